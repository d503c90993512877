#!/usr/bin/env bash
# Every C++ and CUDA source of the project is as clang-format (the repository's .clang-format:
# Google style, 100 columns) writes it. A violation fails the test and prints the diff to apply:
#   clang-format -i <file>
# Usage: format_test.sh REPO_ROOT. Exit 77 (ctest: skipped) without clang-format, unless CI is
# set.
set -euo pipefail
ROOT=${1:?usage: format_test.sh REPO_ROOT}
cd "$ROOT"
if ! command -v clang-format >/dev/null; then
  [ -n "${CI:-}" ] && { echo "FAIL clang-format is missing (apt-get install clang-format)"; exit 1; }
  echo "SKIP: clang-format is missing (apt-get install clang-format)"; exit 77
fi
mapfile -t files < <(find common kube operator trainer processnode tests bench \
  \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -type f | sort)
[ "${#files[@]}" -gt 100 ] || { echo "FAIL found only ${#files[@]} sources under $ROOT"; exit 1; }
bad=()
for f in "${files[@]}"; do
  if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [ "${#bad[@]}" -ne 0 ]; then
  for f in "${bad[@]}"; do
    echo "--- $f"; diff -u "$f" <(clang-format "$f") | head -n 20 || true
  done
  echo "FAIL ${#bad[@]} of ${#files[@]} files are not clang-format clean: clang-format -i ${bad[*]}"
  exit 1
fi
echo "ok   all ${#files[@]} C++/CUDA sources are clang-format clean ($(clang-format --version))"
