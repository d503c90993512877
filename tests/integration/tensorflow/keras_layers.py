"""Writes what TensorFlow's Keras computes for small models of every layer type the declared-
model engine supports (trainer/model/), for keras_layers_test to compare: per case a folder
with the model's JSON (model.to_json()), random parameters and state in the engine's layout
(layer by layer in model.layers order, each layer's trainable weights then, separately, its
non-trainable ones, each raveled in C order), a batch of inputs and labels, and Keras' logits
(or probabilities, when the model ends in softmax), mean sparse softmax cross-entropy, its
gradients with respect to every trainable weight and to the inputs, and the state after the
pass (BatchNormalization's moving statistics, updated when training).

    python keras_layers.py OUT_DIR

Dropout is compared in inference mode only (TensorFlow's masks are its own); the example
models run with their Dropout rate set to 0 when training.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402
from keras import layers  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ROWS = 4


def seq(shape, *body, head=5):
    return keras.Sequential([keras.Input(shape), *body, layers.Flatten(name="flatten"),
                             layers.Dense(head, name="head")])


def residual():
    x = keras.Input((6, 6, 3), name="x")
    c = layers.Conv2D(3, 3, padding="same", activation="relu", name="c")(x)
    c2 = layers.Conv2D(3, 1, name="c2")(c)
    a = layers.Add(name="add")([x, c2, c])
    f = layers.Flatten(name="f")(a)
    return keras.Model(x, layers.Dense(4, name="out")(f))


def example(name, drop_rate=None):
    with open(os.path.join(ROOT, "examples", "models", name + ".json")) as f:
        config = json.load(f)
    if drop_rate is not None:
        for layer in config["config"]["layers"]:
            if layer["class_name"] == "Dropout":
                layer["config"]["rate"] = drop_rate
    return keras.models.model_from_json(json.dumps(config))


# The whole MobileNetV2 in training mode is ill-conditioned at small batches: its last blocks
# run at 2x2 and 1x1 pixels, so BatchNormalization normalises over as few values as there are
# rows. TensorFlow's own float32 gradients differ from its float64 ones by up to 2e-2 of a
# tensor's largest magnitude at 4 rows, 8.5e-5 at 16 (measured with the same weights): the
# case runs 16 rows and allows 1e-3, ten times TensorFlow's own float32 error.
LOOSE = {"mobilenet_v2_training": (16, 1e-3)}


def cases():
    """(name, model builder, training)."""
    bn = dict(epsilon=0.01, momentum=0.9)
    return [
        ("conv_valid_relu", lambda: seq((7, 7, 3), layers.Conv2D(4, 3, activation="relu",
                                                                 name="conv")), True),
        ("conv_same_stride2_nobias_relu6", lambda: seq(
            (7, 6, 2), layers.Conv2D(3, 3, strides=2, padding="same", use_bias=False,
                                     activation="relu6", name="conv")), True),
        ("conv_groups2_same", lambda: seq(
            (5, 5, 4), layers.Conv2D(6, 3, groups=2, padding="same", name="conv")), True),
        ("conv_1x1_strided", lambda: seq(
            (6, 6, 3), layers.Conv2D(4, 1, strides=(2, 1), name="conv"),
            layers.Conv2D(2, (2, 3), name="conv2")), True),
        ("depthwise_same_dm2_relu6", lambda: seq(
            (6, 6, 3), layers.DepthwiseConv2D(3, padding="same", depth_multiplier=2,
                                              activation="relu6", name="dw")), True),
        ("depthwise_valid_stride2_nobias", lambda: seq(
            (7, 7, 4), layers.DepthwiseConv2D(3, strides=2, use_bias=False, name="dw")), True),
        ("batchnorm_training", lambda: seq(
            (5, 5, 3), layers.Conv2D(4, 3, name="conv"),
            layers.BatchNormalization(name="bn", **bn)), True),
        ("batchnorm_inference", lambda: seq(
            (5, 5, 3), layers.Conv2D(4, 3, name="conv"),
            layers.BatchNormalization(name="bn", **bn)), False),
        ("maxpool_2_valid", lambda: seq((6, 6, 3), layers.MaxPooling2D(2, name="pool")), True),
        ("maxpool_3_stride2_same", lambda: seq(
            (7, 7, 2), layers.MaxPooling2D(3, strides=2, padding="same", name="pool")), True),
        ("avgpool_2_valid", lambda: seq((6, 5, 3), layers.AveragePooling2D(2, name="pool")),
         True),
        ("avgpool_3_stride2_same", lambda: seq(
            (7, 7, 2), layers.AveragePooling2D(3, strides=2, padding="same", name="pool")),
         True),
        ("global_average_pool", lambda: keras.Sequential([
            keras.Input((5, 4, 6)), layers.GlobalAveragePooling2D(name="gap"),
            layers.Dense(5, name="head")]), True),
        ("dense_relu_nobias_softmax_output", lambda: keras.Sequential([
            keras.Input((3, 3, 5)), layers.Flatten(name="flatten"),
            layers.Dense(7, activation="relu", use_bias=False, name="d"),
            layers.Dense(4, activation="softmax", name="head")]), True),
        ("dropout_inference", lambda: seq(
            (4, 4, 2), layers.Dropout(0.4, name="drop")), False),
        ("activations", lambda: seq(
            (4, 4, 3), layers.Conv2D(3, 1, name="conv"), layers.Activation("relu", name="a"),
            layers.Conv2D(3, 1, name="conv2"), layers.ReLU(max_value=0.3, name="r"),
            layers.Conv2D(3, 1, name="conv3"), layers.Activation("relu6", name="a6")), True),
        ("rescaling", lambda: seq(
            (5, 5, 2), layers.Rescaling(0.5, offset=-0.25, name="rescale"),
            layers.Conv2D(3, 3, name="conv")), True),
        ("add_residual", residual, True),
        ("zero_padding_then_strided_depthwise", lambda: seq(
            (6, 6, 3), layers.ZeroPadding2D(((0, 1), (0, 1)), name="pad"),
            layers.DepthwiseConv2D(3, strides=2, use_bias=False, name="dw")), True),
        ("zero_padding_uneven_then_conv", lambda: seq(
            (4, 5, 2), layers.ZeroPadding2D(((1, 2), (3, 0)), name="pad"),
            layers.Conv2D(3, 3, name="conv"), layers.ZeroPadding2D(1, name="pad2")), True),
        ("seeds_cnn", lambda: example("seeds_cnn"), True),
        ("resnet_block_training", lambda: example("resnet_block", drop_rate=0.0), True),
        ("resnet_block_inference", lambda: example("resnet_block"), False),
        ("mobilenet_v2_block_training", lambda: example("mobilenet_v2_block"), True),
        ("mobilenet_v2_block_inference", lambda: example("mobilenet_v2_block"), False),
        ("resnet20_training", lambda: example("resnet20"), True),
        ("resnet20_inference", lambda: example("resnet20"), False),
        ("mobilenet_v2_training", lambda: example("mobilenet_v2"), True),
        ("mobilenet_v2_inference", lambda: example("mobilenet_v2"), False),
    ]


def glorot_limit(shape):
    receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    return np.sqrt(6.0 / (receptive * (shape[-2] + shape[-1])))


def random_weights(model, rng):
    """Every tensor away from its initial constant: kernels uniform within twice Glorot's
    limit, biases and betas in +-0.1, gammas in [0.7, 1.3], moving means in +-0.2, moving
    variances in [0.5, 1.5]."""
    for layer in model.layers:
        values = []
        for w in layer.weights:
            name, shape = w.path.split("/")[-1], tuple(w.shape)
            if name == "gamma":
                v = rng.uniform(0.7, 1.3, shape)
            elif name == "moving_variance":
                v = rng.uniform(0.5, 1.5, shape)
            elif name == "moving_mean":
                v = rng.uniform(-0.2, 0.2, shape)
            elif name in ("bias", "beta"):
                v = rng.uniform(-0.1, 0.1, shape)
            else:
                limit = 2 * glorot_limit(shape)
                v = rng.uniform(-limit, limit, shape)
            values.append(v.astype("float32"))
        if values:
            layer.set_weights(values)


def flat(tensors):
    parts = [np.asarray(t, dtype="float32").ravel() for t in tensors]
    return np.concatenate(parts) if parts else np.zeros(0, "float32")


def write_case(out, name, model, training, rng):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    random_weights(model, rng)
    rows, tolerance = LOOSE.get(name, (ROWS, None))
    shape = (rows,) + tuple(model.inputs[0].shape[1:])
    x = rng.uniform(-1, 1, shape).astype("float32")
    if name.startswith(("resnet_block", "mobilenet_v2_block")):
        x = rng.uniform(0, 255, shape).astype("float32")  # pixels, as their Rescaling expects
    elif name.startswith("seeds_cnn"):
        x = rng.uniform(0, 1, shape).astype("float32")  # the built-in model's pixels
    classes = model.outputs[0].shape[-1]
    labels = rng.integers(0, classes, rows).astype("uint8")
    softmax_output = model.layers[-1].get_config().get("activation") == "softmax"
    trainable = [w for layer in model.layers for w in layer.trainable_weights]
    state = [w for layer in model.layers for w in layer.non_trainable_weights]
    state_before = flat([w.numpy() for w in state])
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        out = model(xt, training=training)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=not softmax_output)(
            labels.astype("int32"), out)
    grads = tape.gradient(loss, trainable + [xt])
    files = {"params": flat([w.numpy() for w in trainable]), "state_before": state_before,
             "state_after": flat([w.numpy() for w in state]), "inputs": x.ravel(),
             "outputs": out.numpy().ravel(), "grads": flat(grads[:-1]),
             "input_grad": grads[-1].numpy().ravel()}
    for key, value in files.items():
        value.astype("<f4").tofile(os.path.join(d, key + ".f32"))
    labels.tofile(os.path.join(d, "labels.u8"))
    with open(os.path.join(d, "model.json"), "w") as f:
        f.write(model.to_json())
    case = {"name": name, "rows": rows, "training": training, "loss": float(loss),
            "softmax_output": softmax_output}
    if tolerance is not None:
        case["tolerance"] = tolerance
    return case


def main():
    out = sys.argv[1]
    rng = np.random.default_rng(2021)
    manifest = []
    for name, build, training in cases():
        keras.utils.clear_session()
        try:
            model = build()
        except Exception as e:  # a layer this TensorFlow cannot run on the CPU
            print(f"{name}: skipped, Keras cannot build it here: {e}")
            continue
        try:
            manifest.append(write_case(out, name, model, training, rng))
        except Exception as e:
            print(f"{name}: skipped, Keras cannot run it here: {type(e).__name__}: {e}")
            continue
        print(f"{name}: loss {manifest[-1]['loss']:.6f}")
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump({"keras": keras.__version__, "tensorflow": tf.__version__,
                   "cases": manifest}, f, indent=1)


if __name__ == "__main__":
    main()
