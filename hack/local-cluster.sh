#!/usr/bin/env bash
# A real Kubernetes cluster on this machine: etcd, kube-apiserver, kube-controller-manager and
# kube-scheduler as local processes, and one node, named local-node, of either kind:
#
#   TJ_NODE=containerd  a real node (hack/real-node.sh): kubelet + kube-proxy, containerd with
#                       runc and the CNI bridge, cluster DNS; pods are containers from the
#                       images of `make images`. Needs root. The default when root.
#   TJ_NODE=process     the project's node agent (tj-process-node, when built): pods are local
#                       processes. For machines that cannot run containers; the default
#                       when not root.
#   TJ_NODE=kwok        the scale cluster: TJ_KWOK_NODES (default 100) fake nodes, named
#                       kwok-node-<n>, of TJ_KWOK_NODE_PODS pods each (default 110), played by
#                       kwok (hack/build-kubernetes.sh kwok) with the lifecycles of
#                       hack/kwok/stages.yaml: pods run without a container (no trainer, no
#                       /status), a pod annotated scale.tjo.dev/succeed-after ends Succeeded.
#                       The scheduler and controller manager get client limits of
#                       TJ_KWOK_CONTROL_PLANE_QPS (default 500) so that thousands of pods
#                       are bound and collected faster than the operators make them.
#                       docs/scale.md.
#
#   hack/local-cluster.sh up       start (or find running) a cluster; prints the kubeconfig path
#   hack/local-cluster.sh down     stop exactly the processes `up` started (by PID)
#   hack/local-cluster.sh status   say what runs; exit 0 when the API server is healthy
#   hack/local-cluster.sh build    only find or build the binaries; print the Kubernetes dir
#   hack/local-cluster.sh env      print `export KUBECONFIG=...` (and PATH, with the cluster's
#                                  own kubectl first) for eval
#   hack/local-cluster.sh kubectl-dir   print the directory of the cluster's own kubectl
#   hack/local-cluster.sh restart-apiserver   stop and start kube-apiserver (same port; tests)
#   hack/local-cluster.sh compact  compact etcd's history up to now (tests of 410 Gone)
#   hack/local-cluster.sh restart-node [--graceful]   (process node) kill the node agent (SIGKILL, as a crash:
#                                  pods keep running and the new agent adopts them; with
#                                  --graceful SIGTERM, a node shutdown) and start it again
#   hack/local-cluster.sh stop-node     (process node) SIGKILL the node agent and leave it
#                                  dead: the node goes NotReady after the node monitor's
#                                  grace period (a lost node); its pods' processes run on
#   hack/local-cluster.sh start-node    (process node) start the agent that stop-node killed
#
# Binaries: Kubernetes (KUBE_VERSION of hack/versions.env: the control plane, kubelet,
# kube-proxy and kubectl), the etcd it is tested with and, for the real node, containerd,
# CoreDNS and crictl are built once from the Go module proxy by hack/build-kubernetes.sh
# (about 40 minutes on an idle 2-core machine) and cached in
# ${TJ_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tj-operator}/<name>-<version>-<go>/bin.
# $KUBEBUILDER_ASSETS, when it names a directory holding kube-apiserver (envtest's convention;
# etcd and the other programs are optional there), is used instead for the control plane.
#
# TJ_LOCAL_CLUSTER_OWNER_PID=PID at `up`: bring the cluster down when process PID ends.
#
# TJ_LOCAL_CLUSTER_USERS="NAME..." at `up`: one more cluster-admin identity per NAME (a token of
# its own, user NAME), with its kubeconfig in <state>/kubeconfig-NAME, so that the audit log
# tells components apart (bench/scale gives each operator one).
#
# TJ_LOCAL_CLUSTER_AUDIT_LOG=FILE at `up`: the API server writes an audit log (JSON lines, level
# Metadata: who did which verb on which resource, and the answer's code) to FILE, so tests can
# derive the requests a component makes (tests/security: the operator's RBAC).
#
# TJ_LOCAL_NODE_MOUNT_NAMESPACE=false runs the node agent as it runs when not root (no mount
# namespaces: no private /etc/hosts, volumes as $TJ_VOLUME_<NAME>), to test that mode as root.
# TJ_LOCAL_NODE_BIN=PATH: the process node's agent to run instead of build/bin/tj-process-node
# (a path that does not exist: a cluster without a node). Both variables keep the names they
# had when tj-process-node was called tj-local-node.
#
# TJ_NODE_MONITOR_GRACE_PERIOD=DURATION at `up` (e.g. 15s): the controller manager's
# --node-monitor-grace-period, how long a node's silence lasts before it is marked NotReady
# (Kubernetes' default, 50 s, when unset). Tests of lost nodes shorten it for their own cluster;
# the process node renews its Lease every 5 s.
#
# TJ_FEATURE_GATES=Gate=true,... at `up`: kube-apiserver, kube-controller-manager and
# kube-scheduler run with --feature-gates=$TJ_FEATURE_GATES (default: none, the release's own
# defaults). TJ_RUNTIME_CONFIG=group/version=true,... enables API versions that are off by
# default (--runtime-config). With GenericWorkload=true among the gates and TJ_RUNTIME_CONFIG
# unset, scheduling.k8s.io/v1beta1 (Workload, PodGroup: what kube-scheduler's gang plugin reads)
# is enabled, and the controller manager also runs podgroup-protection-controller (it removes
# the finalizer the API server puts on every PodGroup). docs/gangs.md.
#
# TJ_LOCAL_CLUSTER_ETCD_ON_DISK=1 at `up` keeps etcd's data under the state directory, on disk;
# by default it is in /dev/shm (see place_etcd_data).
#
# State: ${TJ_LOCAL_CLUSTER_DIR:-<repo>/.local-cluster}: kubeconfig, pids/, logs/, certs, etcd
# data (a link into /dev/shm). Several clusters can run on one machine with different TJ_LOCAL_CLUSTER_DIR values:
# every port is picked free at `up`.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE_DIR=${TJ_LOCAL_CLUSTER_DIR:-$REPO_ROOT/.local-cluster}
# Canonical (no .., no links), as the mount table names the real node's mounts.
STATE_DIR=$(realpath -m "$STATE_DIR")
CACHE_ROOT=${TJ_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tj-operator}
BIN_DIR_BUILD=${TJ_BUILD_DIR:-$REPO_ROOT/build}/bin
HEALTH_TIMEOUT_S=${TJ_LOCAL_CLUSTER_TIMEOUT:-90}
if [ -z "${TJ_NODE:-}" ]; then
  if [ "$(id -u)" -eq 0 ]; then TJ_NODE=containerd; else TJ_NODE=process; fi
