#!/usr/bin/env bash
# tj-trainer's recipe flags (SGD with Nesterov momentum, weight decay, a cosine schedule with
# warmup, label smoothing; AdamW on a step schedule) against the same recipe in TensorFlow's
# Keras 3 from the venv of hack/tensorflow.sh: keras_recipe.py says what is compared and within
# what tolerance. Synthetic data: no dataset needed.
# Usage: keras_recipe_test.sh REPO_ROOT BUILD_DIR. Exit 77 (ctest: skipped) when the venv
# cannot be made, unless CI or TJ_REQUIRE_TENSORFLOW is set.
set -euo pipefail
ROOT=${1:?usage: keras_recipe_test.sh REPO_ROOT BUILD_DIR}
BUILD=${2:?usage: keras_recipe_test.sh REPO_ROOT BUILD_DIR}
[ -x "$BUILD/bin/tj-trainer" ] || { echo "FAIL $BUILD/bin/tj-trainer is not built"; exit 1; }
# shellcheck source=tests/integration/tensorflow/skip.sh
. "$(dirname "$0")/skip.sh"
PY=$("$ROOT/hack/tensorflow.sh" python 2>/dev/null || "$ROOT/hack/tensorflow.sh" venv) ||
  skip "no TensorFlow venv (hack/tensorflow.sh venv failed)"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
exec "$PY" "$ROOT/tests/integration/tensorflow/keras_recipe.py" "$ROOT" "$BUILD" "$WORK"
