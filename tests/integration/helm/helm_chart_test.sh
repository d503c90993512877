#!/usr/bin/env bash
# helm lint and helm template of helm/tj-operator, checked against what we ask of the
# chart, and manifests/{rbac,operator} (and the chart's crds/) equal to what it renders.
# Usage: helm_chart_test.sh REPO_ROOT. Exit 77 (ctest: skipped) when Helm cannot be had,
# unless CI or TJ_REQUIRE_HELM is set.
set -euo pipefail
ROOT=${1:-$(cd "$(dirname "$0")/../../.." && pwd)}
CHART=$ROOT/helm/tj-operator
fails=0
pass() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

if ! HELM=$("$ROOT/hack/helm.sh" --path 2>/tmp/helm-fetch.$$); then
  cat /tmp/helm-fetch.$$; rm -f /tmp/helm-fetch.$$
  if [ -n "${CI:-}${TJ_REQUIRE_HELM:-}" ]; then echo "FAIL no Helm"; exit 1; fi
  echo "SKIP: no Helm (hack/helm.sh could not fetch it)"; exit 77
fi
rm -f /tmp/helm-fetch.$$
echo "helm: $HELM ($("$HELM" version --short))"

# 1. helm lint, strict, with the defaults and with every optional part on.
if "$HELM" lint --strict "$CHART" >/dev/null; then pass "helm lint --strict (defaults)"
else "$HELM" lint --strict "$CHART"; fail "helm lint --strict (defaults)"; fi
ALL=(--set watchNamespaces='{team-a}' --set networkPolicy.enabled=true
     --set metrics.serviceMonitor.enabled=true --set metrics.podMonitor.enabled=true
     --set metrics.prometheusRule.enabled=true --set metrics.grafanaDashboard.enabled=true
     --set logFormat=text --set replicas=2)
if "$HELM" lint --strict "$CHART" "${ALL[@]}" >/dev/null; then pass "helm lint --strict (all parts on)"
else fail "helm lint --strict (all parts on)"; fi

# 2. helm template: what the objects must say.
render() { "$HELM" template tj-operator "$CHART" --namespace tj-system "$@"; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
if render >"$TMP/default.yaml"; then pass "helm template (defaults)"
else fail "helm template (defaults)"; fi
if render "${ALL[@]}" >"$TMP/all.yaml"; then pass "helm template (all parts on)"
else fail "helm template (all parts on)"; fi
# values.schema.json: a misspelt key or a wrong type fails the install, naming it.
if out=$(render --set replica=2 2>&1); then fail "a misspelt value (replica) must not render"
elif grep -q "additional properties 'replica' not allowed" <<<"$out"; then
  pass "values.schema.json refuses a misspelt value, naming it"
else fail "misspelt value refused without naming it: $out"; fi
if out=$(render --set workers=many 2>&1); then fail "workers=many must not render"
elif grep -q "/workers" <<<"$out"; then pass "values.schema.json refuses a wrong type, naming it"
else fail "wrong type refused without naming it: $out"; fi
if render --set logLevel=verbose >/dev/null 2>&1; then fail "logLevel=verbose must not render"
else pass "values.schema.json refuses an unknown logLevel"; fi
if render --set logFormat=xml >/dev/null 2>&1; then fail "logFormat=xml must not render"
else pass "values.schema.json refuses an unknown logFormat"; fi
if render --set tests.enabled=true --set metrics.service.enabled=false >/dev/null 2>&1; then
  fail "the helm test pod without the metrics Service must not render"
else
  pass "the helm test pod needs the metrics Service"
fi
# The leader Lease is the release's own.
if "$HELM" template other "$CHART" --namespace tj-system 2>/dev/null |
    grep -q -- "--leader-election-id=other-tj-operator-leader"; then
  pass "the Lease is named after the release (other-tj-operator-leader)"
else
  fail "the Lease is not named after the release"
fi
if render --set replicas=2 --set leaderElection.enabled=false >/dev/null 2>&1; then
  fail "replicas=2 without leader election must not render"
else
  pass "replicas=2 without leader election is refused"
fi
render --set networkPolicy.enabled=false >"$TMP/no-network-policy.yaml" ||
  fail "helm template (networkPolicy.enabled=false)"
# The earlier charts' networkPolicy values, which helm upgrade --reuse-values carries over from
# them: accepted, and they change nothing.
if out=$(render --set networkPolicy.namespaces='{team-a}' --set networkPolicy.statusPort=8470 \
    --set networkPolicy.statusEndPort=8533 2>&1) && [ "$out" = "$(cat "$TMP/default.yaml")" ]; then
  pass "the earlier charts' networkPolicy values are accepted and ignored"
else
  fail "the earlier charts' networkPolicy values must render as the defaults: $out"
fi
if render --set watchNamespaces='{a,b}' >/dev/null 2>&1; then
  fail "two watchNamespaces must not render (tj-operator takes one --namespace)"
else
  pass "two watchNamespaces are refused"
fi

render --set rbac.userRoles=false >"$TMP/no-user-roles.yaml" ||
  fail "helm template (rbac.userRoles=false)"

python3 - "$TMP/default.yaml" "$TMP/all.yaml" "$TMP/no-user-roles.yaml" \
  "$TMP/no-network-policy.yaml" <<'PY' || fails=$((fails + 1))
import sys, yaml

failed = []
def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failed.append(what)

def load(path):
    return [d for d in yaml.safe_load_all(open(path)) if d]

def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]

