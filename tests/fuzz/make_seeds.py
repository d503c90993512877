#!/usr/bin/env python3
"""Writes the hand-made seed inputs under corpus/ (idempotent; inputs the fuzzers found and
the regression inputs are committed next to them and left alone). Each target's first input
byte is its mode; see the comment at the top of <target>_fuzz.cpp."""
import gzip
import hashlib
import hmac
import io
import json
import os
import struct
import zipfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- checkpoint (state_file): magic, u32 version, u64 header length, header, floats, SHA-256,
# HMAC-SHA256 under the harness's key.
def state_file(header, floats, version=2, digest=True):
    h = json.dumps(header, separators=(",", ":")).encode()
    body = b"TJCKPT\r\n" + struct.pack("<IQ", version, len(h)) + h
    body += struct.pack("<%df" % len(floats), *floats)
    if not digest:
        return body
    body += hashlib.sha256(body).digest()
    return body + hmac.new(b"fuzz-key", body, hashlib.sha256).digest()


good_header = {"fingerprint": {"model": "cnn", "batch_size": 64, "workers": 2},
               "epoch": 1, "step": 3, "optimizer_iterations": 10, "seed": 42,
               "extra": {"loss_sum": 1.5},
               "tensors": [{"name": "w", "count": 3}, {"name": "adam_m", "count": 2}],
               "data_bytes": 20}
good = state_file(good_header, [1.0, -2.0, 0.5, 0.0, 3.25])
put("state_file", "valid", b"\x00" + good)
put("state_file", "valid_no_digest", b"\x01" + good[:-64])
put("state_file", "truncated", b"\x00" + good[:40])
put("state_file", "corrupt_byte", b"\x00" + good[:30] + b"X" + good[31:])
put("state_file", "bad_version", b"\x01" + state_file(good_header, [1.0] * 5, 3, False))
put("state_file", "sizes_mismatch",
    b"\x01" + state_file(dict(good_header, data_bytes=8), [1.0, 2.0], digest=False))
put("state_file", "tensors_not_list",
    b"\x01" + state_file(dict(good_header, tensors={"name": "w"}, data_bytes=0), [],
                         digest=False))
put("state_file", "empty", b"\x00")

