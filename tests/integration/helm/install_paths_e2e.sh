#!/usr/bin/env bash
# The install paths of README.md and docs/deploy.md, one after another on one empty local
# cluster:
#   1. kubectl apply of the plain manifests in the README's order (crd/, rbac/, operator/):
#      every object accepted, the operator Ready and leading; then removed again.
#   2. helm install of the previous chart version (rendered from git history: the newest
#      commit whose Chart.yaml has another version), and a TrainingJob started under it.
#   3. helm upgrade to this chart while the job runs: the job keeps its pods (same UIDs, no
#      restart) and ends Succeeded under the new operator. Meanwhile both /metrics (the
#      operator's, a trainer's through its tjo.dev/status-port annotation) are scraped, and
#      every metric the chart's dashboard and PrometheusRule query must be in them.
#   4. helm test: on the real node the chart's test pod; on the process node (no Service
#      routing, no cluster DNS) the pod's script as Helm rendered it, run against the
#      operator pod's address, and shown to fail when nothing answers there.
#   5. helm uninstall: the operator's objects go; the CRD, the TrainingJob and its pods, and
#      the leader Lease (the operator's, not Helm's) stay.
# With TJ_HELM_MAJOR=3 every helm command is Helm 3's (hack/helm.sh), else Helm 4's.
# Usage: install_paths_e2e.sh REPO_ROOT BUILD_DIR. Exit 77 (skipped) when Helm, git history
# or the cluster's binaries cannot be had, unless CI / TJ_REQUIRE_CLUSTER is set.
set -euo pipefail
# shellcheck source=../../support/cluster_e2e.sh
. "$1/tests/support/cluster_e2e.sh" "$1" "$2" "install-paths-cluster${TJ_HELM_MAJOR:+-helm$TJ_HELM_MAJOR}"
e2e_prerequisites
echo "     helm $("$HELM" version --short)"
WORK=$(mktemp -d)
e2e_cleanup_on_exit "$WORK"
CHART=$ROOT/helm/tj-operator
fail() { echo "FAIL $*"; exit 1; }
ok() { echo "ok   $*"; }

# The previous chart version, from git history: the whole chart as it was just before the
# commit that set Chart.yaml's version to the current one.
version_of() { sed -n 's/^version: *//p'; }
current=$(version_of <"$CHART/Chart.yaml")
git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1 || skip "no git history to take the previous chart from"
prev_rev="" bump=""
for rev in $(git -C "$ROOT" log --format=%H -- helm/tj-operator/Chart.yaml); do
  v=$(git -C "$ROOT" show "$rev:helm/tj-operator/Chart.yaml" | version_of)
  if [ "$v" = "$current" ]; then bump=$rev; continue; fi
  [ -n "$bump" ] || break  # the working tree's version is not committed yet: HEAD's chart
  prev_rev=$bump^ prev=$v
  break
done
if [ -z "$prev_rev" ] && [ -n "${v:-}" ] && [ "$v" != "$current" ]; then prev_rev=HEAD prev=$v; fi
[ -n "$prev_rev" ] || skip "git history holds no earlier chart version than $current"
mkdir -p "$WORK/prev"
git -C "$ROOT" archive "$prev_rev" helm/tj-operator | tar -x -C "$WORK/prev"
PREV_CHART=$WORK/prev/helm/tj-operator
echo "     chart $current; previous version $prev from $(git -C "$ROOT" rev-parse --short=12 "$prev_rev")"

e2e_cluster_up
step "cluster up"

# 1. The plain manifests, in the README's order, on the empty cluster.
kubectl get namespace tj-system >/dev/null 2>&1 && fail "tj-system exists before the install"
kubectl apply -f "$ROOT/manifests/crd/" >/dev/null || fail "kubectl apply -f manifests/crd/"
kubectl apply -k "$ROOT/manifests/rbac/" >/dev/null || fail "kubectl apply -k manifests/rbac/"
if [ "$TJ_NODE" = containerd ]; then
  kubectl apply -k "$ROOT/manifests/operator/" >/dev/null || fail "kubectl apply -k manifests/operator/"
else
  # The process node's pods share the machine's network: bind the pod's own address, as the
  # chart's bindAddress does there, instead of every address of the machine.
  # shellcheck disable=SC2016  # $(POD_IP) is for Kubernetes to expand in the pod
  kubectl kustomize "$ROOT/manifests/operator/" |
    sed 's/bind-address=:/bind-address=$(POD_IP):/' | kubectl apply -f - >/dev/null ||
    fail "kubectl apply -k manifests/operator/"
fi
ok "kubectl apply: crd/, rbac/, operator/ in the README's order on an empty cluster"
kubectl -n tj-system rollout status deploy/tj-operator --timeout=120s >/dev/null ||
  fail "the plain-manifest operator did not become Ready"
for _ in $(seq 1 30); do
  holder=$(kubectl -n tj-system get lease tj-operator-leader -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)
  [ -n "$holder" ] && break
  sleep 1
