# shellcheck shell=bash
# The real node of the local cluster (TJ_NODE=containerd), sourced by hack/local-cluster.sh:
# containerd 2 (built from the Go module proxy, hack/build-kubernetes.sh) as the CRI runtime
# with Debian's runc and CNI bridge plugin, the kubelet and kube-proxy of the same build as the
# API server, CoreDNS as the cluster DNS, and a feeder that provisions the claims' volumes.
# Pods are real containers from images imported with hack/images.sh.
#
# Everything lives under $STATE_DIR/real-node (sockets, containerd's root and state, the kubelet's
# root, the volumes); what the kubelet and kube-proxy change outside it (sysctls, iptables
# chains, the CNI bridge, cgroups, a few directories) is recorded at `up` and undone at
# `down`. The names the kubelet and kube-proxy use (KUBE-* chains, the kubepods cgroup, DNS
# on port 53 of the node address) are machine-wide, so one real node runs on a machine at a
# time (an flock on /run/tj-real-node.lock; /run/tj-real-node.owner names the cluster).
#
# Needs root and the packages of hack/install-deps.sh. TJ_NETWORK_POLICY=kube-router also
# enforces NetworkPolicies (hack/network-policy.sh); the bridge plugin alone does not.

# shellcheck source=hack/network-policy.sh
. "$REPO_ROOT/hack/network-policy.sh"

REAL_NODE_LOCK=/run/tj-real-node.lock
REAL_NODE_OWNER=/run/tj-real-node.owner
POD_CIDR=10.244.0.0/16
CNI_BRIDGE=tj-cni0
CLUSTER_DOMAIN=cluster.local
# The kernel settings the kubelet, kube-proxy and the bridge plugin may change; `down` puts
# back what they were at `up`.
NODE_SYSCTLS=(vm.overcommit_memory kernel.panic kernel.panic_on_oops net.ipv4.ip_forward
  net.ipv4.conf.all.route_localnet net.bridge.bridge-nf-call-iptables
  net.bridge.bridge-nf-call-ip6tables net.netfilter.nf_conntrack_max
  net.netfilter.nf_conntrack_tcp_timeout_established
  net.netfilter.nf_conntrack_tcp_timeout_close_wait net.ipv6.conf.all.forwarding)
# Directories the kubelet creates whatever its root directory; removed at `down` when `up`
# found them missing.
NODE_HOST_DIRS=(/var/lib/kubelet /var/log/pods /var/log/containers /usr/libexec/kubernetes
  /var/lib/cni /etc/cni /opt/cni)

# The address pods and the API server reach the node at: its first global IPv4 address (the
# kubelet refuses a loopback node IP).
node_ip() {
  ip -4 -o addr show scope global | awk '{sub(/\/.*/, "", $4); print $4; exit}'
}

real_node_paths() {
  RN=$STATE_DIR/real-node
  RN_SOCK=$RN/containerd.sock
}

real_node_check() {
  [ "$(id -u)" -eq 0 ] || die "TJ_NODE=containerd needs root (containers, iptables, mounts)"
  local tool tools="runc iptables podman conntrack containerd containerd-shim-runc-v2 ctr coredns"
  PATH=$NODE_BINS:$PATH
  for tool in $tools; do
    command -v "$tool" >/dev/null || die "'$tool' is missing: run hack/install-deps.sh"
  done
  [ -x /usr/lib/cni/bridge ] || die "no CNI plugins in /usr/lib/cni: run hack/install-deps.sh"
  have_all "$KUBE_BIN" kubelet kube-proxy ||
    die "no kubelet and kube-proxy in $KUBE_BIN: run hack/local-cluster.sh build"
  [ -n "$(node_ip)" ] || die "this machine has no global IPv4 address for the node"
  network_policy_check
  local img
  for img in $("$REPO_ROOT/hack/images.sh" names); do
    CONTAINERS_CONF=${CONTAINERS_CONF:-$CACHE_ROOT/images/containers.conf} \
      podman image exists "$img" 2>/dev/null || die "no image $img: run make images"
  done
}

