#!/usr/bin/env bash
# tj-trainer's outputs read by real TensorFlow tools (the venv of hack/tensorflow.sh, the
# versions of examples/tensorflow/requirements.txt):
#   1. TensorBoard's own event reader (tensorboard.backend.event_processing's
#      EventAccumulator) lists the scalars of tj-trainer's --log-dir, train/ and eval/, with the
#      values tj-trainer logged for each epoch;
#   2. the model tj-trainer exports (--export-dir) becomes Keras weights
#      (examples/tensorflow/tj_to_keras.py): model.weights.h5 loads into the same
#      architecture in Keras 3 and in tf-keras, and model.keras with keras.models.load_model,
#      and each evaluates to tj-trainer's own test accuracy;
#   3. examples/tensorflow/tj_status.py's BackupAndRestore writes each backup it makes as the
#      container's termination message (where a restarted gang resumes).
# Usage: interop_test.sh REPO_ROOT BUILD_DIR. Exit 77 (ctest: skipped) when the venv cannot
# be made (no wheels and no PyPI) or tj-trainer or Fashion-MNIST is missing, unless CI or
# TJ_REQUIRE_TENSORFLOW is set.
set -euo pipefail
ROOT=${1:?usage: interop_test.sh REPO_ROOT BUILD_DIR}
BUILD=${2:?usage: interop_test.sh REPO_ROOT BUILD_DIR}
DATA=${TJ_DATA_DIR:-/usr/share/datasets/fashion-mnist}
# shellcheck source=tests/integration/tensorflow/skip.sh
. "$(dirname "$0")/skip.sh"
[ -x "$BUILD/bin/tj-trainer" ] || skip "$BUILD/bin/tj-trainer is not built"
[ -s "$DATA/t10k-images-idx3-ubyte.gz" ] || skip "no Fashion-MNIST in $DATA (dataset-fashion-mnist)"
PY=$("$ROOT/hack/tensorflow.sh" venv) || skip "no TensorFlow venv (hack/tensorflow.sh venv failed)"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fails=0
pass() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

# Two epochs of 50 steps with a checkpoint each, the export, then the evaluator (which takes
# the newest checkpoint: ckpt-final, epoch 2).
"$BUILD/bin/tj-trainer" --data-dir "$DATA" --epochs 2 --steps-per-epoch 50 --threads 2 \
  --checkpoint-dir "$WORK/ckpt" --log-dir "$WORK/logs" --export-dir "$WORK/model" \
  --status-port 0 >"$WORK/train.log" 2>&1 || { cat "$WORK/train.log"; exit 1; }
"$BUILD/bin/tj-trainer" --data-dir "$DATA" --role evaluator --epochs 2 \
  --checkpoint-dir "$WORK/ckpt" --log-dir "$WORK/logs" --status-port 0 \
  >"$WORK/eval.log" 2>&1 || { cat "$WORK/eval.log"; exit 1; }

# 1. TensorBoard reads the event files.
tensorboard_reads() {
  TF_CPP_MIN_LOG_LEVEL=2 "$PY" - "$WORK" <<'PY'
import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
work = sys.argv[1]
events = [json.loads(l) for l in open(f"{work}/train.log") if l.startswith("{")]
epochs = {e["epoch"]: e for e in events if e.get("event") == "epoch_end"}
evals = [json.loads(l) for l in open(f"{work}/eval.log") if l.startswith("{")]
evals = {e["epoch"]: e for e in evals if "accuracy" in e and "epoch" in e}
ok = True
for sub, want in (("train", ["epoch_loss", "epoch_accuracy", "learning_rate", "images_per_sec"]),
                  ("eval", ["epoch_loss", "epoch_accuracy"])):
    acc = EventAccumulator(f"{work}/logs/{sub}")
    acc.Reload()
    tags = acc.Tags()["scalars"]
    print(f"{sub}/ scalars: {sorted(tags)}")
    for tag in want:
        if tag not in tags:
            print(f"  missing scalar {sub}/{tag}"); ok = False; continue
        points = {s.step: s.value for s in acc.Scalars(tag)}
        print(f"  {sub}/{tag}: {points}")
        # train/ has every epoch; the evaluator, run after training, the newest checkpoint.
        expected = [1, 2] if sub == "train" else [2]
        if sorted(points) != expected:
            print(f"  {sub}/{tag}: steps {sorted(points)}, expected epochs {expected}")
            ok = False
    if sub == "train":
        for epoch, e in epochs.items():
            for tag, key in (("epoch_loss", "loss"), ("epoch_accuracy", "accuracy")):
                got = {s.step: s.value for s in acc.Scalars(tag)}.get(epoch)
                if got is None or abs(got - e[key]) > 1e-5 * max(1, abs(e[key])):
                    print(f"  train/{tag} at {epoch}: {got}, the log says {e[key]}"); ok = False
    else:
        for epoch, e in evals.items():
            got = {s.step: s.value for s in acc.Scalars("epoch_accuracy")}.get(epoch)
            if got is None or abs(got - e["accuracy"]) > 1e-6:
                print(f"  eval/epoch_accuracy at {epoch}: {got}, the log says {e['accuracy']}")
                ok = False
if len(epochs) != 2 or len(evals) < 1:
    print(f"tj-trainer logged {len(epochs)} epochs and {len(evals)} evaluations"); ok = False
sys.exit(0 if ok else 1)
PY
}
if tensorboard_reads; then
  pass "TensorBoard's EventAccumulator reads tj-trainer's events"
