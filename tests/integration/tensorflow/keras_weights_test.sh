#!/usr/bin/env bash
# A declared model's weights both ways as Keras 3's .weights.h5, with TensorFlow's Keras from
# the venv of hack/tensorflow.sh (keras_weights.py says what is checked): tj-trainer's export
# loads into Keras at tj-trainer's test loss and accuracy, and a Keras model's weights with
# frozen layers start a tj-trainer run that keeps the frozen tensors bitwise.
# Usage: keras_weights_test.sh REPO_ROOT BUILD_DIR. Exit 77 (ctest: skipped) when the venv
# cannot be made (no wheels and no PyPI) or Fashion-MNIST is missing, unless CI or
# TJ_REQUIRE_TENSORFLOW is set.
set -euo pipefail
ROOT=${1:?usage: keras_weights_test.sh REPO_ROOT BUILD_DIR}
BUILD=${2:?usage: keras_weights_test.sh REPO_ROOT BUILD_DIR}
for f in "$BUILD/bin/tj-trainer" "$BUILD/tests/keras_weights_eval"; do
  [ -x "$f" ] || { echo "FAIL $f is not built"; exit 1; }
done
DATA=${TJ_DATA_DIR:-/usr/share/datasets/fashion-mnist}
# shellcheck source=tests/integration/tensorflow/skip.sh
. "$(dirname "$0")/skip.sh"
[ -s "$DATA/t10k-images-idx3-ubyte.gz" ] || skip "no Fashion-MNIST in $DATA (dataset-fashion-mnist)"
PY=$("$ROOT/hack/tensorflow.sh" python 2>/dev/null || "$ROOT/hack/tensorflow.sh" venv) ||
  skip "no TensorFlow venv (hack/tensorflow.sh venv failed)"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
exec "$PY" "$ROOT/tests/integration/tensorflow/keras_weights.py" "$ROOT" "$BUILD" "$DATA" "$WORK"