# ---- IDX: big-endian dims after 0 0 type ndims.
def idx(dims, values, type_byte=8):
    return bytes([0, 0, type_byte, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + \
        bytes(values)


labels = idx([5], [0, 1, 2, 9, 3])
images = idx([1, 28, 28], [i % 256 for i in range(784)])
put("idx_reader", "labels_raw", b"\x00" + labels)
put("idx_reader", "labels_gzip_by_harness", b"\x01" + labels)
put("idx_reader", "images_gzip", b"\x00" + gzip.compress(images, mtime=0))
put("idx_reader", "four_dims", b"\x01" + idx([2, 1, 2, 1], [1, 2, 3, 4]))
put("idx_reader", "truncated", b"\x00" + labels[:-2])
put("idx_reader", "trailing", b"\x00" + labels + b"\x00")
put("idx_reader", "float_type", b"\x00" + idx([1], [0, 0, 0, 0], 0x0D))
put("idx_reader", "gzip_truncated", b"\x00" + gzip.compress(images, mtime=0)[:50])


# ---- rendezvous: big-endian; str = u32 length + bytes.
def s(b):
    b = b.encode() if isinstance(b, str) else b
    return struct.pack(">I", len(b)) + b


def client_hello(name="worker 1", version=3, gang=-1, nonce=b"\x00" * 32, proof=b"\x00" * 32):
    return b"TJRV" + bytes([version]) + s(name) + struct.pack(">q", gang) + nonce + proof


def bodies(*parts):
    """Mode 1: request bodies, each prefixed by its u16 length (the harness seals each)."""
    return b"".join(struct.pack(">H", len(p)) + p for p in parts)


SET, GET, WAIT = 1, 2, 3
requests = [bytes([SET]) + s("gloo/0") + s("addr0"), bytes([GET]) + s("gloo/0"),
            bytes([GET]) + s("missing"),
            bytes([WAIT]) + struct.pack(">I", 1) + s("gloo/0") + struct.pack(">Q", 0)]
put("rendezvous", "preauth_wrong_proof", b"\x00" + client_hello() + b"".join(requests))
put("rendezvous", "preauth_bad_magic", b"\x00" + b"HTTP/1.1 GET /\r\n\r\n")
put("rendezvous", "preauth_old_version", b"\x00" + client_hello(version=2))
put("rendezvous", "preauth_other_gang", b"\x00" + client_hello(gang=4))
put("rendezvous", "preauth_long_name", b"\x00" + b"TJRV\x03" + struct.pack(">I", 300) + b"w" * 300)
put("rendezvous", "preauth_truncated_hello", b"\x00" + b"TJRV\x03" + struct.pack(">I", 8) + b"work")
put("rendezvous", "regress_preauth_64mib_task_name",
    b"\x00" + b"TJRV\x03" + struct.pack(">I", (64 << 20) + 1) + b"w" * 16)
put("rendezvous", "authenticated_session", b"\x01" + bodies(*requests))
put("rendezvous", "authenticated_wait_times_out",
    b"\x01" + bodies(bytes([WAIT]) + struct.pack(">I", 2) + s("a") + s("b") + struct.pack(">Q", 50)))
put("rendezvous", "authenticated_truncated_set", b"\x01" + bodies(bytes([SET]) + struct.pack(">I", 1000)))
put("rendezvous", "authenticated_unknown_op", b"\x01" + bodies(b"\x07"))
put("rendezvous", "authenticated_trailing_bytes", b"\x01" + bodies(bytes([GET]) + s("k") + b"xx"))

# ---- link_hello: the ring's and peer health's client hello (trainer/cluster/peer_handshake.h),
# for link_hello_fuzz.cpp's port: key "fuzz-link-key", gang 3, rank 1, server nonce 1..32.
def link_hello(key=b"fuzz-link-key", channel=1, gang=3, from_rank=0, to_rank=1,
               client_nonce=b"\x07" * 32, version=1):
    server_nonce = bytes(range(1, 33))
    mac = hmac.new(key, b"TJCH1 client proof" + bytes([channel]) + struct.pack(">qII", gang,
                   from_rank, to_rank) + server_nonce + client_nonce, hashlib.sha256).digest()
    return (b"TJCH" + bytes([version, channel]) + struct.pack(">Iq", from_rank, gang) +
            client_nonce + mac)


put("link_hello", "valid", link_hello())
put("link_hello", "wrong_key", link_hello(key=b"other"))
put("link_hello", "older_gang", link_hello(gang=2))
put("link_hello", "health_channel", link_hello(channel=2))
put("link_hello", "other_version", link_hello(version=2))
put("link_hello", "trailing", link_hello() + b"x")
put("link_hello", "truncated", link_hello()[:40])
put("link_hello", "http", b"GET / HTTP/1.1\r\n\r\n")

# ---- trainingjob: whole objects as the API server sends them, or bare specs.
template = {"spec": {"containers": [{"name": "trainer", "image": "tj-trainer:latest",
                                     "args": ["--epochs=3"], "env": []}]}}
job = {"apiVersion": "tjo.dev/v1alpha1", "kind": "TrainingJob",
       "metadata": {"name": "fmnist", "namespace": "default", "uid": "u-1"},
       "spec": {"replicaSpecs": {"Worker": {"replicas": 2, "restartPolicy": "ExitCode",
                                            "template": template},
                                 "Evaluator": {"replicas": 1, "template": template}},
                "runPolicy": {"backoffLimit": 3, "activeDeadlineSeconds": 3600,
                              "ttlSecondsAfterFinished": 600, "cleanPodPolicy": "Running",
                              "suspend": False, "startupDeadlineSeconds": 600},
                "successPolicy": "Chief", "port": 2222},
       "status": {"conditions": [{"type": "Running", "status": "True", "reason": "r",
                                  "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                  "replicaStatuses": {"Worker": {"active": 2}}, "restartCount": 1,
                  "progress": {"epoch": 1, "loss": 0.5}}}


def put_json(name, value):
    put("trainingjob", name, json.dumps(value, separators=(",", ":")).encode())


put_json("valid_job", job)
put_json("bare_spec", job["spec"])
bad = json.loads(json.dumps(job))
bad["spec"]["replicaSpecs"]["Worker"]["replicas"] = -1
put_json("negative_replicas", bad)
bad["spec"]["replicaSpecs"]["Worker"]["replicas"] = "2"
put_json("replicas_string", bad)
bad["spec"]["replicaSpecs"]["Worker"]["replicas"] = 10 ** 12
put_json("absurd_replicas", bad)
bad = json.loads(json.dumps(job))
bad["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"] = []
put_json("no_containers", bad)
bad = json.loads(json.dumps(job))
bad["spec"]["replicaSpecs"]["Ps"] = {"replicas": 1}
bad["spec"]["unknownField"] = True
put_json("unknown_fields", bad)
bad = json.loads(json.dumps(job))
bad["status"] = {"conditions": "x", "replicaStatuses": [1], "restartCount": "many"}
put_json("malformed_status", bad)


# ---- tf_example: tf.train.Example in protobuf's wire format, by hand; TFRecord framing with
# TensorFlow's masked CRC-32C. Mode byte: 0 one Example, 1 a TFRecord file.
def varint(v):
    out = b""
    while v >= 0x80:
        out += bytes([(v & 0x7F) | 0x80])
        v >>= 7
    return out + bytes([v])


def field(number, data):
    return varint(number << 3 | 2) + varint(len(data)) + data


def example(features):
    return field(1, b"".join(field(1, field(1, k) + field(2, v)) for k, v in features))


def bytes_feature(value):
    return field(1, field(1, value))


def int64_feature(value, packed=True):
    return field(3, field(1, varint(value)) if packed else varint(1 << 3) + varint(value))


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def tfrecord(data):
    length = struct.pack("<Q", len(data))
    mask = lambda c: (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF
    return (length + struct.pack("<I", mask(crc32c(length))) + data +
            struct.pack("<I", mask(crc32c(data))))


def png(width, height, color_type, rows, palette=None):
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data)))
    header = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    raw = b"".join(b"\x00" + row for row in rows)
    plte = chunk(b"PLTE", palette) if palette else b""
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + plte +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


grey_png = png(4, 4, 0, [bytes([16 * (x + y) for x in range(4)]) for y in range(4)])
rgb_png = png(3, 2, 2, [bytes(range(9)), bytes(range(100, 109))])
image_example = example([(b"image/encoded", bytes_feature(grey_png)),
                         (b"image/class/label", int64_feature(3))])
put("tf_example", "example", b"\x00" + image_example)
put("tf_example", "short_keys_unpacked",
    b"\x00" + example([(b"image", bytes_feature(rgb_png)), (b"label", int64_feature(1, False)),
                       (b"image/format", bytes_feature(b"png"))]))
put("tf_example", "no_label", b"\x00" + example([(b"image", bytes_feature(grey_png))]))
put("tf_example", "records", b"\x01" + tfrecord(image_example) + tfrecord(b""))
put("tf_example", "record_truncated", b"\x01" + tfrecord(image_example)[:-3])
bad = bytearray(tfrecord(image_example))
bad[20] ^= 1
put("tf_example", "record_bad_crc", b"\x01" + bytes(bad))

# ---- npz: .npy bytes (format 1.0) and .npz archives as numpy.savez writes them (zip64 local
# headers). Mode byte: 0 one .npy, 1 an .npz file.
def npy(descr, shape, data, fortran="False"):
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }" % (descr, fortran, dims)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data


def npz(arrays, compression):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as z:
        for name, data in arrays:
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = compression
            with z.open(info, "w", force_zip64=True) as f:
                f.write(data)
    return buf.getvalue()


x = npy("|u1", (2, 2, 2), bytes(range(8)))
y = npy("<i8", (2, 1), struct.pack("<2q", 1, 0))
x_test = npy("<f4", (1, 2, 2, 1), struct.pack("<4f", 0.0, 0.25, 0.5, 1.0))
y_test = npy("|u1", (1,), b"\x02")
put("npz", "npy_uint8", b"\x00" + x)
put("npz", "npy_float", b"\x00" + x_test)
put("npz", "npy_fortran", b"\x00" + npy("|u1", (2, 2), b"abcd", "True"))
arrays = [("x_train", x), ("y_train", y), ("x_test", x_test), ("y_test", y_test)]
put("npz", "stored", b"\x01" + npz(arrays, zipfile.ZIP_STORED))
put("npz", "deflated", b"\x01" + npz(arrays, zipfile.ZIP_DEFLATED))
put("npz", "deflated_truncated", b"\x01" + npz(arrays, zipfile.ZIP_DEFLATED)[:-40])

# ---- image_decoder: mode byte bit 0: decode to 3 channels, else 1. The JPEG seeds (jpeg_*)
# were written by trainer/data/image_encoder.h's EncodeJpeg and are committed as they are.
put("image_decoder", "png_grey", b"\x01" + grey_png)
put("image_decoder", "png_rgb_to_grey", b"\x00" + rgb_png)
put("image_decoder", "png_palette",
    b"\x01" + png(2, 2, 3, [b"\x00\x01", b"\x01\x00"], b"\xff\x00\x00\x00\x00\xff"))
put("image_decoder", "png_truncated", b"\x01" + rgb_png[:40])
