"""clang-tidy over the project's sources, with a cache of the sources that passed.

Run through hack/tidy.sh, which checks the tools. Arguments: ROOT BUILD [FILE...]. The cache key
of a source is the hash of the clang-tidy version, the repository's .clang-tidy, its compile
command and its preprocessed text (clang++ -E), so a changed header re-checks every includer and
nothing else. The checkout's and the build's absolute paths are replaced by placeholders in the
key (they appear in -I flags and in __FILE__), so a clone elsewhere on the machine, as CI's is,
finds the passes of this one.
"""

import concurrent.futures
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time

DIRS = ("common/", "kube/", "operator/", "trainer/", "processnode/", "tests/", "bench/")
NOISE = ("warnings generated", "warning generated", "warnings treated as errors",
         "warning treated as errors", "Suppressed ", "Use -header-filter")


def sources(root, build, wanted):
    """The compile database's entries for the project's .cpp files (one per file)."""
    seen = {}
    with open(os.path.join(build, "compile_commands.json")) as db:
        for entry in json.load(db):
            path = entry["file"]
            if not path.startswith(root + "/"):
                continue
            rel = path[len(root) + 1:]
            if not rel.startswith(DIRS) or not rel.endswith(".cpp") or path in seen:
                continue
            if wanted and rel not in wanted and path not in wanted:
                continue
            seen[path] = entry
    return seen


def cache_key(config, entry, root, build):
    """The hash of what decides clang-tidy's verdict on this source, wherever it is checked out."""
    args = entry.get("arguments") or shlex.split(entry["command"])
    keep = [a for a in args if a.startswith(("-I", "-D", "-std=")) or a == "-pthread"]
    for i, a in enumerate(args):
        if a == "-isystem" and i + 1 < len(args):
            keep += [a, args[i + 1]]
    pre = subprocess.run(["clang++", "-E", "-P", "-w", *keep, entry["file"]],
                         cwd=entry["directory"], capture_output=True)
    def placeless(data):
        return data.replace(build.encode(), b"@BUILD@").replace(root.encode(), b"@ROOT@")

    digest = hashlib.sha256(config)
    digest.update(placeless(" ".join(args).encode()))
    if pre.returncode != 0:  # unknown flags: never cached, always checked
        digest.update(str(time.time_ns()).encode())
    digest.update(placeless(pre.stdout))
    return digest.hexdigest()


def tidy(build, path):
    run = subprocess.run(["clang-tidy", "-p", build, "--quiet", path],
                         capture_output=True, text=True)
    lines = [l for l in (run.stdout + run.stderr).splitlines()
             if l and not any(n in l for n in NOISE)]
    return run.returncode == 0 and not any(": error:" in l or ": warning:" in l for l in lines), lines


def main():
    root, build, wanted = sys.argv[1], sys.argv[2], set(sys.argv[3:])
    cache = os.environ["TJ_TIDY_CACHE"]
    jobs = int(os.environ["TJ_TIDY_JOBS"])
    os.makedirs(cache, exist_ok=True)
    version = subprocess.run(["clang-tidy", "--version"], capture_output=True).stdout
    with open(os.path.join(root, ".clang-tidy"), "rb") as f:
        config = version + f.read()
    entries = sources(root, build, wanted)
    if not entries:
        print(f"tidy: no project sources in {build}/compile_commands.json", file=sys.stderr)
        return 2
    start = time.monotonic()

    def check(path):
        key = cache_key(config, entries[path], root, build)
        if os.path.exists(os.path.join(cache, key)):
            return path, True, [], True
        ok, lines = tidy(build, path)
        if ok:
            open(os.path.join(cache, key), "w").close()
        return path, ok, lines, False

    failed, cached = [], 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for path, ok, lines, hit in pool.map(check, sorted(entries)):
            cached += hit
            if not ok:
                failed.append(path)
                print("\n".join(lines), file=sys.stderr, flush=True)
    took = time.monotonic() - start
    if failed:
        print(f"FAIL clang-tidy: {len(failed)} of {len(entries)} sources have findings (above: "
              "file:line: message [check]). Fix them, or where a check is wrong for a reason, "
              "add // NOLINT(check): reason", file=sys.stderr)
        return 1
    print(f"ok   clang-tidy: {len(entries)} sources clean, {cached} unchanged since they last "
          f"passed ({took:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
