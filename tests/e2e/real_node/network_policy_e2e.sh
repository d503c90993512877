#!/usr/bin/env bash
# The job's NetworkPolicy, made by the operator, enforced on the real node
# (TJ_NETWORK_POLICY=kube-router: kube-router's network policy controller beside the kubelet,
# hack/network-policy.sh):
#   - the chart is installed with its defaults (every namespace watched, networkPolicy.enabled
#     on); the job runs in a namespace the chart was never told of, which enforces the Pod
#     Security level restricted (the job's pods, as the operator makes them, pass it), and the
#     operator gives the job its policy fmnist-pods there, owned by the job;
#   - while the example job trains (2 workers and an evaluator, real containers), every TCP
#     port its chief listens on (read from /proc/net/tcp* in the pod: the peer-health
#     responder and /status; the job's port, of the rendezvous and the ring's handshakes,
#     closed once the gang formed) is reached
#     from the job's other worker, and
#     from none of: a pod of another namespace, a pod of the job's namespace without the job's
#     label, a pod of the job's namespace labelled tjo.dev/job-name of another job (the attack
#     on a namespace-wide policy). The same stranger pod reaches the operator's metrics port (no policy selects the
#     operator), so its refusals are the policy's, not a broken pod network;
#   - the operator, in-cluster, reads the chief's /status through the policy (status.progress
#     fills), and the job trains to Succeeded with its evaluation;
#   - `hack/local-cluster.sh down` leaves no kube-router chain, ipset or process behind.
# Usage: network_policy_e2e.sh REPO_ROOT BUILD_DIR. Exit 77 (skipped) without root, the
# images, Helm or kube-router (hack/build-kubernetes.sh kube-router), unless CI /
# TJ_REQUIRE_CLUSTER / TJ_REQUIRE_HELM is set.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../../support/cluster_e2e.sh
. "$1/tests/support/cluster_e2e.sh" "$1" "$2" network-policy-e2e-cluster
export TJ_NODE=containerd TJ_NETWORK_POLICY=kube-router
# shellcheck source=machine_state.sh
. "$HERE/machine_state.sh"
e2e_prerequisites
"$ROOT/hack/build-kubernetes.sh" kube-router >/dev/null ||
  skip "no kube-router (hack/build-kubernetes.sh kube-router could not build it)"

volatile_sysctls
machine_state >"$BUILD/network-policy-before.txt"
e2e_cleanup_on_exit "$BUILD"/network-policy-*.txt "$VOLATILE_FILE"
e2e_cluster_up
step "cluster up, kube-router enforcing"

NS=np-jobs
OTHER=np-stranger
kubectl create namespace "$NS" >/dev/null
kubectl create namespace "$OTHER" >/dev/null
# The job's namespace at Pod Security level restricted, as docs/reliability.md advises: the
# operator's pods of the example job must pass it.
kubectl label namespace "$NS" pod-security.kubernetes.io/enforce=restricted >/dev/null
# The chart's defaults: every namespace watched, networkPolicy.enabled on.
# shellcheck disable=SC2016  # $(POD_IP) is for the kubelet to expand
"$HELM" install tj-operator "$ROOT/helm/tj-operator" --namespace tj-system --create-namespace \
  --set bindAddress='$(POD_IP)' --wait --timeout 180s >/dev/null

# Two pods that are not the job's, each with a shell to connect from (the trainer image).
client_pod() {  # client_pod NAMESPACE NAME
  kubectl -n "$1" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $2, labels: {${3:-app: client}}}
spec:
  terminationGracePeriodSeconds: 0
  securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: shell
      image: $("$ROOT/hack/images.sh" names | grep /tj-trainer-cpu:)
      command: [sleep, infinity]
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
      resources: {requests: {cpu: 10m, memory: 16Mi}}
