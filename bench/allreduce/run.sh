#!/usr/bin/env bash
# Runs both all-reduce benchmarks side by side: tj-trainer's Gloo communicator and PyTorch's
# torch.distributed Gloo, 2 processes on loopback, 347,148 floats (the model's 347,146
# gradients + 2 metrics). Usage: bench/allreduce/run.sh [build dir, default build]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-$here/../../build}"
args=(--count 347148 --ranks 2 --iterations 200 --warmup 20)
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
"$build/bin/tj-bench-allreduce" "${args[@]}"
/usr/bin/python3 "$here/torch_allreduce.py" "${args[@]}"
