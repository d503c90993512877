#!/usr/bin/env bash
# The scale benchmark: tj-operator and Kubeflow's training-operator (TFJob, v1.8.1) side by
# side, one after the other on the same scale cluster (hack/local-cluster.sh, TJ_NODE=kwok:
# the real API server, scheduler and controller manager, fake nodes and pods), without and
# with Kueue in front. Writes bench/scale/RESULTS.md (and .json). docs/scale.md.
#
#   bash bench/scale/run.sh [JOBS] [WORKERS]     defaults: 1000 jobs of a chief and 7 workers
#
# Phases, each in a namespace of its own that is deleted (and gone) before the next begins:
#   1. tj-operator alone           TrainingJobs, made from the TFJobs by `tj-operator convert`
#   2. training-operator alone     the TFJobs
#   3. training-operator + Kueue   Kueue's built-in TFJob integration
#   4. tj-operator + Kueue         Kueue's external-framework Workloads of tj-operator
#   5. tj-operator, failover       two instances with --leader-elect; the leader is killed
#                                  $TJ_SCALE_KILL_AFTER (40) s in (not in the default phases)
# Only the phase's operator runs during a phase. Both get the same client limits and workers:
# training-operator's are fixed in its code (controller-runtime's 20 QPS, burst 30), so
# tj-operator runs with --kube-api-qps=$TJ_SCALE_QPS (20) --kube-api-burst=$TJ_SCALE_BURST
# (30), and both with $TJ_SCALE_THREADS workers (16: tj-operator's default;
# training-operator's --controller-threads, default 1). tj-operator runs as the chart runs it:
# a NetworkPolicy per job (--network-policy). Each chief ends Succeeded
# $TJ_SCALE_SUCCEED_AFTER (30s) after it starts (kwok's stage), which ends its job.
# Environment: TJ_SCALE_PHASES (default "1 2 3 4"), TJ_BUILD_DIR (build), TJ_SCALE_DIR (the
# cluster's state: build/scale-cluster), TJ_SCALE_KEEP=1 leaves the cluster up,
# TJ_SCALE_DEADLINE (1800 s: a phase whose jobs have not all succeeded by then is cut short).
set -euo pipefail
cd "$(dirname "$0")/../.."
JOBS=${1:-1000}
WORKERS=${2:-7}
BUILD=${TJ_BUILD_DIR:-build}
QPS=${TJ_SCALE_QPS:-20}
BURST=${TJ_SCALE_BURST:-30}
THREADS=${TJ_SCALE_THREADS:-16}
SUCCEED_AFTER=${TJ_SCALE_SUCCEED_AFTER:-30s}
PHASES=${TJ_SCALE_PHASES:-1 2 3 4}
export TJ_LOCAL_CLUSTER_DIR=${TJ_SCALE_DIR:-$PWD/$BUILD/scale-cluster}
OUT=${TJ_SCALE_OUT:-bench/scale/RESULTS.md}
log() { echo "scale: $*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=hack/host-webhook.sh
. hack/host-webhook.sh  # free_port

[ -x "$BUILD/bin/tj-operator" ] || { log "build first: cmake --build $BUILD --target tj-operator"; exit 1; }
# What the phases need, no more (the scale test runs phase 1 alone).
needs=kwok
[[ " $PHASES " =~ \ [234]\  ]] && needs+=" training-operator"
[[ " $PHASES " =~ \ [34]\  ]] && needs+=" kueue"
# shellcheck disable=SC2086  # a list of names
bash hack/build-kubernetes.sh $needs >&2
pods=$((JOBS * (WORKERS + 1)))
# Room for every pod (and the chiefs that stay Succeeded) at 110 pods and 64 CPUs a node.
export TJ_NODE=kwok TJ_KWOK_NODES=$(( (pods * 3 / 2) / 110 + 10 ))
export TJ_LOCAL_CLUSTER_USERS=tj-operator
export TJ_LOCAL_CLUSTER_AUDIT_LOG=$TJ_LOCAL_CLUSTER_DIR.audit.log
rm -f "$TJ_LOCAL_CLUSTER_AUDIT_LOG"
bash hack/local-cluster.sh down >/dev/null 2>&1 || true
kc=$(bash hack/local-cluster.sh up)
export KUBECONFIG=$kc
PATH=$(bash hack/local-cluster.sh kubectl-dir):$PATH
[ "${TJ_SCALE_KEEP:-0}" = 1 ] || trap 'bash hack/local-cluster.sh down >/dev/null 2>&1 || true' EXIT
kubectl apply --server-side -f manifests/crd/trainingjob.yaml >/dev/null
# (`kubectl wait` may fail at once on a CRD so new that it has no conditions yet)
for _ in $(seq 300); do
  [ "$(kubectl get crd trainingjobs.tjo.dev \
    -o jsonpath='{.status.conditions[?(@.type=="Established")].status}')" = True ] && break
  sleep 0.2
done

results=$(mktemp)
tj_pid=''
start_tj_operator() {  # start_tj_operator [FLAGS...]: one more instance; tj_pid, TJ_METRICS
  local m h
  m=$(free_port)
  h=$(free_port)
  setsid "$BUILD/bin/tj-operator" --kubeconfig="$TJ_LOCAL_CLUSTER_DIR/kubeconfig-tj-operator" \
    --kube-api-qps="$QPS" --kube-api-burst="$BURST" --workers="$THREADS" \
    --network-policy --network-policy-operator-namespace=default \
    --metrics-bind-address="127.0.0.1:$m" --health-probe-bind-address="127.0.0.1:$h" "$@" \
    >>"$TJ_LOCAL_CLUSTER_DIR/logs/tj-operator.log" 2>&1 </dev/null &
  tj_pid=$!
  echo "$tj_pid" >"$TJ_LOCAL_CLUSTER_DIR/pids/tj-operator-$tj_pid"
  TJ_METRICS=127.0.0.1:$m
  until curl -fsS "http://127.0.0.1:$h/readyz" >/dev/null 2>&1; do sleep 0.2; done
}
stop_tj_operator() {
  [ -n "$tj_pid" ] || return 0
  kill "$tj_pid" 2>/dev/null || true
  wait "$tj_pid" 2>/dev/null || true
  rm -f "$TJ_LOCAL_CLUSTER_DIR/pids/tj-operator-$tj_pid"
  tj_pid=''
}
TFOP_STARTED=0
start_training_operator() {
  TJ_TFOP_THREADS=$THREADS TJ_TFOP_ARGS=--zap-log-level=info bash hack/training-operator.sh install >&2
  TFOP_STARTED=1
}
tfop_metrics() {  # where training-operator serves /metrics (hack/training-operator.sh)
  echo "127.0.0.1:$(cat "$TJ_LOCAL_CLUSTER_DIR/training-operator/metrics-port")"
}
kueue_up() {  # the TFJob CRD first: Kueue's TFJob integration starts with it
  kubectl get crd tfjobs.kubeflow.org >/dev/null 2>&1 || start_training_operator
  bash hack/kueue.sh install >&2
  kubectl apply --server-side -f - >/dev/null <<YAML
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: scale}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: scale}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: scale
      resources:
      - {name: cpu, nominalQuota: "100000"}
      - {name: memory, nominalQuota: 100000Gi}
