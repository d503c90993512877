"""Writes the Keras model files of this folder: `model.to_json()` of each model below, as the
Keras of examples/tensorflow/requirements.txt writes it (Keras 3; TensorFlow 2.21). tj-trainer's
declared-model engine (trainer/model/) reads them; its tests load them.

    python make_models.py [OUT_DIR]      # default: this file's folder

The JSON is pretty-printed with sorted keys so that a new Keras shows as a readable diff.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
from keras import layers  # noqa: E402


def seeds_cnn():
    """tj-trainer's built-in model (trainer/nn/model.h, fmnist_setup.build_model)."""
    return keras.Sequential([
        keras.Input(shape=(28, 28, 1)),
        layers.Conv2D(32, 3, activation="relu", name="conv"),
        layers.MaxPooling2D(2, name="pool"),
        layers.Flatten(name="flatten"),
        layers.Dense(64, activation="relu", name="dense1"),
        layers.Dense(10, name="dense2"),
    ], name="seeds")


def resnet_block():
    """A small ResNet: a stem, one basic block with an identity shortcut, one with a strided
    1x1 projection, global average pooling."""
    inputs = keras.Input(shape=(28, 28, 1), name="image")
    x = layers.Rescaling(1.0 / 255, name="rescale")(inputs)
    x = layers.Conv2D(16, 3, padding="same", use_bias=False, name="stem_conv")(x)
    x = layers.BatchNormalization(name="stem_bn")(x)
    x = layers.ReLU(name="stem_relu")(x)
    # Block 1: identity shortcut.
    y = layers.Conv2D(16, 3, padding="same", use_bias=False, name="b1_conv1")(x)
    y = layers.BatchNormalization(name="b1_bn1")(y)
    y = layers.Activation("relu", name="b1_relu1")(y)
    y = layers.Conv2D(16, 3, padding="same", use_bias=False, name="b1_conv2")(y)
    y = layers.BatchNormalization(name="b1_bn2")(y)
    x = layers.Add(name="b1_add")([x, y])
    x = layers.ReLU(name="b1_out")(x)
    # Block 2: stride 2, projection shortcut.
    y = layers.Conv2D(32, 3, strides=2, padding="same", use_bias=False, name="b2_conv1")(x)
    y = layers.BatchNormalization(name="b2_bn1")(y)
    y = layers.ReLU(name="b2_relu1")(y)
    y = layers.Conv2D(32, 3, padding="same", use_bias=False, name="b2_conv2")(y)
    y = layers.BatchNormalization(name="b2_bn2")(y)
    s = layers.Conv2D(32, 1, strides=2, use_bias=False, name="b2_proj")(x)
    s = layers.BatchNormalization(name="b2_proj_bn")(s)
    x = layers.Add(name="b2_add")([s, y])
    x = layers.Activation("relu", name="b2_out")(x)
    x = layers.GlobalAveragePooling2D(name="gap")(x)
    x = layers.Dropout(0.2, name="dropout")(x)
    outputs = layers.Dense(10, name="logits")(x)
    return keras.Model(inputs, outputs, name="small_resnet")


def mobilenet_block():
    """MobileNetV2's inverted residual block (expand 1x1, depthwise 3x3, project 1x1 linear,
    identity shortcut) between a strided stem and the head."""
    inputs = keras.Input(shape=(28, 28, 1), name="image")
    x = layers.Rescaling(2.0 / 255, offset=-1.0, name="rescale")(inputs)
    x = layers.Conv2D(16, 3, strides=2, padding="same", use_bias=False, name="stem_conv")(x)
    x = layers.BatchNormalization(name="stem_bn")(x)
    x = layers.ReLU(6.0, name="stem_relu6")(x)
    y = layers.Conv2D(48, 1, use_bias=False, name="expand")(x)
    y = layers.BatchNormalization(name="expand_bn")(y)
    y = layers.ReLU(6.0, name="expand_relu6")(y)
    y = layers.DepthwiseConv2D(3, padding="same", use_bias=False, name="depthwise")(y)
    y = layers.BatchNormalization(name="depthwise_bn")(y)
    y = layers.Activation("relu6", name="depthwise_relu6")(y)
    y = layers.Conv2D(16, 1, use_bias=False, name="project")(y)
    y = layers.BatchNormalization(name="project_bn")(y)
    x = layers.Add(name="add")([x, y])
    x = layers.AveragePooling2D(2, name="avg_pool")(x)
    x = layers.Flatten(name="flatten")(x)
    outputs = layers.Dense(10, name="logits")(x)
    return keras.Model(inputs, outputs, name="mobilenet_v2_block")


