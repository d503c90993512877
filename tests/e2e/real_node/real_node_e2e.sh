#!/usr/bin/env bash
# The real node (TJ_NODE=containerd: kubelet, containerd, runc, CNI, cluster DNS) end to end:
#   - `kubectl get node -o wide` shows containerd as the runtime;
#   - the operator runs in-cluster from localhost/tj-operator (make images) through the chart,
#     and the chart's `helm test` passes (its pod reads /metrics through the Service);
#   - the example job, scaled down, runs as containers of localhost/tj-trainer-cpu: the pods
#     find each other by their DNS names (TF_CONFIG), write to the claim as uid 65532, and
#     the job ends Succeeded with an evaluation;
#   - on a running trainer pod, `kubectl logs`, `exec` and `port-forward` (its /status) work;
#   - `hack/local-cluster.sh down` leaves no process, mount, link, network namespace, iptables
#     rule, changed sysctl or kubepods cgroup behind (machine_state.sh, before and after).
# Usage: real_node_e2e.sh REPO_ROOT BUILD_DIR. Exit 77 (skipped) without root, the images or
# Helm, unless CI / TJ_REQUIRE_CLUSTER / TJ_REQUIRE_HELM is set.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../../support/cluster_e2e.sh
. "$1/tests/support/cluster_e2e.sh" "$1" "$2" real-node-e2e-cluster
export TJ_NODE=containerd  # this test's node, whatever cluster_e2e.sh chose for the others
# shellcheck source=machine_state.sh
. "$HERE/machine_state.sh"
[ "$(id -u)" -eq 0 ] || skip "the real node needs root"
HELM=$("$ROOT/hack/helm.sh" --path) || skip "no Helm (hack/helm.sh could not fetch it)"
"$ROOT/hack/local-cluster.sh" build >/dev/null || skip "no Kubernetes binaries"
export CONTAINERS_CONF=${TJ_CACHE_DIR:-$HOME/.cache/tj-operator}/images/containers.conf
for img in $("$ROOT/hack/images.sh" names); do
  podman image exists "$img" 2>/dev/null || skip "no image $img (make images)"
done
VERSION=$("$ROOT/hack/images.sh" names | sed -n 's#^localhost/tj-operator:##p')

volatile_sysctls
machine_state >"$BUILD/real-node-before.txt"
cluster_down_checked=0
cleanup() {
  local rc=$?
  if [ $rc -ne 0 ] && [ "$cluster_down_checked" = 0 ]; then
    echo "--- operator log"; kubectl -n tj-system logs deploy/tj-operator --tail=30 || true
    echo "--- pods"; kubectl get pods -A -o wide || true
    echo "--- kubelet log"; tail -n 30 "$TJ_LOCAL_CLUSTER_DIR/logs/kubelet.log" || true
  fi
  "$ROOT/hack/local-cluster.sh" down >/dev/null 2>&1 || true
  rm -f "$VOLATILE_FILE"
}
trap cleanup EXIT
export KUBECONFIG
KUBECONFIG=$("$ROOT/hack/local-cluster.sh" up | tail -n1)
step "cluster up"
runtime=$(kubectl get node local-node -o jsonpath='{.status.nodeInfo.containerRuntimeVersion}')
case "$runtime" in containerd://*) echo "ok   node runtime $runtime" ;;
  *) echo "FAIL node runtime '$runtime', expected containerd://"; exit 1 ;; esac
kubectl get node -o wide

# shellcheck disable=SC2016  # $(POD_IP) is for Kubernetes to expand in the pod
"$HELM" install tj-operator "$ROOT/helm/tj-operator" --namespace tj-system --create-namespace \
  --set bindAddress='$(POD_IP)' --wait --timeout 180s >/dev/null
image=$(kubectl -n tj-system get pods -l app.kubernetes.io/name=tj-operator \
  -o jsonpath='{.items[0].status.containerStatuses[0].image}')
[ "$image" = "localhost/tj-operator:$VERSION" ] ||
  { echo "FAIL the operator runs image '$image'"; exit 1; }
echo "ok   the operator runs in-cluster from $image (Ready)"
# The chart's own check, as an admin runs it: a pod reads /metrics through the metrics
# Service (cluster DNS, kube-proxy's Service routing).
if ! out=$("$HELM" test tj-operator -n tj-system --timeout 120s 2>&1); then
  echo "$out"
  echo "--- test pod"; kubectl -n tj-system logs tj-operator-test-metrics 2>&1 | tail -n 20 || true
  kubectl -n tj-system get svc,endpoints,pods -o wide || true
  echo "FAIL helm test tj-operator"; exit 1
fi
echo "ok   helm test: $(kubectl -n tj-system logs tj-operator-test-metrics 2>/dev/null | tail -n1)"

NS=real-node-e2e
kubectl create namespace "$NS" >/dev/null
# The example with short epochs, so that it runs long enough to look at and not longer.
sed 's/--epochs, "3"/--epochs, "3", --steps-per-epoch, "200"/' \
  "$ROOT/manifests/examples/fmnist.yaml" | kubectl -n "$NS" apply -f - >/dev/null
# kubectl wait fails at once on a pod that does not exist yet: first wait for the operator to
# make it.
for _ in $(seq 1 60); do
  kubectl -n "$NS" get pod fmnist-worker-0 >/dev/null 2>&1 && break
  sleep 1
