# shellcheck shell=bash
# NetworkPolicy enforcement on the real node (opt-in: TJ_NETWORK_POLICY=kube-router), sourced
# by hack/real-node.sh. The node's CNI (the bridge plugin) does not enforce NetworkPolicies:
# without this, a policy is stored by the API server and changes nothing. With it, kube-router's
# network policy controller (built from the Go module proxy: hack/build-kubernetes.sh
# kube-router) runs beside the kubelet as a host process, with its router and service proxy
# off:
#   kube-router --run-firewall=true --run-router=false --run-service-proxy=false
# It writes each policy as iptables chains (KUBE-ROUTER-*, KUBE-POD-FW-*, KUBE-NWPLCY-*) and
# ipsets (KUBE-SRC-*, KUBE-DST-*) that filter the pods' traffic: traffic between pods on the
# bridge passes the FORWARD chain because net.bridge.bridge-nf-call-iptables is 1
# (br_netfilter; the kubelet and kube-proxy need it too). Traffic from the node's own
# addresses to its pods is always admitted (kube-router's rule for the kubelet's probes).
# `down` stops it and removes its chains (with the node's other KUBE-* chains) and its ipsets.

KUBE_ROUTER_NAME=kube-router
# The local cluster's Service range (kube-apiserver's --service-cluster-ip-range in
# hack/local-cluster.sh), which kube-router needs to know.
NETWORK_POLICY_SERVICE_CIDR=10.0.0.0/24

network_policy_enabled() {
  case ${TJ_NETWORK_POLICY:-} in
    "") return 1 ;;
    kube-router) return 0 ;;
    *) die "TJ_NETWORK_POLICY=$TJ_NETWORK_POLICY: the only NetworkPolicy implementation of" \
         "the real node is kube-router (unset it for none)" ;;
  esac
}

network_policy_check() {
  network_policy_enabled || return 0
  KUBE_ROUTER_BIN=$("$REPO_ROOT/hack/build-kubernetes.sh" path kube-router)
  [ -x "$KUBE_ROUTER_BIN/kube-router" ] ||
    die "TJ_NETWORK_POLICY=kube-router: no kube-router in $KUBE_ROUTER_BIN: run" \
        "hack/build-kubernetes.sh kube-router (a few minutes, cached)"
  command -v ipset >/dev/null || die "'ipset' is missing: run hack/install-deps.sh"
  [ "$(sysctl -n net.bridge.bridge-nf-call-iptables 2>/dev/null)" = 1 ] ||
    sysctl -q -w net.bridge.bridge-nf-call-iptables=1 >/dev/null 2>&1 ||
    die "TJ_NETWORK_POLICY=kube-router needs bridged pod traffic to pass iptables" \
        "(net.bridge.bridge-nf-call-iptables=1: modprobe br_netfilter), which this kernel refuses"
}

# Starts the controller once the kubelet has registered the node (kube-router reads its
# addresses at start).
network_policy_up() {
  network_policy_enabled || return 0
  local kc=$STATE_DIR/kubeconfig
  wait_for 60 "node registration" "$KUBE_BIN/kubectl" --kubeconfig "$kc" get node local-node \
    >/dev/null 2>&1 || die "the kubelet did not register the node; see $STATE_DIR/logs/kubelet.log"
  start "$KUBE_ROUTER_NAME" "$KUBE_ROUTER_BIN/kube-router" --kubeconfig="$kc" \
    --run-firewall=true --run-router=false --run-service-proxy=false \
    --hostname-override=local-node --service-cluster-ip-range="$NETWORK_POLICY_SERVICE_CIDR" \
    --health-port=0 --metrics-port=0 --iptables-sync-period=30s --v=1
  wait_for 60 "kube-router's chains" iptables -S KUBE-ROUTER-FORWARD >/dev/null 2>&1 ||
    die "kube-router did not write its chains; see $STATE_DIR/logs/$KUBE_ROUTER_NAME.log"
  log "NetworkPolicies are enforced (kube-router's network policy controller)"
}

# Stops the controller; its ipsets go once the chains that use them are gone (real_node_down
# removes every KUBE-* chain first).
network_policy_stop() {
  stop_recorded "$KUBE_ROUTER_NAME"
}
network_policy_remove_sets() {
  command -v ipset >/dev/null || return 0
  local set
  for set in $(ipset list -n 2>/dev/null | grep -E '^(inet6:)?(KUBE-(SRC|DST)-|TMP-)'); do
    ipset destroy "$set" 2>/dev/null || log "could not destroy the ipset $set"
  done
}
