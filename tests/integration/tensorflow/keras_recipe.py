"""tj-trainer's training recipe (--optimizer, --momentum, --nesterov, --weight-decay,
--lr-schedule, --label-smoothing) against the same recipe in TensorFlow's Keras 3.

Usage: keras_recipe.py ROOT BUILD WORK

A model of examples/models/bn_dropout_cnn.json's layers without its Dropouts (Conv2D,
BatchNormalization, ReLU, MaxPooling2D, Dense, Dense softmax; Keras' masks are not ours) starts
from the same random Keras weights (--initial-weights) and trains on the same 64 synthetic
images, a whole-set batch a step (one step an epoch, so the epoch's order of the examples does
not matter), with:
(a) keras.optimizers.SGD(momentum=0.9, nesterov=True, weight_decay=0.01) on a CosineDecay with
    a linear warmup, and CategoricalCrossentropy(label_smoothing=0.1);
(b) keras.optimizers.Adam(weight_decay=0.05) (AdamW) on a PiecewiseConstantDecay by epoch
    (--lr-schedule step:...), unsmoothed.
Each epoch's loss (Keras' history, tj-trainer's epoch_end) agrees within LOSS_TOLERANCE and
every trained tensor (the export's model.weights.h5 against the Keras model's weights) within
WEIGHT_TOLERANCE: the two differ by float32 rounding alone (summation orders, Keras' clipped
log of the softmax against the engine's log-softmax in double).
"""

import json
import os
import subprocess
import sys

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402

LOSS_TOLERANCE = 1e-4
WEIGHT_TOLERANCE = 1e-4  # absolute, on weights of magnitude up to about 1
EPOCHS = 6
BATCH = 64

ROOT, BUILD, WORK = sys.argv[1:4]
TRAINER = os.path.join(BUILD, "bin", "tj-trainer")
results = []  # (passed, what), printed as they come


def check(ok, what):
    results.append((ok, what))
    print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)


spec = json.load(open(os.path.join(ROOT, "examples", "models", "bn_dropout_cnn.json")))
spec["config"]["layers"] = [layer for layer in spec["config"]["layers"]
                            if layer["class_name"] != "Dropout"]
model_json = os.path.join(WORK, "model.json")
with open(model_json, "w") as f:
    json.dump(spec, f)

rng = np.random.default_rng(11)
images = rng.integers(0, 256, (BATCH, 28, 28, 1), dtype=np.uint8)
labels = (np.arange(BATCH) % 10).astype(np.int64)
data = os.path.join(WORK, "data.npz")
np.savez(data, x_train=images, y_train=labels, x_test=images, y_test=labels)
x = images.astype(np.float32) / 255.0
y = keras.utils.to_categorical(labels, 10)

keras.utils.set_random_seed(3)
initial = keras.models.model_from_json(json.dumps(spec))
initial_weights = os.path.join(WORK, "initial.weights.h5")
initial.save_weights(initial_weights)


def tj_train(name, flags):
    export = os.path.join(WORK, name)
    run = subprocess.run(
        [TRAINER, "--model-config", model_json, "--initial-weights", initial_weights,
         "--dataset-format", "npz", "--train-data", data, "--batch-size", str(BATCH),
         "--epochs", str(EPOCHS), "--steps-per-epoch", "1", "--threads", "1",
         "--export-dir", export, *flags], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"tj-trainer {' '.join(flags)} exited {run.returncode}:\n{run.stdout}{run.stderr}")
    losses = [json.loads(line)["loss"] for line in run.stdout.splitlines()
              if line.startswith("{") and json.loads(line).get("event") == "epoch_end"]
    trained = keras.models.model_from_json(json.dumps(spec))
    trained.load_weights(os.path.join(export, "model.weights.h5"))
    return losses, trained.get_weights()


def keras_train(optimizer, loss):
    model = keras.models.model_from_json(json.dumps(spec))
    model.load_weights(initial_weights)
    model.compile(optimizer=optimizer, loss=loss)
    history = model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    return history.history["loss"], model.get_weights()


def compare(name, flags, optimizer, loss):
    ours_loss, ours = tj_train(name, flags)
    theirs_loss, theirs = keras_train(optimizer, loss)
    loss_diff = max(abs(a - b) for a, b in zip(ours_loss, theirs_loss))
    check(len(ours_loss) == EPOCHS and loss_diff <= LOSS_TOLERANCE,
          f"{name}: the {EPOCHS} epochs' losses agree within {LOSS_TOLERANCE} (largest "
          f"difference {loss_diff:.2e}; Keras {theirs_loss[-1]:.6f}, ours {ours_loss[-1]:.6f})")
    weight_diff = max(float(np.abs(a - b).max()) for a, b in zip(ours, theirs))
    moved = max(float(np.abs(a - b).max()) for a, b in zip(ours, initial.get_weights()))
    check(weight_diff <= WEIGHT_TOLERANCE and moved > 100 * WEIGHT_TOLERANCE,
          f"{name}: every tensor agrees within {WEIGHT_TOLERANCE} (largest difference "
          f"{weight_diff:.2e}; the weights moved up to {moved:.2e})")


compare("sgd_nesterov_cosine_smoothing",
        ["--optimizer", "sgd", "--momentum", "0.9", "--nesterov", "--weight-decay", "0.01",
         "--lr-schedule", "cosine:0.1,warmup=2,alpha=0.1", "--label-smoothing", "0.1"],
        keras.optimizers.SGD(
            learning_rate=keras.optimizers.schedules.CosineDecay(
                0.0, decay_steps=EPOCHS - 2, alpha=0.1, warmup_target=0.1, warmup_steps=2),
            momentum=0.9, nesterov=True, weight_decay=0.01),
        keras.losses.CategoricalCrossentropy(label_smoothing=0.1))
# Epochs 1-3 (steps 0-2) at 1e-2, then 2e-3: PiecewiseConstantDecay's step <= 2 is the first.
compare("adamw_step_schedule",
        ["--weight-decay", "0.05", "--lr-schedule", "step:1e-2@1,2e-3@4"],
        keras.optimizers.Adam(
            learning_rate=keras.optimizers.schedules.PiecewiseConstantDecay([2], [1e-2, 2e-3]),
            weight_decay=0.05),
        keras.losses.CategoricalCrossentropy())

failed = [what for ok, what in results if not ok]
if failed:
    sys.exit(f"{len(failed)} of {len(results)} checks failed")
print("all recipe checks passed")
