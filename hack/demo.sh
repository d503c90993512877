#!/usr/bin/env bash
# make demo: the whole path a user takes, on a real local cluster (hack/local-cluster.sh:
# etcd, kube-apiserver, controller manager, scheduler, and a real node whose pods are
# containers of the images from `make images`; TJ_NODE=process: the node agent tj-process-node
# runs them as processes instead):
# helm install the operator from the chart, kubectl apply --server-side the example TrainingJob
# (2 workers + an evaluator on Fashion-MNIST), follow its progress, print `kubectl get tj`
# and the final evaluation. The cluster stays up afterwards so you can look around;
# `hack/local-cluster.sh down` stops it (TJ_DEMO_DOWN=1 stops it at the end of the demo).
# TJ_DEMO_TIMEOUT (seconds, default 900) bounds the wait for the job.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export TJ_BUILD_DIR=${TJ_BUILD_DIR:-$ROOT/build}
NS=${DEMO_NAMESPACE:-demo}
TIMEOUT=${TJ_DEMO_TIMEOUT:-900}
if [ -z "${TJ_NODE:-}" ]; then
  if [ "$(id -u)" -eq 0 ]; then TJ_NODE=containerd; else TJ_NODE=process; fi
fi
export TJ_NODE
if [ "$TJ_NODE" = process ]; then
  for b in tj-process-node tj-operator tj-trainer; do
    [ -x "$TJ_BUILD_DIR/bin/$b" ] || { echo "demo: $TJ_BUILD_DIR/bin/$b is missing: run make build" >&2; exit 1; }
  done
fi
# The kubectl of the cluster's own Kubernetes release first on PATH (and KUBECONFIG).
eval "$(hack/local-cluster.sh env)"
for tool in kubectl python3; do
  command -v "$tool" >/dev/null || { echo "demo: '$tool' is missing: run make deps" >&2; exit 1; }
done
case "$TIMEOUT" in ''|*[!0-9]*) echo "demo: TJ_DEMO_TIMEOUT=$TIMEOUT: expected seconds" >&2; exit 2 ;; esac
say() { printf '\n== %s\n' "$*"; }
cluster_up=0
finish() {
  local rc=$?
  if [ "$cluster_up" = 1 ] && [ "${TJ_DEMO_DOWN:-0}" = 1 ]; then
    say "Stopping the local cluster (TJ_DEMO_DOWN=1)"
    hack/local-cluster.sh down || true
  elif [ "$cluster_up" = 1 ] && [ "$rc" -ne 0 ]; then
    echo "demo: failed (exit $rc); the local cluster is still up: hack/local-cluster.sh down stops it" >&2
  fi
}
trap finish EXIT

say "Local cluster, node: $TJ_NODE (the first run builds Kubernetes and caches it: half an hour or more on 2 cores)"
export KUBECONFIG
KUBECONFIG=$(hack/local-cluster.sh up | tail -n1)
cluster_up=1
kubectl version 2>/dev/null | grep -E '^(Client|Server) Version' || true
kubectl get nodes -o wide

say "helm install tj-operator (the operator runs in-cluster under the chart's RBAC)"
HELM=$(hack/helm.sh --path)
# shellcheck disable=SC2016  # $(POD_IP) is for Kubernetes to expand in the pod
if ! "$HELM" upgrade --install tj-operator helm/tj-operator --namespace tj-system \
    --create-namespace --set bindAddress='$(POD_IP)' --wait --timeout 180s >/dev/null; then
  echo "demo: the operator did not become ready within 180s; its pod and last log lines:" >&2
  kubectl -n tj-system get pods -l app.kubernetes.io/name=tj-operator >&2 || true
  kubectl -n tj-system logs deploy/tj-operator --tail 5 >&2 || true
  exit 1
fi
kubectl -n tj-system get deploy tj-operator

say "kubectl apply --server-side -f manifests/examples/fmnist.yaml (namespace $NS)"
kubectl get namespace "$NS" >/dev/null 2>&1 || kubectl create namespace "$NS" >/dev/null
# The directory the node agent binds the example's claim to (empty when there is none).
claim_dir() {
  local pv
  pv=$(kubectl -n "$NS" get pvc fmnist-data -o jsonpath='{.spec.volumeName}' 2>/dev/null || true)
  if [ -n "$pv" ]; then
    kubectl get pv "$pv" -o jsonpath='{.spec.hostPath.path}' 2>/dev/null || true
  fi
}
# A run starts from nothing: a previous run's pods would answer to the new pods' names, and
# its checkpoints and backup (on the same claim) would be evaluated or resumed.
if kubectl -n "$NS" get trainingjob fmnist >/dev/null 2>&1; then
  echo "removing the previous demo run (job, pods, and what it wrote on the claim)"
  kubectl -n "$NS" delete trainingjob fmnist --ignore-not-found --wait=true --timeout=120s >/dev/null
  kubectl -n "$NS" wait --for=delete pod -l tjo.dev/job-name=fmnist --timeout=120s \
    >/dev/null 2>&1 || true