done
[ -n "$holder" ] || fail "the plain-manifest operator holds no Lease"
ok "the operator is Ready and leads (Lease tj-system/tj-operator-leader)"
kubectl delete -k "$ROOT/manifests/operator/" --wait=true >/dev/null
kubectl delete -k "$ROOT/manifests/rbac/" --wait=false >/dev/null
step "plain install removed (the CRD stays)"

# 2. helm install of the previous chart version, and a job under it. The CRD from step 1 is
# still there (and newer than the previous chart's): Helm 4 applies crds/ server-side and
# would conflict with the fields kubectl owns, so the install skips them, as docs/deploy.md
# says for a cluster that already has the CRD.
# shellcheck disable=SC2016  # $(POD_IP) is for Kubernetes to expand in the pod
HELM_SET=(--set bindAddress='$(POD_IP)')
"$HELM" install tjo "$PREV_CHART" -n tj-helm --create-namespace --skip-crds "${HELM_SET[@]}" \
  --wait --timeout 120s >/dev/null || fail "helm install --skip-crds of chart $prev"
ok "helm install --skip-crds tjo (chart $prev) over the CRD kubectl applied"
kubectl create namespace train >/dev/null
# Enough epochs that the job outlasts the upgrade. cleanPodPolicy None keeps every pod after
# the job, so that all their UIDs can be compared at the end (Running deletes a worker the
# operator still sees running when the chief's success ends the job).
sed -e 's/--epochs, "3"/--epochs, "6"/g' -e 's/cleanPodPolicy: Running/cleanPodPolicy: None/' \
  "$ROOT/manifests/examples/fmnist.yaml" | kubectl -n train apply -f - >/dev/null
running_pods() {
  kubectl -n train get pods -l tjo.dev/job-name=fmnist \
    -o jsonpath='{range .items[?(@.status.phase=="Running")]}{.metadata.name}={.metadata.uid} {end}'
}
deadline=$((SECONDS + 300))
while [ $SECONDS -lt $deadline ]; do
  [ "$(running_pods | wc -w)" -ge 3 ] && break
  sleep 2
done
before=$(running_pods)
[ "$(wc -w <<<"$before")" -ge 3 ] || fail "fmnist's pods are not running under chart $prev: $before"
ok "fmnist runs under chart $prev: $before"

# 3. helm upgrade while it runs, after the CRD as docs/deploy.md's "Upgrades" says.
kubectl apply -f "$ROOT/manifests/crd/" >/dev/null || fail "kubectl apply -f manifests/crd/ before the upgrade"
"$HELM" upgrade tjo "$CHART" -n tj-helm "${HELM_SET[@]}" --wait --timeout 120s >/dev/null ||
  fail "helm upgrade to chart $current"
[ "$(kubectl -n tj-helm get deploy tjo-tj-operator -o jsonpath='{.metadata.labels.helm\.sh/chart}')" = "tj-operator-$current" ] ||
  fail "the Deployment is not chart $current's"
ok "helm upgrade tjo to chart $current"
case "$(kubectl -n train get tj fmnist -o jsonpath='{.status.conditions[?(@.status=="True")].type}')" in
  *Succeeded*|*Failed*) fail "fmnist ended before the upgrade was done: the test needs a longer job" ;;
esac
ok "fmnist still runs after the upgrade"
# Scrape the new operator and a trainer while the job runs.
op_pod=$(kubectl -n tj-helm get pods -l "app.kubernetes.io/instance=tjo,helm.sh/chart=tj-operator-$current" \
  --field-selector=status.phase=Running -o jsonpath='{.items[0].status.podIP}')
curl -fsS --max-time 10 "http://$op_pod:8080/metrics" >"$WORK/operator.metrics" ||
  fail "no /metrics from the operator at $op_pod:8080"
for _ in $(seq 1 60); do
  w=$(kubectl -n train get pod fmnist-worker-0 -o jsonpath='{.status.podIP} {.metadata.annotations.tjo\.dev/status-port}' 2>/dev/null || true)
  # shellcheck disable=SC2086  # split on purpose: the pod's IP and its status port
  set -- $w
  if [ $# -eq 2 ] && curl -fsS --max-time 5 "http://$1:$2/metrics" >"$WORK/trainer.metrics" 2>/dev/null; then
    break
  fi
  sleep 1
done
grep -q '^# TYPE tj_trainer_epoch' "$WORK/trainer.metrics" 2>/dev/null ||
  fail "no trainer /metrics through the pod's tjo.dev/status-port annotation ($w)"
ok "scraped the operator's /metrics and worker 0's (port from its tjo.dev/status-port annotation)"
for name in rest_client_requests_total rest_client_request_duration_seconds \
  workqueue_queue_duration_seconds workqueue_work_duration_seconds process_cpu_seconds_total \
  process_resident_memory_bytes process_open_fds process_start_time_seconds tj_operator_build_info; do
  grep -q "^# TYPE $name " "$WORK/operator.metrics" || fail "the operator exports no $name"
done
grep -Eq '^rest_client_requests_total\{code="200",method="GET",host=".+"\} [1-9]' "$WORK/operator.metrics" ||
  fail "no counted GET in rest_client_requests_total"
ok "the operator exports rest_client_*, workqueue_* durations, process_*, build_info, per-namespace job counters"
"$HELM" template tjo "$CHART" -n tj-helm --set metrics.prometheusRule.enabled=true >"$WORK/rules.yaml"
/usr/bin/python3 "$ROOT/tests/integration/helm/promql_metrics.py" "$CHART/dashboards/tj-operator.json" \
  "$WORK/rules.yaml" "$WORK/operator.metrics" "$WORK/trainer.metrics" ||
  fail "the dashboard or the rules query a metric nobody exports"

deadline=$((SECONDS + 1200))
state=""
while [ $SECONDS -lt $deadline ]; do
  state=$(kubectl -n train get tj fmnist \
    -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type} {end}' 2>/dev/null || true)
  case "$state" in *Succeeded*|*Failed*) break ;; esac
  sleep 3
