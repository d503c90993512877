"""Keras 3's .weights.h5 both ways between tj-trainer and TensorFlow's Keras.

Usage: keras_weights.py ROOT BUILD DATA WORK

(a) Out: tj-trainer trains examples/models/bn_dropout_cnn.json for a few steps and exports it;
    Keras loads the export's model.weights.h5 into model_from_json(model.json) and evaluates
    the test set: its loss is tj-trainer's test loss within LOSS_TOLERANCE, its accuracy equal,
    and its predicted class of each test image the engine's (keras_weights_eval on the same
    file). The file has the groups, datasets, shapes, types and attributes of the file Keras'
    own save_weights writes for the model.
(b) In: a Keras model with its Conv2D and BatchNormalization frozen ("trainable": false),
    random weights and moving statistics, saved with save_weights, is given to tj-trainer with
    --initial-weights: the engine's predictions for those weights (no step) are Keras'; after
    training the frozen tensors (and the frozen BatchNormalization's moving statistics) are
    bitwise the initial ones and the trainable ones moved. A resume with other initial weights
    and weights of another model are refused.
"""

import gzip
import json
import os
import subprocess
import sys

import h5py
import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402

# The mean test loss of 10,000 images, Keras' (float32 sums per batch, its clipped log of the
# softmax) against the engine's (double sums of log-softmax): they differ by rounding alone.
LOSS_TOLERANCE = 1e-4
# Softmax probabilities of the engine's logits against Keras' predictions.
PROB_TOLERANCE = 1e-5

ROOT, BUILD, DATA, WORK = sys.argv[1:5]
TRAINER = os.path.join(BUILD, "bin", "tj-trainer")
EVAL = os.path.join(BUILD, "tests", "keras_weights_eval")
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def idx(name):
    with gzip.open(os.path.join(DATA, name)) as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * dims).reshape(shape)


x_test = (idx("t10k-images-idx3-ubyte.gz").astype(np.float32) / 255.0)[..., None]
y_test = idx("t10k-labels-idx1-ubyte.gz").astype(np.int64)


def trainer(*args, expect_ok=True):
    run = subprocess.run([TRAINER, "--data-dir", DATA, "--threads", "1", *args],
                         capture_output=True, text=True)
    if expect_ok and run.returncode != 0:
        sys.exit(f"tj-trainer {' '.join(args)} exited {run.returncode}:\n{run.stdout}{run.stderr}")
    return run


def event(run, name):
    for line in run.stdout.splitlines():
        if line.startswith("{") and json.loads(line).get("event") == name:
            return json.loads(line)
    sys.exit(f"no {name} event in:\n{run.stdout}")


def engine_logits(model_json, weights, images):
    path = os.path.join(WORK, "images.f32")
    np.ascontiguousarray(images, np.float32).tofile(path)
    out = os.path.join(WORK, "logits.f32")
    subprocess.run([EVAL, model_json, weights, path, str(len(images)), out], check=True)
    return np.fromfile(out, np.float32).reshape(len(images), -1)


def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def layout(path):
    """Every group and dataset of an HDF5 file: type, shape, dtype, attributes."""
    items = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            attrs = {k: (v.decode() if isinstance(v, bytes) else str(v))
                     for k, v in obj.attrs.items()}
            if isinstance(obj, h5py.Dataset):
                items[name] = ("dataset", obj.shape, str(obj.dtype), attrs)
            else:
                items[name] = ("group", None, None, attrs)
        f.visititems(visit)
    return items


def variables(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset)
                     else None)
    return out


# --- (a) tj-trainer's export loads into Keras -------------------------------------------
model_file = os.path.join(ROOT, "examples", "models", "bn_dropout_cnn.json")
export = os.path.join(WORK, "export")
run = trainer("--model-config", model_file, "--epochs", "1", "--steps-per-epoch", "30",
              "--export-dir", export)
end = event(run, "train_end")
arch = json.load(open(os.path.join(export, "architecture.json")))
check(arch.get("keras_weights_file") == "model.weights.h5",
      "architecture.json names model.weights.h5")
ours = os.path.join(export, "model.weights.h5")
model = keras.models.model_from_json(open(os.path.join(export, "model.json")).read())
model.load_weights(ours)
keras_own = os.path.join(WORK, "keras_own.weights.h5")
model.save_weights(keras_own)
check(layout(ours) == layout(keras_own),
      "the export's model.weights.h5 has the layout of Keras' own save_weights "
      f"({len(layout(ours))} groups and datasets)")
mine, theirs = variables(ours), variables(keras_own)
check(all(np.array_equal(mine[k], theirs[k]) for k in mine),
      "Keras saves back the bits it loaded")
model.compile(loss=keras.losses.SparseCategoricalCrossentropy(), metrics=["accuracy"])
loss, accuracy = model.evaluate(x_test, y_test, batch_size=1000, verbose=0)
check(abs(loss - end["test_loss"]) <= LOSS_TOLERANCE,
      f"Keras' test loss {loss:.7f} is tj-trainer's {end['test_loss']:.7f} within "
      f"{LOSS_TOLERANCE} (difference {abs(loss - end['test_loss']):.2e})")
