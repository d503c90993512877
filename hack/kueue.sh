#!/usr/bin/env bash
# Kueue in a running local cluster (hack/local-cluster.sh), from Kueue's own manifests:
#
#   hack/kueue.sh install     build Kueue's manager (cached, hack/build-kubernetes.sh kueue),
#                             install its CRDs, RBAC and webhook configuration, start it
#   hack/kueue.sh uninstall   remove what install installed and stop the manager
#   hack/kueue.sh status      say whether the manager runs and answers; exit 0 when it does
#
# The manifests are Kueue's config/default (KUEUE_VERSION of hack/versions.env), rendered by
# the cluster's kubectl (`kubectl kustomize`) from the module in Go's module cache, the one the
# manager was built from. The manager runs as a process of this machine, like the rest of the
# control plane (its PID in <state>/pids/kueue, so `hack/local-cluster.sh down` stops it too;
# its log in <state>/logs/kueue.log), so that the API server reaches its webhooks on both node
# kinds; the changes to the upstream manifests follow from that (docs/kueue.md):
#   - the webhooks (admission and CRD conversion) call https://127.0.0.1:<free port>/<path>,
#     with a serving certificate for 127.0.0.1 signed by a CA of this install (caBundle), in
#     place of the Service kueue-webhook-service and Kueue's internal certificate management;
#   - no Deployment, Services, APIService (the visibility API is off) or certificate Secret;
#   - the Configuration is upstream's (its list of integrations) plus
#     integrations.externalFrameworks: [TrainingJob.v1alpha1.tjo.dev], free ports for the
#     webhook and health servers, no metrics server, no leader election (one manager); with
#     TJ_KUEUE_WAIT_FOR_PODS_READY=<duration> (e.g. 30s) at install, waitForPodsReady with
#     that timeout and recoveryTimeout (Kueue evicts an admitted Workload whose PodsReady
#     condition is not True in time); with TJ_KUEUE_DEVICE_CLASSES=<resource>=<class>[,...]
#     at install, Kueue's DynamicResourceAllocation gate and resources.deviceClassMappings, so
#     that the devices a pod's resource claims ask for of <class> count as <resource>;
#     with TJ_KUEUE_FEATURE_GATES=<Gate>=true[,...] at install, those gates too (e.g.
#     PriorityBoost=true, for the operator's --kueue-priority-boost-max).
# The manager talks to the API server with the cluster's admin kubeconfig; Kueue's RBAC is
# installed as upstream ships it.
#
# State: <state>/kueue/ (TJ_LOCAL_CLUSTER_DIR, as hack/local-cluster.sh): the rendered
# manifests, the Configuration, the certificates.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE_DIR=$(realpath -m "${TJ_LOCAL_CLUSTER_DIR:-$REPO_ROOT/.local-cluster}")
KUEUE_DIR=$STATE_DIR/kueue
READY_TIMEOUT_S=${TJ_KUEUE_TIMEOUT:-120}
# shellcheck source=hack/versions.env
. "$REPO_ROOT/hack/versions.env"
TJ_EXTERNAL_FRAMEWORK=TrainingJob.v1alpha1.tjo.dev

