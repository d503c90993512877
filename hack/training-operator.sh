#!/usr/bin/env bash
# Kubeflow's training-operator (TFJob only) in a running local cluster (hack/local-cluster.sh),
# the peer bench/scale measures tj-operator against, from its own manifests:
#
#   hack/training-operator.sh install     build it (cached, hack/build-kubernetes.sh
#                                         training-operator), install the TFJob CRD, its
#                                         namespace, RBAC and webhook configuration, start it
#   hack/training-operator.sh uninstall   remove what install installed and stop it
#   hack/training-operator.sh status      say whether it runs and answers; exit 0 when it does
#   hack/training-operator.sh pid         print its PID (/proc/<pid>: RSS, CPU); exit 1 if none
#
# The manifests are the module's manifests/overlays/standalone (TRAINING_OPERATOR_VERSION of
# hack/versions.env), rendered by the cluster's kubectl (`kubectl kustomize`) from the module
# in Go's module cache, the one the binary was built from. The operator runs as a process of
# this machine, like the control plane and hack/kueue.sh's manager (its PID in
# <state>/pids/training-operator, so `hack/local-cluster.sh down` stops it too; its log in
# <state>/logs/training-operator.log), so that the API server reaches its webhook on every node
# kind. The changes to the upstream manifests follow from that (docs/peers.md):
#   - of the CRDs only TFJob's, and the operator runs with --enable-scheme=tfjob;
#   - the ValidatingWebhookConfiguration validator.training-operator.kubeflow.org keeps only
#     the TFJob webhook, which calls https://127.0.0.1:<free port>/validate-kubeflow-org-v1-tfjob
#     with a caBundle of a CA made for this install;
#   - its certificate Secret training-operator-webhook-cert (namespace kubeflow) holds that CA
#     and a serving certificate for 127.0.0.1 and training-operator.kubeflow.svc. The operator
#     cannot be told to leave its certificates alone: it runs cert-controller, which replaces a
#     CA or serving certificate it does not find valid and injects its CA into the webhook
#     configuration. It finds these valid and keeps them. The webhook server reads the pair
#     from $TMPDIR/k8s-webhook-server/serving-certs (TMPDIR=<state>/training-operator/tmp, where
#     a pod would mount the Secret); cert-controller waits for a file at the fixed path
#     /tmp/k8s-webhook-server/serving-certs/tls.crt (made once for the machine if missing);
#   - no Deployment or Service; health and metrics servers on free ports of 127.0.0.1, no
#     leader election (the default);
#   - it authenticates as its own ServiceAccount kubeflow/training-operator (a token from the
#     TokenRequest API in its own kubeconfig, <state>/training-operator/kubeconfig), bound to
#     upstream's ClusterRole by upstream's ClusterRoleBinding: the audit log names it
#     system:serviceaccount:kubeflow:training-operator, user agent training-operator/...
#
# Install it before Kueue (hack/kueue.sh) when Kueue is to queue TFJobs: Kueue's built-in
# integration kubeflow.org/tfjob needs the TFJob CRD. Present when Kueue's manager starts, its
# controller starts with it; added later, the manager polls for it (after 1 s, doubling up
# to 2 min).
#
# Environment:
#   TJ_LOCAL_CLUSTER_DIR  the cluster's state directory, as for hack/local-cluster.sh
#   TJ_TFOP_THREADS       --controller-threads (default 1: upstream's default, which its
#                         manifests keep; tj-operator's --workers is 16)
#   TJ_TFOP_ARGS          more flags, split at blanks (e.g. --zap-log-level=info: upstream logs
#                         at zap's development level, debug)
#   TJ_TFOP_QPS, TJ_TFOP_BURST   refused unless 20 and 30: the operator has no flag for its
#                         client's rate limits and runs with controller-runtime's 20 QPS, burst 30
#   TJ_TFOP_TIMEOUT       seconds to wait for it to be ready (default 120)
#
# State: <state>/training-operator/ (TJ_LOCAL_CLUSTER_DIR, as hack/local-cluster.sh): the rendered
# manifests, the certificates, the kubeconfig, the ports.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE_DIR=$(realpath -m "${TJ_LOCAL_CLUSTER_DIR:-$REPO_ROOT/.local-cluster}")
TFOP_DIR=$STATE_DIR/training-operator
READY_TIMEOUT_S=${TJ_TFOP_TIMEOUT:-120}
THREADS=${TJ_TFOP_THREADS:-1}
# shellcheck source=hack/versions.env
. "$REPO_ROOT/hack/versions.env"
VERSION=${TRAINING_OPERATOR_VERSION:-}
NAMESPACE=kubeflow  # upstream's; cert-controller's Secret is there (MY_POD_NAMESPACE)
# What the operator's cert-controller checks: the Secret, the CA's name, the serving
# certificate's DNS name (<--webhook-service-name>.<namespace>.svc), the webhook configuration.
SECRET=training-operator-webhook-cert
CA_NAME=training-operator-ca
SERVICE_DNS=training-operator.$NAMESPACE.svc
VWC=validator.training-operator.kubeflow.org
# cert-controller's CertDir, fixed in the module (pkg/cert): it only waits for tls.crt there.
FIXED_CERT_DIR=/tmp/k8s-webhook-server/serving-certs
# The ServiceAccount token's lifetime: as long as a local cluster lives, at least.
TOKEN_DURATION=8760h

