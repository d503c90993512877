#!/usr/bin/env bash
# TensorFlow as the yardstick: the seeds' model and recipe (Fashion-MNIST, the CNN of
# trainer/nn/model.h, Adam 1e-3, global batch 64, 3 epochs) in tj-trainer and in TensorFlow
# (examples/tensorflow/keras_fit.py: tf-keras model.fit, MultiWorkerMirroredStrategy), on this
# machine, in one run, in two shapes:
#   1 process x 2 threads            (batch 64)
#   2 worker processes x 1 thread    (32 each, TF_CONFIG on loopback; MWMS for TensorFlow)
# Reports the last epoch's images/s and the test accuracy after the 3 epochs. TensorFlow runs
# in the venv of hack/tensorflow.sh (the versions of examples/tensorflow/requirements.txt).
# Writes bench/train_tf/RESULTS.md.        bash bench/train_tf/run.sh [STEPS]
# STEPS caps the steps per epoch (default 0: whole epochs, 937 steps of 64).
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-0}
EPOCHS=${EPOCHS:-3}
TRAINER=${TRAINER:-build/bin/tj-trainer}
OUT=${OUT:-bench/train_tf/RESULTS.md}
[ -x "$TRAINER" ] || { echo "build first: make build" >&2; exit 1; }
PY=$(bash hack/tensorflow.sh venv)
KERAS_FIT=examples/tensorflow/keras_fit.py
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
tfc() { echo "{\"cluster\":{\"worker\":[\"localhost:$1\",\"localhost:$2\"]},\"task\":{\"type\":\"worker\",\"index\":$3}}"; }
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

tj_one() {
  $TRAINER --epochs "$EPOCHS" --steps-per-epoch "$STEPS" --batch-size 64 --threads 2 \
    --status-port 0 >"$tmp/tj1.w0"
}
tj_two() {
  local p0 p1
  p0=$(port) p1=$(port)
  TJ_RENDEZVOUS_KEY=bench TF_CONFIG=$(tfc "$p0" "$p1" 1) $TRAINER --epochs "$EPOCHS" \
    --steps-per-epoch "$STEPS" --batch-size 32 --threads 1 --status-port 0 >"$tmp/tj2.w1" &
  TJ_RENDEZVOUS_KEY=bench TF_CONFIG=$(tfc "$p0" "$p1" 0) $TRAINER --epochs "$EPOCHS" \
    --steps-per-epoch "$STEPS" --batch-size 32 --threads 1 --status-port 0 >"$tmp/tj2.w0"
  wait
}
tf_one() {
  TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=2 "$PY" $KERAS_FIT --epochs "$EPOCHS" \
    --steps-per-epoch "$STEPS" --batch-size 64 --threads 2 >"$tmp/tf1.w0" 2>"$tmp/tf1.err"
}
tf_two() {
  local p0 p1
  p0=$(port) p1=$(port)
  TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=2 TF_CONFIG=$(tfc "$p0" "$p1" 1) "$PY" $KERAS_FIT \
    --epochs "$EPOCHS" --steps-per-epoch "$STEPS" --batch-size 32 --threads 1 >"$tmp/tf2.w1" 2>"$tmp/tf2.err1" &
  TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=2 TF_CONFIG=$(tfc "$p0" "$p1" 0) "$PY" $KERAS_FIT \
    --epochs "$EPOCHS" --steps-per-epoch "$STEPS" --batch-size 32 --threads 1 >"$tmp/tf2.w0" 2>"$tmp/tf2.err0"
  wait
}
# Alternating the two trainers, so that a change in the machine's load falls on both.
tj_one; tf_one; tj_two; tf_two
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

field() { grep "\"$1\"" "$3" | tail -1 | sed -E "s/.*\"$2\": ?([0-9.e-]+).*/\1/"; }
row() { # LABEL FILE
  printf "| %s | %.0f | %.4f |\n" "$1" "$(field epoch_end images_per_sec "$2")" \
    "$(field train_end test_accuracy "$2")"
}
tf_version=$("$PY" -c 'import tensorflow, tf_keras; print(tensorflow.__version__, "/ tf-keras", tf_keras.__version__)' 2>/dev/null)
{
  echo "# TensorFlow as the yardstick: tj-trainer vs TensorFlow, same model and recipe"
  echo
  echo "- Machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load average before: $load_before, after: $load_after"
  echo "- TensorFlow: $tf_version (tensorflow-cpu from PyPI, CPython $("$PY" -c 'import platform; print(platform.python_version())'))"
  echo "- Command: \`bash bench/train_tf/run.sh $STEPS\` (EPOCHS=$EPOCHS; steps per epoch: ${STEPS/#0/all}), one run of each, in the order tj 1x2, TF 1x2, tj 2x1, TF 2x1"
  echo "  - tj-trainer 1x2: \`tj-trainer --epochs $EPOCHS --steps-per-epoch $STEPS --batch-size 64 --threads 2\`"
  echo "  - tj-trainer 2x1: two \`tj-trainer --epochs $EPOCHS --steps-per-epoch $STEPS --batch-size 32 --threads 1\` with TF_CONFIG on loopback"
  echo "  - TensorFlow 1x2: \`TF_USE_LEGACY_KERAS=1 python examples/tensorflow/keras_fit.py --epochs $EPOCHS --steps-per-epoch $STEPS --batch-size 64 --threads 2\`"
  echo "  - TensorFlow 2x1: two \`... keras_fit.py --epochs $EPOCHS --steps-per-epoch $STEPS --batch-size 32 --threads 1\` with TF_CONFIG (MultiWorkerMirroredStrategy)"
  echo "- Recipe: Fashion-MNIST (60,000 training images), the seeds' CNN, Adam 1e-3, global batch 64, $EPOCHS epochs; images/s of the last epoch; test accuracy on the 10,000 test images after the last epoch."
  echo
  echo "| trainer, shape | images/s (last epoch) | test accuracy |"
  echo "|---|---:|---:|"
  row "tj-trainer, 1 process x 2 threads" "$tmp/tj1.w0"
  row "TensorFlow, 1 process x 2 threads" "$tmp/tf1.w0"
  row "tj-trainer, 2 workers x 1 thread" "$tmp/tj2.w0"
  row "TensorFlow, 2 workers x 1 thread (MWMS)" "$tmp/tf2.w0"
  echo
  echo "Raw output (worker 0 of each):"
  echo
  echo '```'
  for f in tj1.w0 tf1.w0 tj2.w0 tf2.w0; do
    echo "== $f"
    grep -E '"(epoch_end|train_end)"' "$tmp/$f"
  done
  echo '```'
} >"$OUT"
cat "$OUT"
