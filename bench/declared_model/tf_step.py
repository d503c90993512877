"""TensorFlow's Keras on the same step tj-bench-model times: forward, mean sparse softmax
cross-entropy and the gradients of every trainable weight (no optimizer update), compiled with
tf.function, batch 64 of random images; prints the median milliseconds of --steps steps.

    python tf_step.py MODEL.json [--batch 64] [--steps 20] [--threads N]
"""
import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=0, help="0: TensorFlow's default")
    a = p.parse_args()
    if a.threads:
        tf.config.threading.set_intra_op_parallelism_threads(a.threads)
        tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    with open(a.model) as f:
        model = keras.models.model_from_json(f.read())
    shape = (a.batch,) + tuple(model.inputs[0].shape[1:])
    rng = np.random.default_rng(1)
    x = tf.constant(rng.uniform(0, 1, shape).astype("float32"))
    y = tf.constant(rng.integers(0, model.outputs[0].shape[-1], a.batch).astype("int32"))
    # A model ending in softmax gives probabilities (tj-bench-model folds that softmax into
    # the loss; Keras computes it, then the cross-entropy of its output).
    softmax = model.layers[-1].get_config().get("activation") == "softmax"
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=not softmax)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        return loss, tape.gradient(loss, model.trainable_weights)

    step()
    ms = []
    for _ in range(a.steps):
        start = time.perf_counter()
        loss, grads = step()
        _ = float(loss)
        ms.append(1000 * (time.perf_counter() - start))
    median = float(np.median(ms))
    print(f"tensorflow {tf.__version__}: {model.name}: {median:.2f} ms a step (median of "
          f"{a.steps}), {a.batch * 1000 / median:.0f} images/s")


if __name__ == "__main__":
    main()
