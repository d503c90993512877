# shellcheck shell=bash
# Sourced by the TensorFlow integration tests (*_test.sh here): skip REASON ends the test as
# skipped (exit 77, which ctest reports as such), or as failed when CI or TJ_REQUIRE_TENSORFLOW
# is set, where a missing venv or dataset must not pass unnoticed.
skip() {
  if [ -n "${CI:-}${TJ_REQUIRE_TENSORFLOW:-}" ]; then echo "FAIL $*"; exit 1; fi
  echo "SKIP: $*"; exit 77
}