fi
case "$TJ_NODE" in
  containerd|process|kwok) ;;
  *) echo "local-cluster: error: TJ_NODE=$TJ_NODE: use containerd, process or kwok" >&2; exit 2 ;;
esac
# The Kubernetes release is pinned in hack/versions.env (KUBE_VERSION). TJ_KUBE_VERSION picks
# another of the releases it lists in KUBE_VERSIONS (1.36 or 1.36.3); build-kubernetes.sh reads
# the same variable, so the cluster runs what it builds.
# shellcheck source=hack/versions.env
. "$REPO_ROOT/hack/versions.env"
if ! KUBE_VERSION=$(kube_version_for "${TJ_KUBE_VERSION:-}"); then
  echo "local-cluster: error: TJ_KUBE_VERSION=$TJ_KUBE_VERSION: the local cluster runs" \
       "Kubernetes ${KUBE_VERSIONS// /, } (hack/versions.env); unset TJ_KUBE_VERSION, name" \
       "one of those, or add another release there" >&2
  exit 2
fi
BUILD_K8S=$REPO_ROOT/hack/build-kubernetes.sh

log() { echo "local-cluster: $*" >&2; }
die() { log "error: $*"; exit 1; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# ---------------------------------------------------------------------------------------------
# Binaries

have_all() {  # have_all DIR NAME... : every NAME is an executable in DIR
  local d=$1; shift
  for n in "$@"; do [ -x "$d/$n" ] || return 1; done
}

# Sets KUBE_BIN (the Kubernetes programs' directory), ETCD_BIN and, for the real node on 1.37,
# NODE_BINS (containerd with its shim and ctr, coredns, crictl: a directory each, for PATH).
find_binaries() {
  KUBE_BIN='' ETCD_BIN='' NODE_BINS=''
  if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
    [ -x "$KUBEBUILDER_ASSETS/kube-apiserver" ] ||
      die "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS holds no kube-apiserver"
    KUBE_BIN=$KUBEBUILDER_ASSETS
    [ -x "$KUBEBUILDER_ASSETS/etcd" ] && ETCD_BIN=$KUBEBUILDER_ASSETS/etcd
  else
    "$BUILD_K8S" etcd kubernetes >&2 || die "building Kubernetes failed (above)"
    KUBE_BIN=$("$BUILD_K8S" path kubernetes)
    ETCD_BIN=$("$BUILD_K8S" path etcd)/etcd
  fi
  if [ -z "$ETCD_BIN" ]; then
    "$BUILD_K8S" etcd >&2 || die "building etcd failed (above)"
    ETCD_BIN=$("$BUILD_K8S" path etcd)/etcd
  fi
  if [ "$TJ_NODE" = containerd ] && [ -z "$NODE_BINS" ]; then
    "$BUILD_K8S" containerd coredns >&2 || die "building the node's runtime failed (above)"
    # (crictl, for looking at the node, when `hack/build-kubernetes.sh all` has built it)
    NODE_BINS=$("$BUILD_K8S" path containerd):$("$BUILD_K8S" path coredns)
    NODE_BINS+=:$("$BUILD_K8S" path crictl)
  fi
}

# ---------------------------------------------------------------------------------------------
# Processes

free_port() {
  python3 - <<'EOF'
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
EOF
}

pid_alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

# start NAME CMD...: runs CMD in the background in its own session, logs to logs/NAME.log,
# records its PID in pids/NAME.
start() {
  local name=$1; shift
  setsid "$@" >"$STATE_DIR/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$STATE_DIR/pids/$name"
  log "started $name (pid $!)"
}

api_healthy() {
  [ -f "$STATE_DIR/token" ] && [ -f "$STATE_DIR/port" ] || return 1
  curl -fsS --max-time 3 --cacert "$STATE_DIR/certs/apiserver.crt" \
    -H "Authorization: Bearer $(cat "$STATE_DIR/token")" \
    "https://127.0.0.1:$(cat "$STATE_DIR/port")/healthz" 2>/dev/null | grep -qx ok
}

all_running() {
  [ -d "$STATE_DIR/pids" ] || return 1
  local f
  for f in "$STATE_DIR"/pids/*; do
    [ -f "$f" ] || return 1
    pid_alive "$(cat "$f")" || return 1
  done
}

write_kubeconfig() {  # write_kubeconfig FILE PORT TOKEN
  local ca
  ca=$(base64 -w0 <"$STATE_DIR/certs/ca.crt")
  write_private "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:$2
    certificate-authority-data: $ca
users:
- name: admin
  user:
    token: $3
contexts:
- name: local
  context: {cluster: local, user: admin, namespace: default}
current-context: local
EOF
}

# A CA and a serving certificate for 127.0.0.1/localhost signed by it, so clients verify TLS.
make_certs() {
  local c=$STATE_DIR/certs
  mkdir -p "$c"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$c/ca.key" -out "$c/ca.crt" -days 3650 \
    -subj "/CN=tj-local-cluster-ca" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$c/apiserver.key" -out "$c/apiserver.csr" \
    -subj "/CN=kube-apiserver" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,%s\n' \
    'DNS:kubernetes.default.svc,IP:10.0.0.1' >"$c/san.ext"
  # A real node's pods reach the API server at the node address.
  [ "$TJ_NODE" != containerd ] || sed -i "s/^subjectAltName=/&IP:$(node_ip),/" "$c/san.ext"
  # The API server serves the whole chain so clients that trust the CA verify it.
  openssl x509 -req -in "$c/apiserver.csr" -CA "$c/ca.crt" -CAkey "$c/ca.key" \
    -CAcreateserial -out "$c/apiserver.leaf.crt" -days 3650 -extfile "$c/san.ext" 2>/dev/null
  cat "$c/apiserver.leaf.crt" "$c/ca.crt" >"$c/apiserver.crt"
  # The node agent's log endpoint (what `kubectl logs` reaches through the API server).
  openssl req -newkey rsa:2048 -nodes -keyout "$c/node.key" -out "$c/node.csr" \
    -subj "/CN=tj-process-node" 2>/dev/null
  echo 'subjectAltName=IP:127.0.0.1,DNS:localhost' >"$c/node.ext"
  # A real node's kubelet serves at the node address.
  [ "$TJ_NODE" != containerd ] || sed -i "s/^subjectAltName=/&IP:$(node_ip),/" "$c/node.ext"
  openssl x509 -req -in "$c/node.csr" -CA "$c/ca.crt" -CAkey "$c/ca.key" \
    -CAcreateserial -out "$c/node.crt" -days 3650 -extfile "$c/node.ext" 2>/dev/null
  # The API server's client certificate towards a kubelet (logs, exec, port-forward).
  openssl req -newkey rsa:2048 -nodes -keyout "$c/apiserver-kubelet-client.key" \
    -out "$c/apiserver-kubelet-client.csr" -subj "/O=system:masters/CN=kube-apiserver" 2>/dev/null
  openssl x509 -req -in "$c/apiserver-kubelet-client.csr" -CA "$c/ca.crt" -CAkey "$c/ca.key" \
    -CAcreateserial -out "$c/apiserver-kubelet-client.crt" -days 3650 2>/dev/null
  openssl genrsa -out "$c/sa.key" 2048 2>/dev/null
  openssl rsa -in "$c/sa.key" -pubout -out "$c/sa.pub" 2>/dev/null
}

wait_for() {  # wait_for SECONDS WHAT CMD... (WHAT names the wait for the reader of the call)
  local limit=$1; shift 2
  local deadline=$((SECONDS + limit))
  until "$@"; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
}

cmd_up() {
  if all_running && api_healthy; then
    log "already up: $STATE_DIR/kubeconfig"
    echo "$STATE_DIR/kubeconfig"
    return 0
  fi
  if [ -d "$STATE_DIR/pids" ]; then
    log "a previous cluster in $STATE_DIR is partly down; stopping what is left of it"
    cmd_down
  fi
  find_binaries
  # A real node: its checks and the machine's lock before anything starts.
  if [ "$TJ_NODE" = containerd ]; then real_node_paths; real_node_check; real_node_lock; fi
  local t0=$SECONDS
  remove_etcd_memory
  rm -rf "$STATE_DIR"
  mkdir -p "$STATE_DIR/pids" "$STATE_DIR/logs"
  place_etcd_data
  make_certs
  local token port_e port_p port_a port_c port_s port_k
  token=$(openssl rand -hex 24)
  port_e=$(free_port); port_p=$(free_port); port_a=$(free_port)
  port_c=$(free_port); port_s=$(free_port); port_k=$(free_port)
  echo "$token" | write_private "$STATE_DIR/token"
  echo "$port_a" >"$STATE_DIR/port"
  # The API server's token file: whoever reads it is cluster-admin.
  local tokens="$token,admin,admin,system:masters" user user_token
  write_kubeconfig "$STATE_DIR/kubeconfig" "$port_a" "$token"
  for user in ${TJ_LOCAL_CLUSTER_USERS:-}; do
    [[ $user =~ ^[a-z0-9][a-z0-9.-]*$ ]] ||
      die "TJ_LOCAL_CLUSTER_USERS: '$user' is not a user name (lower case, digits, . and -)"
    user_token=$(openssl rand -hex 24)
    tokens+=$'\n'"$user_token,$user,$user,system:masters"
    write_kubeconfig "$STATE_DIR/kubeconfig-$user" "$port_a" "$user_token"
  done
  echo "$tokens" | write_private "$STATE_DIR/tokens.csv"
  cat >"$STATE_DIR/cluster.env" <<EOF
KUBE_BIN=$KUBE_BIN
ETCD_BIN=$ETCD_BIN
NODE_BINS=$NODE_BINS
ETCD_PORT=$port_e
APISERVER_PORT=$port_a
EOF
  if [ "$TJ_NODE" = containerd ]; then
    # Pods reach the API server (the `kubernetes` Service) at the node address.
    printf 'BIND_ADDRESS=0.0.0.0\nADVERTISE_ADDRESS=%s\n' "$(node_ip)" >>"$STATE_DIR/cluster.env"
  fi
  write_audit_policy
  write_feature_gates

  start etcd "$ETCD_BIN" --data-dir "$(etcd_data_dir)" --name local \
    --listen-client-urls "http://127.0.0.1:$port_e" \
    --advertise-client-urls "http://127.0.0.1:$port_e" \
    --listen-peer-urls "http://127.0.0.1:$port_p" \
    --initial-advertise-peer-urls "http://127.0.0.1:$port_p" \
    --initial-cluster "local=http://127.0.0.1:$port_p"
  start kube-apiserver "$REPO_ROOT/hack/local-cluster.sh" run-apiserver "$STATE_DIR"
  if ! wait_for "$HEALTH_TIMEOUT_S" "API server" api_healthy; then
    log "the API server did not become healthy in ${HEALTH_TIMEOUT_S}s; last log lines:"
    tail -n 20 "$STATE_DIR/logs/kube-apiserver.log" >&2 || true
    cmd_down
    exit 1
  fi
  local kc=$STATE_DIR/kubeconfig
  local gate_flags=() qps_flags=() monitor_flags=()
  [ -z "${TJ_FEATURE_GATES:-}" ] || gate_flags=(--feature-gates="$TJ_FEATURE_GATES")
  [ -z "${TJ_NODE_MONITOR_GRACE_PERIOD:-}" ] ||
    monitor_flags=(--node-monitor-grace-period="$TJ_NODE_MONITOR_GRACE_PERIOD")
  if [ "$TJ_NODE" = kwok ]; then
    local qps=${TJ_KWOK_CONTROL_PLANE_QPS:-500}
    qps_flags=(--kube-api-qps="$qps" --kube-api-burst=$((qps * 2)))
  fi
  if [ -x "$KUBE_BIN/kube-controller-manager" ]; then
    local controllers=garbagecollector,namespace,serviceaccount,serviceaccount-token
    controllers+=,ttl-after-finished,root-ca-cert-publisher,nodelifecycle,deployment,replicaset
    # view/edit/admin take in the rules of ClusterRoles labelled aggregate-to-* (the chart's
    # users' roles for TrainingJobs), as on every real cluster.
    controllers+=,clusterrole-aggregation
    # A ResourceQuota is enforced once this controller has filled in its status (tests that
    # cap a namespace's pods use one).
    controllers+=,resourcequota
    # A real node: Endpoints for the cluster DNS, EndpointSlices for kube-proxy (it routes
    # Services from those alone, and rejects connections to a Service without any), claims
    # bound by the volume binder (tj-process-node binds them itself), and the protection
    # finalizers' controllers.
    [ "$TJ_NODE" != containerd ] ||
      controllers+=,endpoint,endpointslice,persistentvolume-binder,pvc-protection,pv-protection
    # Since 1.29 the node lifecycle controller only taints; evicting the pods of a lost node
    # is a controller of its own.
    controllers+=,taint-eviction-controller
    # Native gangs: the API server puts a finalizer on every PodGroup that this controller
    # removes once no pod uses the group.
    ! generic_workload || controllers+=,podgroup-protection-controller
    start kube-controller-manager "$KUBE_BIN/kube-controller-manager" --kubeconfig="$kc" \
      --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
      --service-account-private-key-file="$STATE_DIR/certs/sa.key" \
      --root-ca-file="$STATE_DIR/certs/ca.crt" \
      --controllers="$controllers" "${gate_flags[@]}" "${qps_flags[@]}" "${monitor_flags[@]}" \
      --leader-elect=false --bind-address=127.0.0.1 --secure-port="$port_c"
    # The ServiceAccount admission plugin rejects pods whose ServiceAccount does not exist
    # yet: return only once the serviceaccount controller runs (it has created `default`).
    if ! wait_for "$HEALTH_TIMEOUT_S" "ServiceAccount default/default" api_get \
        /api/v1/namespaces/default/serviceaccounts/default; then
      log "the controller manager created no ServiceAccount in ${HEALTH_TIMEOUT_S}s; last log lines:"
      tail -n 20 "$STATE_DIR/logs/kube-controller-manager.log" >&2 || true
      cmd_down
      exit 1
    fi
  else
    log "no kube-controller-manager in $KUBE_BIN: no garbage collection of owned objects"
  fi
  if [ -x "$KUBE_BIN/kube-scheduler" ]; then
    start kube-scheduler "$KUBE_BIN/kube-scheduler" --kubeconfig="$kc" \
      --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" "${gate_flags[@]}" \
      "${qps_flags[@]}" --leader-elect=false --bind-address=127.0.0.1 --secure-port="$port_s"
  else
    log "no kube-scheduler in $KUBE_BIN: pods will not be bound to nodes"
  fi
  local node=${TJ_LOCAL_NODE_BIN:-$BIN_DIR_BUILD/tj-process-node}
  if [ "$TJ_NODE" = containerd ]; then
    log "node: containerd (pods are containers; TJ_NODE=process for the process node)"
    real_node_up
    if ! wait_for "$HEALTH_TIMEOUT_S" "node" node_ready; then
      log "node local-node did not become Ready in ${HEALTH_TIMEOUT_S}s; last kubelet log lines:"
      tail -n 20 "$STATE_DIR/logs/kubelet.log" >&2 || true
      cmd_down
      exit 1
    fi
  elif [ "$TJ_NODE" = kwok ]; then
    kwok_up || { cmd_down; exit 1; }
  elif [ -x "$node" ]; then
    log "node: tj-process-node (pods are local processes)"
    printf 'NODE_BIN=%q\nKUBELET_PORT=%q\nNODE_MOUNT_NAMESPACE=%q\nPOD_NETWORK=%q\n' "$node" \
      "$port_k" "${TJ_LOCAL_NODE_MOUNT_NAMESPACE:-auto}" "$(free_pod_network)" >"$STATE_DIR/node.env"
    start_node
    if ! wait_for "$HEALTH_TIMEOUT_S" "node" node_ready; then
      log "node local-node did not become Ready in ${HEALTH_TIMEOUT_S}s; see $STATE_DIR/logs"
      cmd_down
      exit 1
    fi
  else
    log "no node agent at $node (build target tj-process-node): the cluster has no node"
  fi
  log "up in $((SECONDS - t0)) s: export KUBECONFIG=$kc"
  [ -z "${TJ_LOCAL_CLUSTER_OWNER_PID:-}" ] || start_owner_watch "$TJ_LOCAL_CLUSTER_OWNER_PID"
  echo "$kc"
}

# With TJ_LOCAL_CLUSTER_OWNER_PID set at `up`, the cluster goes down when that process ends
# (a test binary killed by ctest's timeout, say) rather than running on. The watcher ends by
# itself once the cluster is down.
start_owner_watch() {  # start_owner_watch PID
  # shellcheck disable=SC2016  # the watcher's shell expands its own $1, $2 and environment
  TJ_LOCAL_CLUSTER_DIR=$STATE_DIR setsid bash -c '
    while kill -0 "$1" 2>/dev/null && [ -d "$TJ_LOCAL_CLUSTER_DIR/pids" ]; do sleep 2; done
    [ -d "$TJ_LOCAL_CLUSTER_DIR/pids" ] && exec "$2" down' \
    owner-watch "$1" "$REPO_ROOT/hack/local-cluster.sh" \
    >>"$STATE_DIR/logs/owner-watch.log" 2>&1 </dev/null 8>&- &
  log "the cluster goes down when process $1 ends"
}

# Starts tj-process-node as recorded in node.env by `up` (also for restart-node).
start_node() {
  # shellcheck disable=SC1091
  . "$STATE_DIR/node.env"
  # shellcheck disable=SC2153  # NODE_BIN comes from node.env, written by `up`
  start tj-process-node "$NODE_BIN" --kubeconfig="$STATE_DIR/kubeconfig" --node-name=local-node \
    --state-dir="$STATE_DIR/node" --log-dir="$STATE_DIR/logs" --bin-dir="$(dirname "$NODE_BIN")" \
    --kubelet-port="$KUBELET_PORT" --tls-cert-file="$STATE_DIR/certs/node.crt" \
    --tls-key-file="$STATE_DIR/certs/node.key" --heartbeat-seconds=5 \
    --mount-namespace="$NODE_MOUNT_NAMESPACE" --pod-network="${POD_NETWORK:-0}" \
    --kubelet-version="$KUBE_VERSION"
}

# The second octet N of this cluster's pod addresses 127.N.x.y: one that no other cluster on
# this machine uses (no socket bound in 127.N.0.0/16 and no other cluster's node.env names
# it), so that pods of two clusters never take each other's address and port.
free_pod_network() {
  local taken n
  taken=$( { ss -Htan 2>/dev/null | awk '{print $4}' | sed -n 's/^127\.\([0-9]*\)\..*/\1/p'
             grep -hs '^POD_NETWORK=' "$REPO_ROOT"/build*/local-cluster-*/node.env \
               "$REPO_ROOT/.local-cluster/node.env" | cut -d= -f2; } | sort -u)
  for _ in $(seq 50); do
    n=$((RANDOM % 239 + 1))  # 127.240.0.0/12 is the kwok pods' (kwok_up)
    grep -qx "$n" <<<"$taken" || { echo "$n"; return; }
  done
  echo $((RANDOM % 239 + 1))
}

