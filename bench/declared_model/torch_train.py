"""PyTorch training a Keras model JSON (built by torch_step.py's KerasModel, weights drawn as
Keras' GlorotUniform draws them, biases zero) on an .npz of uint8 images (x_train, y_train,
x_test, y_test), with the recipe bench/declared_model/train.sh gives tj-trainer: pixels / 255,
SGD with momentum, a constant learning rate or a cosine decay over the whole run (--cosine:
lr x (1 + cos(pi t / T)) / 2 at update t of T, as Keras' CosineDecay), softmax cross-entropy,
a shuffled epoch of global batches. With WORLD_SIZE > 1 (and RANK, MASTER_ADDR, MASTER_PORT) it is one rank of
DistributedDataParallel over Gloo, each rank taking its slice of every global batch; without,
one process. Prints one JSON line per epoch and one at the end with the test accuracy.

    python torch_train.py MODEL.json DATA.npz --epochs 2 --global-batch 64 --lr 0.05
        [--momentum 0.9] [--cosine] [--threads N] [--seed 1] [--channels-last]
"""
import json
import math
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from torch_step import KerasModel
from train_args import recipe_parser


def keras_glorot_(module):
    """Keras' GlorotUniform: limit sqrt(6 / (fan_in + fan_out)) with Keras' fans of the Keras
    kernel shape (kh, kw, in / groups, out) or, depthwise, (kh, kw, in, multiplier)."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            kh, kw = m.kernel_size
            if m.groups == m.in_channels and m.groups > 1:  # depthwise
                fan_in, fan_out = kh * kw * m.in_channels, kh * kw * m.out_channels // m.in_channels
            else:
                fan_in, fan_out = kh * kw * m.in_channels // m.groups, kh * kw * m.out_channels
        elif isinstance(m, nn.Linear):
            fan_in, fan_out = m.in_features, m.out_features
        else:
            continue
        limit = math.sqrt(6 / (fan_in + fan_out))
        with torch.no_grad():
            m.weight.uniform_(-limit, limit)
            if m.bias is not None:
                m.bias.zero_()


def main():
    p = recipe_parser()
    p.add_argument("--channels-last", action="store_true")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
        torch.set_num_interop_threads(a.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(a.seed)  # every rank draws the same initial weights
    with open(a.model) as f:
        model = KerasModel(json.load(f))
    keras_glorot_(model)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt).train()
    net = nn.parallel.DistributedDataParallel(model) if world > 1 else model

    def tensor(images):  # uint8 NHWC -> float NCHW / 255
        x = torch.from_numpy(images).permute(0, 3, 1, 2).float().div_(255)
        return x.contiguous(memory_format=fmt)

    with np.load(a.data) as d:
        x_train, y_train = d["x_train"], d["y_train"].astype("int64")
        x_test, y_test = d["x_test"], d["y_test"].astype("int64")
    steps, share = len(x_train) // a.global_batch, a.global_batch // world
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    total = a.epochs * steps
    schedule = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda t: 0.5 * (1 + math.cos(math.pi * min(t, total) / total)) if a.cosine else 1.0)
    order_rng = np.random.default_rng(a.seed)  # the same order on every rank
    start = time.perf_counter()
    for epoch in range(a.epochs):
        t0, order = time.perf_counter(), order_rng.permutation(len(x_train))
        loss_sum = 0.0
        for s in range(steps):
            rows = order[s * a.global_batch + rank * share:s * a.global_batch + (rank + 1) * share]
            loss = F.cross_entropy(net(tensor(x_train[rows])), torch.from_numpy(y_train[rows]))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            schedule.step()
            loss_sum += float(loss.detach())
        seconds = time.perf_counter() - t0
        if rank == 0:
            print(json.dumps({"event": "epoch_end", "epoch": epoch + 1, "loss": loss_sum / steps,
                              "seconds": seconds,
                              "images_per_sec": steps * a.global_batch / seconds}), flush=True)
    train_seconds = time.perf_counter() - start
    if rank == 0:
        model.eval()
        correct, loss_sum = 0, 0.0
        with torch.no_grad():
            for i in range(0, len(x_test), 256):
                logits = model(tensor(x_test[i:i + 256]))
                labels = torch.from_numpy(y_test[i:i + 256])
                loss_sum += float(F.cross_entropy(logits, labels, reduction="sum"))
                correct += int((logits.argmax(1) == labels).sum())
        print(json.dumps({"event": "train_end", "epochs": a.epochs,
                          "test_loss": loss_sum / len(x_test),
                          "test_accuracy": correct / len(x_test), "train_seconds": train_seconds,
                          "pytorch": torch.__version__}), flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
