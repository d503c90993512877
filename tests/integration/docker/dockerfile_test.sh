#!/usr/bin/env bash
# The Dockerfile, checked without a Docker engine (none runs on the development machine):
#   1. dockerfile-utils lint (the npm package; fetched once into the tj-operator cache);
#   2. the structure: build stages on pinned images (Debian for build-cpu, a CUDA devel image
#      for build-trainer), runtime targets `operator` (Debian, no CUDA) and `trainer` in both
#      variants (TRAINER_VARIANT=cpu: Debian, no CUDA, built by build-cpu; gpu: CUDA runtime
#      with cuDNN, built by build-trainer), a non-root USER in each, COPY sources that exist,
#      a .dockerignore without build trees, the CUDA release hack/versions.env pins for
#      builds outside the images (hack/cuda-toolkit.sh) the images' own;
#   3. the Debian images install (hack/image/install-runtime.sh) every Debian package that
#      holds a shared library their program links (ldd of the build's binary here, Debian 12
#      too), and the CUDA trainer image the packages of the non-CUDA libraries tj-trainer
#      links. `make images` builds the Debian targets for real (tests/e2e/real_node).
# Usage: dockerfile_test.sh REPO_ROOT BUILD_DIR. Exit 77 (ctest: skipped) when dockerfile-utils
# cannot be fetched, unless CI or TJ_REQUIRE_DOCKERFILE_LINT is set.
set -euo pipefail
ROOT=${1:?usage: dockerfile_test.sh REPO_ROOT BUILD_DIR}
BUILD=${2:?usage: dockerfile_test.sh REPO_ROOT BUILD_DIR}
DOCKERFILE=$ROOT/Dockerfile
LINT_VERSION=${TJ_DOCKERFILE_UTILS_VERSION:-0.16.3}
CACHE_ROOT=${TJ_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tj-operator}
fails=0
pass() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

# 1. dockerfile-utils lint: any diagnostic (error or warning) fails.
lint_dir=$CACHE_ROOT/dockerfile-utils/$LINT_VERSION
lint=$lint_dir/node_modules/.bin/dockerfile-utils
if [ ! -x "$lint" ]; then
  mkdir -p "$lint_dir"
  if ! command -v npm >/dev/null ||
     ! timeout 300 npm install --silent --no-audit --no-fund --prefix "$lint_dir" \
         "dockerfile-utils@$LINT_VERSION" >"$lint_dir/npm.log" 2>&1 || [ ! -x "$lint" ]; then
    tail -n 5 "$lint_dir/npm.log" 2>/dev/null || true
    if [ -n "${CI:-}${TJ_REQUIRE_DOCKERFILE_LINT:-}" ]; then
      echo "FAIL could not fetch dockerfile-utils@$LINT_VERSION with npm"; exit 1
    fi
    echo "SKIP: could not fetch dockerfile-utils@$LINT_VERSION with npm (apt-get install npm)"
    exit 77
  fi
fi
if out=$("$lint" lint "$DOCKERFILE" 2>&1) && [ -z "$out" ]; then
  pass "dockerfile-utils $LINT_VERSION lint: no diagnostics"
else
  echo "$out"; fail "dockerfile-utils lint"
fi
# The linter must itself catch a broken file, or step 1 proves nothing.
broken=$(mktemp)
trap 'rm -f "$broken"' EXIT
printf 'FROM debian:12.11\nFROOM x\nUSER\n' >"$broken"
if "$lint" lint "$broken" >/dev/null 2>&1; then
  fail "dockerfile-utils lint accepts an unknown instruction"
else
  pass "dockerfile-utils lint rejects a broken Dockerfile"
fi

# 2 and 3: the structure and the runtime packages.
python3 - "$ROOT" "$BUILD" <<'PY' || fails=$((fails + 1))
import glob, os, re, subprocess, sys

root, build = sys.argv[1], sys.argv[2]
failed = []

def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failed.append(what)

# Instructions with their continuation lines joined; comments dropped.
lines, cur = [], ""
for raw in open(os.path.join(root, "Dockerfile")):
    s = raw.rstrip("\n")
    if not cur and (not s.strip() or s.lstrip().startswith("#")):
        continue
    if s.endswith("\\"):
        cur += s[:-1] + " "
        continue
    lines.append((cur + s).strip())
    cur = ""
instr = [(l.split(None, 1)[0].upper(), l.split(None, 1)[1] if " " in l else "") for l in lines]

