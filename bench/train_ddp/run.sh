#!/usr/bin/env bash
# Two workers on this machine, one thread each, 64 images per replica: tj-trainer (Gloo
# all-reduce of the fused gradients, TF_CONFIG on loopback) against PyTorch
# DistributedDataParallel over Gloo (Debian's python3-torch), run one after the other.
# Writes bench/train_ddp/RESULTS.md.   bash bench/train_ddp/run.sh [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-300}
EPOCHS=${EPOCHS:-2}
TRAINER=${TRAINER:-build/bin/tj-trainer}
OUT=bench/train_ddp/RESULTS.md
[ -x "$TRAINER" ] || { echo "build first: make build" >&2; exit 1; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
P0=$(port); P1=$(port)
tfc() { echo "{\"cluster\":{\"worker\":[\"localhost:$P0\",\"localhost:$P1\"]},\"task\":{\"type\":\"worker\",\"index\":$1}}"; }
flags="--epochs $EPOCHS --steps-per-epoch $STEPS --batch-size 64 --threads 1"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
tmp=$(mktemp -d)
TF_CONFIG=$(tfc 1) $TRAINER $flags > "$tmp/w1" &
TF_CONFIG=$(tfc 0) $TRAINER $flags > "$tmp/w0"
wait
MP=$(port)
for r in 1 0; do
  RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$MP OMP_NUM_THREADS=1 \
    /usr/bin/python3 bench/train_ddp/../train_cpu/pytorch_seeds.py --ddp --threads 1 \
    --epochs "$EPOCHS" --steps-per-epoch "$STEPS" --batch-size 64 > "$tmp/pt$r" &
done
wait
field() { grep "\"$1\"" | tail -1 | sed -E "s/.*\"$2\": ?([0-9.e-]+).*/\1/"; }
tj_ips=$(field epoch_end images_per_sec < "$tmp/w0")
pt_ips=$(field epoch_end images_per_sec < "$tmp/pt0")
tj_step=$(field train_end step_ms < "$tmp/w0")
tj_ar=$(field train_end allreduce_ms < "$tmp/w0")
sha() { grep '"train_end"' "$1" | sed -E 's/.*"weights_sha256":"([0-9a-f]+)".*/\1/'; }
same=$([ -n "$(sha "$tmp/w0")" ] && [ "$(sha "$tmp/w0")" = "$(sha "$tmp/w1")" ] && echo "yes ($(sha "$tmp/w0"))" || echo NO)
ratio=$(python3 -c "print(f'{$tj_ips / $pt_ips:.1f}')")
share=$(python3 -c "print(f'{100 * $tj_ar / $tj_step:.0f}')")
{
  echo "# Two workers, one thread each: tj-trainer vs PyTorch DDP (Gloo)"
  echo
  echo "- Date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "- Machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load average before: $load_before"
  echo "- Command: \`bash bench/train_ddp/run.sh $STEPS\` (EPOCHS=$EPOCHS); 2 processes x 1 thread, 64 images per replica (global batch 128)"
  echo "- images/s: global images per second of the last epoch, from worker 0 / rank 0"
  echo
  echo "| trainer | images/s | vs PyTorch DDP | step (ms) | all-reduce per step (ms) | all-reduce share |"
  echo "|---|---:|---:|---:|---:|---:|"
  printf "| tj-trainer (Gloo, fused 347,148 floats) | %.0f | %sx | %.2f | %.2f | %s%% |\n" "$tj_ips" "$ratio" "$tj_step" "$tj_ar" "$share"
  printf "| PyTorch DDP 1.13 (Gloo) | %.0f | 1.0x | | see bench/allreduce | |\n" "$pt_ips"
  echo
  echo "Both tj-trainer workers ended with the same weights_sha256: $same"
  echo
  echo '```'
  cat "$tmp/w0" "$tmp/pt0"
  echo '```'
} > "$OUT"
rm -rf "$tmp"
cat "$OUT"
