#!/usr/bin/env bash
# Pod Security Admission bounds what a TrainingJob may have the operator create: in a namespace
# labelled pod-security.kubernetes.io/enforce=restricted, on the local cluster with the
# operator installed by the chart,
#   - a TrainingJob whose template asks for the node's PID namespace and a hostPath volume gets
#     no pod: the API server refuses the operator's create, and the job's condition
#     PodCreateRefused says so with the server's message (violates PodSecurity
#     "restricted:latest": host namespaces (hostPID=true), restricted volume types (hostPath));
#   - the operator retries with backoff, not in a loop: over 20 s, a few more refusals at most
#     (the CreateFailed Event's count) and no rewrite of the job (its resourceVersion);
#   - the example job, as the operator makes its pods (non-root defaults), is admitted there.
# Usage: pod_security_admission_e2e.sh REPO_ROOT BUILD_DIR. Exit 77 (skipped) when Helm or
# the cluster's binaries cannot be had, unless CI / TJ_REQUIRE_CLUSTER / TJ_REQUIRE_HELM is set.
set -euo pipefail
# shellcheck source=../support/cluster_e2e.sh
. "$1/tests/support/cluster_e2e.sh" "$1" "$2" psa-e2e-cluster
NS=psa-e2e
e2e_prerequisites
e2e_cleanup_on_exit "$BUILD/psa-hostjob.yaml"
e2e_cluster_up
# shellcheck disable=SC2016  # $(POD_IP) is for the kubelet to expand
"$HELM" install tj-operator "$ROOT/helm/tj-operator" --namespace tj-system --create-namespace \
  --set bindAddress='$(POD_IP)' --wait --timeout 120s >/dev/null
kubectl create namespace "$NS" >/dev/null
kubectl label namespace "$NS" pod-security.kubernetes.io/enforce=restricted >/dev/null
step "cluster up, operator Ready; namespace $NS enforces restricted"

# The example with one worker, no evaluator, the node's PIDs and a hostPath volume.
python3 - "$ROOT/manifests/examples/fmnist.yaml" >"$BUILD/psa-hostjob.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "TrainingJob"]
job = docs[0]
job["metadata"]["name"] = "hostjob"
del job["spec"]["replicaSpecs"]["Evaluator"]
worker = job["spec"]["replicaSpecs"]["Worker"]
worker["replicas"] = 1
pod = worker["template"]["spec"]
pod.pop("volumes")
c = pod["containers"][0]
c.pop("volumeMounts")
c["args"] = ["--epochs", "1", "--threads", "1"]
# What a job might ask to read a dataset off the node: both refused from level baseline up.
# (privileged: true would be refused before admission on the local cluster, whose API server
# disallows privileged containers: the condition then says Invalid.)
pod["hostPID"] = True
pod["volumes"] = [{"name": "host", "hostPath": {"path": "/"}}]
c["volumeMounts"] = [{"name": "host", "mountPath": "/host"}]
print(yaml.safe_dump(job))
PY
kubectl -n "$NS" apply -f "$BUILD/psa-hostjob.yaml" >/dev/null
cond() {  # cond FIELD: the PodCreateRefused condition's field
  kubectl -n "$NS" get trainingjob hostjob \
    -o jsonpath="{.status.conditions[?(@.type==\"PodCreateRefused\")].$1}"
}
for _ in $(seq 1 60); do
  [ "$(cond status)" = True ] && break
  sleep 1
done
[ "$(cond status)" = True ] || {
  echo "FAIL no PodCreateRefused condition; conditions:"
  kubectl -n "$NS" get trainingjob hostjob -o jsonpath='{.status.conditions}'; echo
  exit 1
}
message=$(cond message)
for word in 'violates PodSecurity "restricted:latest"' hostPID hostPath; do
  grep -qF "$word" <<<"$message" ||
    { echo "FAIL the condition does not carry the API server's refusal ($word): $message"; exit 1; }
done
[ "$(cond reason)" = Forbidden ] || { echo "FAIL reason '$(cond reason)'"; exit 1; }
[ -z "$(kubectl -n "$NS" get pods -l tjo.dev/job-name=hostjob -o name)" ] ||
  { echo "FAIL a pod of the refused job exists"; exit 1; }
echo "ok   PodCreateRefused: $message"

# Backoff, not a loop: the Event counts refusals; the job is not rewritten.
refusals() {
  kubectl -n "$NS" get events --field-selector reason=CreateFailed,involvedObject.name=hostjob \
    -o jsonpath='{range .items[*]}{.count}{"\n"}{end}' | awk '{n += $1} END {print n + 0}'
}
sleep 10
before=$(refusals)
rv=$(kubectl -n "$NS" get trainingjob hostjob -o jsonpath='{.metadata.resourceVersion}')
sleep 20
after=$(refusals)
rv_after=$(kubectl -n "$NS" get trainingjob hostjob -o jsonpath='{.metadata.resourceVersion}')
[ $((after - before)) -le 3 ] ||
  { echo "FAIL $((after - before)) refused creates in 20 s ($before -> $after): a loop"; exit 1; }
[ "$rv" = "$rv_after" ] || { echo "FAIL the job was rewritten ($rv -> $rv_after)"; exit 1; }
echo "ok   retried with backoff: $before refusals in the first 10 s, $((after - before)) in the next 20 s; the job not rewritten"

# The operator's own defaults pass restricted: the example job's pods are admitted.
kubectl -n "$NS" apply -f "$ROOT/manifests/examples/fmnist.yaml" >/dev/null
for _ in $(seq 1 60); do
  kubectl -n "$NS" get pod fmnist-worker-0 fmnist-worker-1 fmnist-evaluator-0 >/dev/null 2>&1 && break
  sleep 1
done
kubectl -n "$NS" get pod fmnist-worker-0 fmnist-worker-1 fmnist-evaluator-0 >/dev/null ||
  { echo "FAIL the example job's pods were not admitted under restricted"
    kubectl -n "$NS" get trainingjob fmnist -o jsonpath='{.status.conditions}'; echo; exit 1; }
echo "ok   the example job's pods, as the operator makes them, are admitted under restricted"
kubectl -n "$NS" delete trainingjob --all --wait=false >/dev/null
