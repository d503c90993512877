#!/usr/bin/env bash
# Training, not one step: ResNet-20 and MobileNetV2 (alpha 0.35) from examples/models/ trained
# by tj-trainer, TensorFlow's Keras (keras_train.py) and PyTorch from PyPI (torch_train.py) on
# the same data with the same recipe, in two shapes on this machine:
#   1 process x 2 threads        (global batch 64)
#   2 worker processes x 1 thread (32 each: tj-trainer with TF_CONFIG, Keras under
#                                 MultiWorkerMirroredStrategy, PyTorch DDP over Gloo)
# Data: Fashion-MNIST (Debian's real images) made CIFAR-shaped (fashion32.py: padded to 32x32,
# 3 channels), the first TRAIN training images and the whole 10,000-image test set. Recipe:
# pixels / 255, SGD momentum 0.9, a cosine decay of the learning rate to 0 over the run (Keras'
# CosineDecay; from 0.05 for ResNet-20, 0.02 for MobileNetV2), softmax cross-entropy, EPOCHS
# shuffled epochs, Keras' GlorotUniform initial weights in all three. MobileNetV2's
# BatchNormalization momentum is 0.99 here, not keras.applications' 0.999: with 0.999 the
# moving statistics are still half their initial values after 600 steps, and all three
# trainers then test at chance (10%). Reports the last epoch's images/s and the test accuracy
# after the last epoch, one run of each (their order alternates the trainers); writes
# bench/declared_model/TRAINING.md.
#   bash bench/declared_model/train.sh [TRAIN] [EPOCHS]      defaults: 12800 images, 3 epochs
set -euo pipefail
cd "$(dirname "$0")/../.."
TRAIN=${1:-12800}
EPOCHS=${2:-3}
MODELS=${MODELS:-resnet20 mobilenet_v2}
DATA_DIR=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
OUT=${OUT:-bench/declared_model/TRAINING.md}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=bench/lib/trainer-runs.sh
. bench/lib/trainer-runs.sh
pick_trainer "$tmp"
PY=$(bash hack/tensorflow.sh venv)
TORCH_PY=$(bash hack/pytorch.sh venv)
"$PY" bench/declared_model/fashion32.py "$DATA_DIR" "$tmp/data.npz" "$TRAIN"
for m in $MODELS; do
  python3 - "examples/models/$m.json" "$tmp/$m.json" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
for layer in spec["config"]["layers"]:
    if layer["class_name"] == "BatchNormalization" and layer["config"]["momentum"] > 0.99:
        layer["config"]["momentum"] = 0.99
json.dump(spec, open(sys.argv[2], "w"))
PY
done
lr() { [ "$1" = mobilenet_v2 ] && echo 0.02 || echo 0.05; }

# two_workers NAME FN ARGS...: `FN ARGS... 1` in the background and `FN ARGS... 0`, the two
# workers of one run; worker 0's stdout goes to $tmp/NAME, their stderr to $tmp/NAME.err[1].
# Fails if either worker does.
two_workers() {
  local name=$1
  shift
  "$@" 1 >/dev/null 2>"$tmp/$name.err1" &
  "$@" 0 >"$tmp/$name" 2>"$tmp/$name.err" || { wait; return 1; }
  wait $!
}
tj() { # MODEL WORKERS
  local args
  args=(--model-config "$tmp/$1.json" --dataset-format npz --train-data "$tmp/data.npz"
    --optimizer sgd --momentum 0.9 --lr-schedule "cosine:$(lr "$1")" --epochs "$EPOCHS"
    --status-port 0)
  if [ "$2" = 1 ]; then
    "$TRAINER" "${args[@]}" --batch-size 64 --threads 2 >"$tmp/tj-$1-1" 2>"$tmp/tj-$1-1.err"
  else
    two_workers "tj-$1-2" tj_worker "$(port)" "$(port)"
  fi
}
tj_worker() { # PORT0 PORT1 INDEX, with tj's args
  TJ_RENDEZVOUS_KEY=bench TF_CONFIG=$(tfc "$1" "$2" "$3") "$TRAINER" "${args[@]}" \
    --batch-size 32 --threads 1
}
tf() { # MODEL WORKERS
  local args=(bench/declared_model/keras_train.py "$tmp/$1.json" "$tmp/data.npz"
    --global-batch 64 --lr "$(lr "$1")" --cosine --momentum 0.9 --epochs "$EPOCHS")
  if [ "$2" = 1 ]; then
    "$PY" "${args[@]}" --threads 2 >"$tmp/tf-$1-1" 2>"$tmp/tf-$1-1.err"
  else
    two_workers "tf-$1-2" tf_worker "$(port)" "$(port)"
  fi
}
tf_worker() { # PORT0 PORT1 INDEX, with tf's args
  TF_CONFIG=$(tfc "$1" "$2" "$3") "$PY" "${args[@]}" --threads 1
}
torch() { # MODEL WORKERS: channels_last (the faster layout in run.sh's steps)
  local args=(bench/declared_model/torch_train.py "$tmp/$1.json" "$tmp/data.npz"
    --global-batch 64 --lr "$(lr "$1")" --cosine --momentum 0.9 --channels-last
    --epochs "$EPOCHS")
  if [ "$2" = 1 ]; then
    "$TORCH_PY" "${args[@]}" --threads 2 >"$tmp/torch-$1-1" 2>"$tmp/torch-$1-1.err"
  else
    two_workers "torch-$1-2" torch_worker "$(port)"
  fi
}
torch_worker() { # PORT RANK, with torch's args
  MASTER_ADDR=127.0.0.1 MASTER_PORT=$1 WORLD_SIZE=2 RANK=$2 "$TORCH_PY" "${args[@]}" --threads 1
}
run() { # TRAINER MODEL WORKERS: a failed run (either worker) stops the benchmark with its stderr
  if ! { "$@" && grep -q '"train_end"' "$tmp/$1-$2-$3"; }; then
    echo "train.sh: $1 $2 x$3 failed:" >&2
    tail -20 "$tmp/$1-$2-$3".err* >&2
    exit 1
  fi
  echo "train.sh: $1 $2 x$3 done" >&2
}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for m in $MODELS; do
  for w in 1 2; do
    run tj "$m" "$w"
    run tf "$m" "$w"
    run torch "$m" "$w"
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

