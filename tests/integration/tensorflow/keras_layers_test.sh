#!/usr/bin/env bash
# The declared-model engine (trainer/model/) computes what TensorFlow's Keras computes: for
# every supported layer type and the example models of examples/models/, keras_layers.py
# (the venv of hack/tensorflow.sh) writes Keras' outputs, loss, gradients and updated state
# for random parameters and inputs, and keras_layers_compare runs the engine on the same and
# compares (keras_layers_test.cpp states the measure and the tolerance).
# Usage: keras_layers_test.sh REPO_ROOT BUILD_DIR. Exit 77 (ctest: skipped) when the venv
# cannot be made (no wheels and no PyPI), unless CI or TJ_REQUIRE_TENSORFLOW is set.
set -euo pipefail
ROOT=${1:?usage: keras_layers_test.sh REPO_ROOT BUILD_DIR}
BUILD=${2:?usage: keras_layers_test.sh REPO_ROOT BUILD_DIR}
# shellcheck source=tests/integration/tensorflow/skip.sh
. "$(dirname "$0")/skip.sh"
COMPARE=$BUILD/tests/keras_layers_compare
[ -x "$COMPARE" ] || { echo "FAIL $COMPARE is not built"; exit 1; }
PY=$("$ROOT/hack/tensorflow.sh" python 2>/dev/null || "$ROOT/hack/tensorflow.sh" venv) ||
  skip "no TensorFlow venv (hack/tensorflow.sh venv failed)"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
TF_CPP_MIN_LOG_LEVEL=2 "$PY" "$ROOT/tests/integration/tensorflow/keras_layers.py" "$WORK" \
  2>"$WORK/python.err" || { cat "$WORK/python.err"; echo "FAIL keras_layers.py"; exit 1; }
TJ_KERAS_CASES=$WORK "$COMPARE"
