#!/usr/bin/env bash
# The effect of --allreduce-dtype bfloat16 on accuracy: 2 workers x 1 thread, 64 images each,
# whole epochs, float32 and bfloat16 on the wire, for several seeds; the test-set accuracy
# and loss after EPOCHS epochs. Writes bench/train_ddp/BF16_ACCURACY.md.
#   EPOCHS=5 SEEDS="1 2 3" bash bench/train_ddp/bf16_accuracy.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
EPOCHS=${EPOCHS:-5}
SEEDS=${SEEDS:-1 2 3}
TRAINER=${TRAINER:-build/bin/tj-trainer}
OUT=bench/train_ddp/BF16_ACCURACY.md
[ -x "$TRAINER" ] || { echo "build first: make build" >&2; exit 1; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() { # SEED DTYPE
  local p0 p1
  p0=$(port) p1=$(port)
  tfc() { echo "{\"cluster\":{\"worker\":[\"localhost:$p0\",\"localhost:$p1\"]},\"task\":{\"type\":\"worker\",\"index\":$1}}"; }
  local f=(--epochs "$EPOCHS" --seed "$1" --batch-size 64 --threads 1 --allreduce-dtype "$2")
  TJ_RENDEZVOUS_KEY=bench TF_CONFIG=$(tfc 1) "$TRAINER" "${f[@]}" >"$tmp/$1.$2.w1" &
  TJ_RENDEZVOUS_KEY=bench TF_CONFIG=$(tfc 0) "$TRAINER" "${f[@]}" >"$tmp/$1.$2.w0"
  wait
}
get() { grep '"train_end"' "$1" | sed -E "s/.*\"$2\": ?\"?([0-9a-f.e-]+).*/\1/"; }
{
  echo "# float32 vs bfloat16 all-reduce: accuracy after $EPOCHS epochs"
  echo
  echo "- Date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "- Machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
  echo "- Command: \`EPOCHS=$EPOCHS SEEDS=\"$SEEDS\" bash bench/train_ddp/bf16_accuracy.sh\`; 2 workers x 1 thread, 64 images each (global batch 128), whole epochs of Fashion-MNIST"
  echo
  echo "| seed | float32 test accuracy | bfloat16 test accuracy | float32 test loss | bfloat16 test loss | ranks equal (f32, bf16) |"
  echo "|---:|---:|---:|---:|---:|---|"
} >"$OUT"
for seed in $SEEDS; do
  run "$seed" float32
  run "$seed" bfloat16
  eq() { [ "$(get "$tmp/$seed.$1.w0" weights_sha256)" = "$(get "$tmp/$seed.$1.w1" weights_sha256)" ] && echo yes || echo NO; }
  printf "| %s | %.4f | %.4f | %.4f | %.4f | %s, %s |\n" "$seed" \
    "$(get "$tmp/$seed.float32.w0" test_accuracy)" "$(get "$tmp/$seed.bfloat16.w0" test_accuracy)" \
    "$(get "$tmp/$seed.float32.w0" test_loss)" "$(get "$tmp/$seed.bfloat16.w0" test_loss)" \
    "$(eq float32)" "$(eq bfloat16)" >>"$OUT"
done
cat "$OUT"
