#!/usr/bin/env bash
# Runs every benchmark and rewrites its RESULTS.md. Run on a quiet machine (each uses every
# core); the numbers are only comparable side by side, within one run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash bench/train_cpu/run.sh 300 2
bash bench/train_ddp/run.sh 300
bash bench/backup_overhead/run.sh 7
bash bench/allreduce/run.sh build
build/bin/tj-bench-checkpoint --runs 51 --dir "$(mktemp -d)"
bash bench/operator_load/run.sh 3
bash bench/declared_model/run.sh 10 3
bash bench/declared_model/train.sh 12800 3
