"""Keras model.fit under MultiWorkerMirroredStrategy, in the shape of TensorFlow's "Multi-worker
training with Keras" tutorial: TF_CONFIG read by the strategy, the global batch split among the
workers, BackupAndRestore for fault tolerance, ModelCheckpoint for the evaluator, TensorBoard.
Nothing here knows about tj-operator; the same program runs under Kubeflow's TFJob, or alone.

    python keras_fit.py --epochs 3 --backup-dir /data/backup --checkpoint-dir /data/ckpt \\
        --log-dir /data/logs --export-dir /data/model

Keras 3 (TensorFlow's default) and tf-keras (TF_USE_LEGACY_KERAS=1) both run it; where they
differ it says so (docs/tensorflow.md has the whole list):
  * BackupAndRestore: tf-keras gives each non-chief worker a directory of its own inside
    backup_dir by itself; Keras 3 writes the same file from every worker (and the chief
    removes the whole directory at the end), so each task gets a subdirectory here.
  * A backup taken mid-epoch (--save-freq N): tf-keras resumes at the next step; Keras 3
    resumes at the start of the epoch the backup was taken in, with the backup's weights.

Elastic: a backup resumes at another number of workers (a job that shrinks and grows back).
tf-keras' backup is the chief's, and any worker count restores it; what must not change is the
training itself, so the global batch is fixed (--global-batch, or --batch-size times
$TJ_ELASTIC_SHARDS, which the operator sets) and split evenly among whichever workers there
are; the steps per epoch depend on the global batch alone, the learning rate on the epoch alone
(fmnist_setup's batch_sizes() has the rule where the workers do not divide the batch). A
resumed run's input skips the batches the backup has trained, which tf-keras does not do.

The tj_status callback (tj_status.py, optional) serves the progress that `kubectl get tj`
shows; without it (or outside the operator) nothing changes.
"""
import argparse
import os
import shutil
import sys
import time

import tensorflow as tf

import fmnist_setup

try:
    import tj_status
except ImportError:  # the callback is optional
    tj_status = None


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    fmnist_setup.add_training_args(p)
    p.add_argument("--backup-dir", help="BackupAndRestore's directory (shared by the job)")
    p.add_argument("--save-freq", default="epoch",
                   help="BackupAndRestore: 'epoch' or a number of steps between backups")
    p.add_argument("--checkpoint-dir", help="ModelCheckpoint: ckpt-<epoch>.weights.h5 files")
    p.add_argument("--log-dir", help="TensorBoard event files")
    p.add_argument("--export-dir", help="the trained model: model.keras, model.weights.h5")
    a = p.parse_args(argv)
    fmnist_setup.check_training_args(p, a)
    if a.save_freq != "epoch":
        try:
            a.save_freq = int(a.save_freq)
        except ValueError:
            p.error(f"--save-freq {a.save_freq!r}: use 'epoch' or a positive number of steps")
        if a.save_freq <= 0:
            p.error(f"--save-freq {a.save_freq}: use 'epoch' or a positive number of steps")
    return a


class Report(tf.keras.callbacks.Callback):
    """One JSON line where fit starts (epoch 1 step 0, or where BackupAndRestore resumed it)
    and one per epoch, with the epoch's images/s."""

    def __init__(self, global_batch, args):
        super().__init__()
        self.global_batch = global_batch
        self.args = args
        self.epoch, self.steps, self.started, self.reported = None, 0, 0.0, False
        self.steps_run = 0  # by this process, over all epochs

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch, self.steps, self.started = int(epoch) + 1, 0, time.monotonic()

    def on_train_batch_begin(self, batch, logs=None):
        if not self.reported:
            self.reported = True
            fmnist_setup.log("first_step", epoch=self.epoch, step=int(batch))

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1
        self.steps_run += 1
        if self.args.step_delay:
            time.sleep(self.args.step_delay)
        fmnist_setup.fill_memory_if_due(self.args, self.steps_run)

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        seconds = time.monotonic() - self.started
        fmnist_setup.log("epoch_end", epoch=int(epoch) + 1, steps=self.steps,
                         loss=float(logs.get("loss", float("nan"))),
                         accuracy=float(logs.get("accuracy", float("nan"))), seconds=seconds,
                         images_per_sec=self.steps * self.global_batch / seconds)