# Stops the node agent with SIG$1 (KILL: a crash, the pods' processes live on and the next
# agent adopts them; TERM: a node shutdown, the agent stops the pods) and waits for it to end.
kill_node_agent() {  # kill_node_agent KILL|TERM
  local f=$STATE_DIR/pids/tj-process-node pid
  { [ -f "$f" ] && [ -f "$STATE_DIR/node.env" ]; } ||
    die "no tj-process-node recorded in $STATE_DIR: run up first (with tj-process-node built)"
  pid=$(cat "$f")
  if pid_alive "$pid"; then
    kill "-$1" "$pid"
    local deadline=$((SECONDS + 30))
    while pid_alive "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
    pid_alive "$pid" && die "tj-process-node (pid $pid) still runs 30 s after SIG$1"
  fi
  return 0
}

# Starts the node agent again; returns when it has registered. The previous log is kept as
# tj-process-node.log.<n>.
cmd_start_node() {
  local f=$STATE_DIR/pids/tj-process-node
  [ -f "$STATE_DIR/node.env" ] ||
    die "no tj-process-node recorded in $STATE_DIR: run up first (with tj-process-node built)"
  ! { [ -f "$f" ] && pid_alive "$(cat "$f")"; } ||
    die "tj-process-node (pid $(cat "$f")) runs already: stop-node first"
  local n=1
  while [ -e "$STATE_DIR/logs/tj-process-node.log.$n" ]; do n=$((n + 1)); done
  mv "$STATE_DIR/logs/tj-process-node.log" "$STATE_DIR/logs/tj-process-node.log.$n" 2>/dev/null || true
  start_node
  # Ready alone could be the old heartbeat: wait for the new agent's own announcement.
  wait_for "$HEALTH_TIMEOUT_S" "node agent" grep -q node_ready "$STATE_DIR/logs/tj-process-node.log" ||
    die "tj-process-node did not come back; see $STATE_DIR/logs/tj-process-node.log"
  log "tj-process-node started (pid $(cat "$f"))"
}

