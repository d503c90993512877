#!/usr/bin/env bash
# Scaling on this machine, in one run: tj-trainer as 1 process x 2 threads (global batch 128)
# against 2 worker processes x 1 thread (64 images each, TF_CONFIG on loopback) with each
# all-reduce (the ring in float32 and bfloat16, Gloo's own), and PyTorch
# DistributedDataParallel over Gloo (Debian's python3-torch) with the same 2 x 1 shape.
# Each configuration runs ROUNDS times, interleaved, and the median is kept.
# Writes bench/train_ddp/RESULTS.md.   bash bench/train_ddp/run.sh [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-300}
EPOCHS=${EPOCHS:-2}
ROUNDS=${ROUNDS:-3}
TRAINER=${TRAINER:-build/bin/tj-trainer}
OUT=bench/train_ddp/RESULTS.md
[ -x "$TRAINER" ] || { echo "build first: make build" >&2; exit 1; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
flags=(--epochs "$EPOCHS" --steps-per-epoch "$STEPS")
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

one_process() { # NAME
  "$TRAINER" "${flags[@]}" --batch-size 128 --threads 2 >"$tmp/$1.w0"
}
two_workers() { # NAME EXTRA-FLAGS...
  local name=$1
  shift
  local p0 p1
  p0=$(port) p1=$(port)
  tfc() { echo "{\"cluster\":{\"worker\":[\"localhost:$p0\",\"localhost:$p1\"]},\"task\":{\"type\":\"worker\",\"index\":$1}}"; }
  TJ_RENDEZVOUS_KEY=bench TF_CONFIG=$(tfc 1) "$TRAINER" "${flags[@]}" --batch-size 64 --threads 1 "$@" >"$tmp/$name.w1" &
  TJ_RENDEZVOUS_KEY=bench TF_CONFIG=$(tfc 0) "$TRAINER" "${flags[@]}" --batch-size 64 --threads 1 "$@" >"$tmp/$name.w0"
  wait
}
pytorch_ddp() { # NAME
  local mp r
  mp=$(port)
  for r in 1 0; do
    RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$mp OMP_NUM_THREADS=1 \
      /usr/bin/python3 bench/train_cpu/pytorch_seeds.py --ddp --threads 1 \
      --epochs "$EPOCHS" --steps-per-epoch "$STEPS" --batch-size 64 >"$tmp/$1.w$r" &
  done
  wait
}

field() { grep "\"$1\"" | tail -1 | sed -E "s/.*\"$2\": ?([0-9.e-]+).*/\1/"; }
sha() { grep '"train_end"' "$1" | sed -E 's/.*"weights_sha256":"([0-9a-f]+)".*/\1/'; }
for round in $(seq 1 "$ROUNDS"); do
  one_process "1x2.$round"
  two_workers "ring.$round"
  two_workers "bf16.$round" --allreduce-dtype bfloat16
  two_workers "gloo.$round" --allreduce-algorithm gloo
  [ "$round" -gt 1 ] || pytorch_ddp "torch.$round"
done
# The median round by last-epoch images/s, and its figures.
median_round() { # NAME -> the file of the median round's worker 0
  local name=$1 r
  for r in $(seq 1 "$ROUNDS"); do
    [ -f "$tmp/$name.$r.w0" ] || continue
    echo "$(field epoch_end images_per_sec <"$tmp/$name.$r.w0") $tmp/$name.$r.w0"
  done | sort -g | awk '{a[NR]=$2} END {print a[int((NR+1)/2)]}'
}
row() { # LABEL NAME
  local f ips step ar agree
  f=$(median_round "$2")
  ips=$(field epoch_end images_per_sec <"$f")
  step=$(field train_end step_ms <"$f")
  ar=$(field train_end allreduce_ms <"$f")
  agree="-"
  if [ -f "${f%.w0}.w1" ] && grep -q weights_sha256 "${f%.w0}.w1"; then
    [ "$(sha "$f")" = "$(sha "${f%.w0}.w1")" ] && agree=yes || agree=NO
  fi
  printf "| %s | %.0f | %.0f%% | %.2f | %.2f | %s | %s |\n" "$1" "$ips" \
    "$(python3 -c "print(100 * $ips / $base)")" "$step" "$ar" "$agree" "$(sha "$f" | cut -c1-12)"
}
base=$(field epoch_end images_per_sec <"$(median_round 1x2)")
torch_ips=$(field epoch_end images_per_sec <"$tmp/torch.1.w0")
{
  echo "# Scaling on one machine: 1 process x 2 threads vs 2 workers x 1 thread"
  echo
  echo "- Date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "- Machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load average before: $load_before"
  echo "- Command: \`bash bench/train_ddp/run.sh $STEPS\` (EPOCHS=$EPOCHS, ROUNDS=$ROUNDS); global batch 128 in every row"
  echo "- images/s: global images per second of the last epoch, from worker 0, median of $ROUNDS interleaved rounds"
  echo "- vs 1x2: images/s over the 1 process x 2 threads row's (the scaling efficiency of 2 workers)"
  echo
  echo "| configuration | images/s | vs 1x2 | step (ms) | all-reduce per step (ms) | ranks' weights equal | weights sha256 |"
  echo "|---|---:|---:|---:|---:|---|---|"
  row "tj-trainer, 1 process x 2 threads" 1x2
  row "tj-trainer, 2 workers x 1 thread, ring float32" ring
  row "tj-trainer, 2 workers x 1 thread, ring bfloat16" bf16
  row "tj-trainer, 2 workers x 1 thread, Gloo's all-reduce" gloo
  printf "| PyTorch 1.13 DDP (Gloo), 2 workers x 1 thread, 1 round | %.0f | %.0f%% | | | | |\n" \
    "$torch_ips" "$(python3 -c "print(100 * $torch_ips / $base)")"
  echo
  echo "The float32 ring and Gloo sum the same two values per element (a + b), so their weights"
  echo "are bitwise equal; the 1-process run sums the 128 images' gradients in another order,"
  echo "so its weights differ within summation order (see docs/trainer.md, \"The all-reduce\")."
  echo
  echo '```'
  for n in 1x2 ring bf16 gloo; do grep train_end "$(median_round $n)"; done
  grep train_end "$tmp/torch.1.w0" || true
  echo '```'
} >"$OUT"
cat "$OUT"
