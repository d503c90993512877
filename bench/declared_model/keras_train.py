"""TensorFlow's Keras training a Keras model JSON on an .npz of uint8 images (x_train, y_train,
x_test, y_test as keras.datasets writes them), with the recipe bench/declared_model/train.sh
gives tj-trainer: pixels / 255, SGD with momentum, a constant learning rate or Keras'
CosineDecay over the whole run (--cosine, as tj-trainer's --lr-schedule cosine:LR), the sparse
softmax cross-entropy, a shuffled epoch of global batches. With TF_CONFIG set it is one worker of
MultiWorkerMirroredStrategy (each worker's batch is the global batch / workers, from its own
shard of the data); without, one process under the default strategy. Prints one JSON line per
epoch (images/s of that epoch) and one at the end with the test accuracy over the test set.

The loop is TensorFlow's custom training loop (a tf.function step run by strategy.run, as
examples/tensorflow/custom_loop.py), in both shapes: Keras 3's model.fit fails under
MultiWorkerMirroredStrategy (docs/tensorflow.md, keras-team/keras#20585), and one code path
keeps the two shapes comparable.

    python keras_train.py MODEL.json DATA.npz --epochs 2 --global-batch 64 --lr 0.05
        [--momentum 0.9] [--cosine] [--threads N] [--seed 1]
"""
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402

from train_args import recipe_parser  # noqa: E402


def main():
    a = recipe_parser().parse_args()
    if a.threads:
        tf.config.threading.set_intra_op_parallelism_threads(a.threads)
        tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    keras.utils.set_random_seed(a.seed)
    multi = "TF_CONFIG" in os.environ
    strategy = (tf.distribute.MultiWorkerMirroredStrategy() if multi
                else tf.distribute.get_strategy())
    with np.load(a.data) as d:
        x_train, y_train = d["x_train"], d["y_train"].astype("int32")
        x_test, y_test = d["x_test"], d["y_test"].astype("int32")
    x_train = x_train.astype("float32") / 255
    x_test = x_test.astype("float32") / 255
    steps = len(x_train) // a.global_batch

    def dataset_fn(input_context):
        # Each worker reads its own shard, batched by its share of the global batch.
        batch = input_context.get_per_replica_batch_size(a.global_batch)
        ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shard(
            input_context.num_input_pipelines, input_context.input_pipeline_id)
        return (ds.shuffle(len(x_train), seed=a.seed, reshuffle_each_iteration=True).repeat()
                .batch(batch, drop_remainder=True).prefetch(2))

    train = iter(strategy.distribute_datasets_from_function(dataset_fn))
    with strategy.scope():
        with open(a.model) as f:
            model = keras.models.model_from_json(f.read())
        lr = (keras.optimizers.schedules.CosineDecay(a.lr, a.epochs * steps) if a.cosine
              else a.lr)
        optimizer = keras.optimizers.SGD(lr, momentum=a.momentum)
        optimizer.build(model.trainable_variables)
    softmax = model.layers[-1].get_config().get("activation") == "softmax"
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=not softmax,
                                                         reduction="none")

    @tf.function
    def train_step(iterator):
        def step_fn(inputs):
            images, labels = inputs
            with tf.GradientTape() as tape:
                per_example = loss_fn(labels, model(images, training=True))
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=a.global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        per_replica = strategy.run(step_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    start = time.perf_counter()
    for epoch in range(a.epochs):
        t0, total = time.perf_counter(), 0.0
        for _ in range(steps):
            total += float(train_step(train))
        seconds = time.perf_counter() - t0
        print(json.dumps({"event": "epoch_end", "epoch": epoch + 1, "loss": total / steps,
                          "seconds": seconds,
                          "images_per_sec": steps * a.global_batch / seconds}), flush=True)
    train_seconds = time.perf_counter() - start
    # Evaluation outside the strategy: this worker's model, as Keras computes accuracy.
    accuracy = keras.metrics.SparseCategoricalAccuracy()
    loss_sum = 0.0
    for i in range(0, len(x_test), 256):
        out = model(x_test[i:i + 256], training=False)
        accuracy.update_state(y_test[i:i + 256], out)
        loss_sum += float(tf.reduce_sum(loss_fn(y_test[i:i + 256], out)))
    print(json.dumps({"event": "train_end", "epochs": a.epochs,
                      "test_loss": loss_sum / len(x_test),
                      "test_accuracy": float(accuracy.result()), "train_seconds": train_seconds,
                      "tensorflow": tf.__version__, "keras": keras.__version__}), flush=True)


if __name__ == "__main__":
    main()
