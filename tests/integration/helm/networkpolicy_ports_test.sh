#!/usr/bin/env bash
# The job's NetworkPolicy, as the operator makes it, admits every port a real job listens on,
# and nothing more: three tj-trainer processes (worker 0 is the chief) train on loopback as a
# job's pods do; the listening TCP sockets of each process are read from /proc/net/tcp{,6}
# (matched by inode to /proc/PID/fd) while they run; then the policy that
# `tj-operator network-policy` prints for that job (the operator's own builder, its default
# operator labels) is evaluated for each port and each kind of client:
#   - a pod of the same job (label tjo.dev/job-name, same namespace): every port admitted
#     (the rendezvous, Gloo's pair sockets, the peer-health responder, /status);
#   - the operator (its pod labels, in its namespace): only the status ports;
#   - a pod of the namespace without the job label, a pod of the namespace labelled as another
#     job, this job's pod of another namespace: nothing.
# A trainer here listens for /status on a free port rather than on the 8470 + n of its pod:
# that port is judged as the pod's.
# Usage: networkpolicy_ports_test.sh REPO_ROOT TJ_TRAINER TJ_OPERATOR. Exit 77 (ctest:
# skipped) without the dataset, unless CI or TJ_REQUIRE_HELM is set.
set -euo pipefail
: "${1:?REPO_ROOT}"
TRAINER=${2:?path of tj-trainer}
OPERATOR=${3:?path of tj-operator}
DATA=/usr/share/datasets/fashion-mnist
skip() {
  if [ -n "${CI:-}${TJ_REQUIRE_HELM:-}" ]; then echo "FAIL $*"; exit 1; fi
  echo "SKIP: $*"; exit 77
}
[ -x "$TRAINER" ] || { echo "FAIL $TRAINER is not built"; exit 1; }
[ -x "$OPERATOR" ] || { echo "FAIL $OPERATOR is not built"; exit 1; }
[ -d "$DATA" ] || skip "no dataset in $DATA (hack/install-deps.sh installs dataset-fashion-mnist)"

TMP=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT

# Free ports for the three trainers' TF_CONFIG addresses and three consecutive status ports
# (the operator gives replica n the status port base + n).
read -r P0 P1 P2 STATUS <<<"$(python3 - <<'PY'
import socket
def free(n=1):
    while True:
        socks, base = [], None
        try:
            s = socket.socket(); s.bind(("127.0.0.1", 0)); base = s.getsockname()[1]; socks.append(s)
            for k in range(1, n):
                t = socket.socket(); t.bind(("127.0.0.1", base + k)); socks.append(t)
            return base
        except OSError:
            pass
        finally:
            for s in socks: s.close()
print(free(), free(), free(), free(3))
PY
)"
TF_CLUSTER="{\"worker\":[\"127.0.0.1:$P0\",\"127.0.0.1:$P1\",\"127.0.0.1:$P2\"]}"
for i in 0 1 2; do
  TF_CONFIG="{\"cluster\":$TF_CLUSTER,\"task\":{\"type\":\"worker\",\"index\":$i}}" \
    TJ_RENDEZVOUS_KEY=networkpolicy-test-key TJ_STATUS_PORT=$((STATUS + i)) \
    "$TRAINER" --data-dir "$DATA" --device cpu --threads 1 --epochs 1 --steps-per-epoch 40 \
    --log-format json >"$TMP/w$i.out" 2>"$TMP/w$i.err" &
  pids+=($!)
done

# Every listening TCP port of each process, sampled until all three have exited.
python3 - "$TMP/ports.json" "${pids[@]}" <<'PY'
import json, os, sys, time
out, pids = sys.argv[1], [int(p) for p in sys.argv[2:]]
seen = {p: set() for p in pids}

def listening():  # inode -> port of every TCP socket in state LISTEN (0A)
    socks = {}
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(f).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == "0A":
                socks[cols[9]] = int(cols[1].rsplit(":", 1)[1], 16)
    return socks

deadline = time.time() + 400
while time.time() < deadline:
    alive = 0
    socks = listening()
    for p in pids:
        try:
            fds = os.listdir("/proc/%d/fd" % p)
            alive += 1
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink("/proc/%d/fd/%s" % (p, fd))
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in socks:
                seen[p].add(socks[link[8:-1]])
    if not alive:
        break
    time.sleep(0.02)
json.dump({str(p): sorted(v) for p, v in seen.items()}, open(out, "w"))
PY
status=0
for i in 0 1 2; do
  wait "${pids[$i]}" || { echo "FAIL trainer $i exited $?"; tail -5 "$TMP/w$i.err"; status=1; }
done
pids=()
[ $status -eq 0 ] || exit 1

cat >"$TMP/job.yaml" <<JOB
apiVersion: tjo.dev/v1alpha1
kind: TrainingJob
metadata: {name: fmnist, namespace: team-a, uid: u-1}
spec:
  port: $P0
  replicaSpecs:
    Worker:
      replicas: 3
      template:
        spec:
          containers: [{name: trainer, image: tj-trainer}]
JOB
"$OPERATOR" --network-policy-operator-namespace tj-system network-policy -f "$TMP/job.yaml" \
  >"$TMP/policy.json"