# SIGKILLs the node agent and leaves it dead: the node stops renewing its Lease and status, and
# the node controller marks it NotReady after its grace period (TJ_NODE_MONITOR_GRACE_PERIOD).
cmd_stop_node() {
  kill_node_agent KILL
  log "tj-process-node stopped (SIGKILL); start-node starts it again"
}

# Stops the node agent, SIGKILL (a crash; the pods' processes live on and the next agent
# adopts them) or, with --graceful, SIGTERM (a node shutdown: the agent stops the pods), and
# starts it again; returns when it has registered again.
cmd_restart_node() {
  local sig=KILL
  case "${1:-}" in
    --graceful) sig=TERM ;;
    "") ;;
    *) die "restart-node: unknown option '$1' (only --graceful)" ;;
  esac
  kill_node_agent "$sig"
  cmd_start_node
  log "tj-process-node restarted after SIG$sig"
}

# The scale cluster's nodes: kwok plays TJ_KWOK_NODES Node objects created here (annotated
# kwok.x-k8s.io/node=fake, the annotation it manages), with the stages of hack/kwok/stages.yaml.
# Pod addresses come from 127.240.0.0/12: this machine's own, so that a program of the
# benchmark listening on 0.0.0.0 answers for the pods (bench/scale: the chiefs' /status); the
# process node keeps below it (free_pod_network). The nodes' address is 127.0.0.1, where no
# kubelet answers: a read of a pod's log fails at once. Returns once every node is Ready.
kwok_up() {
  local kwok_bin nodes=${TJ_KWOK_NODES:-100} pods=${TJ_KWOK_NODE_PODS:-110}
  [[ $nodes =~ ^[1-9][0-9]{0,4}$ && $pods =~ ^[1-9][0-9]{0,4}$ ]] ||
    { log "TJ_KWOK_NODES=$nodes, TJ_KWOK_NODE_PODS=$pods: each a number, 1 to 99999"; return 1; }
  "$BUILD_K8S" kwok >&2 || { log "building kwok failed (above)"; return 1; }
  kwok_bin=$("$BUILD_K8S" path kwok)/kwok
  log "node: kwok, $nodes fake nodes of $pods pods each (pods run no container)"
  start kwok "$kwok_bin" --kubeconfig="$STATE_DIR/kubeconfig" \
    --config="$REPO_ROOT/hack/kwok/stages.yaml" \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --cidr=127.240.0.1/12 --node-ip=127.0.0.1 --node-lease-duration-seconds=40 \
    --server-address=127.0.0.1:"$(free_port)"
  python3 - "$nodes" "$pods" >"$STATE_DIR/kwok-nodes.json" <<'PY'
import json, sys
nodes, pods = int(sys.argv[1]), sys.argv[2]
items = [{
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": f"kwok-node-{i}", "annotations": {"kwok.x-k8s.io/node": "fake"},
                 "labels": {"type": "kwok", "kubernetes.io/hostname": f"kwok-node-{i}"}},
    "status": {"capacity": {"cpu": "64", "memory": "512Gi", "pods": pods}},
} for i in range(nodes)]
json.dump({"apiVersion": "v1", "kind": "List", "items": items}, sys.stdout)
PY
  "$KUBE_BIN/kubectl" --kubeconfig="$STATE_DIR/kubeconfig" create -f "$STATE_DIR/kwok-nodes.json" \
    >/dev/null || { log "creating the kwok nodes failed"; return 1; }
  if ! wait_for "$HEALTH_TIMEOUT_S" "$nodes kwok nodes Ready" kwok_nodes_ready "$nodes"; then
    log "the kwok nodes did not become Ready in ${HEALTH_TIMEOUT_S}s; see $STATE_DIR/logs/kwok.log"
    return 1
  fi
}