default, full = load(sys.argv[1]), load(sys.argv[2])

dep = by_kind(default, "Deployment")[0]
pod = dep["spec"]["template"]["spec"]
c = pod["containers"][0]
sc = c["securityContext"]
check(pod["securityContext"]["runAsNonRoot"] is True, "pod runs as non-root")
check(pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", "seccomp RuntimeDefault")
check(sc["readOnlyRootFilesystem"] is True, "read-only root file system")
check(sc["allowPrivilegeEscalation"] is False, "no privilege escalation")
check(sc["capabilities"]["drop"] == ["ALL"], "all capabilities dropped")
check(c["livenessProbe"]["httpGet"]["path"] == "/healthz", "liveness /healthz")
check(c["readinessProbe"]["httpGet"]["path"] == "/readyz", "readiness /readyz")
ports = {p["name"]: p["containerPort"] for p in c["ports"]}
check(ports == {"metrics": 8080, "health": 8081}, "ports metrics 8080, health 8081")
check(c["resources"] == {"requests": {"cpu": "10m", "memory": "64Mi"},
                         "limits": {"cpu": "500m", "memory": "128Mi"}}, "requests and limits")
args = c["args"]
for flag in ("--leader-elect", "--leader-election-namespace=tj-system",
             "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081", "--workers=4"):
    check(flag in args, "flag " + flag)
# Only flags tj-operator has (operator/main.cpp); an unknown one makes it exit 2.
known = ("--kubeconfig", "--namespace", "--leader-elect", "--leader-election-namespace",
         "--leader-election-id", "--metrics-bind-address", "--health-probe-bind-address",
         "--workers", "--kube-api-qps", "--kube-api-burst", "--log-format", "--network-policy",
         "--network-policy-operator-namespace", "--network-policy-operator-labels",
         "--restart-in-place", "--kueue-priority-boost-max", "--kueue-priority-boost-seconds")
check(all(a.split("=")[0] in known for a in args), "every flag is one tj-operator has: %s" % args)
env = {e["name"]: e.get("value") for e in c["env"]}
check(env.get("TJ_LOG_LEVEL") == "info", "TJ_LOG_LEVEL from logLevel")
check("--log-format=json" in args, "--log-format=json by default")
check("--restart-in-place=auto" in args, "--restart-in-place=auto by default")
fargs0 = by_kind(full, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"]
check("--log-format=text" in fargs0, "--log-format=text from logFormat")

# helm test: a hook pod that reads /metrics through the Service, not selected by it.
tests = by_kind(default, "Pod")
check(len(tests) == 1 and tests[0]["metadata"]["annotations"]["helm.sh/hook"] == "test",
      "one helm test pod (hook test)")
if tests:
    t = tests[0]
    svc = by_kind(default, "Service")[0]
    sel = svc["spec"]["selector"]
    check(not all(t["metadata"]["labels"].get(k) == v for k, v in sel.items()),
          "the metrics Service does not select the test pod")
    script = t["spec"]["containers"][0]["args"][0]
    check("tj-operator-metrics.tj-system.svc" in script and "/metrics" in script,
          "the test pod asks the metrics Service for /metrics")
    check(t["spec"]["securityContext"]["runAsNonRoot"] is True and
          t["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True,
          "the test pod runs non-root, read-only")

# Monitoring: off by default; with them on, what Prometheus and Grafana need.
for kind in ("PodMonitor", "PrometheusRule", "ConfigMap"):
    check(not by_kind(default, kind), kind + " off by default")
pm = by_kind(full, "PodMonitor")
check(len(pm) == 1, "PodMonitor when enabled")
if pm:
    ep = pm[0]["spec"]["podMetricsEndpoints"][0]
    srcs = [tuple(r.get("sourceLabels", [])) for r in ep["relabelings"]]
    check(("__meta_kubernetes_pod_annotation_tjo_dev_status_port",) in srcs,
          "PodMonitor keeps pods with the tjo.dev/status-port annotation")
    check(any(r.get("targetLabel") == "__address__" for r in ep["relabelings"]),
          "PodMonitor scrapes <pod IP>:<annotated port>")
    check(pm[0]["spec"]["namespaceSelector"] == {"matchNames": ["team-a"]},
          "PodMonitor in the watched namespace")
    check(pm[0]["spec"]["selector"]["matchExpressions"][0]["key"] == "tjo.dev/job-name",
          "PodMonitor selects TrainingJob pods")
pr = by_kind(full, "PrometheusRule")
alerts = [r["alert"] for g in pr[0]["spec"]["groups"] for r in g["rules"]] if pr else []
check(len(alerts) >= 5 and all(r.get("expr") for g in pr[0]["spec"]["groups"] for r in g["rules"]),
      "PrometheusRule with its alerts: %s" % alerts)
cms = by_kind(full, "ConfigMap")
check(len(cms) == 1 and cms[0]["metadata"]["labels"].get("grafana_dashboard") == "1",
      "dashboard ConfigMap labelled for Grafana's sidecar")
if cms:
    import json as _json
    dash = _json.loads(cms[0]["data"]["tj-operator.json"])
    check(dash["uid"] == "tj-operator" and len(dash["panels"]) >= 10,
          "the dashboard JSON parses, %d panels" % len(dash["panels"]))
check(not any(a.startswith("--namespace") for a in args), "no --namespace: every namespace")
check(pod["serviceAccountName"] == "tj-operator", "runs as its ServiceAccount")

# RBAC: only the verbs the operator uses, nothing wildcard, cluster-wide by default.
def aggregated(d):
    return any(k.startswith("rbac.authorization.k8s.io/aggregate-to-")
               for k in (d["metadata"].get("labels") or {}))
def operator_roles(docs, kind):
    return [d for d in by_kind(docs, kind) if not aggregated(d)]
def rules(docs, kind):
    return [r for d in operator_roles(docs, kind) for r in d["rules"]]
allowed = {
    ("tjo.dev", "trainingjobs"): {"get", "list", "watch", "delete"},
    ("tjo.dev", "trainingjobs/status"): {"get", "update", "patch"},
    ("tjo.dev", "trainingjobs/finalizers"): {"update"},
    ("", "pods"): {"get", "list", "watch", "create", "delete"},
    ("", "pods/log"): {"get"},  # the evaluator's final evaluation, read after it exits
    ("", "services"): {"get", "list", "watch", "create", "delete"},
    ("", "secrets"): {"get", "list", "watch", "create", "delete"},
    ("", "events"): {"create", "patch"},
    # The nodes the jobs' pods run on, watched: a lost one restarts its gangs at once.
    ("", "nodes"): {"list", "watch"},
    ("coordination.k8s.io", "leases"): {"get", "create", "update"},
    # One per job (networkPolicy.enabled): made, watched, read when its name is taken.
    ("networking.k8s.io", "networkpolicies"): {"get", "list", "watch", "create"},
}
# One PodGroup per gang, of whichever gang scheduler the cluster or the job has (docs/gangs.md),
# watched where the cluster serves it.
for g in ("scheduling.k8s.io", "scheduling.volcano.sh", "scheduling.x-k8s.io"):
    allowed[(g, "podgroups")] = {"get", "list", "watch", "create", "delete"}
for kind in ("ClusterRole", "Role"):
    for r in rules(default, kind) + rules(full, kind):
        for g in r["apiGroups"]:
            for res in r["resources"]:
                ok = (g, res) in allowed and set(r["verbs"]) <= allowed[(g, res)]
                check(ok and "*" not in r["verbs"], "%s grants only %s %s/%s" % (kind, r["verbs"], g, res))
check(len(operator_roles(default, "ClusterRole")) == 1, "cluster-wide: one ClusterRole")
lease_roles = [d for d in by_kind(default, "Role") if d["metadata"]["name"].endswith("leader-election")]
check(len(lease_roles) == 1 and lease_roles[0]["metadata"]["namespace"] == "tj-system",
      "leader-election Role in the release namespace")
check(len(by_kind(default, "Service")) == 1, "metrics Service")
check(not by_kind(default, "ServiceMonitor"), "ServiceMonitor off by default")
# The jobs' NetworkPolicies are the operator's, one per job in the job's namespace: the chart
# renders none (a namespace-wide one would admit every pod labelled tjo.dev/job-name, and
# NetworkPolicies add up), and turns the operator's on by default.
check(not by_kind(default, "NetworkPolicy") and not by_kind(full, "NetworkPolicy"),
      "no namespace-wide NetworkPolicy from the chart")
args_of = lambda docs: by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"]
np_rule = lambda docs, v: any(g == "networking.k8s.io" and "networkpolicies" in r["resources"] and
                              v in r["verbs"] for r in rules(docs, "ClusterRole") +
                              rules(docs, "Role") for g in r["apiGroups"])
check("--network-policy" in args_of(default) and
      "--network-policy-operator-namespace=tj-system" in args_of(default),
      "per-job NetworkPolicies on by default, admitting the operator of tj-system")
# The labels the operator's policies admit are the operator pods' own.
op_labels = [a.split("=", 1)[1] for a in args_of(default)
             if a.startswith("--network-policy-operator-labels=")]
operator_pod = by_kind(default, "Deployment")[0]["spec"]["template"]["metadata"]["labels"]
check(len(op_labels) == 1 and
      dict(kv.split("=", 1) for kv in op_labels[0].split(",")).items() <= operator_pod.items(),
      "the operator's pod labels reach it: %s" % op_labels)
check(all(np_rule(default, v) for v in ("create", "list", "watch")) and
      all(np_rule(full, v) for v in ("create", "list", "watch")),
      "RBAC: create, list and watch networkpolicies, in both RBAC modes")
off = load(sys.argv[4])
check(not any(a.startswith("--network-policy") for a in args_of(off)) and
      not np_rule(off, "create") and not np_rule(off, "list"),
      "networkPolicy.enabled=false: no flag, no networkpolicies in the RBAC")

node_rule = lambda docs, kind: any(g == "" and "nodes" in r["resources"] and
                                   {"list", "watch"} <= set(r["verbs"])
                                   for r in rules(docs, kind) for g in r["apiGroups"])
check(node_rule(default, "ClusterRole") and not node_rule(full, "Role"),
      "nodes listed and watched in the ClusterRole; not in a namespace's Role, where they mean nothing")

# Per-namespace mode: nothing cluster-wide, a Role and RoleBinding per watched namespace.
check(not operator_roles(full, "ClusterRole") and not by_kind(full, "ClusterRoleBinding"),
      "watchNamespaces: no cluster-wide RBAC for the operator")

# The users' roles: TrainingJobs aggregated into view (read, status included) and into
# edit/admin (also create, change, delete; never write status), in both RBAC modes.
for docs, mode in ((default, "cluster-wide"), (full, "watchNamespaces")):
    user = {d["metadata"]["name"]: d for d in by_kind(docs, "ClusterRole") if aggregated(d)}
    def grants(label):
        out = set()
        for d in user.values():
            if d["metadata"]["labels"].get("rbac.authorization.k8s.io/aggregate-to-" + label) == "true":
                for r in d["rules"]:
                    out |= {(g, res, v) for g in r["apiGroups"] for res in r["resources"]
                            for v in r["verbs"]}
        return out
    read = {("tjo.dev", res, v) for res in ("trainingjobs", "trainingjobs/status")
            for v in ("get", "list", "watch")}
    write = {("tjo.dev", "trainingjobs", v)
             for v in ("create", "update", "patch", "delete", "deletecollection")}
    check(sorted(user) == ["tj-operator-trainingjob-editor", "tj-operator-trainingjob-viewer"],
          "%s: viewer and editor ClusterRoles for users: %s" % (mode, sorted(user)))
    check(grants("view") == read, "%s: aggregate-to-view grants exactly reading TrainingJobs" % mode)
    for label in ("edit", "admin"):
        check(grants(label) == read | write,
              "%s: aggregate-to-%s grants reading and writing TrainingJobs, not status" % (mode, label))
    check(all("*" not in r["verbs"] + r["resources"] for d in user.values() for r in d["rules"]),
          "%s: no wildcard in the users' roles" % mode)
check(not [d for d in by_kind(load(sys.argv[3]), "ClusterRole") if aggregated(d)],
      "rbac.userRoles=false: no users' roles")
for ns in ("team-a",):
    check(any(d["metadata"].get("namespace") == ns for d in by_kind(full, "Role")), "Role in " + ns)
    check(any(d["metadata"].get("namespace") == ns for d in by_kind(full, "RoleBinding")),
          "RoleBinding in " + ns)
fargs = by_kind(full, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"]
check("--namespace=team-a" in fargs, "--namespace=team-a")
check(by_kind(full, "Deployment")[0]["spec"]["replicas"] == 2, "replicas 2")
check(len(by_kind(full, "ServiceMonitor")) == 1, "ServiceMonitor when enabled")
sys.exit(1 if failed else 0)
PY

# The checker install_paths_e2e_test runs on the dashboard's and the rules' queries (against
# real scrapes there) fails, naming the metric, when a queried metric is not exported.
render --set metrics.prometheusRule.enabled=true >"$TMP/rules.yaml"
printf '# TYPE controller_runtime_reconcile_total counter\n' >"$TMP/scrape.txt"
if out=$(/usr/bin/python3 "$ROOT/tests/integration/helm/promql_metrics.py" \
    "$CHART/dashboards/tj-operator.json" "$TMP/rules.yaml" "$TMP/scrape.txt" 2>&1); then
  fail "promql_metrics.py passed with metrics missing from the scrape"
elif grep -q "workqueue_depth is exported by neither" <<<"$out" &&
    ! grep -q "controller_runtime_reconcile_total is exported by neither" <<<"$out"; then
  pass "promql_metrics.py names a queried metric missing from the scrapes, and only those"
else
  fail "promql_metrics.py did not name the missing metric: $out"
fi

# 3. manifests/ equal what the chart renders.
if "$ROOT/hack/generate-manifests.sh" --check; then
  pass "manifests/rbac, manifests/operator (and crds/) equal the chart"
else
  fail "manifests/ differ from the chart: run hack/generate-manifests.sh"
fi
if [ -z "$(ls "$CHART/crds" 2>/dev/null)" ]; then
  fail "helm/tj-operator/crds/ is empty: the CRD (manifests/crd/) is not in the chart yet"
fi

[ "$fails" -eq 0 ] && echo "helm_chart_test: all passed" || echo "helm_chart_test: $fails failed"
[ "$fails" -eq 0 ]
