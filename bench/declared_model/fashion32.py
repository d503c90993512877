"""Writes Fashion-MNIST (Debian's dataset-fashion-mnist IDX files, read by the TensorFlow
examples' fmnist_setup.load) as a CIFAR-shaped .npz: each 28x28 grey image zero-padded to
32x32 and repeated into 3 channels, uint8, with x_train/y_train (the first TRAIN images of the
training set, in file order) and x_test/y_test (the whole test set), as keras.datasets writes
CIFAR-10. Runs in the venv of hack/tensorflow.sh.

    python fashion32.py IDX_DIR OUT.npz [TRAIN]
"""
import os
import sys

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "tensorflow"))
import fmnist_setup  # noqa: E402


def cifar_shaped(images):
    """[n, 28, 28, 1] floats in [0, 1] (k / 255 exactly) -> [n, 32, 32, 3] uint8 k."""
    pixels = np.rint(images[..., 0] * 255).astype(np.uint8)
    padded = np.pad(pixels, ((0, 0), (2, 2), (2, 2)))
    return np.repeat(padded[..., None], 3, axis=3)


def main():
    directory, out = sys.argv[1], sys.argv[2]
    train = int(sys.argv[3]) if len(sys.argv) > 3 else 60000
    x_train, y_train = fmnist_setup.load(directory, "train")
    x_test, y_test = fmnist_setup.load(directory, "test")
    np.savez(out, x_train=cifar_shaped(x_train[:train]), y_train=y_train[:train].astype(np.uint8),
             x_test=cifar_shaped(x_test), y_test=y_test.astype(np.uint8))


if __name__ == "__main__":
    main()
