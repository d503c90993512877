#!/usr/bin/env bash
# Security checks on a real local cluster. The operator is installed by the Helm
# chart and runs in-cluster as its ServiceAccount, with the chart's RBAC; the API server writes
# an audit log (hack/local-cluster.sh, TJ_LOCAL_CLUSTER_AUDIT_LOG). One job lifecycle: a job
# runs, loses a worker (gang restart), succeeds; an invalid job fails; a job on a missing claim
# fails at its startup deadline naming the claim; a short job is deleted by the operator after
# its TTL; the user deletes the first job. Then:
#   rbac       the (verb, resource) pairs the operator sent, from the audit log, are all granted
#              (no 403) and the chart grants no pair it never sent, except NOT_EXERCISED below
#              (each with its reason); and by scope: the requests sent cluster-wide (no
#              namespace) are exactly CLUSTER_WIDE below, and no ClusterRole of the chart
#              lets the operator read Secrets (get, list or watch);
#   non-root   every pod the operator created has runAsNonRoot, allowPrivilegeEscalation false
#              and capabilities drop ALL;
#   secret     the job's rendezvous Secret has the job as controller owner and is garbage-
#              collected with it; the pods get the key by reference, not as a literal value;
#              deleted mid-job, it is made again with a new key and the whole gang restarts
#              with it (every pod of the last gang carries the new key's hash);
#   no leak    the key (raw and base64) is in no log of the cluster (operator, pods, node agent,
#              control plane), no Event, not in the job's status.
# The rendezvous' refusal of peers without the job's key is tested where it lives:
# tests/unit/trainer/cluster/rendezvous_test.cpp (WrongKeyIsRefused...),
# tests/integration/collective (GlooCollective.WrongKeyIsRefused...) and
# tests/integration/trainer/multiworker_test.cpp (WrongKeyIsRefusedAndTrainingGoesOn).
# Usage: security_e2e.sh REPO_ROOT BUILD_DIR. Exit 77 (skipped) when Helm or the cluster's
# binaries cannot be had, unless CI / TJ_REQUIRE_CLUSTER / TJ_REQUIRE_HELM is set.
set -euo pipefail
# shellcheck source=../support/cluster_e2e.sh
. "$1/tests/support/cluster_e2e.sh" "$1" "$2" security-e2e-cluster
AUDIT=$BUILD/security-e2e-audit.log
export TJ_LOCAL_CLUSTER_AUDIT_LOG=$AUDIT
SA=system:serviceaccount:tj-system:tj-operator
NS=security-e2e
failures=0
ok() { echo "ok   $*"; }
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
# wait_until SECONDS WHAT CMD...: polls CMD every second; false after SECONDS.
wait_until() {
  local limit=$1 what=$2 deadline=$((SECONDS + $1))
  shift 2
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { echo "     (gave up after ${limit}s waiting for $what)"; return 1; }
    sleep 1
  done
}

e2e_prerequisites
e2e_cleanup_on_exit "$AUDIT"
rm -f "$AUDIT"
e2e_cluster_up
[ -f "$AUDIT" ] || { echo "FAIL the API server writes no audit log to $AUDIT"; exit 1; }
step "cluster up, audit log $AUDIT"

# Pods of every process node on a machine share the 127.0.x.y addresses: ports of our own,
# so that another cluster's operator on the same address does not stop this one.
port=$((20000 + RANDOM % 20000))
# shellcheck disable=SC2016  # $(POD_IP) is for Kubernetes to expand in the pod, not the shell
HELM_ARGS=(tj-operator "$ROOT/helm/tj-operator" --namespace tj-system --set bindAddress='$(POD_IP)'
           --set "metrics.port=$port" --set "health.port=$((port + 1))")
"$HELM" install "${HELM_ARGS[@]}" --create-namespace --wait --timeout 120s >/dev/null
step "helm install: operator Ready"

