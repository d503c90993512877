#!/usr/bin/env bash
# examples/tensorflow/keras_fit.py resumes its backup at another worker count (2 -> 1 -> 2
# workers on loopback, SIGKILLed after a backup; keras_elastic.py says what is checked), with
# TensorFlow from the venv of hack/tensorflow.sh. About a minute on 2 cores, two TensorFlow
# processes at most.
# Usage: keras_elastic_test.sh REPO_ROOT. Exit 77 (ctest: skipped) when the venv cannot be made
# (no wheels and no PyPI) or Fashion-MNIST is missing, unless CI or TJ_REQUIRE_TENSORFLOW is set.
set -euo pipefail
ROOT=${1:?usage: keras_elastic_test.sh REPO_ROOT}
DATA=${TJ_DATA_DIR:-/usr/share/datasets/fashion-mnist}
# shellcheck source=tests/integration/tensorflow/skip.sh
. "$(dirname "$0")/skip.sh"
[ -s "$DATA/train-images-idx3-ubyte.gz" ] ||
  skip "no Fashion-MNIST in $DATA (dataset-fashion-mnist)"
PY=$("$ROOT/hack/tensorflow.sh" venv) || skip "no TensorFlow venv (hack/tensorflow.sh venv failed)"

# The batch rule alone (fmnist_setup.batch_sizes): (global batch asked, global, per replica).
(cd "$ROOT/examples/tensorflow" && TF_CPP_MIN_LOG_LEVEL=2 "$PY" - <<'PY'
import os
from argparse import Namespace
import fmnist_setup
def sizes(replicas, batch_size=64, global_batch=0, shards=None):
    os.environ.pop("TJ_ELASTIC_SHARDS", None)
    if shards is not None:
        os.environ["TJ_ELASTIC_SHARDS"] = str(shards)
    return fmnist_setup.batch_sizes(Namespace(batch_size=batch_size, global_batch=global_batch),
                                    replicas)
cases = [
    (sizes(2), (128, 128, 64)),                      # no elastic setting: 64 per worker
    (sizes(1), (64, 64, 64)),
    (sizes(1, shards=2), (128, 128, 128)),           # the operator's TJ_ELASTIC_SHARDS
    (sizes(2, shards=2), (128, 128, 64)),
    (sizes(3, shards=4), (256, 255, 85)),            # does not divide: rounded down
    (sizes(2, global_batch=100, shards=4), (100, 100, 50)),  # --global-batch wins
    (sizes(3, global_batch=100), (100, 99, 33)),
]
bad = [(got, want) for got, want in cases if got != want]
try:
    sizes(4, global_batch=3)
    bad.append("a global batch of 3 among 4 replicas was not refused")
except ValueError:
    pass
print("FAIL batch_sizes:", bad) if bad else print("ok   batch_sizes: the global batch rule")
raise SystemExit(1 if bad else 0)
PY
)
exec "$PY" "$ROOT/tests/integration/tensorflow/keras_elastic.py" "$ROOT/examples/tensorflow" "$DATA"
