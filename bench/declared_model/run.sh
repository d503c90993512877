#!/usr/bin/env bash
# One training step (forward, loss, gradients; no optimizer) of the seeds' CNN, ResNet-20 and
# MobileNetV2 from examples/models/ at batch 64: the declared-model engine (tj-bench-model)
# against TensorFlow's Keras on the same model JSON (tf_step.py, a tf.function step, in the venv
# of hack/tensorflow.sh) and PyTorch from PyPI on the same model built from that JSON
# (torch_step.py, eager, NCHW and channels_last, in the venv of hack/pytorch.sh), 1 and 2
# threads. Rounds alternate the programs (a shared, noisy machine slows them alike); each figure
# is the median of the rounds' per-run medians. Writes bench/declared_model/RESULTS.md, with the
# per-layer table of one extra run per model.
#   bash bench/declared_model/run.sh [STEPS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-10}
ROUNDS=${2:-3}
BENCH=${BENCH:-build/bin/tj-bench-model}
OUT=bench/declared_model/RESULTS.md
[ -x "$BENCH" ] || { echo "no $BENCH: make -C build tj-bench-model" >&2; exit 1; }
PY=$(bash hack/tensorflow.sh venv)
TORCH_PY=$(bash hack/pytorch.sh venv)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
models="seeds_cnn resnet20 mobilenet_v2"
for round in $(seq "$ROUNDS"); do
  for threads in 1 2; do
    for m in $models; do
      "$BENCH" "examples/models/$m.json" --batch 64 --threads "$threads" --steps "$STEPS" |
        sed -n 's/^declared model: \([0-9.]*\) ms.*/\1/p' >>"$work/ours-$m-$threads"
      TF_CPP_MIN_LOG_LEVEL=2 "$PY" bench/declared_model/tf_step.py "examples/models/$m.json" \
        --batch 64 --threads "$threads" --steps "$STEPS" 2>/dev/null |
        sed -n 's/.*: \([0-9.]*\) ms a step.*/\1/p' >>"$work/tf-$m-$threads"
      for layout in nchw channels_last; do
        flag=()
        [ "$layout" = nchw ] || flag=(--channels-last)
        "$TORCH_PY" bench/declared_model/torch_step.py "examples/models/$m.json" --batch 64 \
          --threads "$threads" --steps "$STEPS" "${flag[@]}" |
          sed -n 's/.*: \([0-9.]*\) ms a step.*/\1/p' >>"$work/torch-$layout-$m-$threads"
      done
    done
  done
  echo "round $round done" >&2
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
median() { sort -n "$1" | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
rounds() { tr '\n' ' ' <"$1"; }
{
  echo "# Declared models (the seeds' CNN, ResNet-20, MobileNetV2) beside TensorFlow and PyTorch"
  echo
  echo "- Date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "- Machine: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), $(nproc) cores," \
    "shared with other builds; load average before: $load_before, after: $load_after"
  echo "- Command: \`bash bench/declared_model/run.sh $STEPS $ROUNDS\`; each run: one warm-up step," \
    "then the median of $STEPS steps; the table: the median of $ROUNDS rounds (ms a step, batch 64)"
  echo "- AVX-512: $(grep -q avx512f /proc/cpuinfo && echo yes || echo no); the engine's target:" \
    "avx512 where it is. Peak of a core: measured by \`tj-bench-model --peak\` (16 independent" \
    "FMA chains; in the per-layer runs below), the figure the \"of peak\" column divides by"
  echo "- TensorFlow $("$PY" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null)," \
    "\`tf_step.py\` (a tf.function of forward, loss and gradients, intra- and inter-op threads set)"
  echo "- PyTorch $("$TORCH_PY" -c 'import torch; print(torch.__version__)'), PyPI's build" \
    "(hack/pytorch.sh), \`torch_step.py\` (eager forward, loss and \`torch.autograd.grad\`;" \
    "intra- and inter-op threads set), in PyTorch's default NCHW and in channels_last;" \
    "PyTorch / tj divides the faster of the two"
  echo
  echo "| model | threads | tj engine ms | TensorFlow ms | PyTorch NCHW ms |" \
    "PyTorch channels_last ms | TF / tj | PyTorch / tj |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
  for m in $models; do
    for threads in 1 2; do
      ours=$(median "$work/ours-$m-$threads")
      tf=$(median "$work/tf-$m-$threads")
      nchw=$(median "$work/torch-nchw-$m-$threads")
      last=$(median "$work/torch-channels_last-$m-$threads")
      ratio=$(awk -v a="$tf" -v b="$ours" 'BEGIN {printf "%.2f", a / b}')
      torch_ratio=$(awk -v a="$nchw" -v c="$last" -v b="$ours" \
        'BEGIN {printf "%.2f", (a < c ? a : c) / b}')
      echo "| $m | $threads | $ours | $tf | $nchw | $last | $ratio | $torch_ratio |"
    done
  done
  echo
  echo "Each round's median, ms:"
  echo
  echo "| model | threads | tj | TensorFlow | PyTorch NCHW | PyTorch channels_last |"
  echo "|---|---:|---|---|---|---|"
  for m in $models; do
    for threads in 1 2; do
      echo "| $m | $threads | $(rounds "$work/ours-$m-$threads") | $(rounds "$work/tf-$m-$threads") |" \
        "$(rounds "$work/torch-nchw-$m-$threads") |" \
        "$(rounds "$work/torch-channels_last-$m-$threads") |"
    done
  done
  for m in $models; do
    echo
    echo "## $m, per layer (1 thread, one run)"
    echo
    echo '```'
    "$BENCH" "examples/models/$m.json" --batch 64 --threads 1 --steps "$STEPS" --peak
    echo '```'
  done
} >"$OUT"
cat "$OUT"
