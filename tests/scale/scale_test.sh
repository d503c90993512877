#!/usr/bin/env bash
# The scale test (tests/scale/CMakeLists.txt): bench/scale's first phase (tj-operator alone)
# at 200 jobs x 8 pods on a scale cluster of its own, then bounds on what it cost:
#   - every job Succeeded, each with exactly its 8 pods (none made twice);
#   - /status reads, counted by the chiefs' responder (not by the operator), whose every
#     answer differs: never two reads of one chief within --progress-poll-seconds (5 s; 4.5
#     allows for timers), and in all at most one per chief per period of its 30 s run plus 2:
#     200 x (30 / 5 + 2) = 1,600 (a chief runs a few seconds longer when kwok is late);
#   - status writes per job at most one per period while running plus the lifecycle's writes
#     (Created, Running, Succeeded and the last progress): 30 / 5 + 5 = 11;
#   - API requests per job at most 40 (about 31 today: 8 pod creates, 7 deletes of the
#     workers at the end, the Service, Secret, NetworkPolicy, status writes, events and the
#     chief's log); reads (get, list) other than the chief's log and the informers' lists
#     and watches: none per job (every read of a pass is served from a cache);
#   - the operator's peak RSS within the chart's limit (128 MiB).
# Usage: scale_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC=$1
BUILD=$2
cd "$SRC"
out=$BUILD/scale-test
rm -rf "$out" && mkdir -p "$out"
if ! command -v go >/dev/null && [ -z "${TJ_REQUIRE_CLUSTER:-}" ]; then
  echo "SKIP: no Go to build kwok with (hack/install-deps.sh installs it)"
  exit 77
fi
TJ_BUILD_DIR=$BUILD TJ_SCALE_PHASES=1 TJ_SCALE_QPS=500 TJ_SCALE_BURST=1000 \
  TJ_SCALE_DIR=$BUILD/local-cluster-scale TJ_SCALE_OUT=$out/RESULTS.md \
  bash bench/scale/run.sh 200 7
python3 - "$out/RESULTS.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))[0]
jobs, per = p["jobs"], p["pods_per_job"]
period, running = 5, float(p["succeed_after"].rstrip("s"))
req = p["requests"]
total = sum(req.values())
status = sum(n for k, n in req.items() if k.split()[0] in ("update", "patch") and k.endswith("/status"))
reads = {k: n for k, n in req.items() if k.split()[0] in ("get", "list")
         and k != "get pods/log"}
checks = [
    ("jobs Succeeded", p["jobs_succeeded"], "==", jobs),
    ("pods per job (none made twice)", p["pods_per_job_seen"], "==", per),
    ("/status reads seen by the chiefs", p["status_reads"], "<=", jobs * (running / period + 2)),
    ("shortest time between two reads of a chief, s", p["status_reads_min_gap_s"], ">=",
     period - 0.5),
    ("status writes per job", status / jobs, "<=", running / period + 5),
    # The audit log tells the operator's requests by its own user: at least its pod creates.
    ("pod creates per job seen as the operator's user", req.get("create pods", 0) / jobs, ">=",
     per),
    ("API requests per job", total / jobs, "<=", 40),
    ("reads besides the informers' (get/list, not the chief's log)", sum(reads.values()), "<=", 20),
    ("peak RSS MiB", p["peak_rss_mib"], "<=", 128),
]
failed = 0
for what, got, op, bound in checks:
    ok = {"==": got == bound, "<=": got <= bound, ">=": got >= bound}[op]
    failed += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {what}: {got:.2f} (bound {op} {bound:.2f})")
print("reads:", reads)
print("requests per job:", {k: round(n / jobs, 2) for k, n in sorted(req.items())})
sys.exit(1 if failed else 0)
PY
