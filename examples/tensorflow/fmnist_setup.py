"""Fashion-MNIST and the model shared by the TensorFlow examples (as `mnist_setup.py` is in
TensorFlow's multi-worker tutorials).

The data are the four IDX files of Debian's dataset-fashion-mnist package, read from a
directory (the images ship them in /usr/share/datasets/fashion-mnist): nothing is downloaded.
The model is tj-trainer's: Conv2D(32, 3x3, relu) -> MaxPool(2) -> Flatten -> Dense(64, relu)
-> Dense(10) logits, softmax cross-entropy, Adam at 1e-3 (Keras' defaults otherwise), so a
TensorFlow run and a tj-trainer run of the same recipe can be compared, and weights move
between them (tj_to_keras.py).

Works with Keras 3 (TensorFlow's default) and with tf-keras (TF_USE_LEGACY_KERAS=1): it uses
`tf.keras`, which is whichever of the two TensorFlow loaded.
"""
import collections
import gzip
import json
import os
import struct
import sys

import numpy as np
import tensorflow as tf

DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"
TRAIN_IMAGES, TRAIN_LABELS = "train-images-idx3-ubyte", "train-labels-idx1-ubyte"
TEST_IMAGES, TEST_LABELS = "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"


def keras_flavour():
    """'tf-keras <version>' under TF_USE_LEGACY_KERAS=1, else 'keras <version>' (Keras 3)."""
    if tf.keras.__name__.startswith("tf_keras"):
        import tf_keras
        return f"tf-keras {tf_keras.__version__}"
    import keras
    return f"keras {keras.__version__}"


def _read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 8:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    ndims = data[3]
    dims = struct.unpack(">" + "I" * ndims, data[4:4 + 4 * ndims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndims).reshape(dims)


def _find(data_dir, stem):
    for name in (stem + ".gz", stem):
        path = os.path.join(data_dir, name)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(
        f"{os.path.join(data_dir, stem)}(.gz) not found: --data-dir must name a directory with "
        "the four Fashion-MNIST IDX files (Debian's dataset-fashion-mnist installs them in "
        f"{DEFAULT_DATA_DIR})")


def load(data_dir, split):
    """(images float32 [n, 28, 28, 1] in [0, 1], labels int64 [n]) of 'train' or 'test'."""
    images, labels = (TRAIN_IMAGES, TRAIN_LABELS) if split == "train" else (TEST_IMAGES,
                                                                              TEST_LABELS)
    x = _read_idx(_find(data_dir, images)).astype(np.float32) / 255.0
    y = _read_idx(_find(data_dir, labels)).astype(np.int64)
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"{data_dir}: {x.shape[0]} {split} images but {y.shape[0]} labels")
    return x[..., np.newaxis], y


def train_dataset(data_dir, global_batch_size, seed=42):
    """Shuffled, repeated, batched by the global batch: what model.fit takes under a strategy
    (the strategy splits each global batch among the workers)."""
    x, y = load(data_dir, "train")
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    ds = ds.shuffle(len(x), seed=seed, reshuffle_each_iteration=True).repeat()
    ds = ds.batch(global_batch_size, drop_remainder=True)
    options = tf.data.Options()
    # In-memory data has no files to split: each worker takes its share of every batch.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options)


def test_dataset(data_dir, batch_size):
    x, y = load(data_dir, "test")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size).with_options(options)


def build_model():
    """The seeds' CNN (tj-trainer's architecture), uncompiled. Layer names fixed so weights
    files match across programs."""
    keras = tf.keras
    return keras.Sequential([
        keras.Input(shape=(28, 28, 1)),
        keras.layers.Conv2D(32, 3, activation="relu", name="conv"),
        keras.layers.MaxPooling2D(2, name="pool"),
        keras.layers.Flatten(name="flatten"),
        keras.layers.Dense(64, activation="relu", name="dense1"),
        keras.layers.Dense(10, name="dense2"),
    ], name="seeds")


def build_and_compile_model(learning_rate=1e-3):
    keras = tf.keras
    model = build_model()
    model.compile(
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=keras.optimizers.Adam(learning_rate=learning_rate),
        metrics=["accuracy"])
    return model


def lr_for_epoch(epoch):
    """The seeds' schedule (1-based epoch): 1e-3 for 1-3, 1e-4 for 4-7, 1e-5 after."""
    return 1e-3 if epoch <= 3 else 1e-4 if epoch <= 7 else 1e-5


def task():
    """(type, index, has_chief) of this process from TF_CONFIG; (None, 0, False) alone."""
    cfg = json.loads(os.environ.get("TF_CONFIG") or "{}")
    t = cfg.get("task", {})
    return t.get("type"), int(t.get("index", 0)), bool(cfg.get("cluster", {}).get("chief"))


def is_chief(task_type, task_index, has_chief):
    """TensorFlow's rule: the chief task, else worker 0, else a process on its own."""
    if task_type is None or task_type == "chief":
        return True
    return task_type == "worker" and task_index == 0 and not has_chief


