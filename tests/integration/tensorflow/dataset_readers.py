"""Writes datasets with TensorFlow's and NumPy's own writers, and what they hold, for
dataset_readers_compare (the trainer's readers, trainer/data/) to read back.

Usage: dataset_readers.py OUT_DIR (the venv of hack/tensorflow.sh). Writes into OUT_DIR:
  png.tfrecord    tf.io.TFRecordWriter, tf.train.Example {image/encoded: PNG, image/class/label}
  jpeg.tfrecord   the same with the short keys {image: JPEG q90, label}
  stored.npz      numpy.savez: x_train uint8 N x H x W x 3, y_train int64 N x 1,
                  x_test float32 in [0, 1] N x H x W, y_test uint8 N
  compressed.npz  numpy.savez_compressed of the same
  folder/         <class>/<n>.png for Keras' image_dataset_from_directory
and the expected content as raw bytes: pixels.bin (uint8 N x H x W x 3), labels.txt,
jpeg_pixels.bin (tf.io.decode_jpeg with INTEGER_ACCURATE, libjpeg's default method),
x_test.bin, y_test.txt, folder_pixels.bin and folder_labels.txt (Keras' reading of folder/,
in its order: classes sorted, files sorted within each).
"""
import os
import sys

import numpy as np
import tensorflow as tf

N, H, W = 12, 10, 12
CLASSES = 5


def images(rng):
    # Smooth ramps plus noise: JPEG-like content, distinct per image.
    y, x = np.mgrid[0:H, 0:W]
    out = np.empty((N, H, W, 3), np.uint8)
    for i in range(N):
        base = (x * 9 + y * 7 + i * 13)[..., None] + np.array([0, 40, 80])
        noise = rng.integers(-12, 13, size=(H, W, 3))
        out[i] = np.clip(base + noise, 0, 255).astype(np.uint8)
    return out


def example(image_key, image_bytes, label_key, label):
    return tf.train.Example(features=tf.train.Features(feature={
        image_key: tf.train.Feature(bytes_list=tf.train.BytesList(value=[image_bytes])),
        label_key: tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
        # A feature the reader must skip.
        "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"png"])),
    })).SerializeToString()


def main(out):
    rng = np.random.default_rng(7)
    x = images(rng)
    labels = rng.integers(0, CLASSES, size=N)
    x.tofile(os.path.join(out, "pixels.bin"))
    with open(os.path.join(out, "labels.txt"), "w") as f:
        f.write(" ".join(str(int(v)) for v in labels))

    with tf.io.TFRecordWriter(os.path.join(out, "png.tfrecord")) as w:
        for i in range(N):
            png = tf.io.encode_png(x[i]).numpy()
            w.write(example("image/encoded", png, "image/class/label", int(labels[i])))
    jpeg_pixels = []
    with tf.io.TFRecordWriter(os.path.join(out, "jpeg.tfrecord")) as w:
        for i in range(N):
            jpeg = tf.io.encode_jpeg(x[i], quality=90).numpy()
            w.write(example("image", jpeg, "label", int(labels[i])))
            jpeg_pixels.append(tf.io.decode_jpeg(jpeg, channels=3,
                                                 dct_method="INTEGER_ACCURATE").numpy())
    np.stack(jpeg_pixels).tofile(os.path.join(out, "jpeg_pixels.bin"))

    x_test_int = rng.integers(0, 256, size=(N, H, W))
    x_test = (x_test_int / 255.0).astype(np.float32)
    y_test = rng.integers(0, CLASSES, size=N).astype(np.uint8)
    arrays = dict(x_train=x, y_train=labels.astype(np.int64).reshape(N, 1), x_test=x_test,
                  y_test=y_test)
    np.savez(os.path.join(out, "stored.npz"), **arrays)
    np.savez_compressed(os.path.join(out, "compressed.npz"), **arrays)
    x_test_int.astype(np.uint8).tofile(os.path.join(out, "x_test.bin"))
    with open(os.path.join(out, "y_test.txt"), "w") as f:
        f.write(" ".join(str(int(v)) for v in y_test))

    # Class folders, read back by Keras for the order and labels it gives them.
    names = ["cat", "dog", "emu"]
    for i in range(N):
        path = os.path.join(out, "folder", names[i % 3], "img%02d.png" % (N - i))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tf.io.write_file(path, tf.io.encode_png(x[i]))
    keras_images, keras_labels = [], []
    ds = tf.keras.utils.image_dataset_from_directory(
        os.path.join(out, "folder"), labels="inferred", image_size=(H, W), shuffle=False,
        batch_size=None, interpolation="bilinear")
    for image, label in ds:
        keras_images.append(image.numpy().round().astype(np.uint8))
        keras_labels.append(int(label.numpy()))
    np.stack(keras_images).tofile(os.path.join(out, "folder_pixels.bin"))
    with open(os.path.join(out, "folder_labels.txt"), "w") as f:
        f.write(" ".join(str(v) for v in keras_labels))
    print("dataset_readers.py: TensorFlow %s, NumPy %s: wrote %s" %
          (tf.__version__, np.__version__, out))


if __name__ == "__main__":
    main(sys.argv[1])
