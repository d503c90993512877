#!/usr/bin/env bash
# The demo job (manifests/examples/fmnist.yaml: 2 workers x 1 thread and an evaluator) as pods
# on the local cluster's real node, beside the same three programs as host processes on
# loopback: the trainer binary copied out of the same image, the same arguments, files in a
# temporary directory instead of the claim. Rounds alternate the two; the figure of a run is the
# chief's images/s of its last epoch (the first warms caches); each side's is the median of the
# rounds. Writes bench/pods_vs_processes/RESULTS.md.
#   bash bench/pods_vs_processes/run.sh [ROUNDS]
# Needs root, `make images`, and a local cluster with the operator installed, as `make demo`
# leaves it (the demo's namespace and claim are reused; the demo's job is deleted).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-3}
NS=${DEMO_NAMESPACE:-demo}
VERSION=$(sed -n 's/^project([^ ]* VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
IMAGE=${IMAGE:-localhost/tj-trainer-cpu:$VERSION}
OUT=bench/pods_vs_processes/RESULTS.md
eval "$(hack/local-cluster.sh env)"
hack/local-cluster.sh status >/dev/null ||
  { echo "pods_vs_processes: no local cluster: run make demo first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bash bench/image_speed/copy-trainer.sh "$IMAGE" "$work/tj-trainer"

# The demo job's arguments, from the manifest, so both sides run the same command.
manifest=manifests/examples/fmnist.yaml
worker_args=$(/usr/bin/python3 - "$manifest" <<'EOF'
import sys, yaml, shlex
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d.get("kind") == "TrainingJob":
        for role in ("Worker", "Evaluator"):
            c = d["spec"]["replicaSpecs"][role]["template"]["spec"]["containers"][0]
            print(shlex.join(c["args"]))
EOF
)
eval_args=$(sed -n 2p <<<"$worker_args")
worker_args=$(sed -n 1p <<<"$worker_args")

# Last epoch's images/s of a trainer's output (JSON lines on stdin).
ips() {
  grep '"epoch_end"' | tail -1 | sed -E 's/.*"images_per_sec": ?([0-9.]+).*/\1/' |
    xargs printf '%.0f\n'
}

claim_dir() {
  local pv
  pv=$(kubectl -n "$NS" get pvc fmnist-data -o jsonpath='{.spec.volumeName}')
  kubectl get pv "$pv" -o jsonpath='{.spec.hostPath.path}'
}

pods_run() {
  kubectl -n "$NS" delete trainingjob fmnist --ignore-not-found --wait=true --timeout=120s >/dev/null
  kubectl -n "$NS" wait --for=delete pod -l tjo.dev/job-name=fmnist --timeout=120s \
    >/dev/null 2>&1 || true
  local dir
  dir=$(claim_dir 2>/dev/null || true)
  [ -z "$dir" ] || rm -rf "${dir:?}"/*
  kubectl -n "$NS" apply --server-side -f "$manifest" >/dev/null
  kubectl -n "$NS" wait trainingjob/fmnist --for=jsonpath='{.status.state}'=Succeeded \
    --timeout=900s >/dev/null
  kubectl -n "$NS" logs fmnist-worker-0 -c trainer | ips
}

processes_run() {
  local p0 p1 pe key cluster d=$work/run
  port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
  p0=$(port); p1=$(port); pe=$(port)
  key=$(openssl rand -hex 16)
  rm -rf "$d" && mkdir -p "$d"
  cluster="{\"worker\":[\"127.0.0.1:$p0\",\"127.0.0.1:$p1\"],\"evaluator\":[\"127.0.0.1:$pe\"]}"
  tfc() { echo "{\"cluster\":$cluster,\"task\":{\"type\":\"$1\",\"index\":$2}}"; }
  # The manifest's /data paths, here.
  local wa=${worker_args//\/data/$d} ea=${eval_args//\/data/$d}
  # shellcheck disable=SC2086
  TF_CONFIG=$(tfc evaluator 0) TJ_RENDEZVOUS_KEY=$key "$work/tj-trainer" $ea >"$d/eval.log" 2>&1 &
  local ev=$!
  # shellcheck disable=SC2086
  TF_CONFIG=$(tfc worker 1) TJ_RENDEZVOUS_KEY=$key "$work/tj-trainer" $wa >"$d/w1.log" 2>&1 &
  local w1=$!
  # shellcheck disable=SC2086
  TF_CONFIG=$(tfc worker 0) TJ_RENDEZVOUS_KEY=$key "$work/tj-trainer" $wa >"$d/w0.log" 2>"$d/w0.err"
  wait "$w1"
  wait "$ev"
  ips <"$d/w0.log"
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
pods=() procs=()
for ((round = 1; round <= ROUNDS; round++)); do
  v=$(pods_run); pods+=("$v"); echo "round $round: pods: $v images/s" >&2
  v=$(processes_run); procs+=("$v"); echo "round $round: processes: $v images/s" >&2
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mp=$(median "${pods[@]}") mq=$(median "${procs[@]}")
ratio=$(awk -v a="$mp" -v b="$mq" 'BEGIN {printf "%.2f", a / b}')
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
{
  echo "# The demo job as pods vs as host processes"
  echo
  echo "\`bash bench/pods_vs_processes/run.sh $ROUNDS\` on $cpu, $(nproc) cores, Kubernetes"
  kubectl version -o json |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])' ||
    echo "(version unknown)"
  echo "with the real node (containerd, runc, CNI bridge). Load average before: $load_before;"
  echo "after: $load_after. The job: \`$manifest\` (2 workers x 1 thread, an evaluator,"
  echo "backups and checkpoints). Processes: the same three programs on loopback, the trainer"
  echo "binary copied out of \`$IMAGE\`, the same arguments. Figure: the chief's images/s in"
  echo "its last epoch; rounds alternate the two sides."
  echo
  echo "| round | pods | processes |"
  echo "|---|---|---|"
  for i in "${!pods[@]}"; do echo "| $((i + 1)) | ${pods[$i]} | ${procs[$i]} |"; done
  echo "| **median** | **$mp** | **$mq** |"
  echo
  echo "Pods reach **$ratio** of the processes' speed."
} >"$OUT"
cat "$OUT"
