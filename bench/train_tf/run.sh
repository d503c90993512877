#!/usr/bin/env bash
# TensorFlow as the yardstick: the seeds' model and recipe (Fashion-MNIST, the CNN of
# trainer/nn/model.h, Adam 1e-3, global batch 64, 3 epochs) in tj-trainer and in TensorFlow
# (examples/tensorflow/keras_fit.py: tf-keras model.fit, MultiWorkerMirroredStrategy), on this
# machine, in one run, in two shapes:
#   1 process x 2 threads            (batch 64)
#   2 worker processes x 1 thread    (32 each, TF_CONFIG on loopback; MWMS for TensorFlow)
# Reports the last epoch's images/s and the test accuracy after the 3 epochs. TensorFlow runs
# in the venv of hack/tensorflow.sh (the versions of examples/tensorflow/requirements.txt).
# The four configurations run ROUNDS times (default 3), interleaved (tj, TF, tj, TF in each
# round), so a change in the machine's load falls on both; each is reported as the median
# round by images/s, with TensorFlow / tj-trainer ratios of the medians.
# Writes bench/train_tf/RESULTS.md.        bash bench/train_tf/run.sh [STEPS]
# STEPS caps the steps per epoch (default 0: whole epochs, 937 steps of 64).
# TRAINER: the tj-trainer to time; by default the one users run, copied out of the CPU image
# (`make images`, bench/image_speed/copy-trainer.sh), else the host build build/bin/tj-trainer.
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-0}
EPOCHS=${EPOCHS:-3}
ROUNDS=${ROUNDS:-3}
OUT=${OUT:-bench/train_tf/RESULTS.md}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=bench/lib/trainer-runs.sh
. bench/lib/trainer-runs.sh
pick_trainer "$tmp"
PY=$(bash hack/tensorflow.sh venv)
KERAS_FIT=examples/tensorflow/keras_fit.py
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