# Takes the machine's real-node lock for this cluster, or says which cluster has it. The lock
# is an flock on fd 8, which every process `up` starts from here on inherits: it is held
# while any process of the cluster lives, and released by the kernel when the last one ends,
# so two clusters starting at once cannot both have it and a crashed one cannot keep it. A
# cluster going down releases it within seconds: wait that long
# (TJ_REAL_NODE_LOCK_WAIT seconds, default 60) before saying another node runs.
real_node_lock() {
  exec 8>>"$REAL_NODE_LOCK"
  if ! flock -w "${TJ_REAL_NODE_LOCK_WAIT:-60}" 8; then
    local owner
    owner=$(cat "$REAL_NODE_OWNER" 2>/dev/null) || owner="another cluster"
    die "the real node of $owner runs on this machine (one at a time): bring it down" \
        "(TJ_LOCAL_CLUSTER_DIR=<its directory> hack/local-cluster.sh down) or use TJ_NODE=process"
  fi
  echo "$STATE_DIR" >"$REAL_NODE_OWNER"
}

# What `down` compares against: sysctl values and which host directories existed.
real_node_record() {
  local k
  : >"$RN/sysctl.saved"
  for k in "${NODE_SYSCTLS[@]}"; do
    sysctl -n "$k" >/dev/null 2>&1 && echo "$k=$(sysctl -n "$k")" >>"$RN/sysctl.saved"
  done
  : >"$RN/host-dirs.created"
  for k in "${NODE_HOST_DIRS[@]}"; do
    [ -e "$k" ] || echo "$k" >>"$RN/host-dirs.created"
  done
}

# containerd 2's configuration (version 3; 2.4 migrates it to its version 4, with a warning;
# written as version 4 its top-level [grpc] address was ignored, and containerd served the
# machine's /run/containerd/containerd.sock): root, state and sockets under $RN, Debian's runc
# and CNI plugins, the pause image pinned (kubelet 1.35+ no longer names it: the runtime keeps
# it and never collects it; without a registry it could not be pulled back).
containerd_config() {
  local pause=$1
  cat >"$RN/containerd/config.toml" <<EOF
version = 3
root = "$RN/containerd/root"
state = "$RN/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper",
                    "io.containerd.snapshotter.v1.erofs", "io.containerd.nri.v1.nri",
                    "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$RN_SOCK"
[ttrpc]
  address = "$RN_SOCK.ttrpc"
[plugins.'io.containerd.internal.v1.opt']
  path = "$RN/containerd/opt"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$pause"
[plugins.'io.containerd.cri.v1.runtime']
  # Root here cannot lower oom_score_adj (no CAP_SYS_RESOURCE): without this every sandbox
  # fails with "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  # Pod network namespaces under the state directory, not /var/run/netns.
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$(command -v runc)"
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$RN/cni/net.d"
EOF
}

real_node_config() {
  local ip=$1 port_k=$2 port_h=$3 pause
  pause=$("$REPO_ROOT/hack/images.sh" names | grep /tj-pause:)
  mkdir -p "$RN/containerd" "$RN/cni/net.d" "$RN/cni/ipam" "$RN/kubelet" "$RN/volumes" \
    "$RN/volume-plugins" "$RN/dns"
  chmod 755 "$RN/dns"
  containerd_config "$pause"
  cat >"$RN/cni/net.d/10-tj.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "tj-pods",
  "plugins": [
    {"type": "bridge", "bridge": "$CNI_BRIDGE", "isGateway": true, "ipMasq": true,
     "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$RN/cni/ipam",
              "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  echo "nameserver $ip" >"$RN/resolv.conf"
  cat >"$RN/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: $port_k
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $port_h
tlsCertFile: $STATE_DIR/certs/node.crt
tlsPrivateKeyFile: $STATE_DIR/certs/node.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $STATE_DIR/certs/ca.crt}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
failSwapOn: false
makeIPTablesUtilChains: false
clusterDNS: [$ip]
clusterDomain: $CLUSTER_DOMAIN
resolvConf: $RN/resolv.conf
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, nodefs.inodesFree: 1%,
               imagefs.available: 1%}
nodeStatusUpdateFrequency: 5s
syncFrequency: 10s
# Machines that mount cgroups v1 (hybrid): kubelet 1.35+ refuses them unless told.
failCgroupV1: false
containerRuntimeEndpoint: unix://$RN_SOCK
volumePluginDir: $RN/volume-plugins
EOF
}

