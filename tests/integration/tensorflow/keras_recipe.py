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
log of the softmax against the engine's log-softmax in double). Except the Conv2D kernel that
BatchNormalization normalises in training: its gradient along the batch's mean direction
cancels (BatchNormalization's backward removes the mean of what flows back), so some of its
elements are differences of large sums, equal in the two to float32 rounding of those sums
only; Adam divides each element by its own magnitude, and SGD with momentum carries the error
on, so after 6 steps they differ by about 1 % of how far the kernel moved (measured up to 2 %
with AdamW, from 0.9 % after the first step). That kernel is held to BEFORE_BN_TOLERANCE of
its movement; every other tensor to WEIGHT_TOLERANCE, which also catches a recipe's weight
decay or smoothing missing on one side. With SGD at a rate of 0.1 and momentum 0.9 the
kernel's difference flows on into the tensors after it (the BatchNormalization's gamma and
beta differ by up to 3.3e-4 of their 0.37 of movement), so there each tensor may differ by
SGD_RELATIVE of its own movement where that is more than WEIGHT_TOLERANCE; the AdamW case,
whose steps stay small, holds every tensor to WEIGHT_TOLERANCE (and its decay is the same
code as SGD's).
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
BEFORE_BN = {0}  # the Conv2D kernel's index in get_weights(): BatchNormalization follows it
BEFORE_BN_TOLERANCE = 5e-2  # of the largest movement of that kernel's elements
SGD_RELATIVE = 2e-3  # of a tensor's largest movement, in the SGD case
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


def compare(name, flags, optimizer, loss, relative=0.0):
    ours_loss, ours = tj_train(name, flags)
    theirs_loss, theirs = keras_train(optimizer, loss)
    loss_diff = max(abs(a - b) for a, b in zip(ours_loss, theirs_loss))
    check(len(ours_loss) == EPOCHS and loss_diff <= LOSS_TOLERANCE,
          f"{name}: the {EPOCHS} epochs' losses agree within {LOSS_TOLERANCE} (largest "
          f"difference {loss_diff:.2e}; Keras {theirs_loss[-1]:.6f}, ours {ours_loss[-1]:.6f})")
    start = initial.get_weights()
    diffs = [float(np.abs(a - b).max()) for a, b in zip(ours, theirs)]
    moves = [float(np.abs(b - c).max()) for b, c in zip(theirs, start)]
    # The largest difference over what each tensor may differ by.
    worst = max(d / max(WEIGHT_TOLERANCE, relative * m)
                for i, (d, m) in enumerate(zip(diffs, moves)) if i not in BEFORE_BN)
    moved = max(moves)
    allowed = f"{WEIGHT_TOLERANCE}" + (f" or {relative} of its movement" if relative else "")
    check(worst <= 1.0 and moved > 100 * WEIGHT_TOLERANCE,
          f"{name}: every tensor but the kernel before BatchNormalization agrees within "
          f"{allowed} (the worst at {worst:.2f} of that; differences "
          f"{', '.join(f'{d:.1e}' for d in diffs)}; the weights moved up to {moved:.2e})")
    for i in sorted(BEFORE_BN):
        check(diffs[i] <= BEFORE_BN_TOLERANCE * moves[i] and moves[i] > 0,
              f"{name}: the kernel before BatchNormalization agrees within "
              f"{BEFORE_BN_TOLERANCE} of its movement (difference {diffs[i]:.2e}, "
              f"{diffs[i] / max(moves[i], 1e-30):.2%} of its movement {moves[i]:.2e})")


compare("sgd_nesterov_cosine_smoothing",
        ["--optimizer", "sgd", "--momentum", "0.9", "--nesterov", "--weight-decay", "0.01",
         "--lr-schedule", "cosine:0.1,warmup=2,alpha=0.1", "--label-smoothing", "0.1"],
        keras.optimizers.SGD(
            learning_rate=keras.optimizers.schedules.CosineDecay(
                0.0, decay_steps=EPOCHS - 2, alpha=0.1, warmup_target=0.1, warmup_steps=2),
            momentum=0.9, nesterov=True, weight_decay=0.01),
        keras.losses.CategoricalCrossentropy(label_smoothing=0.1), relative=SGD_RELATIVE)
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
