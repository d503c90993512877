#!/usr/bin/python3
"""PyTorch's torch.distributed Gloo all-reduce of the same buffer, for comparison with
tj-bench-allreduce: N processes on loopback, 1 thread each, one JSON line from rank 0.

    /usr/bin/python3 torch_allreduce.py [--count 347148] [--ranks 2] [--iterations 200]
"""
import argparse
import json
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(rank, args, port):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.ranks)
    grads = torch.empty(args.count, dtype=torch.float32)
    times = []
    for i in range(args.warmup + args.iterations):
        grads.copy_((torch.arange(args.count) + i + rank).remainder(97).float() * 1e-3)
        start = time.perf_counter()
        dist.all_reduce(grads, op=dist.ReduceOp.SUM)
        end = time.perf_counter()
        if i >= args.warmup:
            times.append((end - start) * 1000.0)
    if rank == 0:
        times.sort()
        at = lambda q: times[int(q * (len(times) - 1))]
        print(json.dumps({"event": "allreduce_bench", "backend": f"torch {torch.__version__} gloo",
                          "ranks": args.ranks, "floats": args.count,
                          "iterations": args.iterations, "median_ms": at(0.5),
                          "mean_ms": sum(times) / len(times), "p10_ms": at(0.1),
                          "p90_ms": at(0.9)}), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--count", type=int, default=347148)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--iterations", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    args = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(run, args=(args, free_port()), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()