YAML
}
phase() {  # phase N OPERATOR PID METRICS [QUEUE]
  local n=$1 op=$2 pid=$3 metrics=$4 queue=${5:-}
  log "phase $n: $op${queue:+ + Kueue}, $JOBS jobs x $((WORKERS + 1)) pods"
  python3 bench/scale/scale.py --kubeconfig "$kc" --operator "$op" --pid "$pid" \
    --metrics "$metrics" --operator-bin "$BUILD/bin/tj-operator" --namespace "scale-$n" \
    --jobs "$JOBS" --workers "$WORKERS" --succeed-after "$SUCCEED_AFTER" \
    --deadline "${TJ_SCALE_DEADLINE:-1800}" \
    ${queue:+--queue "$queue"} >>"$results" || log "phase $n: not every job succeeded"
  tail -n1 "$results" >&2
  kubectl delete namespace "scale-$n" --wait=false >/dev/null
}
settle() {  # the namespaces of earlier phases gone, so they cost the next phase nothing
  local t0=$SECONDS
  while kubectl get namespaces -o name | grep '^namespace/scale-' >/dev/null; do
    [ $((SECONDS - t0)) -lt 900 ] || { log "namespaces still terminating after 900 s"; break; }
    sleep 2
  done
}

for n in $PHASES; do
  case $n in
    1) start_tj_operator; phase 1 tj-operator "$tj_pid" "$TJ_METRICS"; stop_tj_operator ;;
    2) start_training_operator
       phase 2 training-operator "$(bash hack/training-operator.sh pid)" \
         "$(tfop_metrics)" ;;
    3) kueue_up
       [ "$TFOP_STARTED" = 1 ] || start_training_operator
       phase 3 training-operator "$(bash hack/training-operator.sh pid)" \
         "$(tfop_metrics)" scale ;;
    4) kubectl get clusterqueue scale >/dev/null 2>&1 || kueue_up
       if tfop=$(bash hack/training-operator.sh pid 2>/dev/null); then kill "$tfop" || true; fi
       start_tj_operator; phase 4 tj-operator "$tj_pid" "$TJ_METRICS" scale; stop_tj_operator ;;
    5) # Two instances with --leader-elect; the leader is killed (SIGKILL) KILL_AFTER seconds
       # into the phase. The survivor takes over: no job lost, no pod made twice.
       start_tj_operator --leader-elect --leader-election-namespace=default
       leader=$tj_pid
       until curl -fsS "http://$TJ_METRICS/metrics" 2>/dev/null |
           grep -q '^leader_election_master_status{name="tj-operator"} 1'; do sleep 0.2; done
       start_tj_operator --leader-elect --leader-election-namespace=default
       ( sleep "${TJ_SCALE_KILL_AFTER:-40}"; kill -KILL "$leader"
         log "phase 5: killed the leader (pid $leader)" ) &
       phase 5 tj-operator "$tj_pid" "$TJ_METRICS"
       stop_tj_operator; rm -f "$TJ_LOCAL_CLUSTER_DIR/pids/tj-operator-$leader" ;;
    *) log "unknown phase $n (1 to 5)"; exit 2 ;;
  esac
  settle
done

# shellcheck source=hack/versions.env
. hack/versions.env
header="# Scale: tj-operator beside Kubeflow's training-operator

\`bash bench/scale/run.sh $JOBS $WORKERS\` on \`$(hostname)\` ($(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1048576)) GiB),
commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- operator kube common bench/scale hack || echo +changes), $(date -u +%Y-%m-%dT%H:%MZ).
Kubernetes $KUBE_VERSION, kwok $KWOK_VERSION ($TJ_KWOK_NODES nodes), training-operator $TRAINING_OPERATOR_VERSION, Kueue $KUEUE_VERSION.
tj-operator: client QPS $QPS, burst $BURST, $THREADS workers, a NetworkPolicy per job; training-operator: client QPS 20, burst 30 (fixed in its code), $THREADS controller threads, log level info.
$JOBS jobs of a chief and $WORKERS workers each, created by 8 concurrent clients; each chief Succeeded $SUCCEED_AFTER after it started.
Times are from the first create of the phase. docs/scale.md says how each figure is taken."
python3 bench/scale/report.py "$results" "$TJ_LOCAL_CLUSTER_AUDIT_LOG" "$OUT" "$header"
log "wrote $OUT"
