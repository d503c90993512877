#!/usr/bin/env bash
# make demo-local: trains the seeds' model on Fashion-MNIST with two tj-trainer workers and a
# sidecar evaluator on this machine (TF_CONFIG on loopback, as in TensorFlow's
# MultiWorkerMirroredStrategy tutorial), with backups, checkpoints, TensorBoard logs and an
# exported model under .demo/. No Kubernetes: `make demo` runs the same on the local cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
TRAINER=build/bin/tj-trainer
EPOCHS=${EPOCHS:-3}
DEMO=.demo
rm -rf "$DEMO" && mkdir -p "$DEMO"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
P0=$(port); P1=$(port); PE=$(port)
cluster="{\"worker\":[\"localhost:$P0\",\"localhost:$P1\"],\"evaluator\":[\"localhost:$PE\"]}"
tfc() { echo "{\"cluster\":$cluster,\"task\":{\"type\":\"$1\",\"index\":$2}}"; }
common=(--epochs "$EPOCHS" --threads 1 --backup-dir "$DEMO/backup" --save-freq 100
        --checkpoint-dir "$DEMO/checkpoints" --log-dir "$DEMO/logs")
key=$(openssl rand -hex 16)

echo "== Training $EPOCHS epochs: 2 workers (1 thread each) + 1 evaluator, rendezvous key set"
TF_CONFIG=$(tfc evaluator 0) TJ_RENDEZVOUS_KEY=$key $TRAINER "${common[@]}" --eval-poll-interval 0.5 \
  > "$DEMO/evaluator.log" 2> "$DEMO/evaluator.err" &
eval_pid=$!
TF_CONFIG=$(tfc worker 1) TJ_RENDEZVOUS_KEY=$key $TRAINER "${common[@]}" \
  > "$DEMO/worker-1.log" 2> "$DEMO/worker-1.err" &
w1_pid=$!
TF_CONFIG=$(tfc worker 0) TJ_RENDEZVOUS_KEY=$key $TRAINER "${common[@]}" --export-dir "$DEMO/model" \
  --status-port 0 2> "$DEMO/worker-0.err" | tee "$DEMO/worker-0.log" | grep --line-buffered -E '"epoch_end"|"train_end"'
wait $w1_pid
wait $eval_pid
echo
echo "== Evaluator (follows the checkpoints):"
cat "$DEMO/evaluator.log"
echo
echo "== Both workers hold the same weights:"
grep -ho '"weights_sha256":"[0-9a-f]*"' "$DEMO/worker-0.log" "$DEMO/worker-1.log"
echo
echo "== The exported model, evaluated on its own:"
$TRAINER --evaluate-only --model "$DEMO/model"
echo
echo "Next: logs in $DEMO/*.log; TensorBoard: tensorboard --logdir $DEMO/logs;"
echo "      checkpoints in $DEMO/checkpoints; the exported model in $DEMO/model."