else
  fail "TensorBoard's EventAccumulator"
fi

# 2. The export in Keras, both Keras versions, at tj-trainer's test accuracy.
want=$(grep '"event":"train_end"' "$WORK/train.log" | "$PY" -c \
  'import json,sys; print(json.loads(sys.stdin.read())["test_accuracy"])')
echo "tj-trainer's test accuracy: $want"
cd "$ROOT/examples/tensorflow"
for flavour in keras3 tf-keras; do
  legacy=0; [ "$flavour" = tf-keras ] && legacy=1
  for out in model.weights.h5 model.keras; do
    [ "$flavour/$out" = tf-keras/model.keras ] && continue  # .keras is Keras 3's format
    if ! got=$(TF_USE_LEGACY_KERAS=$legacy TF_CPP_MIN_LOG_LEVEL=2 "$PY" tj_to_keras.py \
        "$WORK/model" "$WORK/$flavour-$out" --evaluate --data-dir "$DATA" 2>"$WORK/err"); then
      cat "$WORK/err"; fail "$flavour: tj_to_keras.py -> $out"; continue
    fi
    # A fresh model of the architecture loads the file and evaluates the same.
    if ! reloaded=$(TF_USE_LEGACY_KERAS=$legacy TF_CPP_MIN_LOG_LEVEL=2 "$PY" - \
        "$WORK/$flavour-$out" "$DATA" 2>"$WORK/err" <<'PY'
import json, sys
import tensorflow as tf
import fmnist_setup
path, data = sys.argv[1], sys.argv[2]
if path.endswith(".keras"):
    model = tf.keras.models.load_model(path)
else:
    model = fmnist_setup.build_and_compile_model()
    model.load_weights(path)
_, acc = model.evaluate(fmnist_setup.test_dataset(data, 1000), verbose=0)
print(json.dumps({"test_accuracy": float(acc)}))
PY
    ); then
      cat "$WORK/err"; fail "$flavour: loading $out"; continue
    fi
    if "$PY" - "$want" "$got" "$reloaded" <<'PY'; then
import json, sys
want = float(sys.argv[1])
got = json.loads(sys.argv[2].strip().splitlines()[-1])["test_accuracy"]
again = json.loads(sys.argv[3].strip().splitlines()[-1])["test_accuracy"]
print(f"  converted {got}, loaded again {again}, tj-trainer {want}")
# 10,000 test images: equal up to float32 ties between two logits (a few images at most).
sys.exit(0 if abs(got - want) <= 3e-4 and abs(again - got) < 1e-9 else 1)
PY
      pass "$flavour: $out evaluates to tj-trainer's test accuracy"
    else
      fail "$flavour: $out evaluates to another accuracy"
    fi
  done
done

# 3. tj_status.BackupAndRestore, in Keras 3 and tf-keras: Keras' own backups, each also written
# as the termination message. 2 epochs of 6 steps, a backup every 4 steps (the count runs on
# across epochs): after steps 4 of epoch 1, 2 and 6 of epoch 2; the last one is the message.
for legacy in 0 1; do
  flavour=$([ $legacy = 1 ] && echo tf-keras || echo keras-3)
  : >"$WORK/termination-$legacy"
  if ! out=$(cd "$ROOT/examples/tensorflow" && TF_USE_LEGACY_KERAS=$legacy TF_CPP_MIN_LOG_LEVEL=2       TJ_TERMINATION_MESSAGE_PATH="$WORK/termination-$legacy" "$PY" - "$WORK/bar-$legacy"       2>"$WORK/err" <<'PY'
import sys
import numpy as np
import tj_status
k = tj_status._keras
model = k.Sequential([k.Input((4,)), k.layers.Dense(2)])
model.compile(optimizer="sgd", loss="mse")
x, y = np.zeros((24, 4), "float32"), np.zeros((24, 2), "float32")
model.fit(x, y, batch_size=4, epochs=2, verbose=0,
          callbacks=[tj_status.BackupAndRestore(sys.argv[1], save_freq=4)])
PY
  ); then
    cat "$WORK/err"; fail "$flavour: fit with tj_status.BackupAndRestore"; continue
  fi
  if "$PY" - "$WORK/termination-$legacy" <<'PY'; then
import json, sys
m = json.load(open(sys.argv[1]))["lastBackup"]
print(f"  termination message {m}")
sys.exit(0 if (m["epoch"], m["step"]) == (2, 6) and m["time"].endswith("Z") else 1)
PY
    pass "$flavour: tj_status.BackupAndRestore wrote its last backup, epoch 2 step 6"
  else
    fail "$flavour: tj_status.BackupAndRestore's termination message is not epoch 2 step 6"
  fi
done

[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all interop checks passed"
