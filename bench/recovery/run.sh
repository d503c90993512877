#!/usr/bin/env bash
# Time to recover: from a worker's crash to the gang's first step after it, on the local
# cluster's real node, with the operator as users run it (Helm-installed image, as `make demo`
# leaves it). Each round applies the demo job (manifests/examples/fmnist.yaml, 2 workers + an
# evaluator) with more epochs, waits for the chief's first backup, SIGKILLs worker 1's
# tj-trainer (a crash: the process dies, its pod stays), and reads from the new gang's chief
# log the moment it trained its first step (`first_step`, as the container runtime timestamps
# the line; the node and this script share the clock). Phases, from the API's timestamps (1 s resolution) and the
# trainer's events (1 ms): the crash -> the new chief pod created (the operator's judgement and
# the old pods' deletion) -> its container started (scheduling, sandbox, image, volume) -> the
# trainer's start -> restored (rendezvous, backup read) -> first step.
#   sudo bash bench/recovery/run.sh [ROUNDS]
# In place is the chart's default (restartInPlace: auto; the real node's kubelet declares the
# feature); made again: first `helm upgrade tj-operator helm/tj-operator -n tj-system
# --reuse-values --set restartInPlace=never --wait`.
# Writes bench/recovery/RESULTS-<mode>.md, mode = how the operator restarted the gang, as seen:
# `in-place` when the chief pod is the same one (its containers restarted: Kubernetes 1.36+,
# --restart-in-place=auto, docs/reliability.md), else `recreate` (its pods made again).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-3}
NS=${DEMO_NAMESPACE:-demo}
JOB=recovery
eval "$(hack/local-cluster.sh env)"
hack/local-cluster.sh status >/dev/null ||
  { echo "recovery: no local cluster: run make demo first" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "recovery: run as root (it signals the node's processes)" >&2; exit 1; }
kubectl get ns "$NS" >/dev/null || { echo "recovery: no namespace $NS: run make demo first" >&2; exit 1; }

# The demo job under another name, 8 epochs, a backup every 50 steps, its own directories.
manifest=$(mktemp)
trap 'rm -f "$manifest"' EXIT
/usr/bin/python3 - manifests/examples/fmnist.yaml "$JOB" >"$manifest" <<'EOF'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
job = next(d for d in docs if d.get("kind") == "TrainingJob")
job["metadata"]["name"] = sys.argv[2]
for rs in job["spec"]["replicaSpecs"].values():
    c = rs["template"]["spec"]["containers"][0]
    a = c["args"]
    for i, v in enumerate(a[:-1]):
        if v == "--epochs":
            a[i + 1] = "8"
        elif v == "--save-freq":
            a[i + 1] = "50"
        elif v in ("--backup-dir", "--checkpoint-dir", "--log-dir", "--export-dir"):
            a[i + 1] = "/data/" + sys.argv[2] + a[i + 1][len("/data"):]
print(yaml.safe_dump(job))
EOF

now() { date +%s.%N; }
epoch_of() {  # an RFC 3339 time -> seconds since the epoch
  date -d "$1" +%s.%N
}
# When the first event `name` of pod $1's trainer log was written, in seconds ("" when none
# yet): the runtime's timestamp of the line (kubectl logs --timestamps).
event_ts() {
  local ts
  ts=$(kubectl -n "$NS" logs --timestamps "$1" -c trainer 2>/dev/null |
    grep -m1 "\"event\":\"$2\"" | cut -d' ' -f1) || true
  if [ -n "$ts" ]; then epoch_of "$ts"; fi
}
# The host pid of pod $1's tj-trainer (the real node runs containers in the host's pid space).
trainer_pid() {
  local p
  for p in /proc/[0-9]*; do
    [ "$(basename "$(readlink "$p/exe" 2>/dev/null)")" = tj-trainer ] || continue
    tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qx "HOSTNAME=$1" || continue
    basename "$p"
    return 0
  done
  return 1
}
wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || { echo "recovery: timed out waiting for $what" >&2; return 1; }
    sleep 0.2
  done
}
delete_job() {
  kubectl -n "$NS" delete trainingjob "$JOB" --ignore-not-found --wait=true --timeout=120s >/dev/null
  kubectl -n "$NS" wait --for=delete pod -l "tjo.dev/job-name=$JOB" --timeout=120s >/dev/null 2>&1 || true
}
has_event() { [ -n "$(event_ts "$1" "$2")" ]; }
new_chief() {  # the chief pod is another than $1 (re-created), or restarted in place
  local uid restarts
  uid=$(kubectl -n "$NS" get pod "$JOB-worker-0" -o jsonpath='{.metadata.uid}' 2>/dev/null) || return 1
  restarts=$(kubectl -n "$NS" get pod "$JOB-worker-0" \
    -o jsonpath='{.status.containerStatuses[?(@.name=="trainer")].restartCount}' 2>/dev/null) || return 1
  [ -n "$uid" ] && { [ "$uid" != "$1" ] || [ "${restarts:-0}" -gt 0 ]; }
}
chief_first_step_after() {  # a first_step of the chief after time $1
  local t
  t=$(event_ts "$JOB-worker-0" first_step)
  [ -n "$t" ] && awk -v a="$t" -v b="$1" 'BEGIN {exit !(a > b)}'
}

