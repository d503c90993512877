#!/usr/bin/env python3
"""The seeds' model and recipe in PyTorch on one GPU: the peer tj-trainer --device gpu is
measured against. Model, initialisation, loss, Adam (Keras defaults, eps 1e-7) and the
learning-rate schedule are bench/train_cpu/pytorch_seeds.py's (imported from there, not
copied). Like tj-trainer's GPU backend: the data set is copied to the device once, each
epoch's order is drawn on the device, the loss and accuracy are summed on the device and read
once per epoch, and every product is full float32 (no TF32 in cuDNN or cuBLAS).

--mode eager: plain PyTorch. --mode compile: torch.compile of the model (the optimizer step
stays eager); the first epoch then includes compilation, so compare steady-state epochs.
Prints one JSON line per epoch and a train_end line with tj-trainer's field names.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train_cpu"))
from pytorch_seeds import Seeds, find, lr_for_epoch, read_idx  # noqa: E402


def load(data_dir, stem, device):
    images = read_idx(find(data_dir, stem + "-images-idx3-ubyte")).astype(np.float32) / 255.0
    labels = read_idx(find(data_dir, stem + "-labels-idx1-ubyte")).astype(np.int64)
    return (torch.from_numpy(images).unsqueeze(1).to(device),
            torch.from_numpy(labels).to(device))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--mode", choices=["eager", "compile"], default="eager")
    a = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("pytorch_seeds_gpu.py: torch sees no CUDA device")
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(a.seed)
    xtr, ytr = load(a.data_dir, "train", dev)
    xte, yte = load(a.data_dir, "t10k", dev)

    model = Seeds().to(dev)
    step_model = torch.compile(model) if a.mode == "compile" else model
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-7)
    steps = len(xtr) // a.batch_size
    gen = torch.Generator(device=dev)
    total_images, total_seconds = 0, 0.0
    for epoch in range(1, a.epochs + 1):
        for g in opt.param_groups:
            g["lr"] = lr_for_epoch(epoch)
        gen.manual_seed(a.seed * 1000 + epoch)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        order = torch.randperm(len(xtr), generator=gen, device=dev)
        loss_sum = torch.zeros((), device=dev)
        correct = torch.zeros((), device=dev, dtype=torch.int64)
        model.train()
        for s in range(steps):
            idx = order[s * a.batch_size:(s + 1) * a.batch_size]
            x, y = xtr[idx], ytr[idx]
            opt.zero_grad(set_to_none=True)
            out = step_model(x)
            loss = F.cross_entropy(out, y, reduction="sum") / a.batch_size
            loss.backward()
            opt.step()
            loss_sum += loss.detach() * a.batch_size
            correct += (out.argmax(1) == y).sum()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        images = steps * a.batch_size
        total_images += images
        total_seconds += dt
        print(json.dumps({"event": "epoch_end", "epoch": epoch, "steps": steps,
                          "loss": loss_sum.item() / images, "accuracy": correct.item() / images,
                          "lr": lr_for_epoch(epoch), "seconds": dt,
                          "images_per_sec": images / dt}), flush=True)
    model.eval()
    with torch.inference_mode():
        logits = model(xte)
    test = {"test_loss": F.cross_entropy(logits, yte).item(),
            "test_accuracy": (logits.argmax(1) == yte).float().mean().item()}
    print(json.dumps({"event": "train_end", "epochs": a.epochs, **test,
                      "device": torch.cuda.get_device_name(),
                      "torch": torch.__version__, "mode": a.mode,
                      "images_per_sec": total_images / total_seconds,
                      "train_seconds": total_seconds}), flush=True)


if __name__ == "__main__":
    main()