done
kubectl -n "$NS" wait --for=condition=Ready pod/fmnist-worker-0 --timeout=180s >/dev/null
step "worker 0 Ready"
# The log is read into a variable before grep: with pipefail, `kubectl logs | grep -q` fails
# whenever grep exits on its match before kubectl has written the rest (SIGPIPE).
logs=""
for _ in $(seq 1 120); do
  logs=$(kubectl -n "$NS" logs fmnist-worker-0 2>/dev/null || true)
  grep -q '"event":"backup_saved"' <<<"$logs" && break
  sleep 1
done
grep -q '"event":"backup_saved"' <<<"$logs" ||
  { echo "FAIL kubectl logs shows no backup_saved event"; tail <<<"$logs"; exit 1; }
echo "ok   kubectl logs: the chief's events"
uid=$(kubectl -n "$NS" exec fmnist-worker-0 -- id -u)
[ "$uid" = 65532 ] || { echo "FAIL kubectl exec: uid '$uid'"; exit 1; }
peer=fmnist-worker-1.fmnist.$NS.svc
kubectl -n "$NS" exec fmnist-worker-0 -- getent hosts "$peer" ||
  { echo "FAIL $peer does not resolve in the pod"; exit 1; }
echo "ok   kubectl exec: uid 65532, and $peer resolves"
port=$(kubectl -n "$NS" get pod fmnist-worker-0 \
  -o jsonpath='{.spec.containers[0].env[?(@.name=="TJ_STATUS_PORT")].value}')
local_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
kubectl -n "$NS" port-forward pod/fmnist-worker-0 "$local_port:$port" >"$BUILD/real-node-pf.log" 2>&1 &
pf=$!
status=""
for _ in $(seq 1 50); do
  status=$(curl -fsS --max-time 2 "http://127.0.0.1:$local_port/status" 2>/dev/null) && break
  sleep 0.2
done
kill "$pf" 2>/dev/null || true
grep -q '"epoch"' <<<"$status" ||
  { echo "FAIL kubectl port-forward to /status: '$status'"; cat "$BUILD/real-node-pf.log"; exit 1; }
echo "ok   kubectl port-forward: /status $status"

kubectl -n "$NS" wait --for=condition=Succeeded trainingjob/fmnist --timeout=600s >/dev/null ||
  { echo "FAIL fmnist did not succeed"; kubectl -n "$NS" describe trainingjob fmnist | tail -20; exit 1; }
evaluation=$(kubectl -n "$NS" get trainingjob fmnist -o jsonpath='{.status.evaluation}')
[ -n "$evaluation" ] || { echo "FAIL no evaluation in the status"; exit 1; }
step "fmnist Succeeded; evaluation $evaluation"

# The declared-model example as a user runs it: the Keras model from a ConfigMap, the dataset
# written by the pods' init containers (tj-dataset of the trainer image) on the datasets claim.
# Scaled down: one epoch of 4 steps of 16, part of Fashion-MNIST, small CPU requests.
kubectl -n "$NS" create configmap resnet20-model \
  --from-file=model.json="$ROOT/examples/models/resnet20.json" >/dev/null
sed -e 's/--epochs, "3", --batch-size, "64"/--epochs, "1", --steps-per-epoch, "4", --batch-size, "16"/' \
    -e 's/--epochs, "3", --threads/--epochs, "1", --threads/' \
    -e 's/--split, train,/--split, train, --limit, "2048",/' \
    -e 's/--split, test,/--split, test, --limit, "256",/' \
    -e 's/cpu: "1", memory: 512Mi/cpu: 100m, memory: 512Mi/' \
    -e 's/cpu: 500m, memory: 512Mi/cpu: 100m, memory: 512Mi/' \
  "$ROOT/manifests/examples/declared-model.yaml" | kubectl -n "$NS" apply -f - >/dev/null
if ! kubectl -n "$NS" wait --for=condition=Succeeded trainingjob/resnet20 --timeout=600s \
    >/dev/null; then
  echo "FAIL the declared-model example did not succeed"
  kubectl -n "$NS" describe trainingjob resnet20 | tail -20
  for c in dataset-train dataset-test trainer; do
    echo "--- resnet20-worker-0 $c"; kubectl -n "$NS" logs resnet20-worker-0 -c "$c" | tail -5
  done
  exit 1
fi
declared_eval=$(kubectl -n "$NS" get trainingjob resnet20 -o jsonpath='{.status.evaluation}')
[ -n "$declared_eval" ] || { echo "FAIL no evaluation in the declared model's status"; exit 1; }
grep -q '"examples":2048' <<<"$(kubectl -n "$NS" logs resnet20-worker-0 -c dataset-train)$(
  kubectl -n "$NS" logs resnet20-worker-1 -c dataset-train)" ||
  { echo "FAIL no init container converted the training set"; exit 1; }
step "declared-model example Succeeded (ResNet-20, TFRecord from init containers):" \
  "evaluation $declared_eval"

"$ROOT/hack/local-cluster.sh" down >/dev/null
cluster_down_checked=1
machine_state >"$BUILD/real-node-after.txt"
if ! compare_machine_state "$BUILD/real-node-before.txt" "$BUILD/real-node-after.txt"; then
  echo "FAIL hack/local-cluster.sh down changed the machine (above)"; exit 1
fi
echo "ok   down left no process, mount, link, netns, iptables rule, sysctl or cgroup behind"
rm -rf "$TJ_LOCAL_CLUSTER_DIR" "$BUILD"/real-node-*.txt "$BUILD/real-node-pf.log"
