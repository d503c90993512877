"""An evaluator beside the training workers, in the manner of TensorFlow's SidecarEvaluator: it
follows the checkpoints the chief writes, evaluates each new one on the test set, writes the
results as TensorBoard summaries, and ends after the checkpoint of the last epoch. It takes
part in no collective (TF_CONFIG's task type `evaluator`). Nothing here knows about
tj-operator.

    python sidecar_evaluator.py --checkpoint-dir /data/ckpt --epochs 3 --log-dir /data/logs

Two kinds of checkpoint directories, told apart by their files:
  * tf.train.CheckpointManager's (custom_loop.py): the `checkpoint` index file; the epoch is
    the checkpoint's `epoch` variable;
  * Keras ModelCheckpoint's ckpt-<epoch>.weights.h5 files (keras_fit.py); the epoch is in
    the name.
A checkpoint that cannot be read yet (still being written) is tried again at the next poll.
tf_keras.utils.SidecarEvaluator does this for tf-keras only (Keras 3 has none); this one
works with both.
"""
import argparse
import glob
import os
import re
import sys
import time

import tensorflow as tf

import fmnist_setup

try:
    import tj_status
except ImportError:
    tj_status = None

KERAS_CKPT = re.compile(r"ckpt-(\d+)\.weights\.h5$")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--epochs", type=int, required=True,
                   help="the training's epochs: the evaluator ends after that checkpoint")
    p.add_argument("--data-dir", default=fmnist_setup.DEFAULT_DATA_DIR)
    p.add_argument("--log-dir", help="TensorBoard summaries go to <log-dir>/eval")
    p.add_argument("--poll-interval", type=float, default=2.0)
    p.add_argument("--timeout", type=float, default=1800.0,
                   help="seconds without a new checkpoint before giving up (exit 1)")
    a = p.parse_args(argv)
    if a.epochs <= 0:
        p.error("--epochs must be positive")
    return a


def newest_checkpoint(directory):
    """(name, epoch or None, loader) of the newest checkpoint, or None."""
    if os.path.exists(os.path.join(directory, "checkpoint")):
        path = tf.train.latest_checkpoint(directory)
        return (path, None, "tf") if path else None
    best = None
    for path in glob.glob(os.path.join(directory, "ckpt-*.weights.h5")):
        m = KERAS_CKPT.search(path)
        if m and (best is None or int(m.group(1)) > best[1]):
            best = (path, int(m.group(1)), "keras")
    return best


def main(argv):
    a = parse_args(argv)
    fmnist_setup.log("start", task="evaluator", keras=fmnist_setup.keras_flavour(),
                     tensorflow=tf.__version__, checkpoint_dir=a.checkpoint_dir)
    model = fmnist_setup.build_and_compile_model()
    epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
    test = fmnist_setup.test_dataset(a.data_dir, 1000)
    writer = tf.summary.create_file_writer(os.path.join(a.log_dir, "eval")) if a.log_dir else None
    status = tj_status.StatusServer(role="evaluator") if tj_status else None

    seen, last_new = None, time.monotonic()
    while True:
        found = newest_checkpoint(a.checkpoint_dir) if os.path.isdir(a.checkpoint_dir) else None
        if found and found[0] != seen:
            path, epoch, kind = found
            try:
                if kind == "tf":
                    tf.train.Checkpoint(model=model, epoch=epoch_var).restore(
                        path).expect_partial()
                    epoch = int(epoch_var.numpy())
                else:
                    model.load_weights(path)
            except (OSError, ValueError, tf.errors.OpError) as e:
                fmnist_setup.log("retry", checkpoint=path, error=str(e).splitlines()[0])
                time.sleep(a.poll_interval)
                continue
            seen, last_new = path, time.monotonic()
            loss, accuracy = model.evaluate(test, verbose=0)
            name = os.path.basename(path)
            fmnist_setup.log("evaluation", checkpoint=name, epoch=epoch, loss=float(loss),
                             accuracy=float(accuracy))
            if writer:
                with writer.as_default():
                    tf.summary.scalar("epoch_loss", loss, step=epoch)
                    tf.summary.scalar("epoch_accuracy", accuracy, step=epoch)
                writer.flush()
            if status:
                status.update(state="evaluating", evaluation={
                    "checkpoint": name[:256], "epoch": epoch, "loss": float(loss),
                    "accuracy": float(accuracy)})
            if epoch >= a.epochs:
                fmnist_setup.log("evaluator_end", checkpoint=name, epoch=epoch)
                return 0
        elif time.monotonic() - last_new > a.timeout:
            print(f"sidecar_evaluator: no new checkpoint in {a.checkpoint_dir} for "
                  f"{a.timeout:.0f} s (the last: {seen}); giving up", file=sys.stderr)
            return 1
        time.sleep(a.poll_interval)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