kwok_nodes_ready() {  # kwok_nodes_ready N: N nodes are Ready
  local ready
  ready=$("$KUBE_BIN/kubectl" --kubeconfig="$STATE_DIR/kubeconfig" get nodes -l type=kwok \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' \
    2>/dev/null | grep -c True) || true
  [ "${ready:-0}" -ge "$1" ]
}

api_get() {  # api_get PATH: the API server answers 2xx
  curl -fsS --max-time 3 --cacert "$STATE_DIR/certs/ca.crt" \
    -H "Authorization: Bearer $(cat "$STATE_DIR/token")" \
    "https://127.0.0.1:$(cat "$STATE_DIR/port")$1" >/dev/null 2>&1
}

node_ready() {
  curl -fsS --max-time 3 --cacert "$STATE_DIR/certs/ca.crt" \
    -H "Authorization: Bearer $(cat "$STATE_DIR/token")" \
    "https://127.0.0.1:$(cat "$STATE_DIR/port")/api/v1/nodes/local-node" 2>/dev/null |
    jq -e '.status.conditions[]? | select(.type=="Ready" and .status=="True")' >/dev/null
}

# With TJ_LOCAL_CLUSTER_AUDIT_LOG: an audit policy that records every request's metadata (no
# bodies, so no Secret data), and AUDIT_LOG in cluster.env for run-apiserver.
write_audit_policy() {
  [ -n "${TJ_LOCAL_CLUSTER_AUDIT_LOG:-}" ] || return 0
  cat >"$STATE_DIR/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
EOF
  printf 'AUDIT_LOG=%q\n' "$TJ_LOCAL_CLUSTER_AUDIT_LOG" >>"$STATE_DIR/cluster.env"
  log "audit log: $TJ_LOCAL_CLUSTER_AUDIT_LOG"
}

# Whether TJ_FEATURE_GATES turns GenericWorkload on (native gang scheduling).
generic_workload() {
  [[ ",${TJ_FEATURE_GATES:-}," == *,GenericWorkload=true,* ]]
}

# With TJ_FEATURE_GATES or TJ_RUNTIME_CONFIG: FEATURE_GATES and RUNTIME_CONFIG in cluster.env
# for run-apiserver (also when a test restarts it). A value that is not a comma-separated list
# of Name=true|false (gates) or group/version=true|false (API versions) is refused here, with
# its name, rather than by the API server's log.
write_feature_gates() {
  local gates=${TJ_FEATURE_GATES:-} runtime=${TJ_RUNTIME_CONFIG:-}
  [ -z "$gates" ] || [[ "$gates" =~ ^[A-Za-z0-9]+=(true|false)(,[A-Za-z0-9]+=(true|false))*$ ]] ||
    die "TJ_FEATURE_GATES=$gates: give Gate=true|false,... (e.g. GenericWorkload=true)"
  [ -z "$runtime" ] ||
    [[ "$runtime" =~ ^[a-z0-9./]+=(true|false)(,[a-z0-9./]+=(true|false))*$ ]] ||
    die "TJ_RUNTIME_CONFIG=$runtime: give group/version=true|false,..." \
      "(e.g. scheduling.k8s.io/v1beta1=true)"
  if [ -z "$runtime" ] && generic_workload; then runtime=scheduling.k8s.io/v1beta1=true; fi
  [ -z "$gates$runtime" ] ||
    log "feature gates: ${gates:-(defaults)}; API versions: ${runtime:-(defaults)}"
  printf 'FEATURE_GATES=%q\nRUNTIME_CONFIG=%q\n' "$gates" "$runtime" >>"$STATE_DIR/cluster.env"
}

# Runs kube-apiserver in the foreground (called by `up` and by tests that restart it).
cmd_run_apiserver() {
  local dir=$1
  # shellcheck disable=SC1091
  . "$dir/cluster.env"
  # Pods that use in-cluster configuration get what a kubelet gives them: the ServiceAccount
  # admission plugin adds to every pod a projected volume (a TokenRequest token, the
  # kube-root-ca.crt ConfigMap, the namespace) at /var/run/secrets/kubernetes.io/serviceaccount,
  # which tj-process-node fills. The plugin needs
  # the controller manager's serviceaccount controller (a `default` ServiceAccount per
  # namespace); without a controller manager it stays off, as in envtest.
  local sa_flags=(--disable-admission-plugins=ServiceAccount)
  if [ -x "$KUBE_BIN/kube-controller-manager" ]; then
    sa_flags=(--enable-admission-plugins=ServiceAccount)
  fi
  local audit_flags=()
  if [ -n "${AUDIT_LOG:-}" ]; then
    audit_flags=(--audit-policy-file="$dir/audit-policy.yaml" --audit-log-path="$AUDIT_LOG"
                 --audit-log-format=json --audit-log-mode=blocking)
  fi
  local gate_flags=()
  [ -z "${FEATURE_GATES:-}" ] || gate_flags+=(--feature-gates="$FEATURE_GATES")
  [ -z "${RUNTIME_CONFIG:-}" ] || gate_flags+=(--runtime-config="$RUNTIME_CONFIG")
  exec "$KUBE_BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --cert-dir="$dir/certs" --tls-cert-file="$dir/certs/apiserver.crt" \
    --tls-private-key-file="$dir/certs/apiserver.key" \
    --secure-port="$APISERVER_PORT" --bind-address="${BIND_ADDRESS:-127.0.0.1}" \
    ${ADVERTISE_ADDRESS:+--advertise-address="$ADVERTISE_ADDRESS"} \
    --service-cluster-ip-range=10.0.0.0/24 --authorization-mode=RBAC \
    --token-auth-file="$dir/tokens.csv" \
    --service-account-issuer="https://127.0.0.1:$APISERVER_PORT" \
    --service-account-key-file="$dir/certs/sa.pub" \
    --service-account-signing-key-file="$dir/certs/sa.key" \
    "${sa_flags[@]}" "${audit_flags[@]}" "${gate_flags[@]}" \
    --etcd-compaction-interval=0 --kubelet-preferred-address-types=InternalIP \
    --kubelet-client-certificate="$dir/certs/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$dir/certs/apiserver-kubelet-client.key"
}

# Stops every process recorded under pids/, newest first: SIGTERM, then SIGKILL after 10 s.
# etcd's data directory: in memory (/dev/shm) unless TJ_LOCAL_CLUSTER_ETCD_ON_DISK=1.
# etcd fsyncs every commit; on a disk that a build is writing to at the same time a commit
# waited tens of milliseconds, so the API server's throughput (and every test's pace) followed
# the machine's I/O rather than its CPU. A test cluster's data need not survive the machine.
# $STATE_DIR/etcd is then a link to /dev/shm/tj-etcd.XXXXXX, removed at `down`; directories
# left there by clusters that were never brought down are removed at the next `up`.
place_etcd_data() {
  if [ "${TJ_LOCAL_CLUSTER_ETCD_ON_DISK:-0}" != 1 ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
    local dir
    # (older than a minute: not one that another cluster's `up` is setting up right now)
    while IFS= read -r dir; do
      local owner
      owner=$(cat "$dir/owner" 2>/dev/null) || owner=
      { [ -n "$owner" ] && [ "$(readlink "$owner/etcd" 2>/dev/null)" = "$dir" ]; } || rm -rf "$dir"
    done < <(find /dev/shm -maxdepth 1 -name 'tj-etcd.*' -type d -mmin +1 2>/dev/null)
    if dir=$(mktemp -d /dev/shm/tj-etcd.XXXXXX); then
      echo "$STATE_DIR" >"$dir/owner"
      mkdir -m 700 "$dir/data"
      ln -s "$dir" "$STATE_DIR/etcd"
      return 0
    fi
  fi
  mkdir -p "$STATE_DIR/etcd"
}
etcd_data_dir() {
  if [ -L "$STATE_DIR/etcd" ]; then echo "$STATE_DIR/etcd/data"; else echo "$STATE_DIR/etcd"; fi
}
remove_etcd_memory() {
  [ -L "$STATE_DIR/etcd" ] || return 0
  rm -rf "$(readlink "$STATE_DIR/etcd")"
  rm -f "$STATE_DIR/etcd"
}

cmd_down() {
  [ -d "$STATE_DIR/pids" ] || { log "nothing to stop in $STATE_DIR"; remove_etcd_memory; return 0; }
  # The real node first, while the API server still runs (its pods are deleted through it).
  find_binaries_quietly
  real_node_down
  local name
  # Kueue's manager (hack/kueue.sh) and the training-operator (hack/training-operator.sh)
  # first: they would only log the API server's going.
  # tj-local-node: the process node's former name, recorded by clusters started before it.
  # tj-operator-<pid>: operators bench/scale runs as processes of this machine.
  local others
  others=$(cd "$STATE_DIR/pids" && ls -d tj-operator-* 2>/dev/null) || true
  for name in $others kueue training-operator kwok tj-process-node tj-local-node kube-scheduler kube-controller-manager kube-apiserver etcd; do
    stop_recorded "$name"
  done
  rmdir "$STATE_DIR/pids" 2>/dev/null || true
  remove_etcd_memory
}

# Stops kube-apiserver and starts it again on the same port; returns when it is healthy.
cmd_restart_apiserver() {
  local f=$STATE_DIR/pids/kube-apiserver
  [ -f "$f" ] || die "no kube-apiserver recorded in $STATE_DIR: run up first"
  local pid
  pid=$(cat "$f")
  if pid_alive "$pid"; then
    kill -TERM "$pid"
    local deadline=$((SECONDS + 15))
    while pid_alive "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
    pid_alive "$pid" && kill -KILL "$pid"
  fi
  start kube-apiserver "$REPO_ROOT/hack/local-cluster.sh" run-apiserver "$STATE_DIR"
  wait_for "$HEALTH_TIMEOUT_S" "API server" api_healthy ||
    die "the API server did not come back; see $STATE_DIR/logs/kube-apiserver.log"
  log "kube-apiserver restarted (pid $(cat "$f"))"
}

# Compacts etcd up to its current revision through its HTTP gateway: older resourceVersions
# are then gone for good (a watch from one gets 410 once the API server's cache has no copy).
cmd_compact() {
  # shellcheck disable=SC1091
  . "$STATE_DIR/cluster.env"
  local url=http://127.0.0.1:$ETCD_PORT/v3/kv rev
  rev=$(curl -fsS -X POST "$url/range" -d '{"key":"AA=="}' | jq -r .header.revision)
  { [ -n "$rev" ] && [ "$rev" != null ]; } || die "could not read etcd's revision at $url"
  curl -fsS -X POST "$url/compaction" -d "{\"revision\":\"$rev\",\"physical\":true}" >/dev/null
  log "etcd compacted at revision $rev"
  echo "$rev"
}

cmd_status() {
  if [ ! -d "$STATE_DIR/pids" ]; then echo "down"; return 1; fi
  local f
  for f in "$STATE_DIR"/pids/*; do
    [ -f "$f" ] || continue
    if pid_alive "$(cat "$f")"; then state=running; else state=dead; fi
    printf '%-24s pid %-8s %s\n' "$(basename "$f")" "$(cat "$f")" "$state"
  done
  if api_healthy; then
    echo "api server https://127.0.0.1:$(cat "$STATE_DIR/port") healthy"
    echo "kubeconfig $STATE_DIR/kubeconfig"
  else
    echo "api server not healthy"
    return 1
  fi
}

# KUBE_BIN and NODE_BINS for `down` (kube-proxy --cleanup, ctr) without building anything.
find_binaries_quietly() {
  [ -f "$STATE_DIR/cluster.env" ] || return 0
  KUBE_BIN=$(sed -n 's/^KUBE_BIN=//p' "$STATE_DIR/cluster.env")
  [ ! -x "$KUBE_BIN/kubectl" ] || PATH=$KUBE_BIN:$PATH
  NODE_BINS=$(sed -n 's/^NODE_BINS=//p' "$STATE_DIR/cluster.env")
}

# shellcheck source=hack/real-node.sh
. "$REPO_ROOT/hack/real-node.sh"
# shellcheck source=hack/private-file.sh
. "$REPO_ROOT/hack/private-file.sh"

case "${1:-}" in
  up) cmd_up ;;
  run-node-feeder) cmd_run_node_feeder "$2" ;;
  down) cmd_down ;;
  status) cmd_status ;;
  build) find_binaries; echo "$KUBE_BIN" ;;
  env) echo "export KUBECONFIG=$STATE_DIR/kubeconfig"
       echo "export PATH=$("$BUILD_K8S" path kubernetes):\$PATH" ;;
  kubectl-dir) "$BUILD_K8S" path kubernetes ;;
  run-apiserver) cmd_run_apiserver "$2" ;;
  restart-apiserver) cmd_restart_apiserver ;;
  compact) cmd_compact ;;
  restart-node) cmd_restart_node "${2:-}" ;;
  stop-node) cmd_stop_node ;;
  start-node) cmd_start_node ;;
  *) sed -n '2,44p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