fi
old_dir=$(claim_dir)
cluster_dir=$(cd "$(dirname "$KUBECONFIG")" && pwd)
case "$old_dir" in "$cluster_dir"/*) rm -rf "${old_dir:?}"/* ;; esac
kubectl -n "$NS" apply --server-side -f manifests/examples/fmnist.yaml

say "Training (status.progress, as the operator reads it from the chief's /status)"
# One line whenever something changes: state (status.state, what `kubectl get tj` shows),
# epoch, the epoch's loss and accuracy over the global batch, throughput, gang restarts.
progress_line() {
  python3 -c '
import json, sys
try:
    st = json.load(sys.stdin).get("status", {})
except ValueError:
    sys.exit(0)
p = st.get("progress", {})
def num(k, f):
    v = p.get(k)
    return format(v, f) if isinstance(v, (int, float)) else "-"
reason = ""
for c in st.get("conditions", []):
    if c.get("type") == "Running" and c.get("status") == "True" and c.get("reason") != "JobRunning":
        reason = " (" + c.get("reason", "") + ")"
print("state %-10s epoch %s/%s  step %-5s  loss %-6s  accuracy %-6s  images/s %-6s  restarts %s" % (
    (st.get("state") or "Pending") + reason, p.get("epoch", "-"), p.get("totalEpochs", "-"),
    p.get("step", "-"), num("loss", ".4f"), num("accuracy", ".4f"),
    num("imagesPerSecond", ".0f"), st.get("restartCount", 0)))'
}
deadline=$((SECONDS + TIMEOUT))
last=""
state=""
while [ $SECONDS -lt $deadline ]; do
  json=$(kubectl -n "$NS" get trainingjob fmnist -o json 2>/dev/null || true)
  state=$(printf '%s' "$json" | python3 -c \
    'import json,sys; print(json.load(sys.stdin).get("status",{}).get("state",""))' 2>/dev/null || true)
  line=$(printf '%s' "$json" | progress_line)
  if [ -n "$line" ] && [ "$line" != "$last" ]; then
    echo "$(date -u +%H:%M:%S) $line"
    last=$line
  fi
  case "$state" in Succeeded|Failed) break ;; esac
  sleep 2
done

say "kubectl get tj"
kubectl -n "$NS" get trainingjob
say "Final evaluation (status.evaluation: the evaluator on the last checkpoint)"
kubectl -n "$NS" get trainingjob fmnist -o json | python3 -c '
import json, sys
e = json.load(sys.stdin).get("status", {}).get("evaluation")
if not e:
    print("(none yet)")
else:
    print("checkpoint %s  epoch %s  test loss %.4f  test accuracy %.4f" % (
        e.get("checkpoint"), e.get("epoch"), e.get("loss", float("nan")),
        e.get("accuracy", float("nan"))))'
case "$state" in
  Succeeded) ;;
  Failed) say "The job failed: conditions and events"
     kubectl -n "$NS" describe trainingjob fmnist | tail -25
     exit 1 ;;
  *) say "The job did not finish within ${TIMEOUT}s (TJ_DEMO_TIMEOUT): conditions and events"
     kubectl -n "$NS" describe trainingjob fmnist | tail -25
     exit 1 ;;
esac

data_dir=$(claim_dir)
data_dir=${data_dir:-"(kubectl get pv)"}

cat <<EOT

== Where to look next (eval "\$(hack/local-cluster.sh env)": KUBECONFIG, and this kubectl first on PATH)
  kubectl -n $NS describe tj fmnist          # conditions and events
  kubectl -n $NS get pods -l tjo.dev/job-name=fmnist
  kubectl -n $NS logs fmnist-worker-0        # the chief's JSON events (epoch_end, backup_saved)
  kubectl -n $NS logs fmnist-evaluator-0     # the evaluations, one per checkpoint
  kubectl -n tj-system logs deploy/tj-operator
  ls $data_dir
                                             # backup/ checkpoints/ logs/ model/ of the job;
                                             # tensorboard --logdir $data_dir/logs
  README.md: Operations, Troubleshooting; docs/operator.md, docs/deploy.md
  hack/local-cluster.sh down                 # stop the cluster (all of its processes)
EOT