# CoreDNS on the node address, port 53: the cluster's names from the API server (Services,
# and pods with a hostname behind a headless Service), the rest from this machine's servers.
coredns_config() {
  local ip=$1 upstream=() ns
  while read -r ns; do
    [ "$ns" = "$ip" ] || upstream+=("$ns")
  done < <(awk '/^nameserver/ {print $2}' /etc/resolv.conf)
  [ ${#upstream[@]} -gt 0 ] || upstream=(/etc/resolv.conf)
  cat >"$RN/dns/Corefile" <<EOF
.:53 {
    bind $ip
    errors
    kubernetes $CLUSTER_DOMAIN in-addr.arpa ip6.arpa {
        kubeconfig $STATE_DIR/kubeconfig local
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 1
    }
    forward . ${upstream[*]}
}
EOF
}

# Starts containerd, imports the images, starts the cluster DNS, the feeder, the kubelet and
# kube-proxy.
real_node_up() {
  real_node_paths
  local ip port_k port_h port_pm port_ph
  ip=$(node_ip)
  port_k=$(free_port); port_h=$(free_port); port_pm=$(free_port); port_ph=$(free_port)
  mkdir -p "$RN"
  real_node_record
  real_node_config "$ip" "$port_k" "$port_h"
  printf 'NODE=containerd\nNODE_IP=%q\nKUBELET_PORT=%q\n' "$ip" "$port_k" >"$STATE_DIR/node.env"

  # containerd finds its shim (containerd-shim-runc-v2) on PATH: the built one first.
  [ -z "${NODE_BINS:-}" ] || PATH=$NODE_BINS:$PATH
  start containerd containerd --config "$RN/containerd/config.toml"
  wait_for 30 containerd ctr -a "$RN_SOCK" version >/dev/null 2>&1 ||
    die "containerd did not start; see $STATE_DIR/logs/containerd.log"
  CONTAINERS_CONF=${CONTAINERS_CONF:-$CACHE_ROOT/images/containers.conf} \
    "$REPO_ROOT/hack/images.sh" import "$RN_SOCK" 2>>"$STATE_DIR/logs/images.log" ||
    die "importing the images into containerd failed; see $STATE_DIR/logs/images.log"

  local kc=$STATE_DIR/kubeconfig
  coredns_config "$ip"
  start coredns coredns -conf "$RN/dns/Corefile"
  start node-feeder "$REPO_ROOT/hack/local-cluster.sh" run-node-feeder "$STATE_DIR"

  start kubelet "$KUBE_BIN/kubelet" --config="$RN/kubelet/config.yaml" --kubeconfig="$kc" \
    --root-dir="$RN/kubelet" --cert-dir="$RN/kubelet/pki" \
    --hostname-override=local-node --node-ip="$ip" --v=1
  start kube-proxy "$KUBE_BIN/kube-proxy" --kubeconfig="$kc" --hostname-override=local-node \
    --proxy-mode=iptables --cluster-cidr="$POD_CIDR" --oom-score-adj=0 \
    --conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 \
    --conntrack-tcp-timeout-close-wait=0 --bind-address="$ip" \
    --metrics-bind-address="127.0.0.1:$port_pm" --healthz-bind-address="127.0.0.1:$port_ph"
  network_policy_up
}

# Runs in the foreground until the cluster goes down (started by real_node_up): every second,
# a hostPath volume in node/volumes for each claim that has none (what a local-path provisioner does: a directory
# every uid may write, bound through the controller manager's volume binder; deleted with its
# claim).
cmd_run_node_feeder() {
  STATE_DIR=$1
  real_node_paths
  local api token ca tick=0
  api=https://127.0.0.1:$(cat "$STATE_DIR/port")
  token=$(cat "$STATE_DIR/token")
  ca=$STATE_DIR/certs/ca.crt
  get() { curl -fsS --max-time 5 --cacert "$ca" -H "Authorization: Bearer $token" "$api$1"; }
  send() {  # send METHOD PATH JSON
    curl -fsS --max-time 5 --cacert "$ca" -H "Authorization: Bearer $token" -X "$1" \
      -H 'Content-Type: application/json' --data-binary "$3" "$api$2" >/dev/null
  }
  while [ -d "$STATE_DIR/pids" ]; do
    local pvcs pvs
    if pvcs=$(get /api/v1/persistentvolumeclaims); then
      jq -c '.items[] | select((.spec.volumeName // "") == "" and .metadata.deletionTimestamp == null)
             | {ns: .metadata.namespace, name: .metadata.name, uid: .metadata.uid,
                size: (.spec.resources.requests.storage // "1Gi"),
                modes: (.spec.accessModes // ["ReadWriteOnce"]),
                class: (.spec.storageClassName // "")}' <<<"$pvcs" |
      while read -r c; do
        local uid dir
        uid=$(jq -r .uid <<<"$c")
        dir=$RN/volumes/pvc-$uid
        mkdir -p "$dir" && chmod 0777 "$dir"
        send POST /api/v1/persistentvolumes "$(jq -c --arg dir "$dir" '{
          apiVersion: "v1", kind: "PersistentVolume",
          metadata: {name: "pvc-\(.uid)",
                     annotations: {"pv.kubernetes.io/provisioned-by": "tj-local-cluster"}},
          spec: {capacity: {storage: .size}, accessModes: .modes, storageClassName: .class,
                 persistentVolumeReclaimPolicy: "Retain", hostPath: {path: $dir},
                 claimRef: {apiVersion: "v1", kind: "PersistentVolumeClaim", namespace: .ns,
                            name: .name, uid: .uid}}}' <<<"$c")" 2>/dev/null || true
      done || true
    fi
    # Every few seconds: volumes whose claim is gone.
    if [ $((tick % 5)) -eq 0 ] && pvs=$(get /api/v1/persistentvolumes); then
      jq -r '.items[] | select(.metadata.annotations["pv.kubernetes.io/provisioned-by"]
                               == "tj-local-cluster" and .status.phase == "Released")
             | .metadata.name' <<<"$pvs" |
      while read -r pv; do
        send DELETE "/api/v1/persistentvolumes/$pv" '{}' 2>/dev/null && rm -rf "$RN/volumes/$pv"
      done || true
    fi
    tick=$((tick + 1))
    sleep 1
  done
}

# Stops the real node and undoes what it changed on the machine. Safe to run twice and on a
# node that never came up.
real_node_down() {
  real_node_paths
  [ -d "$RN" ] || return 0
  [ -z "${NODE_BINS:-}" ] || PATH=$NODE_BINS:$PATH
  # Pods first, through the kubelet while it runs (it stops their containers and tears their
  # network down); what is left after 30 s is killed below.
  # The controllers and the scheduler stop first, so that no new pod replaces them.
  if [ -f "$STATE_DIR/pids/kubelet" ] && pid_alive "$(cat "$STATE_DIR/pids/kubelet")" &&
     api_healthy; then
    stop_recorded kube-controller-manager
    stop_recorded kube-scheduler
    kubectl --kubeconfig "$STATE_DIR/kubeconfig" delete pods --all --all-namespaces \
      --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
    local deadline=$((SECONDS + 30))
    while [ $SECONDS -lt $deadline ] && running_tasks | grep -q .; do sleep 0.5; done
  fi
  local name
  network_policy_stop
  for name in kube-proxy kubelet node-feeder coredns; do stop_recorded "$name"; done
  # Containers that outlived the kubelet, then containerd and its shims.
  if [ -S "$RN_SOCK" ]; then
    local t
    for t in $(running_tasks); do
      ctr -a "$RN_SOCK" -n k8s.io tasks kill -s KILL "$t" >/dev/null 2>&1 || true
    done
    sleep 0.5
    for t in $(ctr -a "$RN_SOCK" -n k8s.io containers ls -q 2>/dev/null); do
      ctr -a "$RN_SOCK" -n k8s.io tasks delete -f "$t" >/dev/null 2>&1 || true
      ctr -a "$RN_SOCK" -n k8s.io containers delete "$t" >/dev/null 2>&1 || true
    done
  fi
  stop_recorded containerd
  pkill -KILL -f "containerd-shim.* -address $RN_SOCK" 2>/dev/null || true
  # kube-proxy's chains (KUBE-*), then what the CNI plugins left (CNI-*).
  if [ -x "${KUBE_BIN:-}/kube-proxy" ]; then
    "$KUBE_BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true
  fi
  remove_chains
  network_policy_remove_sets
  # Mounts under the node's directory (pod volumes, network namespaces, root file systems),
  # deepest first.
  local m
  for m in $(findmnt -rn -o TARGET | grep -F "$RN/" | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  ip link del "$CNI_BRIDGE" 2>/dev/null || true
  remove_kubepods_cgroups
  if [ -f "$RN/sysctl.saved" ]; then
    local kv
    while IFS= read -r kv; do
      [ "$(sysctl -n "${kv%%=*}" 2>/dev/null)" = "${kv#*=}" ] ||
        sysctl -q -w "$kv" >/dev/null 2>&1 || log "could not restore $kv"
    done <"$RN/sysctl.saved"
  fi
  if [ -f "$RN/host-dirs.created" ]; then
    local d
    while IFS= read -r d; do rm -rf "$d"; done <"$RN/host-dirs.created"
  fi
  [ "$(cat "$REAL_NODE_OWNER" 2>/dev/null)" = "$STATE_DIR" ] && rm -f "$REAL_NODE_OWNER"
  rm -rf "$RN"
}

# The IDs of containerd's running tasks (containers).
running_tasks() {
  ctr -a "$RN_SOCK" -n k8s.io tasks ls 2>/dev/null | awk 'NR > 1 && $3 == "RUNNING" {print $1}'
}

# Stops one process recorded under pids/, if it runs: SIGTERM to its process group (each was
# started with setsid, so the group holds it and its children), SIGKILL after 10 s.
stop_recorded() {
  local f=$STATE_DIR/pids/$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if pid_alive "$pid"; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 10))
    while pid_alive "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
    if pid_alive "$pid"; then
      log "$1 (pid $pid) ignored SIGTERM; killing it"
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
    log "stopped $1 (pid $pid)"
  fi
  rm -f "$f"
}

# Removes every KUBE-* and CNI-* chain of the filter, nat and mangle tables (IPv4 and IPv6),
# with the rules that jump to them.
remove_chains() {
  local cmd table chain rule
  for cmd in iptables ip6tables; do
    command -v "$cmd" >/dev/null || continue
    for table in filter nat mangle; do
      "$cmd-save" -t "$table" 2>/dev/null | grep -E '^-A .* -j (KUBE|CNI)-' |
        grep -vE '^-A (KUBE|CNI)-' | sed 's/^-A //' |
        while IFS= read -r rule; do
          eval "$cmd -t $table -D $rule" 2>/dev/null || true
        done || true
      for chain in $("$cmd-save" -t "$table" 2>/dev/null | sed -n 's/^:\(\(KUBE\|CNI\)-[^ ]*\) .*/\1/p'); do
        "$cmd" -t "$table" -F "$chain" 2>/dev/null || true
      done
      for chain in $("$cmd-save" -t "$table" 2>/dev/null | sed -n 's/^:\(\(KUBE\|CNI\)-[^ ]*\) .*/\1/p'); do
        "$cmd" -t "$table" -X "$chain" 2>/dev/null || true
      done
    done
  done
}

# The kubelet's pod cgroups (kubepods, in every v1 hierarchy), innermost first, once empty.
remove_kubepods_cgroups() {
  local h
  for h in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/kubepods.slice; do
    [ -d "$h" ] || continue
    find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
}
