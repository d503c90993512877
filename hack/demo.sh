#!/usr/bin/env bash
# make demo: the whole path a user takes, on a real local control plane (hack/local-cluster.sh:
# etcd, kube-apiserver, controller manager, scheduler and the node agent tj-local-node):
# helm install the operator from the chart, kubectl apply the example TrainingJob
# (2 workers + an evaluator on Fashion-MNIST), follow its progress, print `kubectl get tj`
# and the final evaluation. The cluster stays up afterwards so you can look around;
# `hack/local-cluster.sh down` stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export TJ_BUILD_DIR=${TJ_BUILD_DIR:-$ROOT/build}
NS=${DEMO_NAMESPACE:-demo}
for b in tj-local-node tj-operator tj-trainer; do
  [ -x "$TJ_BUILD_DIR/bin/$b" ] || { echo "demo: $TJ_BUILD_DIR/bin/$b is missing: run make build" >&2; exit 1; }
done
say() { printf '\n== %s\n' "$*"; }

say "Local cluster (the first run builds Kubernetes from Debian's source package: 7-9 minutes)"
export KUBECONFIG
KUBECONFIG=$(hack/local-cluster.sh up | tail -n1)
kubectl get nodes

say "helm install tj-operator (the operator runs in-cluster under the chart's RBAC)"
HELM=$(hack/helm.sh --path)
"$HELM" upgrade --install tj-operator helm/tj-operator --namespace tj-system --create-namespace \
  --set bindAddress='$(POD_IP)' --wait --timeout 180s >/dev/null
kubectl -n tj-system get deploy tj-operator

say "kubectl apply -f manifests/examples/fmnist.yaml (namespace $NS)"
kubectl get namespace "$NS" >/dev/null 2>&1 || kubectl create namespace "$NS" >/dev/null
kubectl -n "$NS" delete trainingjob fmnist --ignore-not-found --wait=true >/dev/null
kubectl -n "$NS" apply -f manifests/examples/fmnist.yaml

say "Training (status.progress, as the operator reads it from the chief)"
deadline=$((SECONDS + 900))
last=""
state=""
while [ $SECONDS -lt $deadline ]; do
  state=$(kubectl -n "$NS" get trainingjob fmnist \
    -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type} {end}' 2>/dev/null || true)
  line=$(kubectl -n "$NS" get trainingjob fmnist -o jsonpath='state: {.status.conditions[-1:].type}  epoch {.status.progress.epoch}/{.status.progress.totalEpochs}  loss {.status.progress.loss}  accuracy {.status.progress.accuracy}  restarts {.status.restartCount}' 2>/dev/null || true)
  [ "$line" != "$last" ] && echo "$line" && last=$line
  case "$state" in *Succeeded*|*Failed*) break ;; esac
  sleep 2
done

say "kubectl get tj"
kubectl -n "$NS" get trainingjob
say "Final evaluation (status.evaluation)"
kubectl -n "$NS" get trainingjob fmnist -o jsonpath='{.status.evaluation}'; echo
case "$state" in
  *Succeeded*) ;;
  *) say "The job did not succeed: conditions and events"
     kubectl -n "$NS" describe trainingjob fmnist | tail -25
     exit 1 ;;
esac

cat <<EOT

== Where to look next (export KUBECONFIG=$KUBECONFIG)
  kubectl -n $NS describe tj fmnist          # conditions and events
  kubectl -n $NS get pods -l tjo.dev/job-name=fmnist
  kubectl -n $NS logs fmnist-worker-0        # the chief's JSON events
  kubectl -n $NS logs fmnist-evaluator-0     # the evaluations
  kubectl -n tj-system logs deploy/tj-operator
  kubectl get pv                             # the claim's directory: backups, checkpoints,
                                             # TensorBoard logs (tensorboard --logdir <dir>/logs)
  hack/local-cluster.sh down                 # stop the cluster
EOT
