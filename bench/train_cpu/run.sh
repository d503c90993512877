#!/usr/bin/env bash
# Training throughput on CPU, tj-trainer against PyTorch (PyPI's build, hack/pytorch.sh venv; or
# TORCH_PY's python) with the same model, recipe, batch (64) and thread count, run one after the
# other on this machine.
# Writes bench/train_cpu/RESULTS.md. Run it on a quiet machine: both peers use every thread.
#   bash bench/train_cpu/run.sh [STEPS] [THREADS]
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-300}
THREADS=${2:-2}
EPOCHS=${EPOCHS:-2}
TRAINER=${TRAINER:-build/bin/tj-trainer}
OUT=bench/train_cpu/RESULTS.md
[ -x "$TRAINER" ] || { echo "build first: make build" >&2; exit 1; }

tj_cmd="$TRAINER --epochs $EPOCHS --steps-per-epoch $STEPS --batch-size 64 --threads $THREADS"
TORCH_PY=${TORCH_PY:-$(bash hack/pytorch.sh venv)}
torch_version=$("$TORCH_PY" -c 'import torch; print(torch.__version__)')
pt_cmd="$TORCH_PY bench/train_cpu/pytorch_seeds.py --epochs $EPOCHS --steps-per-epoch $STEPS --batch-size 64 --threads $THREADS"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
tj_out=$($tj_cmd)
pt_out=$($pt_cmd)
# Throughput of the last epoch (the first warms caches and, for PyTorch, its allocator).
ips() { grep '"epoch_end"' | tail -1 | sed -E 's/.*"images_per_sec": ?([0-9.]+).*/\1/'; }
tj_ips=$(echo "$tj_out" | ips)
pt_ips=$(echo "$pt_out" | ips)
ratio=$(python3 -c "print(f'{$tj_ips / $pt_ips:.1f}')")
{
  echo "# CPU training throughput: tj-trainer vs PyTorch"
  echo
  echo "- Date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "- Machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load average before: $load_before"
  echo "- PyTorch: $torch_version (PyPI's build, hack/pytorch.sh)"
  echo "- Command: \`bash bench/train_cpu/run.sh $STEPS $THREADS\` (EPOCHS=$EPOCHS)"
  echo "  - tj-trainer: \`$tj_cmd\`"
  echo "  - PyTorch: \`${pt_cmd/#$TORCH_PY/\$(bash hack/pytorch.sh python)}\`"
  echo "- Model and recipe: the seeds' CNN, batch 64, Adam, $THREADS threads; images/s of the last epoch."
  echo
  echo "| trainer | images/s | vs PyTorch |"
  echo "|---|---:|---:|"
  printf "| tj-trainer | %.0f | %sx |\n" "$tj_ips" "$ratio"
  printf "| PyTorch %s | %.0f | 1.0x |\n" "$torch_version" "$pt_ips"
  echo
  echo "Raw output:"
  echo
  echo '```'
  echo "$tj_out"
  echo "$pt_out"
  echo '```'
} > "$OUT"
cat "$OUT"