log() { echo "kueue: $*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=hack/host-webhook.sh
. "$REPO_ROOT/hack/host-webhook.sh"

# The directory of sigs.k8s.io/kueue@KUEUE_VERSION in Go's module cache.
kueue_module_dir() { module_dir "sigs.k8s.io/kueue@$KUEUE_VERSION" config/default; }

make_certs() {  # a CA of this install, and the webhook server's certificate for 127.0.0.1
  webhook_certs "$KUEUE_DIR/certs" tj-local-kueue-ca
}

# Kueue's manager, with its internal certificate management off, reads a certificate for its
# metrics server from this fixed path at start and exits without one, even with the metrics
# server off (bindAddress "0", as here: the pair is never served). A pair made once for the
# machine, shared by every cluster's manager; left in place at uninstall.
METRICS_CERT_DIR=/etc/kueue/metrics/certs
ensure_metrics_cert() {
  placeholder_cert "$METRICS_CERT_DIR" kueue-metrics-unused \
    "Kueue's manager (its metrics server, when Kueue does not manage its certificates)"
}

# render WEBHOOK_PORT HEALTH_PORT: upstream's manifests, changed as the header says, into
# cluster.yaml (namespace, CRDs, RBAC), webhooks.yaml and config.yaml.
render() {
  local mod
  mod=$(kueue_module_dir)
  "$KUBECTL" kustomize "$mod/config/default" >"$KUEUE_DIR/upstream.yaml"
  "$(python_yaml)" - "$KUEUE_DIR" "$1" "$2" "$TJ_EXTERNAL_FRAMEWORK" <<'EOF'
import base64, os, sys, yaml
out, webhook_port, health_port, external = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
ca = base64.b64encode(open(f"{out}/certs/ca.crt", "rb").read()).decode()
docs = [d for d in yaml.safe_load_all(open(f"{out}/upstream.yaml")) if d]
base = f"https://127.0.0.1:{webhook_port}"

def to_url(client_config, default_path):
    svc = client_config.pop("service", None) or {}
    client_config["url"] = base + (svc.get("path") or default_path)
    client_config["caBundle"] = ca

cluster, webhooks, config = [], [], None
for d in docs:
    kind = d.get("kind")
    if kind in ("Deployment", "Service", "APIService", "Secret"):
        continue
    if kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for w in d.get("webhooks", []):
            to_url(w["clientConfig"], "/")
        webhooks.append(d)
        continue
    if kind == "CustomResourceDefinition":
        conv = d.get("spec", {}).get("conversion", {})
        if conv.get("strategy") == "Webhook":
            to_url(conv["webhook"]["clientConfig"], "/convert")
        # Annotations of cert-manager or Kueue's own CA injection: nothing injects here.
        d["metadata"].get("annotations", {}).pop("cert-manager.io/inject-ca-from", None)
    if kind == "ConfigMap" and "controller_manager_config.yaml" in d.get("data", {}):
        config = yaml.safe_load(d["data"]["controller_manager_config.yaml"])
    cluster.append(d)
with open(f"{out}/crds.txt", "w") as f:
    for d in cluster:
        if d.get("kind") == "CustomResourceDefinition":
            f.write("crd/" + d["metadata"]["name"] + "\n")
if config is None:
    sys.exit("kueue: error: upstream's manifests have no ConfigMap with controller_manager_config.yaml")
config["namespace"] = "kueue-system"
config["health"] = {"healthProbeBindAddress": f"127.0.0.1:{health_port}"}
config["metrics"] = {"bindAddress": "0"}
config["webhook"] = {"host": "127.0.0.1", "port": int(webhook_port), "certDir": f"{out}/certs"}
config["leaderElection"] = {"leaderElect": False}
config["internalCertManagement"] = {"enable": False}
integrations = config.setdefault("integrations", {})
ext = integrations.get("externalFrameworks") or []
if external not in ext:
    ext.append(external)
integrations["externalFrameworks"] = ext
classes = [m for m in os.environ.get("TJ_KUEUE_DEVICE_CLASSES", "").split(",") if m]
if classes:
    mappings = [{"name": m.split("=", 1)[0], "deviceClassNames": [m.split("=", 1)[1]]}
                for m in classes]
    config.setdefault("resources", {})["deviceClassMappings"] = mappings
ready = os.environ.get("TJ_KUEUE_WAIT_FOR_PODS_READY", "")
if ready:
    config["waitForPodsReady"] = {"timeout": ready, "recoveryTimeout": ready,
                                  "blockAdmission": False}
yaml.safe_dump_all(cluster, open(f"{out}/cluster.yaml", "w"), sort_keys=False)
yaml.safe_dump_all(webhooks, open(f"{out}/webhooks.yaml", "w"), sort_keys=False)
yaml.safe_dump(config, open(f"{out}/config.yaml", "w"), sort_keys=False)
EOF
}

manager_pid() { cat "$STATE_DIR/pids/kueue" 2>/dev/null || true; }
manager_ready() { health_ready "$KUEUE_DIR/health-port"; }
stop_manager() { stop_host_process kueue; }

cmd_install() {
  cluster_env
  if pid_alive "$(manager_pid)" && manager_ready; then
    log "Kueue $KUEUE_VERSION runs already (pid $(manager_pid))"
    return 0
  fi
  stop_manager
  local start=$SECONDS bin
  "$REPO_ROOT/hack/build-kubernetes.sh" kueue
  bin=$("$REPO_ROOT/hack/build-kubernetes.sh" path kueue)/kueue
  rm -rf "$KUEUE_DIR" && mkdir -p "$KUEUE_DIR" "$STATE_DIR/logs"
  make_certs
  ensure_metrics_cert
  local webhook_port health_port
  webhook_port=$(free_port)
  health_port=$(free_port)
  render "$webhook_port" "$health_port"
  echo "$health_port" >"$KUEUE_DIR/health-port"
  # CRDs first, then the manager (it needs them), then the webhooks (they need the manager).
  "$KUBECTL" apply --server-side --force-conflicts -f "$KUEUE_DIR/cluster.yaml" >/dev/null
  local crds
  mapfile -t crds <"$KUEUE_DIR/crds.txt"
  "$KUBECTL" wait --for=condition=Established --timeout=60s "${crds[@]}" >/dev/null
  # The visibility API (an aggregated API server) is off: nothing here would route to it.
  KUBECONFIG=$STATE_DIR/kubeconfig setsid "$bin" --config="$KUEUE_DIR/config.yaml" \
    --feature-gates="VisibilityOnDemand=false${TJ_KUEUE_DEVICE_CLASSES:+,DynamicResourceAllocation=true}${TJ_KUEUE_FEATURE_GATES:+,$TJ_KUEUE_FEATURE_GATES}" \
    >"$STATE_DIR/logs/kueue.log" 2>&1 </dev/null &
  echo $! >"$STATE_DIR/pids/kueue"
  log "started the manager (pid $!, log $STATE_DIR/logs/kueue.log)"
  if ! wait_for "$READY_TIMEOUT_S" "the manager is ready" manager_ready; then
    tail -n 20 "$STATE_DIR/logs/kueue.log" >&2
    die "Kueue's manager was not ready within ${READY_TIMEOUT_S}s (log above)"
  fi
  "$KUBECTL" apply --server-side --force-conflicts -f "$KUEUE_DIR/webhooks.yaml" >/dev/null
  # The webhooks answer: a server-side dry run of a ResourceFlavor passes through them.
  local probe='{"apiVersion":"kueue.x-k8s.io/v1beta2","kind":"ResourceFlavor","metadata":{"name":"tj-probe"}}'
  if ! wait_for 60 "the webhooks answer" \
    sh -c "echo '$probe' | '$KUBECTL' create --dry-run=server -f -"; then
    tail -n 20 "$STATE_DIR/logs/kueue.log" >&2
    die "Kueue's webhooks do not answer at https://127.0.0.1:$webhook_port (log above)"
  fi
  log "Kueue $KUEUE_VERSION installed in $((SECONDS - start)) s"
}

cmd_uninstall() {
  cluster_env
  # Kueue's objects first, while the manager runs and takes its finalizers off.
  local r
  for r in workloads.kueue.x-k8s.io localqueues.kueue.x-k8s.io clusterqueues.kueue.x-k8s.io \
    resourceflavors.kueue.x-k8s.io cohorts.kueue.x-k8s.io; do
    "$KUBECTL" get crd "$r" >/dev/null 2>&1 || continue
    "$KUBECTL" delete "$r" --all --all-namespaces --ignore-not-found --wait=false >/dev/null || true
  done
  [ -f "$KUEUE_DIR/webhooks.yaml" ] &&
    "$KUBECTL" delete --ignore-not-found -f "$KUEUE_DIR/webhooks.yaml" >/dev/null
  stop_manager
  # What still holds a finalizer of the stopped manager.
  for r in workloads localqueues clusterqueues resourceflavors; do
    "$KUBECTL" get crd "$r.kueue.x-k8s.io" >/dev/null 2>&1 || continue
    "$KUBECTL" get "$r.kueue.x-k8s.io" -A -o jsonpath='{range .items[*]}{.metadata.namespace}{" "}{.metadata.name}{"\n"}{end}' |
      while read -r ns name; do
        [ -n "$name" ] || { name=$ns; ns=; }
        "$KUBECTL" patch "$r.kueue.x-k8s.io" "$name" ${ns:+-n "$ns"} --type=merge \
          -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
      done
  done
  [ -f "$KUEUE_DIR/cluster.yaml" ] &&
    "$KUBECTL" delete --ignore-not-found --wait=false -f "$KUEUE_DIR/cluster.yaml" >/dev/null
  rm -rf "$KUEUE_DIR"
  log "Kueue uninstalled"
}

cmd_status() {
  local pid
  pid=$(manager_pid)
  if pid_alive "$pid" && manager_ready; then
    echo "kueue $KUEUE_VERSION: running (pid $pid), ready"
  elif pid_alive "$pid"; then
    echo "kueue $KUEUE_VERSION: running (pid $pid), not ready"; return 1
  else
    echo "kueue: not running"; return 1
  fi
}

case ${1:-} in
  install) cmd_install ;;
  uninstall) cmd_uninstall ;;
  status) cmd_status ;;
  *) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