rows=()
totals=()
for ((round = 1; round <= ROUNDS; round++)); do
  delete_job
  kubectl -n "$NS" apply --server-side -f "$manifest" >/dev/null
  wait_for 300 "the chief's first backup" has_event "$JOB-worker-0" backup_saved
  sleep 2
  old_uid=$(kubectl -n "$NS" get pod "$JOB-worker-0" -o jsonpath='{.metadata.uid}')
  pid=$(trainer_pid "$JOB-worker-1") || { echo "recovery: no tj-trainer of $JOB-worker-1 here" >&2; exit 1; }
  t_crash=$(now)
  kill -KILL "$pid"
  wait_for 300 "a new chief" new_chief "$old_uid"
  wait_for 300 "the new gang's first step" chief_first_step_after "$t_crash"
  pod=$(kubectl -n "$NS" get pod "$JOB-worker-0" -o json)
  if [ "$(jq -r .metadata.uid <<<"$pod")" = "$old_uid" ]; then
    mode=in-place
    t_created=$t_crash  # no pod made: its column reads 0
  else
    mode=recreate
    t_created=$(epoch_of "$(jq -r '.metadata.creationTimestamp' <<<"$pod")")
  fi
  started=$(jq -r '.status.containerStatuses[] | select(.name=="trainer") | .state.running.startedAt // empty' <<<"$pod")
  t_started=$( [ -n "$started" ] && epoch_of "$started" || echo "$t_created")
  t_start=$(event_ts "$JOB-worker-0" start)
  t_restored=$(event_ts "$JOB-worker-0" restored)
  t_first=$(event_ts "$JOB-worker-0" first_step)
  restarts=$(kubectl -n "$NS" get tj "$JOB" -o jsonpath='{.status.restarts}')
  row=$(awk -v c="$t_crash" -v cr="$t_created" -v st="$t_started" -v s="$t_start" \
    -v r="$t_restored" -v f="$t_first" -v n="$round" 'BEGIN {
      printf "| %d | %.1f | %.1f | %.1f | %.1f | %.1f | **%.1f** |", n, cr - c, st - cr, s - st,
        r - s, f - r, f - c }')
  rows+=("$row")
  totals+=("$(awk -v c="$t_crash" -v f="$t_first" 'BEGIN {printf "%.1f", f - c}')")
  echo "round $round ($mode): $row restarts $restarts" >&2
done
delete_job
OUT=bench/recovery/RESULTS-$mode.md

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
server=$(kubectl version -o json | jq -r .serverVersion.gitVersion)
image=$(kubectl -n tj-system get deploy -l app.kubernetes.io/name=tj-operator \
  -o jsonpath='{.items[0].spec.template.spec.containers[0].image}')
{
  echo "# Time to recover from a worker's crash ($mode)"
  echo
  echo "\`sudo bash bench/recovery/run.sh $ROUNDS\` on $cpu, $(nproc) cores, Kubernetes $server,"
  echo "the real node (containerd, runc), the operator $image installed by Helm as \`make demo\`"
  echo "does. The job: \`manifests/examples/fmnist.yaml\` (2 workers x 1 thread, an evaluator)"
  echo "with 8 epochs and a backup every 50 steps; worker 1's tj-trainer SIGKILLed 2 s after"
  echo "the chief's first backup. Seconds from the crash; phases from the new chief pod's"
  echo "creation (0 when restarted in place) and container start (the API's 1 s resolution)"
  echo "and its trainer's events as the runtime timestamped them."
  echo
  echo "| round | to the chief pod's creation | to its container's start | to the trainer's start | to restored | to the first step | crash to first step |"
  echo "|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "Median crash to first step: **$(median "${totals[@]}") s**."
} >"$OUT"
cat "$OUT"