def write_dir(path, task_type, task_index, has_chief):
    """Where this task writes what the chief writes to `path`: `path` for the chief, a
    directory of its own beside it for every other worker (as the tutorials do: all workers
    must save, since saving may run collectives, but only the chief's copy is kept)."""
    if is_chief(task_type, task_index, has_chief):
        return path
    return os.path.join(path, f".workertemp_{task_type}_{task_index}")


def log(event, **fields):
    """One JSON line on stdout, flushed: what the examples report."""
    print(json.dumps({"event": event, **fields}), flush=True)


def add_training_args(parser):
    """The flags the training programs share."""
    parser.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps-per-epoch", type=int, default=0,
                        help="steps per epoch (0: the whole training set, 60000 / global batch)")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="images per worker per step (the global batch is this times the "
                             "workers, or times $TJ_ELASTIC_SHARDS where that is set)")
    parser.add_argument("--global-batch", type=int, default=0,
                        help="images per step over all workers, whatever their number (0: from "
                             "--batch-size); each takes an equal share (batch_sizes())")
    parser.add_argument("--threads", type=int, default=0,
                        help="TensorFlow's intra- and inter-op threads (0: TensorFlow's choice)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--step-delay", type=float, default=0.0,
                        help="seconds to sleep after each step (tests: a window to interrupt)")
    parser.add_argument("--fill-memory-at-step", type=int, default=0,
                        help="tests: after this many steps of this process, allocate memory "
                             "until the OOM killer ends it; run it under a memory limit "
                             "(0: never)")
    parser.add_argument("--fill-memory-once", metavar="FILE",
                        help="with --fill-memory-at-step: only the process that creates FILE "
                             "(on storage the job shares) fills memory, so once per job")


def check_training_args(parser, args):
    for flag in ("epochs", "batch_size"):
        if getattr(args, flag) <= 0:
            parser.error(f"--{flag.replace('_', '-')} must be positive")
    for flag in ("global_batch", "steps_per_epoch", "threads", "step_delay",
                 "fill_memory_at_step"):
        if getattr(args, flag) < 0:
            parser.error(f"--{flag.replace('_', '-')} must not be negative")


def fill_memory_if_due(args, steps_run):
    """--fill-memory-at-step: an OOM kill at a chosen step, for tests. After `steps_run` steps
    of this process equal to it (and, with --fill-memory-once, if this process is the one that
    creates that file), writes memory in 64 MiB pieces until the kernel ends the process."""
    if not args.fill_memory_at_step or steps_run != args.fill_memory_at_step:
        return
    if args.fill_memory_once:
        os.makedirs(os.path.dirname(os.path.abspath(args.fill_memory_once)), exist_ok=True)
        try:
            os.close(os.open(args.fill_memory_once, os.O_CREAT | os.O_EXCL | os.O_WRONLY,
                             0o644))
        except FileExistsError:
            return
    log("filling_memory", steps_run=steps_run)
    hoard = []
    while True:
        hoard.append(b"\x01" * (64 << 20))  # a new bytes object: every page written


Run = collections.namedtuple("Run", "strategy task_type task_index has_chief chief workers "
                                    "global_batch per_replica_batch steps_per_epoch")


def batch_sizes(args, replicas):
    """(asked, global, per replica): the batches at `replicas` replicas. The global batch asked
    for is --global-batch, else --batch-size times $TJ_ELASTIC_SHARDS (the operator sets it to
    the job's largest number of training replicas, so it stays the same when the job shrinks),
    else --batch-size times the replicas (the tutorials' rule: it changes with the size). Each
    replica takes an equal share, asked // replicas: where the replicas do not divide it the
    global batch is that share times the replicas, up to replicas - 1 images fewer."""
    shards = int(os.environ.get("TJ_ELASTIC_SHARDS") or 0)
    asked = args.global_batch or args.batch_size * (shards or replicas)
    per_replica = asked // replicas
    if per_replica == 0:
        raise ValueError(f"a global batch of {asked} cannot be split among {replicas} replicas")
    return asked, per_replica * replicas, per_replica


def start(args):
    """Threads and seed from the flags, then MultiWorkerMirroredStrategy (it reads TF_CONFIG and
    waits for every worker); logs the `start` line. The batches follow batch_sizes(); the steps
    per epoch and the learning rate depend on the global batch asked for, not on the workers."""
    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    tf.keras.utils.set_random_seed(args.seed)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task_type, task_index, has_chief = task()
    chief = is_chief(task_type, task_index, has_chief)
    workers = strategy.num_replicas_in_sync
    asked, global_batch, per_replica = batch_sizes(args, workers)
    steps = args.steps_per_epoch or 60000 // asked
    if global_batch != asked:
        print(f"warning: a global batch of {asked} does not divide among {workers} replicas: "
              f"{per_replica} each, {global_batch} a step", file=sys.stderr, flush=True)
    log("start", task=f"{task_type}:{task_index}", chief=chief, workers=workers,
        keras=keras_flavour(), tensorflow=tf.__version__, global_batch=global_batch,
        per_replica_batch=per_replica, steps_per_epoch=steps)
    return Run(strategy, task_type, task_index, has_chief, chief, workers, global_batch,
               per_replica, steps)