done
case "$state" in *Succeeded*) ok "fmnist Succeeded after the upgrade" ;;
  *) fail "fmnist did not succeed after the upgrade: $state" ;; esac
for p in $before; do
  name=${p%%=*} uid=${p#*=}
  now=$(kubectl -n train get pod "$name" -o jsonpath='{.metadata.uid}' 2>/dev/null || true)
  [ "$now" = "$uid" ] || fail "pod $name was replaced during the upgrade ($uid -> $now)"
done
restarts=$(kubectl -n train get tj fmnist -o jsonpath='{.status.restartCount}')
[ "${restarts:-0}" = 0 ] || fail "the job restarted $restarts times across the upgrade"
ok "its pods kept their UIDs across the upgrade, no gang restart"
curl -fsS --max-time 10 "http://$op_pod:8080/metrics" >"$WORK/operator-after.metrics" ||
  fail "no /metrics from the operator at $op_pod:8080 after the job"
grep -q '^tj_operator_jobs_successful_total{namespace="train"} 1' "$WORK/operator-after.metrics" ||
  fail "no tj_operator_jobs_successful_total{namespace=\"train\"} 1 after the job succeeded"
ok "the job's success is counted under its namespace"

# 4. helm test.
if [ "$TJ_NODE" = containerd ]; then
  "$HELM" test tjo -n tj-helm --timeout 120s >/dev/null || fail "helm test tjo"
  ok "helm test: the test pod read /metrics through the Service"
else
  # No Service routing or cluster DNS on the process node: run the release's test-pod script
  # (as Helm rendered it) here, pointed at the operator pod's own address instead.
  "$HELM" get hooks tjo -n tj-helm >"$WORK/hooks.yaml"
  python3 - "$WORK/hooks.yaml" >"$WORK/helm-test.sh" <<'PY'
import sys, yaml
pods = [d for d in yaml.safe_load_all(open(sys.argv[1]))
        if d and d.get("kind") == "Pod" and d["metadata"]["annotations"].get("helm.sh/hook") == "test"]
assert len(pods) == 1, "one helm test pod in the release's hooks, found %d" % len(pods)
print(pods[0]["spec"]["containers"][0]["args"][0])
PY
  sed -i "s|^host=.*|host=$op_pod|" "$WORK/helm-test.sh"
  timeout 30 bash "$WORK/helm-test.sh" >"$WORK/helm-test.out" 2>&1 ||
    { cat "$WORK/helm-test.out"; fail "the helm test pod's script failed against the operator"; }
  ok "helm test: the test pod's script read /metrics from the operator ($(tail -n1 "$WORK/helm-test.out"))"
  # And it fails when nothing answers: a check that cannot fail checks nothing.
  sed -i "s|^port=.*|port=1|" "$WORK/helm-test.sh"
  ! timeout 5 bash "$WORK/helm-test.sh" >/dev/null 2>&1 ||
    fail "the helm test pod's script passed with no operator behind the address"
  ok "helm test: the script fails when no operator answers"
  echo "     (the test pod itself runs on the real node only: it needs Service routing and DNS)"
fi

# 5. helm uninstall: what goes, what stays.
"$HELM" uninstall tjo -n tj-helm --wait >/dev/null || fail "helm uninstall"
for obj in "deploy/tjo-tj-operator" "serviceaccount/tjo-tj-operator" "service/tjo-tj-operator-metrics"; do
  ! kubectl -n tj-helm get "$obj" >/dev/null 2>&1 || fail "$obj is still there after helm uninstall"
done
! kubectl get clusterrole tjo-tj-operator-manager >/dev/null 2>&1 || fail "the ClusterRole stays"
ok "helm uninstall removed the Deployment, Service, ServiceAccount and RBAC"
kubectl get crd trainingjobs.tjo.dev >/dev/null || fail "the CRD went with helm uninstall"
kubectl -n train get tj fmnist >/dev/null || fail "the TrainingJob went with helm uninstall"
ok "the CRD and the TrainingJob stay (Helm never deletes crds/; the jobs are the users')"
if kubectl -n tj-helm get lease tjo-tj-operator-leader >/dev/null 2>&1; then
  ok "the leader Lease stays (the operator made it, not Helm; it expires unused)"
else
  fail "the leader Lease tj-helm/tjo-tj-operator-leader was not there"
fi
step "done"
echo "install_paths_e2e: all passed"