def bn_dropout_cnn():
    """A small CNN with BatchNormalization and two Dropouts, for the trainer's tests of
    declared models (moving statistics in backups, Dropout masks per step and shard): a strided
    convolution without bias, BatchNormalization, ReLU, max pooling, then dense layers with
    Dropout before each, softmax on the output (folded into the loss)."""
    return keras.Sequential([
        keras.Input(shape=(28, 28, 1)),
        layers.Conv2D(16, 3, strides=2, padding="same", use_bias=False, name="conv"),
        layers.BatchNormalization(name="bn"),
        layers.ReLU(name="relu"),
        layers.MaxPooling2D(2, name="pool"),
        layers.Flatten(name="flatten"),
        layers.Dropout(0.25, name="dropout1"),
        layers.Dense(32, activation="relu", name="dense1"),
        layers.Dropout(0.25, name="dropout2"),
        layers.Dense(10, activation="softmax", name="dense2"),
    ], name="bn_dropout_cnn")


def mobilenet_v2():
    """Keras' own MobileNetV2 application at width 0.35 for 32x32x3 images and 10 classes,
    untrained: ZeroPadding2D before each strided depthwise convolution, ReLU6, 17 inverted
    residual blocks, GlobalAveragePooling2D and a softmax Dense."""
    return keras.applications.MobileNetV2(input_shape=(32, 32, 3), alpha=0.35, weights=None,
                                          classes=10)


def resnet20():
    """ResNet-20 for CIFAR-10 (He et al. 2015, section 4.2): a 3x3 convolution of 16 filters,
    three stages of three basic blocks of 16, 32 and 64 filters, the first block of stages 2
    and 3 strided by 2 with a 1x1 projection shortcut (option B), BatchNormalization and ReLU
    after every convolution, global average pooling and a softmax Dense(10)."""
    inputs = keras.Input(shape=(32, 32, 3), name="image")
    x = layers.Conv2D(16, 3, padding="same", use_bias=False, name="stem_conv")(inputs)
    x = layers.BatchNormalization(name="stem_bn")(x)
    x = layers.ReLU(name="stem_relu")(x)
    for stage, filters in enumerate((16, 32, 64), start=1):
        for block in range(1, 4):
            name = f"s{stage}b{block}"
            strides = 2 if stage > 1 and block == 1 else 1
            y = layers.Conv2D(filters, 3, strides=strides, padding="same", use_bias=False,
                              name=name + "_conv1")(x)
            y = layers.BatchNormalization(name=name + "_bn1")(y)
            y = layers.ReLU(name=name + "_relu1")(y)
            y = layers.Conv2D(filters, 3, padding="same", use_bias=False,
                              name=name + "_conv2")(y)
            y = layers.BatchNormalization(name=name + "_bn2")(y)
            if strides != 1:
                x = layers.Conv2D(filters, 1, strides=strides, use_bias=False,
                                  name=name + "_proj")(x)
                x = layers.BatchNormalization(name=name + "_proj_bn")(x)
            x = layers.Add(name=name + "_add")([x, y])
            x = layers.ReLU(name=name + "_out")(x)
    x = layers.GlobalAveragePooling2D(name="gap")(x)
    outputs = layers.Dense(10, activation="softmax", name="predictions")(x)
    return keras.Model(inputs, outputs, name="resnet20")


MODELS = {"seeds_cnn": seeds_cnn, "resnet_block": resnet_block,
          "mobilenet_v2_block": mobilenet_block, "bn_dropout_cnn": bn_dropout_cnn,
          "mobilenet_v2": mobilenet_v2, "resnet20": resnet20}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    os.makedirs(out, exist_ok=True)
    for name, build in MODELS.items():
        model = build()
        text = json.dumps(json.loads(model.to_json()), indent=1, sort_keys=True)
        with open(os.path.join(out, name + ".json"), "w") as f:
            f.write(text + "\n")
        print(f"{name}.json: {len(model.layers)} layers, {model.count_params()} parameters"
              f" (keras {keras.__version__})")


if __name__ == "__main__":
    main()
