#!/usr/bin/env bash
# Installs every Debian package that the build, the tests, the benchmarks and the demo need.
# Idempotent: packages already present are skipped, so a second run is quick.
# Runs as root, or through sudo otherwise. Debian 12 (bookworm).
set -euo pipefail

PACKAGES=(
  # build
  build-essential cmake pkg-config ninja-build ccache
  # libraries
  libcurl4-openssl-dev nlohmann-json3-dev libssl-dev libgtest-dev libgmock-dev
  libmicrohttpd-dev libgloo-dev libyaml-cpp-dev zlib1g-dev libcli11-dev libjemalloc-dev
  libhwy-dev
  # the trainer's image datasets (trainer/data: JPEG through libjpeg-turbo, PNG through libpng)
  libjpeg62-turbo-dev libpng-dev
  # Keras' .weights.h5 files (trainer/model/keras_weights: the HDF5 C library)
  libhdf5-dev
  # data
  dataset-fashion-mnist
  # reference implementations for tests and benchmarks
  # (Debian's /usr/bin/python3: scripts that import these call it by that path, not the
  # `python3` first on PATH, which may be another interpreter without them)
  python3 python3-torch python3-numpy python3-yaml
  # TensorFlow's wheels and venv (hack/tensorflow.sh: pip download, python3 -m venv)
  python3-pip python3-venv
  # local cluster (Kubernetes, etcd, containerd, CoreDNS, crictl and Helm are built from the
  # Go module proxy with the machine's Go by hack/build-kubernetes.sh; none of Debian's is
  # current enough)
  rsync jq curl ca-certificates openssl procps iproute2 util-linux unzip
  # real node: runc + CNI plugins under the built containerd, images built without a daemon
  # (buildah/podman from mmdebstrap base tarballs)
  runc containernetworking-plugins buildah podman mmdebstrap fuse-overlayfs
  catatonit conntrack ipset iptables skopeo
  # fuzzing and sanitizers: clang with libFuzzer and the sanitizer runtimes (tests/fuzz/run.sh)
  clang libclang-rt-14-dev
  # style (tests/style: clang-format on every source, shellcheck on every shell script;
  # make tidy: clang-tidy over the build)
  clang-format clang-tidy shellcheck
  # the GPU backend's CUDA 13 from PyPI where the machine has none (hack/cuda-toolkit.sh, run
  # by `make configure`: pip downloads the wheels; unzip, above, unpacks them)
  python3-pip
)

# kubectl is the local cluster's own, of the same release (hack/local-cluster.sh env); Debian's
# kubernetes-client is 1.20, outside the version skew kubectl supports.
command -v npm >/dev/null 2>&1 || PACKAGES+=(npm)   # the Dockerfile's linter (dockerfile_test)

if [ "$(id -u)" -eq 0 ]; then SUDO=(); else SUDO=(sudo); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -q
"${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