# The example job, short: 3 epochs of 80 steps, a backup every 10 steps, paced so that it
# lasts long enough to see a backup and lose a worker before it ends.
job_json() {  # job_json NAME
  python3 - "$ROOT/manifests/examples/fmnist.yaml" "$1" <<'EOF'
import json, sys, yaml
docs = list(yaml.safe_load_all(open(sys.argv[1])))
job = next(d for d in docs if d["kind"] == "TrainingJob")
job["metadata"]["name"] = sys.argv[2]
for t, rs in job["spec"]["replicaSpecs"].items():
    args = rs["template"]["spec"]["containers"][0]["args"]
    args[args.index("--epochs") + 1] = "3"
    args += ["--steps-per-epoch", "80"]
    if "--save-freq" in args:
        args[args.index("--save-freq") + 1] = "10"
        # Paced (each backup held 1 s before its rename; the next step waits for it): on a
        # quiet machine 240 steps take 3 s, less than the operator's 5 s progress poll that
        # shows the first backup, and the worker would be deleted after the job's end.
        env = rs["template"]["spec"]["containers"][0].setdefault("env", [])
        env.append({"name": "TJ_FAILPOINTS", "value": "backup.before_rename=sleep:1000"})
print(json.dumps(job))
EOF
}
kubectl create namespace "$NS" >/dev/null
python3 -c 'import sys,yaml; print(yaml.safe_dump(next(yaml.safe_load_all(open(sys.argv[1])))))' \
  "$ROOT/manifests/examples/fmnist.yaml" | kubectl -n "$NS" apply -f - >/dev/null
job_json sec | kubectl -n "$NS" apply -f - >/dev/null
job_uid=$(kubectl -n "$NS" get tj sec -o jsonpath='{.metadata.uid}')

# A worker lost mid-training: the operator deletes the gang and creates it again.
has_backup() { [ -n "$(kubectl -n "$NS" get tj sec -o jsonpath='{.status.progress.lastBackup}')" ]; }
wait_until 240 "a first backup" has_backup ||
  fail "job sec showed no backup in 240 s (state $(kubectl -n "$NS" get tj sec \
    -o jsonpath='{.status.state}'))"
# The rendezvous Secret deleted mid-job, then a worker: the new gang cannot start without the
# Secret; the operator (which cannot read Secrets) learns it from the kubelet, makes it again
# with a new key and restarts the gang once more, so that no pod holds the old key.
old_hash=$(kubectl -n "$NS" get tj sec -o jsonpath='{.status.rendezvousKeyHash}')
uid=$(kubectl -n "$NS" get tj sec -o jsonpath='{.metadata.uid}')
secret=sec-rendezvous-$(tr -d - <<<"$uid" | cut -c1-8)  # the job's UID in the name
kubectl -n "$NS" delete secret "$secret" >/dev/null
kubectl -n "$NS" delete pod sec-worker-1 --wait=false >/dev/null
step "Secret $secret and worker 1 deleted after the first backup (key $old_hash)"

# An invalid job: Failed at once (InvalidSpec), no pods.
job_json bad | python3 -c '
import json, sys
j = json.load(sys.stdin)
c = j["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"]
c[0]["name"] = "main"
c.append({"name": "sidecar", "image": "busybox"})
print(json.dumps(j))' | kubectl -n "$NS" apply -f - >/dev/null
# A one-worker job of 3 steps, deleted by the operator 1 s after it succeeds (TTL).
job_json ttl | python3 -c '
import json, sys
j = json.load(sys.stdin)
del j["spec"]["replicaSpecs"]["Evaluator"]
w = j["spec"]["replicaSpecs"]["Worker"]
w["replicas"] = 1
a = w["template"]["spec"]["containers"][0]["args"]
a[a.index("--epochs") + 1] = "1"
a[a.index("--steps-per-epoch") + 1] = "3"
for flag in ("--backup-dir", "--checkpoint-dir", "--log-dir", "--export-dir"):
    a[a.index(flag) + 1] += "-ttl"