python3 - "$TMP/policy.json" "$TMP/ports.json" "$P0" "$STATUS" <<'PY'
import json, sys
policy_file, ports_file, rendezvous, status_base = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
policies = [json.load(open(policy_file))]
# The operator's pods, as the chart labels them (release tj-operator: the flag's default).
operator = {"app.kubernetes.io/name": "tj-operator", "app.kubernetes.io/instance": "tj-operator",
            "app.kubernetes.io/component": "operator"}
POD_STATUS_PORT = 8470  # replica n's /status in its pod: 8470 + n
seen = json.load(open(ports_file))
failed = []
def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failed.append(what)

def selects(selector, labels):  # a LabelSelector: matchLabels and matchExpressions
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        k, op, vals = e["key"], e["operator"], e.get("values") or []
        if op == "Exists" and k not in labels: return False
        if op == "DoesNotExist" and k in labels: return False
        if op == "In" and labels.get(k) not in vals: return False
        if op == "NotIn" and k in labels and labels[k] in vals: return False
    return True

def peer_matches(peer, policy_ns, src):
    if "ipBlock" in peer:
        return False  # pod-to-pod traffic is judged by selectors here
    ns_sel, pod_sel = peer.get("namespaceSelector"), peer.get("podSelector")
    if ns_sel is None:
        ns_ok = src["ns"] == policy_ns
    else:
        ns_ok = selects(ns_sel, src["ns_labels"])
    return ns_ok and (pod_sel is None or selects(pod_sel, src["labels"]))

def port_matches(rule_ports, port):
    if not rule_ports:
        return True
    for p in rule_ports:
        if p.get("protocol", "TCP") != "TCP":
            continue
        if "port" not in p:
            return True
        if not isinstance(p["port"], int):
            continue  # a named port: not one these processes could be matched by
        if p["port"] <= port <= p.get("endPort", p["port"]):
            return True
    return False

def admitted(dst, src, port):  # Kubernetes' semantics for ingress
    relevant = [p for p in policies if p["metadata"]["namespace"] == dst["ns"] and
                "Ingress" in p["spec"].get("policyTypes", ["Ingress"]) and
                selects(p["spec"]["podSelector"], dst["labels"])]
    if not relevant:
        return True  # not isolated
    for p in relevant:
        for rule in p["spec"].get("ingress") or []:
            peers = rule.get("from")
            if (not peers or any(peer_matches(x, dst["ns"], src) for x in peers)) and \
                    port_matches(rule.get("ports"), port):
                return True
    return False

check(policies[0]["kind"] == "NetworkPolicy" and policies[0]["metadata"]["namespace"] == "team-a",
      "the job's NetworkPolicy, in the job's namespace")
job = {"tjo.dev/job-name": "fmnist", "tjo.dev/replica-type": "worker"}
ns_labels = lambda n: {"kubernetes.io/metadata.name": n}
dst = {"ns": "team-a", "labels": job}
clients = {
    "a pod of the same job": {"ns": "team-a", "ns_labels": ns_labels("team-a"), "labels": job},
    "the operator": {"ns": "tj-system", "ns_labels": ns_labels("tj-system"), "labels": operator},
    "a pod of team-a without the job label": {"ns": "team-a", "ns_labels": ns_labels("team-a"),
                                              "labels": {"app": "other"}},
    "a job's pod of another namespace": {"ns": "team-b", "ns_labels": ns_labels("team-b"),
                                         "labels": job},
    "a pod of team-a labelled as another job": {"ns": "team-a", "ns_labels": ns_labels("team-a"),
                                                "labels": {"tjo.dev/job-name": "other"}},
    "a pod labelled like the operator in team-a": {"ns": "team-a",
                                                   "ns_labels": ns_labels("team-a"),
                                                   "labels": operator},
}
all_ports = set()
for i, (pid, ports) in enumerate(sorted(seen.items(), key=lambda kv: int(kv[0]))):
    status = status_base + i
    check(status in ports, "trainer %d listened on its status port %d: %s" % (i, status, ports))
    other = [p for p in ports if p not in (status, rendezvous)]
    # The peer-health responder (and Gloo's pair sockets) take a port the kernel picks.
    check(len(other) >= 1, "trainer %d listened on ports the kernel picked: %s" % (i, other))
    # Its status port as it is in its pod.
    all_ports |= {POD_STATUS_PORT + i if p == status else p for p in ports}
check(rendezvous in seen[sorted(seen, key=int)[0]], "the chief listened on its rendezvous port")
for port in sorted(all_ports):
    is_status = POD_STATUS_PORT <= port <= POD_STATUS_PORT + 2
    check(admitted(dst, clients["a pod of the same job"], port),
          "port %d admitted from a pod of the same job" % port)
    check(admitted(dst, clients["the operator"], port) == is_status,
          "port %d %s from the operator" % (port, "admitted" if is_status else "refused"))
    for who in ("a pod of team-a without the job label", "a job's pod of another namespace",
                "a pod of team-a labelled as another job",
                "a pod labelled like the operator in team-a"):
        check(not admitted(dst, clients[who], port), "port %d refused to %s" % (port, who))
print("%d listening ports of 3 trainers checked: %s" % (len(all_ports), sorted(all_ports)))
sys.exit(1 if failed else 0)
PY
echo "networkpolicy_ports_test: all passed"
