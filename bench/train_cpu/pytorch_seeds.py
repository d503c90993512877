#!/usr/bin/env python3
"""The seeds' model and recipe in PyTorch, the peer tj-trainer is measured against.

Conv2D(32, 3x3, relu) -> MaxPool(2) -> Flatten -> Dense(64, relu) -> Dense(10); softmax
cross-entropy; Adam (Keras defaults: betas 0.9/0.999, eps 1e-7); Glorot-uniform kernels, zero
biases; lr 1e-3 for epochs 1-3, 1e-4 for 4-7, 1e-5 after. Prints one JSON line per epoch
with the same fields as tj-trainer, so bench/train_cpu/run.sh can compare them.

Single process by default; with --ddp it is one rank of DistributedDataParallel over Gloo
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the environment), each rank taking its
slice of every global batch and the loss averaged over the global batch, as tj-trainer does.
"""
import argparse
import gzip
import json
import os
import struct
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    ndims = data[3]
    dims = struct.unpack(">" + "I" * ndims, data[4:4 + 4 * ndims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndims).reshape(dims)


def find(d, stem):
    for name in (stem + ".gz", stem):
        if os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    raise FileNotFoundError(os.path.join(d, stem + ".gz"))


class Seeds(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 32, 3)
        self.fc1 = nn.Linear(13 * 13 * 32, 64)
        self.fc2 = nn.Linear(64, 10)
        for m in (self.conv, self.fc1, self.fc2):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc2(x)


def lr_for_epoch(epoch):
    return 1e-3 if epoch <= 3 else 1e-4 if epoch <= 7 else 1e-5


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps-per-epoch", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--ddp", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rank, world = 0, 1
    if a.ddp:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()

    xtr = torch.from_numpy(read_idx(find(a.data_dir, "train-images-idx3-ubyte")).astype(np.float32) / 255.0).unsqueeze(1)
    ytr = torch.from_numpy(read_idx(find(a.data_dir, "train-labels-idx1-ubyte")).astype(np.int64))
    xte = torch.from_numpy(read_idx(find(a.data_dir, "t10k-images-idx3-ubyte")).astype(np.float32) / 255.0).unsqueeze(1)
    yte = torch.from_numpy(read_idx(find(a.data_dir, "t10k-labels-idx1-ubyte")).astype(np.int64))

    model = Seeds()
    if a.ddp:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-7)
    gb = a.batch_size * world
    steps = len(xtr) // gb
    if a.steps_per_epoch:
        steps = min(steps, a.steps_per_epoch)
    total_images, total_seconds = 0, 0.0
    allreduce_seconds = 0.0
    for epoch in range(1, a.epochs + 1):
        for g in opt.param_groups:
            g["lr"] = lr_for_epoch(epoch)
        gen = torch.Generator().manual_seed(a.seed * 1000 + epoch)
        order = torch.randperm(len(xtr), generator=gen)
        model.train()
        loss_sum, correct = 0.0, 0
        t0 = time.perf_counter()
        for s in range(steps):
            idx = order[s * gb + rank * a.batch_size: s * gb + (rank + 1) * a.batch_size]
            x, y = xtr[idx], ytr[idx]
            opt.zero_grad()
            out = model(x)
            # Sum over the local slice / global batch: DDP averages gradients over ranks,
            # so multiply back by world to get the global-batch mean.
            loss = F.cross_entropy(out, y, reduction="sum") / a.batch_size
            loss.backward()
            opt.step()
            loss_sum += loss.item() * a.batch_size
            correct += (out.argmax(1) == y).sum().item()
        dt = time.perf_counter() - t0
        images = steps * gb
        total_images += images
        total_seconds += dt
        if rank == 0:
            print(json.dumps({"event": "epoch_end", "epoch": epoch, "steps": steps,
                              "loss": loss_sum / (steps * a.batch_size),
                              "accuracy": correct / (steps * a.batch_size),
                              "lr": lr_for_epoch(epoch), "seconds": dt,
                              "images_per_sec": images / dt}), flush=True)
    model.eval()
    with torch.no_grad():
        out = model(xte)
        test_loss = F.cross_entropy(out, yte).item()
        test_acc = (out.argmax(1) == yte).float().mean().item()
    if rank == 0:
        print(json.dumps({"event": "train_end", "epochs": a.epochs, "test_loss": test_loss,
                          "test_accuracy": test_acc,
                          "images_per_sec": total_images / total_seconds}), flush=True)


if __name__ == "__main__":
    main()