# Global ARG defaults (before the first FROM) and the stages.
args, stages, stage = {}, {}, None
for op, rest in instr:
    if op == "ARG" and stage is None:
        name, _, value = rest.partition("=")
        args[name.strip()] = value.strip()
    elif op == "FROM":
        m = re.match(r"(\S+)\s+AS\s+(\S+)", rest, re.I)
        check(m is not None, f"FROM {rest} names its stage (FROM image AS name)")
        if not m:
            continue
        image = re.sub(r"\$\{(\w+)\}", lambda v: args.get(v.group(1), ""), m.group(1))
        stage = m.group(2)
        stages[stage] = {"from": m.group(1), "image": image, "ops": []}
    elif stage is not None:
        stages[stage]["ops"].append((op, rest))

for name in ("build-cpu", "build-trainer", "dataset", "operator", "trainer"):
    check(name in stages, f"stage {name} exists")
if failed:
    sys.exit(1)

def alias(name, variant):
    """The stage `name` stands for with TRAINER_VARIANT=variant: through stages that are only a
    FROM of another stage."""
    a = dict(args, TRAINER_VARIANT=variant)
    while name in stages and not stages[name]["ops"]:
        target = re.sub(r"\$\{(\w+)\}", lambda v: a.get(v.group(1), ""), stages[name]["from"])
        if target not in stages:
            break
        name = target
    return name

def base_of(name, variant):
    """The base image stage `name` is built on with TRAINER_VARIANT=variant."""
    a = dict(args, TRAINER_VARIANT=variant)
    image = re.sub(r"\$\{(\w+)\}", lambda v: a.get(v.group(1), ""), stages[name]["from"])
    return base_of(image, variant) if image in stages else image

# Pinned tags: a version with at least major.minor, never latest, no untagged image.
for name, st in stages.items():
    image = st["image"]
    if image in stages:
        continue
    tag = image.rsplit(":", 1)[1] if ":" in image.split("/")[-1] else ""
    pinned = "@sha256:" in image or (re.match(r"\d+\.\d+", tag) is not None and "latest" not in tag)
    check(pinned, f"stage {name}: base image {image} is pinned to a version")

check(re.search(r"^nvidia/cuda:.*-cudnn-devel-ubuntu", stages["build-trainer"]["image"]) is not None,
      "build-trainer builds on an NVIDIA CUDA devel image with cuDNN")
check(args.get("TRAINER_VARIANT") == "gpu", "the trainer target's default variant is gpu")
check(re.search(r"^nvidia/cuda:.*-cudnn-runtime-ubuntu", base_of("trainer", "gpu")) is not None,
      "trainer (gpu) runs on an NVIDIA CUDA runtime image with cuDNN (NCCL ships in it)")
for name in ("build-cpu", "operator"):
    check("cuda" not in stages[name]["image"], f"{name}: no CUDA in its base image")
check("cuda" not in base_of("trainer", "cpu") and "slim" in base_of("trainer", "cpu"),
      f"trainer (cpu): no CUDA in its base image ({base_of('trainer', 'cpu')})")
cuda_ver = lambda img: re.search(r"cuda:(\d+\.\d+\.\d+)", img).group(1)
check(cuda_ver(stages["build-trainer"]["image"]) == cuda_ver(base_of("trainer", "gpu")),
      "trainer: the devel and runtime images have the same CUDA version")
# The CUDA that builds without an image (hack/cuda-toolkit.sh, CI) is the images' CUDA release.
pins = dict(re.findall(r"^(\w+)=(\S+)", open(os.path.join(root, "hack/versions.env")).read(), re.M))
image_cuda = cuda_ver(stages["build-trainer"]["image"])
check(pins.get("CUDA_TOOLKIT_VERSION", "").split(".")[:2] == image_cuda.split(".")[:2],
      f"hack/versions.env's CUDA_TOOLKIT_VERSION={pins.get('CUDA_TOOLKIT_VERSION')} is the "
      f"images' CUDA release ({image_cuda}; major.minor)")
# The compile step: hack/image/build.sh VARIANT, whose cases say how each variant configures.
build_sh = open(os.path.join(root, "hack/image/build.sh")).read()
def build_case(variant):
    m = re.search(r"^\s*" + variant + r"\)(.*?);;", build_sh, re.M | re.S)
    return m.group(1) if m else ""
def builds(stage, variant):
    return any(o == "RUN" and f"hack/image/build.sh {variant}" in r for o, r in stages[stage]["ops"])
check(builds("build-trainer", "gpu") and "-DTJ_WITH_CUDA=ON" in build_case("gpu")
      and "GPU backend ON" in build_sh,
      "build-trainer configures the GPU backend and fails without it (build.sh gpu)")
check(builds("build-cpu", "cpu") and "-DTJ_WITH_CUDA=OFF" in build_case("cpu"),
      "build-cpu configures without CUDA (build.sh cpu)")

