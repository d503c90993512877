#!/usr/bin/env bash
# The trainer's dataset readers (trainer/data/) against TensorFlow's and NumPy's writers:
# dataset_readers.py (the venv of hack/tensorflow.sh) writes TFRecord files with
# tf.io.TFRecordWriter, .npz files with numpy.savez and savez_compressed and a class folder
# that Keras reads back, with what they hold; dataset_readers_compare reads them with ours.
# Usage: dataset_readers_test.sh REPO_ROOT BUILD_DIR. Exit 77 (ctest: skipped) when the venv is
# not there (hack/tensorflow.sh venv makes it; `make test` does), unless CI or
# TJ_REQUIRE_TENSORFLOW is set.
set -euo pipefail
ROOT=${1:?usage: dataset_readers_test.sh REPO_ROOT BUILD_DIR}
BUILD=${2:?usage: dataset_readers_test.sh REPO_ROOT BUILD_DIR}
# shellcheck source=tests/integration/tensorflow/skip.sh
. "$(dirname "$0")/skip.sh"
COMPARE=$BUILD/tests/dataset_readers_compare
[ -x "$COMPARE" ] || { echo "FAIL $COMPARE is not built"; exit 1; }
PY=$("$ROOT/hack/tensorflow.sh" python 2>/dev/null) ||
  skip "no TensorFlow venv (make it with: bash hack/tensorflow.sh venv)"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
TF_CPP_MIN_LOG_LEVEL=2 "$PY" "$ROOT/tests/integration/tensorflow/dataset_readers.py" "$WORK" \
  2>"$WORK/python.err" || { cat "$WORK/python.err"; echo "FAIL dataset_readers.py"; exit 1; }
TJ_DATASET_CASES=$WORK "$COMPARE"
