#!/usr/bin/env bash
# The operator's creation rate against the API server's own (the load criterion): runs
# the load test (tests/load/operator_load_test.cpp: 200 TrainingJobs of 4 workers at once on a
# local cluster, rounds of a direct client before and after the operator) RUNS times and writes
# bench/operator_load/RESULTS.md with every round and the median ratio. Each run takes about
# 2.5 minutes. Run on a quiet machine: the rates move with any other load.
#   bash bench/operator_load/run.sh [RUNS] [BUILD_DIR]       defaults: 3, build
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${1:-3}
BUILD=${2:-build}
TEST=$BUILD/tests/operator_load_test
OUT=bench/operator_load/RESULTS.md
if [ ! -x "$TEST" ] || [ ! -x "$BUILD/bin/tj-operator" ]; then
  echo "build first: cmake --build $BUILD --target operator_load_test tj-operator" >&2
  exit 1
fi
results=$(mktemp)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for i in $(seq "$RUNS"); do
  echo "run $i of $RUNS" >&2
  TJ_LOAD_RESULT_FILE=$results "$TEST" --gtest_brief=1 >&2 || echo "run $i: the test failed" >&2
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$results" "$OUT" "$RUNS" "$load_before" "$load_after" \
  "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- kube operator tests/load || echo +changes)" \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')" <<'PY'
import json, statistics, sys
path, out, runs, load_before, load_after, commit, cpu = sys.argv[1:]
rows = [json.loads(l) for l in open(path) if l.strip()]
if not rows:
    sys.exit("no run produced a result")
ratios = [r["ratio"] for r in rows]
met = sum(r >= rows[0]["target_ratio"] for r in ratios)
lines = [
    "# Operator load: creation rate against the API server's own",
    "",
    f"`bash bench/operator_load/run.sh {runs}` on `{rows[0]['host']}` ({rows[0]['cpus']} cores, {cpu}),",
    f"commit {commit}, {rows[0]['date']} to {rows[-1]['date']}; load average before {load_before},",
    f"after {load_after}. {rows[0]['jobs']} TrainingJobs x {rows[0]['replicas']} workers = "
    f"{rows[0]['objects']} objects (pods, Services, Secrets). Each test run makes "
    f"{len(rows[0]['rounds'])} rounds: the direct client before and after each operator run; "
    "a round's ratio is the operator's rate over the mean of those two direct rates, the run's "
    "ratio the median round's (tests/load/operator_load_test.cpp, docs/reliability.md \"Load\").",
    "",
    "| run.round | direct: s before, after | operator s | ratio | statuses all right at s | "
    "operator CPU s (until created) | peak RSS MiB | operator curve: s at 1/10/25/50/75/90% | "
    "API server + etcd CPU s: direct before, operator, direct after |",
    "|---|---|---|---|---|---|---|---|---|",
]
for i, run in enumerate(rows, 1):
    for k, r in enumerate(run["rounds"], 1):
        curve = "/".join(f"{x:.2f}" for x in r.get("operator_curve", []))
        lines.append(
            f"| {i}.{k} | {r['direct_s_before']:.2f}, {r['direct_s_after']:.2f} | "
            f"{r['operator_s']:.2f} | {r['ratio']:.2f} | {r['operator_statuses_s']:.2f} | "
            f"{r['operator_cpu_s']:.2f} ({r['operator_cpu_s_until_created']:.2f}) | "
            f"{r['operator_peak_rss_mib']:.1f} | {curve} | "
            f"{r['control_plane_cpu_s_direct_before']:.1f}, "
            f"{r['control_plane_cpu_s_operator']:.1f}, "
            f"{r['control_plane_cpu_s_direct_after']:.1f} |")
round_ratios = [r["ratio"] for run in rows for r in run["rounds"]]
round_met = sum(x >= rows[0]["target_ratio"] for x in round_ratios)
lines += [
    "",
    "Runs' ratios (median rounds): " + ", ".join(f"{x:.2f}" for x in ratios) +
    f"; median {statistics.median(ratios):.2f}; the target {rows[0]['target_ratio']} held in "
    f"{met} of {len(rows)} runs. Single rounds: median {statistics.median(round_ratios):.2f} "
    f"(min {min(round_ratios):.2f}, max {max(round_ratios):.2f}), {round_met} of "
    f"{len(round_ratios)} at or above the target. Peak RSS at most "
    f"{max(r['operator_peak_rss_mib'] for r in rows):.1f} MiB (limit 50). Every run checked "
    "exactly-once creation and every job's status (a run that failed them is missing above).",
    "",
]
open(out, "w").write("\n".join(lines))
print("\n".join(lines))
PY
