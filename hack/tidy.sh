#!/usr/bin/env bash
# clang-tidy with the repository's .clang-tidy over every C++ source of the project that the
# build compiles (common/, kube/, operator/, trainer/, processnode/, tests/, bench/; CUDA
# sources are left to nvcc's warnings). Any finding fails (WarningsAsErrors: '*'); the output
# names the file, the line and the check. Usage:
#   bash hack/tidy.sh [BUILD_DIR] [FILE...]     (default: build, every source)
# A source whose preprocessed text, compile command and .clang-tidy are unchanged since it last
# passed is not checked again: passes are remembered in TJ_TIDY_CACHE (default
# ~/.cache/tj-operator/tidy), so a run over a tree that changed in a few files takes seconds
# plus those files.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
[ $# -gt 0 ] && shift
export TJ_TIDY_CACHE=${TJ_TIDY_CACHE:-$HOME/.cache/tj-operator/tidy}
export TJ_TIDY_JOBS=${TJ_TIDY_JOBS:-$(nproc)}
[ -f "$BUILD/compile_commands.json" ] ||
  { echo "tidy: $BUILD/compile_commands.json is missing: configure first (make configure)" >&2; exit 2; }
for tool in clang-tidy clang++; do
  command -v "$tool" >/dev/null || { echo "tidy: $tool is missing (make deps)" >&2; exit 2; }
done
exec python3 "$ROOT/hack/tidy.py" "$ROOT" "$BUILD" "$@"
