#!/usr/bin/env bash
# Every shell script of the project passes shellcheck (the repository's .shellcheckrc): hack/,
# tests/**/*.sh, bench/**/*.sh and .ci/run. A finding fails the test, naming the file, the line
# and the check (https://www.shellcheck.net/wiki/SCxxxx says why and how to fix it). Where a
# finding is wrong, a `# shellcheck disable=SCxxxx  # reason` line above the command says why.
# Usage: shellcheck_test.sh REPO_ROOT. Exit 77 (ctest: skipped) without shellcheck, unless CI
# is set.
set -euo pipefail
ROOT=${1:?usage: shellcheck_test.sh REPO_ROOT}
cd "$ROOT"
if ! command -v shellcheck >/dev/null; then
  [ -n "${CI:-}" ] && { echo "FAIL shellcheck is missing (bash hack/install-deps.sh)"; exit 1; }
  echo "SKIP: shellcheck is missing (bash hack/install-deps.sh)"; exit 77
fi
mapfile -t files < <({ find hack -type f \( -name '*.sh' -o -name '*.env' \)
                       find tests bench -type f -name '*.sh'
                       echo .ci/run; } | sort)
[ "${#files[@]}" -gt 40 ] || { echo "FAIL found only ${#files[@]} scripts under $ROOT"; exit 1; }
# A few scripts per shellcheck, as many at once as there are cores.
if ! out=$(printf '%s\0' "${files[@]}" |
           xargs -0 -n 8 -P "$(nproc)" shellcheck --format=gcc 2>&1); then
  echo "$out"
  echo "FAIL shellcheck: $(grep -c ': \(error\|warning\|note\|info\|style\):' <<<"$out")" \
    "findings in ${#files[@]} scripts (above)"
  exit 1
fi
echo "ok   all ${#files[@]} shell scripts pass $(shellcheck --version | sed -n 's/^version: /shellcheck /p')"
