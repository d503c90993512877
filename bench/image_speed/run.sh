#!/usr/bin/env bash
# The trainer users run (tj-trainer copied out of the CPU image) beside host builds, and each CPU
# target forced, with the same command: rounds alternate the programs (a shared, noisy machine
# slows them alike), each figure is the median of the rounds. Writes bench/image_speed/RESULTS.md.
#   bash bench/image_speed/run.sh [STEPS] [ROUNDS]
# Environment:
#   IMAGE           the image (default localhost/tj-trainer-cpu:<version>, `make images`)
#   HOST_TRAINER    the host build (default build/bin/tj-trainer: the portable default build)
#   NATIVE_TRAINER  a -DTJ_NATIVE=ON build (default build-native/bin/tj-trainer; configured and
#                   built there when missing)
#   EPOCHS          epochs per run (default 2; the last one's images/s counts)
# Needs root (buildah mounts the image). The PyTorch rows: PyPI's PyTorch (hack/pytorch.sh venv,
# downloaded once), or TORCH_PY's python.
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-200}
ROUNDS=${2:-3}
EPOCHS=${EPOCHS:-2}
VERSION=$(sed -n 's/^project([^ ]* VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
IMAGE=${IMAGE:-localhost/tj-trainer-cpu:$VERSION}
HOST_TRAINER=${HOST_TRAINER:-build/bin/tj-trainer}
NATIVE_TRAINER=${NATIVE_TRAINER:-build-native/bin/tj-trainer}
OUT=bench/image_speed/RESULTS.md
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

[ -x "$HOST_TRAINER" ] || { echo "no host build at $HOST_TRAINER: make build" >&2; exit 1; }
if [ ! -x "$NATIVE_TRAINER" ]; then
  dir=$(dirname "$(dirname "$NATIVE_TRAINER")")
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTJ_NATIVE=ON -DTJ_WITH_CUDA=OFF >/dev/null
  cmake --build "$dir" --target tj-trainer
fi
bash bench/image_speed/copy-trainer.sh "$IMAGE" "$work/image-tj-trainer"

targets=$("$HOST_TRAINER" --epochs 1 --steps-per-epoch 1 --batch-size 8 --threads 1 |
  sed -n 's/.*"cpu_targets_supported":\[\([^]]*\)\].*/\1/p' | tr -d '"' | tr ',' ' ')
common="--epochs $EPOCHS --steps-per-epoch $STEPS --batch-size 64"
# name | environment | command
runs=(
  "image, 2 threads|TJ_CPU_TARGET=auto|$work/image-tj-trainer $common --threads 2"
  "host -march=native, 2 threads|TJ_CPU_TARGET=auto|$NATIVE_TRAINER $common --threads 2"
  "host portable build, 2 threads|TJ_CPU_TARGET=auto|$HOST_TRAINER $common --threads 2"
)
for t in $targets; do
  [ "$t" = scalar ] && continue  # the fallback of last resort: correct, not fast
  runs+=("image, TJ_CPU_TARGET=$t, 1 thread|TJ_CPU_TARGET=$t|$work/image-tj-trainer $common --threads 1")
done
TORCH_PY=${TORCH_PY:-$(bash hack/pytorch.sh venv)}
torch_build=$("$TORCH_PY" -c 'import torch; print(torch.__version__)')  # 2.15.0+cu132
torch_version=${torch_build%%+*}
torch="$TORCH_PY bench/train_cpu/pytorch_seeds.py $common"
runs+=("PyTorch $torch_version, 1 thread|X=1|$torch --threads 1"
      "PyTorch $torch_version, 2 threads|X=1|$torch --threads 2")

# Throughput of the last epoch (the first warms caches and, for PyTorch, its allocator).
ips() { grep '"epoch_end"' | tail -1 | sed -E 's/.*"images_per_sec": ?([0-9.]+).*/\1/'; }
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for ((round = 1; round <= ROUNDS; round++)); do
  for i in "${!runs[@]}"; do
    IFS='|' read -r name envs cmd <<<"${runs[$i]}"
    # shellcheck disable=SC2086
    v=$(env $envs $cmd | ips)
    echo "round $round: $name: $v images/s" >&2
    echo "$v" >>"$work/run-$i"
  done
done
median() { sort -g "$1" | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
declare -A med
for i in "${!runs[@]}"; do med[$i]=$(median "$work/run-$i"); done
find_run() {  # the index of the run named $1, or nothing
  for i in "${!runs[@]}"; do [ "${runs[$i]%%|*}" = "$1" ] && echo "$i"; done
}
ratio() {  # ratio A B: median of run A / median of run B, or n/a when either is absent
  local a b
  a=$(find_run "$1") b=$(find_run "$2")
  if [ -z "$a" ] || [ -z "$b" ]; then echo "n/a"; return; fi
  python3 -c "print(f'{${med[$a]} / ${med[$b]}:.2f}')"
}
{
  echo "# The image's trainer beside host builds and PyTorch"
  echo
  echo "- Date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "- Machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; AVX-512:" \
    "$(grep -qw avx512f /proc/cpuinfo && echo yes || echo no); load average before:" \
    "$load_before (a shared machine: compare the ratios, not the absolute figures)"
  echo "- Command: \`bash bench/image_speed/run.sh $STEPS $ROUNDS\` (EPOCHS=$EPOCHS); image" \
    "\`$IMAGE\`, its \`/usr/local/bin/tj-trainer\` copied out and run on the host"
  echo "- Every program: \`$common --threads N\`; images/s of the last epoch, median of" \
    "$ROUNDS rounds, the programs alternating within each round"
  echo "- CPU targets this machine runs: $targets"
  echo "- PyTorch: $torch_build, PyPI's build" \
    "(hack/pytorch.sh), \`bench/train_cpu/pytorch_seeds.py\`: the same model and recipe"
  echo
  echo "| program | images/s (median) | rounds |"
  echo "|---|---:|---|"
  for i in "${!runs[@]}"; do
    printf '| %s | %.0f | %s |\n' "${runs[$i]%%|*}" "${med[$i]}" "$(paste -sd' ' "$work/run-$i")"
  done
  echo
  echo "| ratio | value | wanted |"
  echo "|---|---:|---|"
  echo "| image / host -march=native, 2 threads | $(ratio "image, 2 threads" "host -march=native, 2 threads") | >= 0.9 |"
  echo "| AVX2 target / AVX-512 target, 1 thread | $(ratio "image, TJ_CPU_TARGET=avx2, 1 thread" "image, TJ_CPU_TARGET=avx512, 1 thread") | >= 0.6 (n/a: this CPU has no AVX-512) |"
  echo "| SSE4 target / PyTorch, 1 thread | $(ratio "image, TJ_CPU_TARGET=sse4, 1 thread" "PyTorch $torch_version, 1 thread") | >= 1 |"
  echo "| image / PyTorch, 2 threads | $(ratio "image, 2 threads" "PyTorch $torch_version, 2 threads") | |"
} >"$OUT"
cat "$OUT"