# A runtime image: its last USER is a non-root uid; it copies its binary from its build stage.
# (image, target, trainer variant, binary, build stage)
RUNTIME = (("operator", "operator", "gpu", "tj-operator", "build-cpu"),
           ("trainer-cpu", "trainer", "cpu", "tj-trainer", "build-cpu"),
           ("trainer", "trainer", "gpu", "tj-trainer", "build-trainer"))
for name, target, variant, binary, build_stage in RUNTIME:
    ops = stages[target]["ops"]
    users = [r for o, r in ops if o == "USER"]
    uid = re.sub(r"\$\{(\w+)\}", lambda v: args.get(v.group(1), ""), users[-1]).split(":")[0] if users else ""
    check(uid.isdigit() and int(uid) != 0, f"{name}: runs as a non-root uid (USER {users[-1] if users else 'missing'} -> {uid})")
    copies_from = [alias(m.group(1), variant) for o, r in ops if o == "COPY" and binary in r
                   for m in [re.search(r"--from=(\S+)", r)] if m]
    check(build_stage in copies_from, f"{name}: copies {binary} from {build_stage} ({copies_from})")
    kind = "operator" if name == "operator" else "trainer"
    check(any(o == "RUN" and f"install-runtime.sh {kind}" in r for o, r in ops),
          f"{name}: sets up with hack/image/install-runtime.sh {kind}")
    check(any(o == "RUN" and "ldd" in r and "not found" in r for o, r in ops),
          f"{name}: the image build fails on a missing shared library (ldd)")
    check(any(o == "ENTRYPOINT" and binary in r for o, r in ops), f"{name}: ENTRYPOINT is {binary}")

# COPY sources from the build context exist.
for name, st in stages.items():
    for o, r in st["ops"]:
        if o not in ("COPY", "ADD") or "--from=" in r:
            continue
        parts = [p for p in r.split() if not p.startswith("--")]
        for src in parts[:-1]:
            check(bool(glob.glob(os.path.join(root, src))), f"{name}: COPY source {src} exists")

# The TensorFlow example image: non-root, set up by install-runtime.sh, TensorFlow from the
# pinned list installed offline from the build context of wheels, the examples it names.
tf_ops = stages.get("tensorflow", {}).get("ops", [])
check("tensorflow" in stages and "slim" in stages["tensorflow"]["image"] and "cuda" not in
      stages["tensorflow"]["image"], "stage tensorflow exists, on Debian slim, no CUDA")
tf_users = [r for o, r in tf_ops if o == "USER"]
tf_uid = re.sub(r"\$\{(\w+)\}", lambda v: args.get(v.group(1), ""), tf_users[-1]).split(":")[0] if tf_users else ""
check(tf_uid.isdigit() and int(tf_uid) != 0, f"tensorflow: runs as a non-root uid ({tf_uid})")
check(any(o == "RUN" and "install-runtime.sh tensorflow" in r for o, r in tf_ops),
      "tensorflow: sets up with hack/image/install-runtime.sh tensorflow")
check(any(o == "RUN" and "from=tensorflow-wheels" in r and "--no-index" in r and "--no-deps" in r
          and "requirements.txt" in r for o, r in tf_ops),
      "tensorflow: installs the pinned list offline (--no-index --no-deps) from tensorflow-wheels")
pins = [l.strip() for l in open(os.path.join(root, "examples/tensorflow/requirements.txt"))
        if l.strip() and not l.startswith("#")]
check(pins and all(re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][A-Za-z0-9.]*", p) for p in pins),
      f"examples/tensorflow/requirements.txt pins every package exactly ({len(pins)})")
check(any(p.startswith("tensorflow-cpu==") for p in pins) and
      not any(p.startswith("tensorflow==") for p in pins),
      "the list has tensorflow-cpu, not the CUDA-capable tensorflow")

# .dockerignore keeps build trees, cluster state and git out of the context.
ignore = [l.strip() for l in open(os.path.join(root, ".dockerignore")) if l.strip() and not l.startswith("#")]
for pattern in (".git", "build", "build-*", ".local-cluster", ".cache"):
    check(pattern in ignore, f".dockerignore excludes {pattern}")

# 3. Runtime packages against the libraries the binaries link.
def apt_installs(kind):
    """The packages hack/image/install-runtime.sh installs for `kind` (operator, trainer)."""
    text = open(os.path.join(root, "hack/image/install-runtime.sh")).read()
    m = re.search(r"^\s*" + kind + r'\) packages="([^"]*)"', text, re.M)
    check(m is not None, f"install-runtime.sh names the packages of {kind}")
    # "DEBIAN|UBUNTU" (libjpeg62-turbo|libjpeg-turbo8): Debian 12's name is checked here.
    return [p.split("|")[0] for p in m.group(1).split()] if m else []