EOF
}
client_pod "$OTHER" stranger
client_pod "$NS" neighbour
# A tenant's pod that claims to be another job's: the label is all a namespace-wide policy
# could check.
client_pod "$NS" impostor "tjo.dev/job-name: other"

sed 's/--epochs, "3"/--epochs, "3", --steps-per-epoch, "300"/' \
  "$ROOT/manifests/examples/fmnist.yaml" | kubectl -n "$NS" apply -f - >/dev/null
kubectl -n "$OTHER" wait --for=condition=Ready pod/stranger --timeout=120s >/dev/null
kubectl -n "$NS" wait --for=condition=Ready pod/neighbour pod/impostor --timeout=120s >/dev/null
# kubectl wait fails at once on a pod that does not exist yet: the operator makes them.
for _ in $(seq 1 60); do
  kubectl -n "$NS" get pod fmnist-worker-0 fmnist-worker-1 >/dev/null 2>&1 && break
  sleep 1
done
kubectl -n "$NS" wait --for=condition=Ready pod/fmnist-worker-0 pod/fmnist-worker-1 \
  --timeout=180s >/dev/null
step "the job's workers, a neighbour and an impostor in $NS, a stranger in $OTHER are Ready"
owner=$(kubectl -n "$NS" get networkpolicy fmnist-pods \
  -o jsonpath='{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}') ||
  { echo "FAIL the operator made no NetworkPolicy for fmnist in $NS"; exit 1; }
[ "$owner" = TrainingJob/fmnist ] || { echo "FAIL NetworkPolicy fmnist-pods is owned by '$owner'"; exit 1; }
echo "ok   the operator made NetworkPolicy fmnist-pods in $NS, owned by the job"

# The chief's listening TCP ports (not those bound to loopback only), once it trains: the
# peer-health responder listens once the gang has formed, and the job's port no longer.
listening() {
  kubectl -n "$NS" exec fmnist-worker-0 -- cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
    awk '$4 == "0A" { split($2, a, ":");
           if (a[1] != "0100007F" && a[1] != "00000000000000000000000001000000") print a[2] }' |
    while read -r hex; do printf '%d\n' "0x$hex"; done | sort -un
}
ports=""
for _ in $(seq 1 120); do
  # Not `kubectl logs | grep -q`: with pipefail, grep's early exit fails the pipe (SIGPIPE).
  if grep -q '"event":"backup_saved"' <<<"$(kubectl -n "$NS" logs fmnist-worker-0 2>/dev/null)"; then
    ports=$(listening); break
  fi
  sleep 1
done
# Two: /status and the peer-health responder. The job's port (2222: the rendezvous and the
# ring's handshakes, one acceptor) closes once the gang has formed.
[ "$(wc -w <<<"$ports")" -ge 2 ] ||
  { echo "FAIL the chief listens on '$ports' (expected /status and the peer-health responder)"; exit 1; }
! grep -qx 2222 <<<"$ports" ||
  { echo "FAIL the chief still listens on the job's port 2222 after the gang formed"; exit 1; }
chief=$(kubectl -n "$NS" get pod fmnist-worker-0 -o jsonpath='{.status.podIP}')
step "the chief ($chief) listens on TCP $(tr '\n' ' ' <<<"$ports")"