check(round(accuracy * 10000) == round(end["test_accuracy"] * 10000),
      f"Keras' test accuracy {accuracy:.4f} is tj-trainer's {end['test_accuracy']:.4f}")
probs = model.predict(x_test, batch_size=1000, verbose=0)
logits = engine_logits(os.path.join(export, "model.json"), ours, x_test)
same = int((probs.argmax(1) == logits.argmax(1)).sum())
check(same == len(x_test), f"the predicted class of {same} of {len(x_test)} test images agrees")
diff = float(np.abs(softmax(logits) - probs).max())
check(diff <= PROB_TOLERANCE, f"probabilities within {PROB_TOLERANCE} (largest difference "
                              f"{diff:.2e})")

# --- (b) a Keras model's weights start a run, frozen layers stay ---------------------------
spec = json.load(open(model_file))
frozen_names = {"conv", "bn"}
for layer in spec["config"]["layers"]:
    if layer["config"]["name"] in frozen_names:
        layer["config"]["trainable"] = False
keras.utils.set_random_seed(7)
frozen = keras.models.model_from_json(json.dumps(spec))
check(len(frozen.trainable_weights) == 4,
      "Keras freezes the conv and the BatchNormalization of the JSON (4 trainable tensors left)")
rng = np.random.default_rng(7)
bn = frozen.get_layer("bn")
bn.set_weights([rng.uniform(0.5, 1.5, 16).astype(np.float32),
                rng.uniform(-0.2, 0.2, 16).astype(np.float32),
                rng.uniform(-0.1, 0.1, 16).astype(np.float32),
                rng.uniform(0.05, 0.2, 16).astype(np.float32)])
frozen_json = os.path.join(WORK, "frozen.json")
with open(frozen_json, "w") as f:
    f.write(frozen.to_json())
initial = os.path.join(WORK, "initial.weights.h5")
frozen.save_weights(initial)
sample = x_test[:2000]
probs = frozen.predict(sample, batch_size=1000, verbose=0)
logits = engine_logits(frozen_json, initial, sample)
same = int((probs.argmax(1) == logits.argmax(1)).sum())
diff = float(np.abs(softmax(logits) - probs).max())
check(same == len(sample) and diff <= PROB_TOLERANCE,
      f"before any step the engine predicts Keras' class for {same} of {len(sample)} images, "
      f"probabilities within {PROB_TOLERANCE} (largest difference {diff:.2e})")

tuned = os.path.join(WORK, "tuned")
backups = os.path.join(WORK, "backups")
run = trainer("--model-config", frozen_json, "--initial-weights", initial, "--epochs", "1",
              "--steps-per-epoch", "20", "--export-dir", tuned, "--backup-dir", backups,
              "--keep-backup")
model_event = event(run, "model")
check(model_event.get("initial_weights") == initial and
      len(model_event.get("initial_weights_sha256", "")) == 64,
      "the model event names the initial weights and their SHA-256")
before, after = variables(initial), variables(os.path.join(tuned, "model.weights.h5"))
frozen_paths = [k for k in before if k.split("/")[1] in ("conv2d", "batch_normalization")]
trained_paths = [k for k in before if k.split("/")[1].startswith("dense")]
check(len(frozen_paths) == 5 and all(np.array_equal(before[k], after[k]) and
                                     before[k].tobytes() == after[k].tobytes()
                                     for k in frozen_paths),
      f"the frozen tensors are bitwise the initial ones after 20 steps: {sorted(frozen_paths)}")
check(len(trained_paths) == 4 and all(not np.array_equal(before[k], after[k])
                                      for k in trained_paths),
      f"every trainable tensor moved: {sorted(trained_paths)}")

# A resume with other initial weights (the same shapes: the export of (a)) is refused.
run = trainer("--model-config", frozen_json, "--initial-weights", ours, "--epochs", "2",
              "--steps-per-epoch", "20", "--backup-dir", backups, expect_ok=False)
check(run.returncode != 0 and "initial_weights_sha256" in run.stdout + run.stderr,
      f"a resume with other initial weights is refused (exit {run.returncode}), naming "
      "initial_weights_sha256")

# Weights of another model are refused before anything runs, naming the layer and shapes.
seeds = keras.models.model_from_json(
    open(os.path.join(ROOT, "examples", "models", "seeds_cnn.json")).read())
other = os.path.join(WORK, "seeds.weights.h5")
seeds.save_weights(other)
run = trainer("--model-config", frozen_json, "--initial-weights", other, expect_ok=False)
output = run.stdout + run.stderr
check(run.returncode == 2 and "layers/conv2d (layer Conv2D 'conv')" in output and
      "in the file and (3, 3, 1, 16) in the model" in output,
      f"another model's weights are refused with exit {run.returncode}: "
      + next((line for line in output.splitlines() if "initial-weights" in line), output[-300:]))

sys.exit(1 if failures else 0)
