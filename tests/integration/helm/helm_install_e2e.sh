#!/usr/bin/env bash
# `helm install` on the local cluster runs the operator for real and the example job to
# Succeeded under the chart's RBAC: on the real node the operator runs from its image
# (localhost/tj-operator), on the process node the node agent runs BUILD/bin/tj-operator, both
# with the ServiceAccount token, CA and KUBERNETES_SERVICE_* a kubelet gives them. Then, with
# its ClusterRoleBinding deleted, the operator is refused (a missing permission shows as a
# failure, not as silent success).
# Usage: helm_install_e2e.sh REPO_ROOT BUILD_DIR. Exit 77 (skipped) when Helm or the
# cluster's binaries cannot be had, unless CI / TJ_REQUIRE_CLUSTER / TJ_REQUIRE_HELM is set.
set -euo pipefail
# shellcheck source=../../support/cluster_e2e.sh
. "$1/tests/support/cluster_e2e.sh" "$1" "$2" helm-e2e-cluster
e2e_prerequisites
# shellcheck disable=SC2119  # no files to remove on success: its arguments are optional
e2e_cleanup_on_exit
e2e_cluster_up
step "cluster up"

# shellcheck disable=SC2016  # $(POD_IP) is for Kubernetes to expand in the pod
"$HELM" install tj-operator "$ROOT/helm/tj-operator" --namespace tj-system --create-namespace \
  --set bindAddress='$(POD_IP)' --wait --timeout 120s >/dev/null
step "helm install: operator Ready (its readiness probe /readyz passed)"
# The operator's process: the image's program in a container on the real node, the build's
# binary on the process node.
exe=$BUILD/bin/tj-operator
[ "$TJ_NODE" != containerd ] || exe=/usr/local/bin/tj-operator
pid=""
for p in $(pgrep -f "^$exe" || true); do pid=$p; done
[ -n "$pid" ] || { echo "FAIL no tj-operator process"; exit 1; }
if tr '\0' '\n' <"/proc/$pid/environ" | grep -q '^KUBECONFIG='; then
  echo "FAIL the operator pod has a KUBECONFIG: it must run in-cluster"; exit 1
fi
tr '\0' '\n' <"/proc/$pid/environ" | grep -q '^KUBERNETES_SERVICE_HOST=.' ||
  { echo "FAIL no KUBERNETES_SERVICE_HOST in the operator's environment"; exit 1; }
echo "ok   the operator runs in-cluster (no KUBECONFIG, KUBERNETES_SERVICE_HOST set)"
kubectl -n tj-system get lease tj-operator-leader >/dev/null
echo "ok   it holds the leader Lease in tj-system"

kubectl create namespace helm-e2e >/dev/null
kubectl -n helm-e2e apply -f "$ROOT/manifests/examples/fmnist.yaml" >/dev/null
deadline=$((SECONDS + 600))
state=""
while [ $SECONDS -lt $deadline ]; do
  state=$(kubectl -n helm-e2e get trainingjob fmnist \
    -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type} {end}' 2>/dev/null || true)
  case "$state" in *Succeeded*|*Failed*) break ;; esac
  sleep 2
done
step "job conditions: $state"
case "$state" in *Succeeded*) echo "ok   fmnist Succeeded under the chart's RBAC" ;;
  *) echo "FAIL fmnist did not succeed"; exit 1 ;; esac
echo "     evaluation: $(kubectl -n helm-e2e get trainingjob fmnist -o jsonpath='{.status.evaluation}')"

# Without its ClusterRoleBinding the operator is refused by the API server.
kubectl delete clusterrolebinding tj-operator-manager >/dev/null
[ "$(kubectl auth can-i --as=system:serviceaccount:tj-system:tj-operator list pods -A)" = no ]
sed 's/name: fmnist$/name: fmnist-denied/' "$ROOT/manifests/examples/fmnist.yaml" |
  kubectl -n helm-e2e apply -f - >/dev/null 2>&1 || true
forbidden=false
for _ in $(seq 1 60); do
  # Not `kubectl logs | grep -q`: with pipefail, grep's early exit fails the pipe (SIGPIPE).
  if grep -qi 'forbidden' <<<"$(kubectl -n tj-system logs deploy/tj-operator 2>/dev/null)"; then
    forbidden=true; break
  fi
  sleep 1
done
if ! $forbidden; then
  echo "FAIL no Forbidden in the operator's log after its ClusterRoleBinding was deleted"; exit 1
fi
echo "ok   without its RBAC the operator is refused (403 Forbidden in its log)"
if [ -n "$(kubectl -n helm-e2e get pods -l tjo.dev/job-name=fmnist-denied -o name)" ]; then
  echo "FAIL pods were created without RBAC"; exit 1
fi
echo "ok   and it created no pod for the new job"
step "done"
echo "helm_install_e2e: 1 passed, 0 failed"