# probe NAMESPACE POD HOST PORT...: one line per port, "PORT open" or "PORT closed" (3 s each).
probe() {
  local ns=$1 pod=$2 host=$3; shift 3
  # shellcheck disable=SC2016  # expanded by the pod's bash
  kubectl -n "$ns" exec "$pod" -- bash -c '
    host=$1; shift
    for p in "$@"; do
      if timeout 3 bash -c "exec 3<>/dev/tcp/$host/$p" 2>/dev/null; then echo "$p open"
      else echo "$p closed"; fi
    done' probe "$host" "$@"
}
fails=0
expect() {  # expect open|closed WHO OUTPUT
  local want=$1 who=$2 out=$3 bad
  bad=$(grep -v " $want\$" <<<"$out" || true)
  if [ -n "$bad" ]; then
    echo "FAIL $who: expected every port $want; got: $(tr '\n' ' ' <<<"$out")"; fails=$((fails + 1))
  else
    echo "ok   $who: $(awk '{print $1}' <<<"$out" | tr '\n' ' ')$want"
  fi
}
# shellcheck disable=SC2086
expect open "the job's worker 1 -> the chief" "$(probe "$NS" fmnist-worker-1 "$chief" $ports)"
# shellcheck disable=SC2086
expect closed "a pod of $OTHER -> the chief" "$(probe "$OTHER" stranger "$chief" $ports)"
# shellcheck disable=SC2086
expect closed "a pod of $NS without the job's label -> the chief" \
  "$(probe "$NS" neighbour "$chief" $ports)"
# shellcheck disable=SC2086
expect closed "a pod of $NS labelled tjo.dev/job-name=other -> the chief" \
  "$(probe "$NS" impostor "$chief" $ports)"
operator=$(kubectl -n tj-system get pods -l app.kubernetes.io/name=tj-operator \
  -o jsonpath='{.items[0].status.podIP}')
expect open "the same pod of $OTHER -> the operator's metrics port (no policy there)" \
  "$(probe "$OTHER" stranger "$operator" 8080)"
kubectl -n "$NS" get networkpolicy fmnist-pods -o name >/dev/null
chains=$(iptables-save -t filter | grep -c '^:KUBE-NWPLCY-' || true)
[ "$chains" -gt 0 ] || { echo "FAIL kube-router wrote no policy chain"; fails=$((fails + 1)); }
[ $fails -eq 0 ] || exit 1

# The operator's /status polls pass the policy: status.progress is filled from the chief.
epoch=""
for _ in $(seq 1 60); do
  epoch=$(kubectl -n "$NS" get trainingjob fmnist -o jsonpath='{.status.progress.epoch}')
  [ -n "$epoch" ] && break
  sleep 1
done
[ -n "$epoch" ] || { echo "FAIL the operator never read the chief's /status (no status.progress)"
  kubectl -n "$NS" get trainingjob fmnist -o jsonpath='{.status.conditions}'; echo; exit 1; }
echo "ok   the operator reads the chief's /status through the policy (epoch $epoch)"

kubectl -n "$NS" wait --for=condition=Succeeded trainingjob/fmnist --timeout=600s >/dev/null ||
  { echo "FAIL fmnist did not succeed"; kubectl -n "$NS" describe trainingjob fmnist | tail -20; exit 1; }
evaluation=$(kubectl -n "$NS" get trainingjob fmnist -o jsonpath='{.status.evaluation}')
[ -n "$evaluation" ] || { echo "FAIL no evaluation in the status"; exit 1; }
restarts=$(kubectl -n "$NS" get trainingjob fmnist -o jsonpath='{.status.restartCount}')
[ "${restarts:-0}" = 0 ] || { echo "FAIL the gang restarted $restarts times"; exit 1; }
step "fmnist Succeeded behind the policy, no restart; evaluation $evaluation"
kubectl -n "$NS" delete trainingjob fmnist --wait=true >/dev/null
gone() { ! kubectl -n "$NS" get networkpolicy fmnist-pods >/dev/null 2>&1; }
for _ in $(seq 1 60); do gone && break; sleep 1; done
gone || { echo "FAIL NetworkPolicy fmnist-pods outlived its job"; exit 1; }
echo "ok   the job's NetworkPolicy went with the job"

"$ROOT/hack/local-cluster.sh" down >/dev/null
machine_state >"$BUILD/network-policy-after.txt"
if ! compare_machine_state "$BUILD/network-policy-before.txt" "$BUILD/network-policy-after.txt"; then
  echo "FAIL hack/local-cluster.sh down left kube-router's state behind (above)"; exit 1
fi
echo "ok   down left no kube-router process, chain or ipset behind"