def apt_alternatives(kind):
    """The "DEBIAN|UBUNTU" entries of install-runtime.sh's packages of `kind`."""
    text = open(os.path.join(root, "hack/image/install-runtime.sh")).read()
    m = re.search(r"^\s*" + kind + r'\) packages="([^"]*)"', text, re.M)
    return {p for p in m.group(1).split() if "|" in p} if m else set()

def linked_packages(binary):
    """The Debian packages that hold the shared libraries ldd resolves (one dpkg -S for all)."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    libs = [m.group(1) for m in re.finditer(r"=>\s+(/\S+)", out)]
    candidates = {}
    for lib in libs:
        real = os.path.realpath(lib)
        for p in (lib, real, real.replace("/usr/lib/", "/lib/", 1), real.replace("/lib/", "/usr/lib/", 1)):
            candidates.setdefault(p, lib)
    r = subprocess.run(["dpkg", "-S"] + sorted(candidates), capture_output=True, text=True)
    owner = {}
    for line in r.stdout.splitlines():
        pkg, _, path = line.partition(": ")
        if path.strip() in candidates:
            owner.setdefault(candidates[path.strip()], pkg.split(":")[0].strip())
    return {owner.get(lib, "?" + lib) for lib in libs}

def depends_closure(pkgs):
    if not pkgs:
        return set()
    r = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
                        "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances"] + pkgs,
                       capture_output=True, text=True)
    closure = {l.strip() for l in r.stdout.splitlines() if l and not l.startswith(" ")}
    check(len(closure - set(pkgs)) > 0,
          f"apt-cache depends knows the dependencies of {pkgs} (else: run apt-get update)")
    return closure | set(pkgs)

# CUDA's libraries: cudart, cuBLAS, cuDNN and NCCL, here from a CUDA toolkit that is no Debian
# package (/usr/local/cuda, or the one hack/cuda-toolkit.sh assembled from PyPI's wheels).
CUDA_LIBS = ("libcudart.so", "libcublas.so", "libcublasLt.so", "libcudnn.so", "libnccl.so")

def cuda_library(package):
    """A library linked here that no Debian package owns ("?<path>") and is one of CUDA's."""
    return package.startswith("?") and \
        os.path.basename(package).split(".so")[0] + ".so" in CUDA_LIBS

# Packages every Debian/Ubuntu base image has (apt itself depends on them).
base = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g"}
for name, _, _, binary, _ in RUNTIME:
    path = os.path.join(build, "bin", binary)
    check(os.path.exists(path), f"{path} is built (needed to compare its libraries)")
    if not os.path.exists(path):
        continue
    # A sanitizer build's runtimes (CI's asan phase runs this test too) are in no image.
    needed = {p for p in linked_packages(path) - base
              if not re.fullmatch(r"lib(asan|ubsan|tsan|lsan)\d*", p)}
    installs = apt_installs("operator" if name == "operator" else "trainer")
    if name == "trainer-cpu":
        # Built here with the GPU backend when CUDA is found; the image's build has none.
        needed = {p for p in needed if not cuda_library(p)}
    if name in ("operator", "trainer-cpu"):
        # Debian 12 here and in the image: the same package names, checked with their depends.
        have = depends_closure(installs)
        missing = sorted(p for p in needed if p not in have)
        check(not missing, f"{name} image installs (or pulls in) the packages of every library "
                           f"{binary} links: {sorted(needed)}; missing {missing}")
    else:
        # Ubuntu 24.04 in the image: the direct packages must be named (names checked by hand
        # against packages.ubuntu.com, docs/deploy.md); their own depends come with them.
        # The CUDA libraries come with the trainer's nvidia/cuda cuDNN runtime base image.
        needed = {p for p in needed if not cuda_library(p)}
        # (t64 names there; libjpeg62-turbo is libjpeg-turbo8 there)
        direct = {"libgloo0", "libmicrohttpd12", "libssl3", "libhwy1", "libhdf5-103-1",
                  "libjpeg62-turbo", "libpng16-16"}
        have = depends_closure([p for p in installs if p in direct])
        check(direct <= set(installs), f"trainer image installs {sorted(direct)}")
        check("libjpeg62-turbo|libjpeg-turbo8" in apt_alternatives("trainer"),
              "trainer image takes libjpeg-turbo8, Ubuntu 24.04's libjpeg-turbo")
        missing = sorted(p for p in needed if p not in have)
        check(not missing, f"every library tj-trainer links here comes with {sorted(direct)} "
                           f"or the base image: {sorted(needed)}; missing {missing}")

sys.exit(1 if failed else 0)
PY

if [ "$fails" -ne 0 ]; then echo "$fails check group(s) failed"; exit 1; fi
echo "all Dockerfile checks passed"
