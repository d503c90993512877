"""A model exported by tj-trainer (--export-dir: architecture.json, weights.tjckpt) as Keras
weights: the same architecture (fmnist_setup.build_model), the same numbers.

    python tj_to_keras.py /data/model model.weights.h5       # for model.load_weights
    python tj_to_keras.py /data/model model.keras            # a whole model, compiled
    python tj_to_keras.py /data/model m.keras --evaluate     # and its test accuracy

The .weights.h5 file loads into fmnist_setup.build_model() in Keras 3 and in tf-keras; the
.keras file loads with keras.models.load_model in Keras 3 (TensorFlow Serving takes the
SavedModel of `model.export(dir)`, docs/tensorflow.md).

weights.tjckpt (trainer/checkpoint/state_file.h): "TJCKPT\\r\\n", uint32 version 2, uint64 header
length, a JSON header naming the tensors, their float32 values, a SHA-256 of all that, then an
HMAC-SHA256 of all that under the job's key (TJ_RENDEZVOUS_KEY; empty for an exported model,
which carries no key). The
weights are one flat vector in trainer/nn/model.h's layout, whose dense kernels are stored
(out, in): the transpose of Keras' (in, out).
"""
import argparse
import hashlib
import hmac
import json
import os
import struct
import sys

import numpy as np

MAGIC = b"TJCKPT\r\n"
# trainer/nn/model.h: (name, shape in the file, count)
LAYOUT = [("conv_kernel", (3, 3, 32)), ("conv_bias", (32,)), ("dense1_kernel", (64, 5408)),
          ("dense1_bias", (64,)), ("dense2_kernel", (10, 64)), ("dense2_bias", (10,))]
PARAMETERS = sum(int(np.prod(shape)) for _, shape in LAYOUT)  # 347,146


def read_state_file(path):
    """(header dict, {tensor name: float32 array}) of a tj-trainer state file, verified."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 20 + 64 or data[:8] != MAGIC:
        raise ValueError(f"{path}: not a tj-trainer checkpoint (no TJCKPT header)")
    version, header_len = struct.unpack("<IQ", data[8:20])
    if version != 2:
        raise ValueError(f"{path}: format version {version}; this converter reads version 2 "
                         "(tj-trainer 0.1.0's version 1 files are no longer written)")
    if hashlib.sha256(data[:-64]).digest() != data[-64:-32]:
        raise ValueError(f"{path}: digest mismatch (a torn or corrupt file)")
    key = os.environ.get("TJ_RENDEZVOUS_KEY", "").encode()
    if not hmac.compare_digest(hmac.new(key, data[:-32], hashlib.sha256).digest(), data[-32:]):
        raise ValueError(f"{path}: not signed with this key (an exported model has none: unset "
                         "TJ_RENDEZVOUS_KEY; a backup or checkpoint needs its job's key)")
    if 20 + header_len > len(data) - 64:
        raise ValueError(f"{path}: header length {header_len} runs past the file")
    header = json.loads(data[20:20 + header_len])
    tensors, offset = {}, 20 + header_len
    for t in header["tensors"]:
        n = int(t["count"])
        tensors[t["name"]] = np.frombuffer(data, dtype="<f4", count=n, offset=offset)
        offset += 4 * n
    if offset != len(data) - 64:
        raise ValueError(f"{path}: tensor sizes do not add up to the file's data")
    return header, tensors


def keras_weights(export_dir):
    """The exported weights as the list model.set_weights takes for fmnist_setup.build_model."""
    with open(os.path.join(export_dir, "architecture.json")) as f:
        arch = json.load(f)
    _, tensors = read_state_file(os.path.join(export_dir, arch.get("weights_file",
                                                                    "weights.tjckpt")))
    if "weights" not in tensors:
        raise ValueError(f"{export_dir}: no tensor 'weights' (tensors: {sorted(tensors)})")
    flat = tensors["weights"]
    if flat.size != PARAMETERS:
        raise ValueError(f"{export_dir}: {flat.size} parameters; the seeds' model has "
                         f"{PARAMETERS}")
    parts, offset = {}, 0
    for name, shape in LAYOUT:
        n = int(np.prod(shape))
        parts[name] = flat[offset:offset + n].reshape(shape)
        offset += n
    return [
        parts["conv_kernel"].reshape(3, 3, 1, 32),  # (ky, kx, in, out), one input channel
        parts["conv_bias"],
        parts["dense1_kernel"].T,  # (in, out); in = flatten of (h, w, c), as Keras flattens
        parts["dense1_bias"],
        parts["dense2_kernel"].T,
        parts["dense2_bias"],
    ]


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("export_dir", help="tj-trainer's --export-dir")
    p.add_argument("output", help="a .weights.h5 or .keras file")
    p.add_argument("--evaluate", action="store_true",
                   help="print the test accuracy of the converted model (JSON)")
    p.add_argument("--data-dir", default=None)
    a = p.parse_args(argv)
    if not (a.output.endswith(".weights.h5") or a.output.endswith(".keras")):
        p.error(f"{a.output}: name a .weights.h5 or a .keras file")
    import fmnist_setup  # TensorFlow loads only after the arguments are good
    try:
        weights = keras_weights(a.export_dir)
    except (OSError, ValueError, KeyError) as e:
        print(f"tj_to_keras: {e}", file=sys.stderr)
        return 1
    model = fmnist_setup.build_and_compile_model()
    model.set_weights(weights)
    if a.output.endswith(".keras"):
        model.save(a.output)
    else:
        model.save_weights(a.output)
    if a.evaluate:
        loss, accuracy = model.evaluate(
            fmnist_setup.test_dataset(a.data_dir or fmnist_setup.DEFAULT_DATA_DIR, 1000),
            verbose=0)
        fmnist_setup.log("keras_evaluation", output=a.output, test_loss=float(loss),
                         test_accuracy=float(accuracy), keras=fmnist_setup.keras_flavour())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
