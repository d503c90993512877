#!/usr/bin/env python3
"""Scaling of synchronous data-parallel training with the ring all-reduce, from measured
per-step times: images/s and efficiency for 2-64 workers over a 10-100 Gb/s network.

The model (weak scaling: each worker keeps its batch, as `replicas` grows so does the global
batch):

  step(p)       = compute + allreduce(p)            (no overlap: the trainer reduces after the
                                                     backward pass)
  allreduce(p)  = 2 (p - 1) * latency               (one hop per step of the ring, twice)
                + 2 (p - 1) / p * bytes / bandwidth (what each rank sends, and receives)
                + (p - 1) / p * floats * add_ns     (the sums of the reduce-scatter)
  efficiency    = compute / step(p)                 (images/s over p times one worker's)

`compute` is one worker's step without the all-reduce (step_ms - allreduce_ms of
bench/train_ddp/RESULTS.md); `add_ns` is the sum's cost per float, from the same machine.
The loopback check at the end puts the model's p = 2 time beside the measured ring (give the
loopback bandwidth from bench/allreduce's "tcp limit" row).

  python3 bench/train_ddp/scaling_model.py --compute-ms 2.1 --latency-us 30 \\
      --loopback-gbps 13 --measured-ring-ms 1.0
"""
import argparse
import math

FLOATS = 347_148  # the fused gradient buffer: 347,146 weights + 2 metrics


def allreduce_ms(p, wire_bytes, gbps, latency_us, add_ns, halving_doubling=False):
    if p == 1:
        return 0.0
    # The ring pays the hop latency 2 (p - 1) times; recursive halving-doubling (Rabenseifner:
    # the same bytes, exchanged with partners at distance 1, 2, 4, ...) 2 log2(p) times.
    steps = 2 * math.ceil(math.log2(p)) if halving_doubling else 2 * (p - 1)
    hops = steps * latency_us / 1e3
    transfer = 2 * (p - 1) / p * FLOATS * wire_bytes * 8 / (gbps * 1e9) * 1e3
    sums = (p - 1) / p * FLOATS * add_ns / 1e6
    return hops + transfer + sums


def main():
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--compute-ms", type=float, required=True, help="one worker's step without the all-reduce")
    a.add_argument("--batch", type=int, default=64, help="images per worker per step")
    a.add_argument("--latency-us", type=float, default=30.0, help="one TCP hop, one way")
    a.add_argument("--add-ns", type=float, default=0.3, help="one float sum (load, add, store)")
    a.add_argument("--loopback-gbps", type=float, help="measured loopback TCP, Gb/s, for the check")
    a.add_argument("--measured-ring-ms", type=float, help="measured ring all-reduce at p = 2")
    args = a.parse_args()

    print(f"compute {args.compute_ms} ms per step of {args.batch} images per worker; "
          f"latency {args.latency_us} us per hop; {FLOATS:,} floats\n")
    for wire, nbytes, hd in (("float32", 4, False), ("bfloat16", 2, False), ("float32", 4, True)):
        title = f"{wire} on the wire" + (
            ", recursive halving-doubling instead of the ring (not implemented: what it would give)"
            if hd else ", the ring")
        print(f"### {title}\n")
        print("| workers | " + " | ".join(f"{g} Gb/s: all-reduce ms, efficiency" for g in (10, 25, 100)) + " |")
        print("|---:|" + "---:|" * 3)
        for p in (2, 4, 8, 16, 32, 64):
            cells = []
            for g in (10, 25, 100):
                ar = allreduce_ms(p, nbytes, g, args.latency_us, args.add_ns, hd)
                eff = args.compute_ms / (args.compute_ms + ar)
                ips = p * args.batch / ((args.compute_ms + ar) / 1e3)
                cells.append(f"{ar:.2f} ms, {100 * eff:.0f}% ({ips:,.0f} img/s)")
            print(f"| {p} | " + " | ".join(cells) + " |")
        print()
    if args.loopback_gbps and args.measured_ring_ms:
        model = allreduce_ms(2, 4, args.loopback_gbps, 0.0, args.add_ns)
        print(f"Check at p = 2 on loopback ({args.loopback_gbps} Gb/s, no latency): model "
              f"{model:.2f} ms, measured {args.measured_ring_ms:.2f} ms")


if __name__ == "__main__":
    main()