a += ["--status-port", "8499"]  # local pods share the host ports: not 8470, the default
j["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = 1
print(json.dumps(j))' | kubectl -n "$NS" apply -f - >/dev/null
# A job on a claim that does not exist: its pods stay Pending (the scheduler says why) and the
# startup deadline fails the job with the scheduler's reason (docs/reliability.md, Bad
# TrainingJobs).
job_json noclaim | python3 -c '
import json, sys
j = json.load(sys.stdin)
for rs in j["spec"]["replicaSpecs"].values():
    rs["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] = "no-such-claim"
j["spec"]["runPolicy"]["startupDeadlineSeconds"] = 5
print(json.dumps(j))' | kubectl -n "$NS" apply -f - >/dev/null
bad_failed() {
  kubectl -n "$NS" get tj bad -o jsonpath='{.status.conditions[?(@.type=="Failed")].reason}' |
    grep -qx InvalidSpec
}
if wait_until 60 "job bad to fail" bad_failed; then ok "the invalid job failed (InvalidSpec)"
else fail "the invalid job did not fail with InvalidSpec"; fi
noclaim_message() {
  kubectl -n "$NS" get tj noclaim -o jsonpath='{.status.conditions[?(@.type=="Failed")].message}'
}
noclaim_failed() { noclaim_message | grep -q 'persistentvolumeclaim "no-such-claim" not found'; }
if wait_until 60 "job noclaim to fail naming the claim" noclaim_failed; then
  ok "a missing claim fails the job at its startup deadline: $(noclaim_message)"
else
  fail "job noclaim: Failed message '$(noclaim_message)' does not name the missing claim"
fi
ttl_gone() { ! kubectl -n "$NS" get tj ttl >/dev/null 2>&1; }
if wait_until 240 "job ttl deleted after its TTL" ttl_gone; then
  ok "a finished job was deleted by the operator after ttlSecondsAfterFinished"
else
  fail "job ttl was not deleted after ttlSecondsAfterFinished"
fi

finished() {
  kubectl -n "$NS" get tj sec -o jsonpath='{.status.state}' | grep -Eqx 'Succeeded|Failed'
}
wait_until 400 "job sec to finish" finished || true
state=$(kubectl -n "$NS" get tj sec -o jsonpath='{.status.state}')
# Gang restarts of every kind: made again (restartCount) or, where the nodes allow it, in place
# (the chart's restartInPlace: auto). The lost worker and the new key may be one restart or two,
# depending on whether the new gang was made before or after the new Secret; that the last gang
# holds the new key is checked below.
restarts=$(kubectl -n "$NS" get tj sec -o jsonpath='{.status.restarts.total}')
step "job sec: $state, restarts.total $restarts"
if [ "$state" = Succeeded ] && [ "${restarts:-0}" -ge 1 ]; then
  ok "job sec succeeded after its gang restarted (a lost worker, a new key)"
else
  fail "job sec: state '$state', restarts.total '$restarts' (want Succeeded after a restart)"
fi

# --- non-root: every pod the operator created (cleanPodPolicy Running keeps finished ones).
pods=$(kubectl -n "$NS" get pods -l tjo.dev/job-name=sec -o json)
if out=$(python3 -c '
import json, sys
pods = json.load(sys.stdin)["items"]
if not pods:
    sys.exit("no pod of job sec left to check")
bad = []
for p in pods:
    s, n = p["spec"], p["metadata"]["name"]
    if s.get("securityContext", {}).get("runAsNonRoot") is not True:
        bad.append(n + ": spec.securityContext.runAsNonRoot is not true")
    for c in s["containers"]:
        sc = c.get("securityContext", {})
        if sc.get("allowPrivilegeEscalation") is not False:
            bad.append("%s/%s: allowPrivilegeEscalation is not false" % (n, c["name"]))
        if "ALL" not in sc.get("capabilities", {}).get("drop", []):
            bad.append("%s/%s: capabilities.drop lacks ALL" % (n, c["name"]))
if bad:
    sys.exit("; ".join(bad))
print(len(pods))' <<<"$pods" 2>&1); then
  ok "all $out pods of job sec: runAsNonRoot, no privilege escalation, capabilities drop ALL"
else
  fail "pod security: $out"
fi

# --- the Secret: made again with a new key, which every pod of the last gang was started with.
secret_name=$secret
secret=$(kubectl -n "$NS" get secret "$secret_name" -o json)
new_hash=$(kubectl -n "$NS" get tj sec -o jsonpath='{.status.rendezvousKeyHash}')
secret_hash=$(jq -r '.metadata.annotations["tjo.dev/rendezvous-key-hash"] // empty' <<<"$secret")
pod_hashes=$(jq -r '[.items[] | select(.metadata.labels["tjo.dev/replica-type"] != "evaluator")
  | .metadata.annotations["tjo.dev/rendezvous-key-hash"] // "none"] | unique | join(" ")' \
  <<<"$pods")
if [ -n "$old_hash" ] && [ "$new_hash" != "$old_hash" ] && [ "$secret_hash" = "$new_hash" ] &&
    [ "$pod_hashes" = "$new_hash" ]; then
  ok "Secret deleted mid-job: made again with a new key ($old_hash -> $new_hash), the last gang's pods all hold it"
else
  fail "Secret deleted mid-job: status key $old_hash -> $new_hash, Secret's $secret_hash, pods' $pod_hashes"
fi

# --- the Secret: owned by the job, referenced (not copied) by the pods.
owner=$(jq -r --arg uid "$job_uid" \
  '[.metadata.ownerReferences[]? | select(.uid == $uid and .kind == "TrainingJob" and .controller == true)] | length' \
  <<<"$secret")
if [ "$owner" = 1 ]; then
  ok "Secret $secret_name: controller owner is TrainingJob sec ($job_uid)"
else
  fail "Secret $secret_name has no controller ownerReference to the job: $(jq -c .metadata.ownerReferences <<<"$secret")"
fi
key_b64=$(jq -r '.data.key // empty' <<<"$secret")
key=$(base64 -d <<<"$key_b64")
[ "${#key}" -ge 16 ] || fail "the rendezvous key is ${#key} bytes (want >= 16)"
if grep -qF -- "$key" <<<"$pods"; then fail "a pod spec holds the key as a literal value"
else ok "pods get the key through secretKeyRef, never as a literal"; fi

# --- no leak: logs, events, status.
leaks=()
search() {  # search WHAT < TEXT
  if grep -qF -e "$key" -e "$key_b64"; then leaks+=("$1"); fi
}
search "the operator's log (kubectl logs)" < <(kubectl -n tj-system logs deploy/tj-operator)
nlogs=0
while IFS= read -r f; do
  search "${f#"$TJ_LOCAL_CLUSTER_DIR"/}" <"$f"
  nlogs=$((nlogs + 1))
done < <(find "$TJ_LOCAL_CLUSTER_DIR/logs" -type f
         # A real node's container output (the kubelet's files): this test's pods and the
         # operator's.
         [ "$TJ_NODE" != containerd ] ||
           find /var/log/pods -path "*/${NS}_*" -type f -o -path "*/tj-system_*" -type f)
search "the audit log" <"$AUDIT"
search "Events" < <(kubectl get events -A -o json)
search "job sec's status" < <(kubectl -n "$NS" get tj sec -o json | jq .status)
if [ ${#leaks[@]} -eq 0 ]; then
  ok "the key (raw and base64) is in none of $nlogs cluster log files (operator, pods, node," \
     "control plane), the audit log, Events, the job's status"
else
  fail "the rendezvous key leaks into: ${leaks[*]}"
fi

# --- garbage collection: the job deleted, its Secret, Service and pods go with it.
kubectl -n "$NS" delete tj sec --wait=false >/dev/null
owned_gone() {
  [ -z "$(kubectl -n "$NS" get secret "$secret_name" --ignore-not-found -o name)" ] &&
    [ -z "$(kubectl -n "$NS" get service sec --ignore-not-found -o name)" ] &&
    [ -z "$(kubectl -n "$NS" get pods -l tjo.dev/job-name=sec -o name)" ]
}
if wait_until 60 "the job's objects to be garbage-collected" owned_gone; then
  ok "job deleted: its Secret, Service and pods were garbage-collected"
else
  fail "after the job was deleted its Secret/Service/pods are still there"
fi
step "lifecycle done"

# --- RBAC: what the operator sent (audit log) against what the chart grants. A watch is
# written to the audit log when it ends: stop the operator first, so that all of its are.
kubectl -n tj-system scale deploy/tj-operator --replicas=0 >/dev/null
operator_gone() { [ -z "$(kubectl -n tj-system get pods -o name)" ]; }
wait_until 60 "the operator to stop" operator_gone || fail "the operator did not stop"
"$HELM" template "${HELM_ARGS[@]}" >"$BUILD/security-e2e-chart.yaml"
if python3 - "$AUDIT" "$SA" "$BUILD/security-e2e-chart.yaml" <<'EOF'; then
import json, sys, yaml
audit, sa, chart = sys.argv[1:]
# Granted by the chart but not always sent in one lifecycle, and why they are still needed.
NOT_EXERCISED = {
    ("tjo.dev", "trainingjobs/finalizers", "update"):
        "checked by the OwnerReferencesPermissionEnforcement admission plugin (where a cluster "
        "enables it) when the operator creates objects with blockOwnerDeletion; never a request",
    ("", "events", "patch"):
        "an Event that repeats is counted by patching it (kube/event_recorder.cpp)",
    ("", "pods/log", "get"):
        "the evaluator's final evaluation, read from its log when it exited before its /status "
        "was read",
    ("tjo.dev", "trainingjobs", "get"):
        "a job read again after a 409 conflict on its status, or when a status kept back is "
        "written at shutdown and the cache no longer shows the job "
        "(operator/controller/executor.cpp)",
    ("networking.k8s.io", "networkpolicies", "get"):
        "a job's NetworkPolicy that a create found already there and the cache does not show "
        "(Executor::CreateNetworkPolicy)",
    ("", "services", "get"):
        "a Service of the job's name that a create found already there and the cache does "
        "not show (Executor::ReadExisting)",
    ("", "secrets", "delete"):
        "a Secret of the job's name whose key the job's status does not record is replaced "
        "(Executor::CreateSecret)",
}
# The gang's PodGroups (operator/controller/gang_scheduling.cpp): sent only where the cluster
# serves Kubernetes' own (the GenericWorkload gate; gang_e2e_test) or a job names Volcano or
# the coscheduling plugin, none of which this run's cluster has.
for g in ("scheduling.k8s.io", "scheduling.volcano.sh", "scheduling.x-k8s.io"):
    for v in ("create", "delete", "get", "list", "watch"):
        NOT_EXERCISED[(g, "podgroups", v)] = (
            "a gang's PodGroup, where the cluster schedules gangs (docs/gangs.md)")
# The only requests the operator sends without a namespace: its informers' lists and watches
# (nodes are cluster-scoped: the lost-node rules watch them). Everything else names the job's
# namespace (or the Lease's).
CLUSTER_WIDE = {(g, r, v) for g, r in (("tjo.dev", "trainingjobs"), ("", "pods"), ("", "services"),
                                       ("networking.k8s.io", "networkpolicies"), ("", "nodes"))
                for v in ("list", "watch")}
used, denied, wide = {}, set(), set()
for line in open(audit):
    e = json.loads(line)
    if e.get("user", {}).get("username") != sa or "objectRef" not in e:
        continue
    o = e["objectRef"]
    res = o.get("resource", "") + ("/" + o["subresource"] if o.get("subresource") else "")
    k = (o.get("apiGroup", ""), res, e["verb"])
    used[k] = used.get(k, 0) + 1
    if not o.get("namespace"):
        wide.add(k)
    if e.get("responseStatus", {}).get("code") == 403:
        denied.add(k)
granted, granted_wide = set(), set()
for d in yaml.safe_load_all(open(chart)):
    if d and d.get("kind") in ("ClusterRole", "Role"):
        labels = d["metadata"].get("labels") or {}
        if any(k.startswith("rbac.authorization.k8s.io/aggregate-to-") for k in labels):
            continue  # the users' roles (added to view/edit/admin), not the operator's
        for r in d.get("rules", []):
            for g in r.get("apiGroups", []):
                for res in r.get("resources", []):
                    for v in r.get("verbs", []):
                        granted.add((g, res, v))
                        if d["kind"] == "ClusterRole":
                            granted_wide.add((g, res, v))
name = lambda k: "%s %s" % (k[2], (k[0] + "/" if k[0] else "") + k[1])
print("     requests of %s by (verb, resource):" % sa)
for k in sorted(used):
    print("       %-50s %6d%s%s" % (name(k), used[k], "  cluster-wide" if k in wide else "",
                                   "" if k in granted else "  NOT GRANTED"))
bad = 0
# Informers the operator adds where the cluster serves what they watch (a kind of PodGroup,
# Kueue's objects) and the chart grants it: cluster-wide too, where they run.
MAY_BE_WIDE = {(g, "podgroups", v)
               for g in ("scheduling.k8s.io", "scheduling.volcano.sh", "scheduling.x-k8s.io")
               for v in ("list", "watch")}
MAY_BE_WIDE |= {("kueue.x-k8s.io", r, v)
                for r in ("workloads", "resourceflavors", "workloadpriorityclasses")
                for v in ("list", "watch")}
for k in sorted(wide - CLUSTER_WIDE - MAY_BE_WIDE):
    print("FAIL sent cluster-wide (without a namespace): %s" % name(k)); bad += 1
for k in sorted(CLUSTER_WIDE - wide):
    print("FAIL never sent cluster-wide, though expected (an informer): %s" % name(k)); bad += 1
for v in ("get", "list", "watch"):
    if ("", "secrets", v) in granted_wide or ("", "*", v) in granted_wide:
        print("FAIL a ClusterRole of the chart lets the operator %s Secrets cluster-wide" % v)
        bad += 1
for k in sorted(denied):
    print("FAIL denied (403): %s" % name(k)); bad += 1
for k in sorted(set(used) - granted):
    print("FAIL used but not granted by the chart: %s" % name(k)); bad += 1
for k in sorted(granted - set(used)):
    if k in NOT_EXERCISED:
        print("     granted, not sent in this run: %s (%s)" % (name(k), NOT_EXERCISED[k]))
    else:
        print("FAIL granted but never used: %s; remove it from "
              "helm/tj-operator/templates/_rules.tpl (then make manifests)" % name(k)); bad += 1
if not used:
    print("FAIL no request of %s in the audit log" % sa); bad += 1
sys.exit(1 if bad else 0)
EOF
  ok "RBAC: the chart grants exactly what the operator uses (plus the documented exceptions), reads cluster-wide only TrainingJobs, pods, Services and nodes, and no Secret"
else
  fail "RBAC is not least privilege (see above)"
fi
step "done"
if [ $failures -ne 0 ]; then
  echo "security_e2e: $failures check(s) failed"
  exit 1
fi
echo "security_e2e: all checks passed"
