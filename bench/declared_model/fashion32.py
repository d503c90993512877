"""Writes Fashion-MNIST (Debian's dataset-fashion-mnist IDX files) as a CIFAR-shaped .npz:
each 28x28 grey image zero-padded to 32x32 and repeated into 3 channels, uint8, with
x_train/y_train (the first TRAIN images of the training set, in file order) and x_test/y_test
(the whole test set), as keras.datasets writes CIFAR-10.

    python fashion32.py IDX_DIR OUT.npz [TRAIN]
"""
import gzip
import os
import sys

import numpy as np


def idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def find(directory, stem):
    for name in (stem, stem + ".gz"):
        if os.path.exists(os.path.join(directory, name)):
            return os.path.join(directory, name)
    raise SystemExit(f"fashion32.py: no {stem}[.gz] in {directory}")


def cifar_shaped(images):
    padded = np.pad(images, ((0, 0), (2, 2), (2, 2)))
    return np.repeat(padded[..., None], 3, axis=3)


def main():
    directory, out = sys.argv[1], sys.argv[2]
    train = int(sys.argv[3]) if len(sys.argv) > 3 else 60000
    x_train = idx(find(directory, "train-images-idx3-ubyte"))[:train]
    y_train = idx(find(directory, "train-labels-idx1-ubyte"))[:train]
    x_test = idx(find(directory, "t10k-images-idx3-ubyte"))
    y_test = idx(find(directory, "t10k-labels-idx1-ubyte"))
    np.savez(out, x_train=cifar_shaped(x_train), y_train=y_train, x_test=cifar_shaped(x_test),
             y_test=y_test)


if __name__ == "__main__":
    main()