def steps_done(backup_dir):
    """The steps trained by the newest tf-keras backup in backup_dir (the chief's, in
    <backup_dir>/chief, which every worker reads), 0 without one."""
    newest = tf.train.latest_checkpoint(os.path.join(backup_dir, "chief"))
    if not newest:
        return 0
    steps = tf.train.load_checkpoint(newest).get_tensor("train_counter/.ATTRIBUTES/VARIABLE_VALUE")
    fmnist_setup.log("input_skipped", backup=os.path.basename(newest), steps=int(steps))
    return int(steps)


def main(argv):
    a = parse_args(argv)
    run = fmnist_setup.start(a)  # TF_CONFIG, the strategy; blocks until every worker is up
    strategy, task_type, task_index = run.strategy, run.task_type, run.task_index
    has_chief, chief, global_batch, steps = (run.has_chief, run.chief, run.global_batch,
                                             run.steps_per_epoch)
    legacy = fmnist_setup.keras_flavour().startswith("tf-keras")

    train = fmnist_setup.train_dataset(a.data_dir, global_batch, seed=a.seed)
    if a.backup_dir and legacy:
        # fit restores the step from the backup but starts the input at its first batch: skip
        # the batches already trained, so a resumed run (at any size) trains on what an
        # uninterrupted one would.
        train = train.skip(steps_done(a.backup_dir))
    with strategy.scope():
        model = fmnist_setup.build_and_compile_model()

    def write_dir(path):
        return fmnist_setup.write_dir(path, task_type, task_index, has_chief)

    callbacks = [
        tf.keras.callbacks.LearningRateScheduler(lambda e, lr: fmnist_setup.lr_for_epoch(e + 1)),
        Report(global_batch, a),
    ]
    if a.backup_dir:
        # tf-keras keeps the chief's backup in backup_dir and the others' apart on its own;
        # Keras 3 does not, so the program does: <backup-dir>/<task>-<index>.
        backup_dir = a.backup_dir
        if not legacy:
            backup_dir = os.path.join(a.backup_dir, f"{task_type or 'chief'}-{task_index}")
        # tj_status's is Keras' own, and says where the job resumes (the termination message).
        backup = tj_status.BackupAndRestore if tj_status else tf.keras.callbacks.BackupAndRestore
        callbacks.append(backup(backup_dir, save_freq=a.save_freq))
    if a.checkpoint_dir:
        callbacks.append(tf.keras.callbacks.ModelCheckpoint(
            os.path.join(write_dir(a.checkpoint_dir), "ckpt-{epoch:02d}.weights.h5"),
            save_weights_only=True))
    if a.log_dir:
        callbacks.append(tf.keras.callbacks.TensorBoard(write_dir(a.log_dir), update_freq="epoch"))
    if tj_status is not None:
        callbacks.append(tj_status.StatusCallback(global_batch_size=global_batch))

    start = time.monotonic()
    history = model.fit(train, epochs=a.epochs, steps_per_epoch=steps, callbacks=callbacks,
                        verbose=2)
    seconds = time.monotonic() - start
    # Every worker evaluates (the evaluation is distributed too); the result is global.
    test_loss, test_accuracy = model.evaluate(
        fmnist_setup.test_dataset(a.data_dir, global_batch), verbose=0)
    epochs_run = len(history.history.get("loss", []))
    fmnist_setup.log("train_end", epochs=a.epochs, epochs_run=epochs_run,
                     test_loss=float(test_loss), test_accuracy=float(test_accuracy),
                     images_per_sec=epochs_run * steps * global_batch / seconds if seconds else 0)
    if a.export_dir:
        # Saving may need every worker; the non-chief copies are written apart and removed.
        out = write_dir(a.export_dir)
        os.makedirs(out, exist_ok=True)
        model.save(os.path.join(out, "model.keras"))
        model.save_weights(os.path.join(out, "model.weights.h5"))
        if not chief:
            shutil.rmtree(out, ignore_errors=True)
    for d in (a.checkpoint_dir, a.log_dir):
        if d and not chief:
            shutil.rmtree(write_dir(d), ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
