"""A custom training loop under MultiWorkerMirroredStrategy, in the shape of TensorFlow's "Custom
training loop with Keras and MultiWorkerMirroredStrategy" tutorial and its fault-tolerance
guide: a dataset function sharded per worker, a tf.function step run by strategy.run, the loss
averaged over the global batch, a tf.train.Checkpoint (model, optimizer, epoch, step) kept by a
tf.train.CheckpointManager at every epoch's end, and a PreemptionCheckpointHandler that saves at
the same step on every worker when one of them gets SIGTERM. Nothing here knows about
tj-operator.

    python custom_loop.py --epochs 3 --checkpoint-dir /data/ckpt-loop

On start, the newest checkpoint in --checkpoint-dir is restored (the handler does it) and
training continues from its epoch and step. After a SIGTERM every worker saves, then exits
with --preemption-exit-code: 143 by default, the code of a process ended by SIGTERM, which
both tj-operator's and Kubeflow TFJob's ExitCode restart policies restart. (TensorFlow's own
default is 42, which both treat as a permanent failure.)
"""
import argparse
import shutil
import sys
import time

import tensorflow as tf

import fmnist_setup

try:
    import tj_status  # optional: says where the job resumes (the termination message)
except ImportError:
    tj_status = None


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    fmnist_setup.add_training_args(p)
    p.add_argument("--checkpoint-dir", required=True,
                   help="tf.train.CheckpointManager's directory (shared by the job)")
    p.add_argument("--keep-checkpoints", type=int, default=5)
    p.add_argument("--preemption-exit-code", type=int, default=143,
                   help="exit code after the save a SIGTERM causes")
    a = p.parse_args(argv)
    fmnist_setup.check_training_args(p, a)
    if a.keep_checkpoints <= 0:
        p.error("--keep-checkpoints must be positive")
    if not 0 <= a.preemption_exit_code <= 255:
        p.error("--preemption-exit-code must be in 0..255")
    return a


def main(argv):
    a = parse_args(argv)
    run = fmnist_setup.start(a)  # TF_CONFIG, the strategy; blocks until every worker is up
    strategy, global_batch, steps_per_epoch = run.strategy, run.global_batch, run.steps_per_epoch

    x, y = fmnist_setup.load(a.data_dir, "train")

    def dataset_fn(input_context):
        # Each worker reads its own shard and batches it by the per-worker batch.
        batch = input_context.get_per_replica_batch_size(global_batch)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(
            input_context.num_input_pipelines, input_context.input_pipeline_id)
        return ds.shuffle(len(x), seed=a.seed).repeat().batch(batch, drop_remainder=True)

    dataset = strategy.distribute_datasets_from_function(dataset_fn)

    with strategy.scope():
        model = fmnist_setup.build_model()
        optimizer = tf.keras.optimizers.Adam(learning_rate=1e-3)
        optimizer.build(model.trainable_variables)  # its slots exist before a restore
        train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
        epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        step_in_epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="step_in_epoch")
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction="none")

    @tf.function
    def train_step(iterator):
        def step_fn(inputs):
            images, labels = inputs
            with tf.GradientTape() as tape:
                logits = model(images, training=True)
                per_example = loss_fn(labels, logits)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            train_accuracy.update_state(labels, logits)
            return loss

        per_replica = strategy.run(step_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=epoch,
                                     step_in_epoch=step_in_epoch)
    # The chief keeps the job's checkpoints in --checkpoint-dir; every other worker saves too
    # (a save may need all of them) into a directory of its own, removed after each save.
    write_dir = fmnist_setup.write_dir(a.checkpoint_dir, run.task_type, run.task_index,
                                       run.has_chief)
    manager = tf.train.CheckpointManager(checkpoint, write_dir,
                                         max_to_keep=a.keep_checkpoints if run.chief else 1)
    # Given the checkpoint and the chief's directory (not a manager, which it would use as is on
    # every worker: all would write into the chief's directory), the handler restores the
    # newest checkpoint there on every worker, and on SIGTERM makes every worker save at the
    # same step (the others into directories of their own), then exit.
    handler = tf.distribute.experimental.PreemptionCheckpointHandler(
        strategy.cluster_resolver, checkpoint, a.checkpoint_dir,
        termination_config=tf.distribute.experimental.TerminationConfig(
            exit_fn=lambda: sys.exit(a.preemption_exit_code)))
    if epoch.numpy() or step_in_epoch.numpy():
        fmnist_setup.log("restored", checkpoint=tf.train.latest_checkpoint(a.checkpoint_dir),
                         epoch=int(epoch.numpy()), step_in_epoch=int(step_in_epoch.numpy()))

    iterator = iter(dataset)
    start, images, steps_run = time.monotonic(), 0, 0
    while epoch.numpy() < a.epochs:
        epoch_start, total_loss, steps = time.monotonic(), 0.0, 0
        train_accuracy.reset_state()
        while step_in_epoch.numpy() < steps_per_epoch:
            if not steps_run:
                fmnist_setup.log("first_step", epoch=int(epoch.numpy()) + 1,
                                 step=int(step_in_epoch.numpy()))
            total_loss += float(handler.run(train_step, iterator))
            step_in_epoch.assign_add(1)
            steps += 1
            steps_run += 1
            if a.step_delay:
                time.sleep(a.step_delay)
            fmnist_setup.fill_memory_if_due(a, steps_run)
        seconds = time.monotonic() - epoch_start
        images += steps * global_batch
        epoch.assign_add(1)
        step_in_epoch.assign(0)
        saved = manager.save()
        if not run.chief:
            shutil.rmtree(write_dir, ignore_errors=True)
        elif tj_status is not None:
            tj_status.report_backup(int(epoch.numpy()), steps_per_epoch)
        fmnist_setup.log("epoch_end", epoch=int(epoch.numpy()), steps=steps,
                         loss=total_loss / max(steps, 1),
                         accuracy=float(train_accuracy.result()),
                         images_per_sec=steps * global_batch / seconds if seconds else 0,
                         checkpoint=saved if run.chief else None)

    # Each worker on its own (the weights are the same everywhere): no collective.
    x_test, y_test = fmnist_setup.load(a.data_dir, "test")
    correct = 0
    for i in range(0, len(x_test), 1000):
        logits = model(x_test[i:i + 1000], training=False)
        correct += int(tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, axis=1),
                                                      y_test[i:i + 1000]), tf.int32)))
    test_accuracy = correct / len(x_test)
    seconds = time.monotonic() - start
    fmnist_setup.log("train_end", epochs=a.epochs, test_accuracy=test_accuracy,
                     images_per_sec=images / seconds if seconds else 0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