tj_one() { # ROUND
  $TRAINER --epochs "$EPOCHS" --steps-per-epoch "$STEPS" --batch-size 64 --threads 2 \
    --status-port 0 >"$tmp/tj1.$1.w0"
}
tj_two() { # ROUND
  local p0 p1
  p0=$(port) p1=$(port)
  TJ_RENDEZVOUS_KEY=bench TF_CONFIG=$(tfc "$p0" "$p1" 1) $TRAINER --epochs "$EPOCHS" \
    --steps-per-epoch "$STEPS" --batch-size 32 --threads 1 --status-port 0 >"$tmp/tj2.$1.w1" &
  TJ_RENDEZVOUS_KEY=bench TF_CONFIG=$(tfc "$p0" "$p1" 0) $TRAINER --epochs "$EPOCHS" \
    --steps-per-epoch "$STEPS" --batch-size 32 --threads 1 --status-port 0 >"$tmp/tj2.$1.w0"
  wait
}
tf_one() { # ROUND
  TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=2 "$PY" $KERAS_FIT --epochs "$EPOCHS" \
    --steps-per-epoch "$STEPS" --batch-size 64 --threads 2 >"$tmp/tf1.$1.w0" 2>"$tmp/tf1.$1.err"
}
tf_two() { # ROUND
  local p0 p1
  p0=$(port) p1=$(port)
  TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=2 TF_CONFIG=$(tfc "$p0" "$p1" 1) "$PY" $KERAS_FIT \
    --epochs "$EPOCHS" --steps-per-epoch "$STEPS" --batch-size 32 --threads 1 >"$tmp/tf2.$1.w1" 2>"$tmp/tf2.$1.err1" &
  TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=2 TF_CONFIG=$(tfc "$p0" "$p1" 0) "$PY" $KERAS_FIT \
    --epochs "$EPOCHS" --steps-per-epoch "$STEPS" --batch-size 32 --threads 1 >"$tmp/tf2.$1.w0" 2>"$tmp/tf2.$1.err0"
  wait
}
# Alternating the two trainers, so that a change in the machine's load falls on both.
run_checked() { # FUNCTION ROUND: a failed run stops the benchmark with its stderr
  "$1" "$2" || { echo "bench: $1 (round $2) failed" >&2; cat "$tmp"/*."$2".err* >&2 2>/dev/null; exit 1; }
}
for round in $(seq 1 "$ROUNDS"); do
  for f in tj_one tf_one tj_two tf_two; do run_checked "$f" "$round"; done
  echo "bench: round $round of $ROUNDS done" >&2
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

field() { grep "\"$1\"" "$3" | tail -1 | sed -E "s/.*\"$2\": ?([0-9.e-]+).*/\1/"; }
# The worker-0 file of the median round of NAME by the last epoch's images/s.
median_file() { # NAME
  local r
  for r in $(seq 1 "$ROUNDS"); do
    echo "$(field epoch_end images_per_sec "$tmp/$1.$r.w0") $tmp/$1.$r.w0"
  done | sort -g | sed -n "$(((ROUNDS + 1) / 2))p" | cut -d' ' -f2
}
all_rates() { # NAME: every round's images/s, in round order
  local r out=""
  for r in $(seq 1 "$ROUNDS"); do
    out+="$(printf '%.0f' "$(field epoch_end images_per_sec "$tmp/$1.$r.w0")") "
  done
  echo "${out% }"
}
row() { # LABEL NAME
  local f
  f=$(median_file "$2")
  printf "| %s | %.0f | %s | %.4f |\n" "$1" "$(field epoch_end images_per_sec "$f")" \
    "$(all_rates "$2")" "$(field train_end test_accuracy "$f")"
}
ratio() { # TF-NAME TJ-NAME
  awk -v a="$(field epoch_end images_per_sec "$(median_file "$1")")" \
    -v b="$(field epoch_end images_per_sec "$(median_file "$2")")" 'BEGIN { printf "%.2f", a / b }'
}
tf_version=$("$PY" -c 'import tensorflow, tf_keras; print(tensorflow.__version__, "/ tf-keras", tf_keras.__version__)' 2>/dev/null)
{
  echo "# TensorFlow as the yardstick: tj-trainer vs TensorFlow, same model and recipe"
  echo
  echo "- Machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load average before: $load_before, after: $load_after"
  echo "- tj-trainer: $trainer_origin"
  echo "- TensorFlow: $tf_version (tensorflow-cpu from PyPI, CPython $("$PY" -c 'import platform; print(platform.python_version())'))"
  echo "- Command: \`bash bench/train_tf/run.sh $STEPS\` (EPOCHS=$EPOCHS; steps per epoch: ${STEPS/#0/all}), $ROUNDS rounds, each in the order tj 1x2, TF 1x2, tj 2x1, TF 2x1; the median round of each"
  echo "  - tj-trainer 1x2: \`tj-trainer --epochs $EPOCHS --steps-per-epoch $STEPS --batch-size 64 --threads 2\`"
  echo "  - tj-trainer 2x1: two \`tj-trainer --epochs $EPOCHS --steps-per-epoch $STEPS --batch-size 32 --threads 1\` with TF_CONFIG on loopback"
  echo "  - TensorFlow 1x2: \`TF_USE_LEGACY_KERAS=1 python examples/tensorflow/keras_fit.py --epochs $EPOCHS --steps-per-epoch $STEPS --batch-size 64 --threads 2\`"
  echo "  - TensorFlow 2x1: two \`... keras_fit.py --epochs $EPOCHS --steps-per-epoch $STEPS --batch-size 32 --threads 1\` with TF_CONFIG (MultiWorkerMirroredStrategy)"
  echo "- Nothing else is meant to run beside the benchmark; the load averages above (on $(nproc) cores) say how quiet the machine was. The ratios of the medians of interleaved rounds are the result that holds on a busier machine too."
  echo "- Recipe: Fashion-MNIST (60,000 training images), the seeds' CNN, Adam 1e-3, global batch 64, $EPOCHS epochs; images/s of the last epoch; test accuracy on the 10,000 test images after the last epoch."
  echo
  echo "| trainer, shape | images/s, median (last epoch) | images/s, each round | test accuracy (median round) |"
  echo "|---|---:|---|---:|"
  row "tj-trainer, 1 process x 2 threads" tj1
  row "TensorFlow, 1 process x 2 threads" tf1
  row "tj-trainer, 2 workers x 1 thread" tj2
  row "TensorFlow, 2 workers x 1 thread (MWMS)" tf2
  echo
  echo "TensorFlow / tj-trainer, medians: 1 x 2 threads $(ratio tf1 tj1), 2 workers x 1 thread $(ratio tf2 tj2)."
  echo
  echo "Raw output (worker 0 of each run):"
  echo
  echo '```'
  for f in tj1 tf1 tj2 tf2; do
    for r in $(seq 1 "$ROUNDS"); do
      echo "== $f round $r"
      grep -E '"(epoch_end|train_end)"' "$tmp/$f.$r.w0"
    done
  done
  echo '```'
} >"$OUT"
cat "$OUT"
