#!/usr/bin/env bash
# The all-reduce of the trainer's fused gradients (347,148 floats: 347,146 gradients + 2
# metrics), 2 processes on loopback, in one run: the machine's limits (one memcpy of the
# buffer; loopback TCP moving the bytes one ring rank moves), tj-trainer's ring (float32,
# bfloat16), Gloo's own all-reduce through the same communicator, and PyTorch's
# torch.distributed Gloo. ROUNDS interleaved rounds; the table keeps each one's median.
# Writes bench/allreduce/RESULTS.md.   bash bench/allreduce/run.sh [build dir, default build]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-$here/../../build}"
ROUNDS=${ROUNDS:-3}
args=(--count 347148 --ranks 2 --iterations 200 --warmup 20)
bench="$build/bin/tj-bench-allreduce"
[ -x "$bench" ] || { echo "build first: make build" >&2; exit 1; }
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for _ in $(seq 1 "$ROUNDS"); do
  "$bench" --algorithm memcpy "${args[@]}" >>"$tmp/memcpy"
  "$bench" --algorithm tcp "${args[@]}" >>"$tmp/tcp"
  "$bench" --algorithm ring "${args[@]}" >>"$tmp/ring"
  "$bench" --algorithm ring --dtype bfloat16 "${args[@]}" >>"$tmp/bf16"
  "$bench" --algorithm gloo "${args[@]}" >>"$tmp/gloo"
  /usr/bin/python3 "$here/torch_allreduce.py" "${args[@]}" | grep allreduce_bench >>"$tmp/torch"
done
python3 - "$tmp" "$ROUNDS" "$load_before" >"$here/RESULTS.md" <<'PY'
import json, statistics, subprocess, sys, time
tmp, rounds, load = sys.argv[1], int(sys.argv[2]), sys.argv[3]
model = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
model = next((l.split(":", 1)[1].strip() for l in model.splitlines() if l.startswith("Model name")), "?")
rows = [("memcpy", "limit: one memcpy of the buffer (1 process)"),
        ("tcp", "limit: loopback TCP, the ring's bytes on its two connections at once"),
        ("ring", "tj ring, float32 (the trainer's default)"),
        ("bf16", "tj ring, bfloat16 on the wire"),
        ("gloo", "tj communicator, Gloo's own all-reduce"),
        ("torch", "PyTorch 1.13 torch.distributed Gloo")]
runs = {k: [json.loads(l) for l in open(f"{tmp}/{k}")] for k, _ in rows}
tcp = statistics.median(r["median_ms"] for r in runs["tcp"])
print("# All-reduce of the trainer's gradients, and this machine's limits\n")
print(f"- Date: {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())}")
print(f"- Machine: {model}, 2 processes on loopback (127.0.0.1); load average before: {load}")
print("- Command: `bash bench/allreduce/run.sh` (tj-bench-allreduce and torch_allreduce.py, "
      "`--count 347148 --ranks 2 --iterations 200 --warmup 20`); Release build")
print(f"- {rounds} interleaved rounds; each cell: the median over rounds of each round's median "
      "(p10 / p90 of the middle round in brackets); times per call as rank 0 sees them")
print("- vs TCP limit: the median over the loopback TCP limit's, which moves the same bytes "
      "(1.39 MB out and in per rank, on two connections as the ring uses) and sums nothing\n")
print("| what | median ms | p10 / p90 ms | per-round medians ms | vs TCP limit |")
print("|---|---:|---:|---|---:|")
for k, label in rows:
    ms = sorted(r["median_ms"] for r in runs[k])
    mid = sorted(runs[k], key=lambda r: r["median_ms"])[len(ms) // 2]
    med = statistics.median(ms)
    print(f"| {label} | {med:.3f} | {mid['p10_ms']:.3f} / {mid['p90_ms']:.3f} | "
          f"{', '.join(f'{m:.3f}' for m in ms)} | {med / tcp:.2f}x |")
PY
cat "$here/RESULTS.md"