field() { grep "\"$1\"" "$3" | tail -1 | sed -E "s/.*\"$2\": ?([0-9.e-]+).*/\1/"; }
ips() { field epoch_end images_per_sec "$tmp/$1"; }
acc() { field train_end test_accuracy "$tmp/$1"; }
{
  echo "# Training ResNet-20 and MobileNetV2: tj-trainer, TensorFlow and PyTorch, same data and recipe"
  echo
  echo "- Date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "- Machine: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), $(nproc) cores" \
    "(AVX-512: $(grep -q avx512f /proc/cpuinfo && echo yes || echo no)); load average before:" \
    "$load_before, after: $load_after"
  echo "- Command: \`bash bench/declared_model/train.sh $TRAIN $EPOCHS\`; one run of each, in the" \
    "order of the table (per model and shape: tj-trainer, TensorFlow, PyTorch)"
  echo "- Data: Fashion-MNIST from Debian's dataset-fashion-mnist, CIFAR-shaped by" \
    "\`fashion32.py\` (zero-padded to 32x32, grey repeated into 3 channels): the first $TRAIN" \
    "training images, the 10,000 test images"
  echo "- Recipe, all three: pixels / 255, SGD momentum 0.9, the learning rate a cosine decay to 0" \
    "over the run (Keras' CosineDecay) from 0.05 (ResNet-20) or 0.02 (MobileNetV2), softmax" \
    "cross-entropy, global batch 64, $EPOCHS epochs, reshuffled each epoch, GlorotUniform weights," \
    "no augmentation, BatchNormalization per worker (none synchronises it); MobileNetV2's" \
    "BatchNormalization momentum 0.99 (keras.applications' 0.999 leaves the moving statistics" \
    "half-initial after 600 steps: all three then test at 10%)"
  echo "- tj-trainer: $trainer_origin, with \`--model-config --dataset-format npz" \
    "--optimizer sgd --momentum 0.9 --lr-schedule cosine:LR\`"
  echo "- TensorFlow $("$PY" -c 'import tensorflow as t, keras as k; print(t.__version__, "/ Keras", k.__version__)' 2>/dev/null)" \
    "(\`keras_train.py\`: a tf.function step under strategy.run, in both shapes, as Keras 3's" \
    "model.fit fails under MultiWorkerMirroredStrategy (docs/tensorflow.md); two workers:" \
    "MultiWorkerMirroredStrategy, each reading its shard)"
  echo "- PyTorch $("$TORCH_PY" -c 'import torch; print(torch.__version__)') from PyPI" \
    "(\`torch_train.py\`: the model torch_step.py builds from the same JSON, channels_last, eager;" \
    "two workers: DistributedDataParallel over Gloo)"
  echo "- images/s: the last epoch's (the first includes TensorFlow's tracing and warm-up);" \
    "test accuracy: on the 10,000 test images after the last epoch (worker 0's model)"
  echo
  echo "| model | shape | tj-trainer images/s | TensorFlow images/s | PyTorch images/s |" \
    "TF / tj | PyTorch / tj | tj accuracy | TF accuracy | PyTorch accuracy |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
  for m in $MODELS; do
    for w in 1 2; do
      shape=$([ "$w" = 1 ] && echo "1 process x 2 threads" || echo "2 workers x 1 thread")
      a=$(ips "tj-$m-$w") b=$(ips "tf-$m-$w") c=$(ips "torch-$m-$w")
      awk -v m="$m" -v s="$shape" -v a="$a" -v b="$b" -v c="$c" -v x="$(acc "tj-$m-$w")" \
        -v y="$(acc "tf-$m-$w")" -v z="$(acc "torch-$m-$w")" 'BEGIN {
          printf "| %s | %s | %.0f | %.0f | %.0f | %.2f | %.2f | %.4f | %.4f | %.4f |\n",
            m, s, a, b, c, b / a, c / a, x, y, z }'
    done
  done
  echo
  echo "Raw output (worker 0):"
  echo
  echo '```'
  for m in $MODELS; do
    for w in 1 2; do
      for t in tj tf torch; do
        echo "== $t $m x$w"
        grep -E '"(epoch_end|train_end)"' "$tmp/$t-$m-$w"
      done
    done
  done
  echo '```'
} >"$OUT"
cat "$OUT"
