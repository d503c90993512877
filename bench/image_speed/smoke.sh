#!/usr/bin/env bash
# CI's guard on the shipped trainer's speed: tj-trainer copied out of the CPU image against the
# host build, the same short run, alternating, 3 rounds. Fails when the median ratio image/host
# is below 0.5: a pathological ratio (an image whose kernels lost their SIMD targets was 27
# times slower), not a timing assertion; bench/image_speed/run.sh measures the real ratios.
#   bash bench/image_speed/smoke.sh [IMAGE] [HOST_TRAINER]
set -euo pipefail
cd "$(dirname "$0")/../.."
VERSION=$(sed -n 's/^project([^ ]* VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
image=${1:-localhost/tj-trainer-cpu:$VERSION}
host=${2:-build/bin/tj-trainer}
[ -x "$host" ] || { echo "image-speed smoke: no host build at $host: make build" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bash bench/image_speed/copy-trainer.sh "$image" "$work/tj-trainer"

ips() {  # the last epoch's images/s of one run of $1
  "$1" --epochs 2 --steps-per-epoch 40 --batch-size 64 --threads 2 | grep '"epoch_end"' |
    tail -1 | sed -E 's/.*"images_per_sec": ?([0-9.]+).*/\1/'
}
ratios=()
for round in 1 2 3; do
  a=$(ips "$work/tj-trainer")
  b=$(ips "$host")
  ratios+=("$(python3 -c "print(f'{$a / $b:.3f}')")")
  echo "image-speed smoke: round $round: image $a, host $b images/s"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -g | sed -n 2p)
echo "image-speed smoke: image/host median ratio $median (rounds: ${ratios[*]})"
if python3 -c "import sys; sys.exit(0 if $median >= 0.5 else 1)"; then
  echo "image-speed smoke: ok (>= 0.5)"
else
  echo "image-speed smoke: FAILED: the image's tj-trainer ($image) trains at $median of the" \
    "host build's speed (< 0.5); check the CPU target its start line names" >&2
  exit 1
fi
