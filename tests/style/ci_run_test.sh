#!/usr/bin/env bash
# .ci/run's own reporting, with every phase replaced by a stub in a scratch tree (the real
# phases take an hour): a failed phase fails the run and its table row; after the table, CI's
# log repeats each failed phase's key lines (ctest's failed tests, a fuzz crash's input as
# base64) so that the end of the log names the failure; a passing phase is not repeated; each
# phase's output is kept in build/ci-logs/; and a phase whose leftover daemon holds stdout
# still ends. Usage: ci_run_test.sh REPO_ROOT.
set -euo pipefail
ROOT=${1:?usage: ci_run_test.sh REPO_ROOT}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL $*"; echo "--- .ci/run printed:"; cat "$work/out"; exit 1; }

mkdir -p "$work/tree/.ci" "$work/tree/bench/image_speed" "$work/tree/hack" \
  "$work/tree/tests/fuzz" "$work/bin"
cp "$ROOT/.ci/run" "$work/tree/.ci/run"
# make test fails with ctest's summary and leaves a daemon holding its stdout; make tidy passes.
cat >"$work/bin/make" <<'EOF'
#!/usr/bin/env bash
if [ "$1" = test ]; then
  echo "early make test output"
  printf 'The following tests FAILED:\n\t 12 - foo_test (Failed)\n\t 13 - bar_test (Timeout)\n'
  (sleep 60 &)
  exit 2
fi
echo "tidy: all clean"
EOF
echo 'echo "image speed ok"' >"$work/tree/bench/image_speed/smoke.sh"
echo 'echo "test-sanitized: passed"' >"$work/tree/hack/test-sanitized.sh"
cat >"$work/tree/tests/fuzz/run.sh" <<'EOF'
echo "fuzz: npz: FAILED after 3 s; log x, input(s):" >&2
echo "fuzz: npz: crash-abc as base64: YWJjAAE=" >&2
exit 1
EOF
chmod +x "$work/bin/make"

start=$SECONDS
rc=0
(cd "$work/tree" && PATH="$work/bin:$PATH" bash .ci/run) >"$work/out" 2>&1 || rc=$?
took=$((SECONDS - start))
[ "$rc" -eq 1 ] || fail "exit $rc, expected 1 (two phases failed)"
[ "$took" -lt 40 ] || fail "took $took s: a daemon holding make test's stdout held up CI"
grep -qE '^  make test .*FAILED \(exit 2\)' "$work/out" || fail "no failed row for make test"
grep -qE '^  fuzz .*FAILED \(exit 1\)' "$work/out" || fail "no failed row for fuzz"
grep -qE '^  tidy .* ok$' "$work/out" || fail "tidy's row is not ok"
# What follows the table: the failed phases' key lines, nothing of the passing ones.
tail_part=$(sed -n '/^=== ci: phases/,$p' "$work/out")
for want in "=== ci: make test FAILED" "13 - bar_test (Timeout)" "12 - foo_test (Failed)" \
    "=== ci: fuzz FAILED" "crash-abc as base64: YWJjAAE=" "=== ci: FAILED"; do
  grep -qF -- "$want" <<<"$tail_part" || fail "the end of the log lacks: $want"
done
if grep -qF "tidy FAILED" <<<"$tail_part" || grep -qF "tidy: all clean" <<<"$tail_part"; then
  fail "a passing phase was repeated after the table"
fi
for phase in make-test tidy img-speed tsan fuzz asan; do
  [ -s "$work/tree/build/ci-logs/$phase.log" ] || fail "no build/ci-logs/$phase.log"
done
grep -qF "early make test output" "$work/tree/build/ci-logs/make-test.log" ||
  fail "make-test.log lacks the phase's output"
echo "PASS .ci/run: failed phases named at the end of the log, logs kept (${took} s)"