log() { echo "training-operator: $*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=hack/host-webhook.sh
. "$REPO_ROOT/hack/host-webhook.sh"
# shellcheck source=hack/private-file.sh
. "$REPO_ROOT/hack/private-file.sh"

check_env() {
  [ -n "$VERSION" ] || die "hack/versions.env sets no TRAINING_OPERATOR_VERSION"
  [[ $THREADS =~ ^[1-9][0-9]*$ ]] || die "TJ_TFOP_THREADS=$THREADS: a positive number"
  # Parity with tj-operator's --kube-api-qps/--kube-api-burst is the benchmark's to set there.
  { [ "${TJ_TFOP_QPS:-20}" = 20 ] && [ "${TJ_TFOP_BURST:-30}" = 30 ]; } ||
    die "TJ_TFOP_QPS/TJ_TFOP_BURST: training-operator $VERSION has no flag for them; its" \
      "client runs at controller-runtime's 20 QPS, burst 30"
}

# render WEBHOOK_PORT: upstream's manifests, changed as the header says, into cluster.yaml
# (namespace, CRD, ServiceAccount, RBAC, certificate Secret) and webhooks.yaml.
render() {
  local mod
  mod=$(module_dir "github.com/kubeflow/training-operator@$VERSION" manifests/overlays/standalone)
  "$KUBECTL" kustomize "$mod/manifests/overlays/standalone" >"$TFOP_DIR/upstream.yaml" \
    2>"$TFOP_DIR/kustomize.log" ||
    { cat "$TFOP_DIR/kustomize.log" >&2; die "kubectl kustomize failed"; }
  "$(python_yaml)" - "$TFOP_DIR" "$1" "$NAMESPACE" "$SECRET" "$VWC" <<'EOF'
import base64, sys, yaml
out, webhook_port, namespace, secret, vwc = sys.argv[1:6]
b64 = lambda name: base64.b64encode(open(f"{out}/certs/{name}", "rb").read()).decode()
# libyaml's parser where PyYAML has it: 3.3 MB of six CRDs take it 0.5 s, the Python one 4 s.
loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
docs = [d for d in yaml.load_all(open(f"{out}/upstream.yaml"), Loader=loader) if d]
cluster, webhooks, seen = [], [], set()
for d in docs:
    kind, name = d.get("kind"), d["metadata"]["name"]
    seen.add((kind, name))
    if kind in ("Deployment", "Service"):
        continue
    if kind == "CustomResourceDefinition" and name != "tfjobs.kubeflow.org":
        continue
    if kind == "Secret" and name == secret:
        d["data"] = {n: b64(n) for n in ("ca.crt", "ca.key", "tls.crt", "tls.key")}
    if kind == "ValidatingWebhookConfiguration" and name == vwc:
        d["webhooks"] = [w for w in d["webhooks"] if w["name"].startswith("validator.tfjob.")]
        for w in d["webhooks"]:
            path = w["clientConfig"].pop("service")["path"]
            w["clientConfig"] = {"url": f"https://127.0.0.1:{webhook_port}{path}",
                                 "caBundle": b64("ca.crt")}
        webhooks.append(d)
        continue
    cluster.append(d)
for want in [("Namespace", namespace), ("CustomResourceDefinition", "tfjobs.kubeflow.org"),
             ("ServiceAccount", "training-operator"), ("ClusterRole", "training-operator"),
             ("ClusterRoleBinding", "training-operator"), ("Secret", secret),
             ("ValidatingWebhookConfiguration", vwc)]:
    if want not in seen:
        sys.exit(f"training-operator: error: upstream's manifests have no {want[0]} {want[1]}")
if not webhooks[0]["webhooks"]:
    sys.exit(f"training-operator: error: {vwc} has no TFJob webhook upstream")
yaml.dump_all(cluster, open(f"{out}/cluster.yaml", "w"), Dumper=dumper, sort_keys=False)
yaml.dump_all(webhooks, open(f"{out}/webhooks.yaml", "w"), Dumper=dumper, sort_keys=False)
EOF
  chmod 600 "$TFOP_DIR/cluster.yaml"  # the Secret's CA key
}

# The operator's kubeconfig: the cluster's server and CA, a token of its ServiceAccount.
write_kubeconfig() {
  local token server ca
  token=$("$KUBECTL" create token training-operator -n "$NAMESPACE" --duration="$TOKEN_DURATION")
  server=$("$KUBECTL" config view --minify -o jsonpath='{.clusters[0].cluster.server}')
  ca=$("$KUBECTL" config view --minify --raw \
    -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
  write_private "$TFOP_DIR/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: $server
    certificate-authority-data: $ca
users:
- name: training-operator
  user:
    token: $token
contexts:
- name: local
  context: {cluster: local, user: training-operator, namespace: $NAMESPACE}
current-context: local
EOF
}

# cert-controller waits for a file at its fixed CertDir, where a pod has the Secret mounted (10
# tries over 9 to 17 min, then the operator exits); only that the file exists matters (the
# webhook server reads $TMPDIR's). A pair made once for the machine if none is there; left in
# place at uninstall.
ensure_fixed_cert() {
  placeholder_cert "$FIXED_CERT_DIR" training-operator-unused "the operator's cert-controller"
}

crd_established() {
  [ "$("$KUBECTL" get crd tfjobs.kubeflow.org \
    -o jsonpath='{.status.conditions[?(@.type=="Established")].status}')" = True ]
}

manager_pid() { cat "$STATE_DIR/pids/training-operator" 2>/dev/null || true; }
manager_ready() { health_ready "$TFOP_DIR/health-port"; }
stop_manager() { stop_host_process training-operator; }

# tfjob_yaml NAME CONTAINER: a TFJob of one Chief and one Worker whose containers are named
# CONTAINER (the webhook requires "tensorflow").
tfjob_yaml() {
  local r replicas=
  for r in Chief Worker; do
    replicas+="\"$r\":{\"replicas\":1,\"template\":{\"spec\":{\"containers\":[{\"name\":\"$2\","
    replicas+="\"image\":\"localhost/tj-probe:0\"}]}}},"
  done
  printf '{"apiVersion":"kubeflow.org/v1","kind":"TFJob","metadata":{"name":"%s","namespace":"%s"},%s}\n' \
    "$1" "$NAMESPACE" "\"spec\":{\"tfReplicaSpecs\":{${replicas%,}}}"
}

# The webhook answers: it admits a valid TFJob and denies one the CRD's schema allows (server-side
# dry runs; the webhook has no side effects).
webhook_answers() {
  local denied
  tfjob_yaml tj-probe tensorflow | "$KUBECTL" create --dry-run=server -f - >/dev/null 2>&1 ||
    return 1
  denied=$(tfjob_yaml tj-probe trainer | "$KUBECTL" create --dry-run=server -f - 2>&1) &&
    return 1
  [[ $denied == *"validator.tfjob.training-operator.kubeflow.org\" denied the request"* ]]
}

cmd_install() {
  check_env
  cluster_env
  if pid_alive "$(manager_pid)" && manager_ready; then
    log "training-operator $VERSION runs already (pid $(manager_pid))"
    return 0
  fi
  stop_manager
  local start=$SECONDS bin
  "$REPO_ROOT/hack/build-kubernetes.sh" training-operator
  bin=$("$REPO_ROOT/hack/build-kubernetes.sh" path training-operator)/training-operator
  rm -rf "$TFOP_DIR" && mkdir -p "$TFOP_DIR" "$STATE_DIR/logs"
  webhook_certs "$TFOP_DIR/certs" "$CA_NAME" "$SERVICE_DNS"
  local serving=$TFOP_DIR/tmp/k8s-webhook-server/serving-certs
  mkdir -p "$serving"
  cp "$TFOP_DIR/certs/tls.crt" "$TFOP_DIR/certs/tls.key" "$serving/"
  ensure_fixed_cert
  local webhook_port health_port metrics_port
  webhook_port=$(free_port)
  health_port=$(free_port)
  metrics_port=$(free_port)
  render "$webhook_port"
  echo "$webhook_port" >"$TFOP_DIR/webhook-port"
  echo "$health_port" >"$TFOP_DIR/health-port"
  echo "$metrics_port" >"$TFOP_DIR/metrics-port"
  # What an uninstall just deleted takes no changes until it is gone.
  local o
  for o in "namespace/$NAMESPACE" crd/tfjobs.kubeflow.org; do
    [ -n "$("$KUBECTL" get "$o" -o jsonpath='{.metadata.deletionTimestamp}' 2>/dev/null)" ] ||
      continue
    "$KUBECTL" wait --for=delete "$o" --timeout=120s >/dev/null || die "$o is still being deleted"
  done
  # Everything before the operator starts, as with upstream's Deployment: its cert-controller
  # reads the Secret at start (and exits without one) and injects the same CA into the webhook
  # configuration. TFJobs are refused until its webhook server listens.
  "$KUBECTL" apply --server-side --force-conflicts -f "$TFOP_DIR/cluster.yaml" >/dev/null
  # (Not `kubectl wait --for=condition=Established`: it fails on a CRD that has no conditions
  # yet, as one just created may have.)
  wait_for 60 "the TFJob CRD is established" crd_established ||
    die "the TFJob CRD was not established within 60 s"
  "$KUBECTL" apply --server-side --force-conflicts -f "$TFOP_DIR/webhooks.yaml" >/dev/null
  write_kubeconfig
  local extra=()
  read -ra extra <<<"${TJ_TFOP_ARGS:-}"
  # No --namespace (nor KUBEFLOW_NAMESPACE): TFJobs of every namespace. The webhook server
  # listens on every address (the binary has no flag for its host), on a free port.
  env -u KUBEFLOW_NAMESPACE MY_POD_NAMESPACE="$NAMESPACE" TMPDIR="$TFOP_DIR/tmp" \
    KUBECONFIG="$TFOP_DIR/kubeconfig" setsid "$bin" --kubeconfig="$TFOP_DIR/kubeconfig" \
    --enable-scheme=tfjob --controller-threads="$THREADS" \
    --webhook-server-port="$webhook_port" \
    --health-probe-bind-address="127.0.0.1:$health_port" \
    --metrics-bind-address="127.0.0.1:$metrics_port" "${extra[@]}" \
    >"$STATE_DIR/logs/training-operator.log" 2>&1 </dev/null &
  echo $! >"$STATE_DIR/pids/training-operator"
  log "started the operator (pid $!, log $STATE_DIR/logs/training-operator.log)"
  if ! wait_for "$READY_TIMEOUT_S" "the operator is ready" manager_ready; then
    tail -n 20 "$STATE_DIR/logs/training-operator.log" >&2
    die "the training-operator was not ready within ${READY_TIMEOUT_S}s (log above)"
  fi
  if ! wait_for 60 "its webhook answers" webhook_answers; then
    tail -n 20 "$STATE_DIR/logs/training-operator.log" >&2
    die "the training-operator's webhook does not answer at https://127.0.0.1:$webhook_port (log above)"
  fi
  log "training-operator $VERSION installed in $((SECONDS - start)) s (threads $THREADS)"
}

cmd_uninstall() {
  cluster_env
  # TFJobs first, while the operator runs (they hold no finalizer), then their pods and
  # Services: the garbage collector may leave those behind, as it knows a new CRD's kind only
  # from its next discovery (every 30 s) and cannot resolve their owners once the CRD is gone.
  if "$KUBECTL" get crd tfjobs.kubeflow.org >/dev/null 2>&1; then
    "$KUBECTL" delete tfjobs.kubeflow.org --all --all-namespaces --ignore-not-found \
      --wait=false >/dev/null || true
  fi
  "$KUBECTL" delete pods,services --all-namespaces --ignore-not-found --wait=false \
    -l training.kubeflow.org/operator-name=tfjob-controller >/dev/null || true
  [ -f "$TFOP_DIR/webhooks.yaml" ] &&
    "$KUBECTL" delete --ignore-not-found -f "$TFOP_DIR/webhooks.yaml" >/dev/null
  stop_manager
  [ -f "$TFOP_DIR/cluster.yaml" ] &&
    "$KUBECTL" delete --ignore-not-found --wait=false -f "$TFOP_DIR/cluster.yaml" >/dev/null
  rm -rf "$TFOP_DIR"
  log "training-operator uninstalled"
}

cmd_status() {
  local pid
  pid=$(manager_pid)
  if pid_alive "$pid" && manager_ready; then
    echo "training-operator $VERSION: running (pid $pid), ready;" \
      "metrics http://127.0.0.1:$(cat "$TFOP_DIR/metrics-port")/metrics"
  elif pid_alive "$pid"; then
    echo "training-operator $VERSION: running (pid $pid), not ready"; return 1
  else
    echo "training-operator: not running"; return 1
  fi
}

cmd_pid() {
  local pid
  pid=$(manager_pid)
  pid_alive "$pid" || { log "not running"; return 1; }
  echo "$pid"
}

case ${1:-} in
  install) cmd_install ;;
  uninstall) cmd_uninstall ;;
  status) cmd_status ;;
  pid) cmd_pid ;;
  *) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
