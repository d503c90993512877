#!/usr/bin/env python3
"""bench/scale/RESULTS.md from the phases bench/scale/run.sh ran (one JSON object per line,
scale.py's) and the API server's audit log: each operator's requests by verb and resource,
counted from its own identity within its phase. Usage: report.py PHASES AUDIT_LOG OUT HEADER
"""
import collections
import datetime
import glob
import json
import sys


# Who each operator is to the API server: tj-operator has a user of its own
# (TJ_LOCAL_CLUSTER_USERS), training-operator its ServiceAccount (hack/training-operator.sh).
AUDIT_USER = {"tj-operator": "tj-operator",
              "training-operator": "system:serviceaccount:kubeflow:training-operator"}


def audit_counts(path, phases):
    """{phase index: Counter((verb, resource) -> requests)} of each phase's operator."""
    # A phase's requests: from its first create until the next phase begins (the end of the
    # log for the last), so that what the operator does after the last job Succeeded (deleting
    # the workers' pods and Services, as cleanPodPolicy says) counts too; only the phase's
    # operator runs then.
    ends = [p["wall_start"] for p in phases[1:]] + [float("inf")]
    windows = [(AUDIT_USER[p["operator"]], p["wall_start"], end) for p, end in zip(phases, ends)]
    counts = [collections.Counter() for _ in phases]
    # The API server rotates its audit log at 100 MB (audit-<time>.log beside it): read all.
    base = path[:-len(".log")] if path.endswith(".log") else path
    for name in sorted(glob.glob(glob.escape(base) + "-*.log")) + [path]:
        count_file(name, windows, counts)
    return counts


def count_file(name, windows, counts):
    with open(name) as f:
        for line in f:
            e = json.loads(line)
            if e.get("stage") != "ResponseComplete":
                continue
            user = e.get("user", {}).get("username")
            t = datetime.datetime.fromisoformat(
                e["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
            for i, (op, start, end) in enumerate(windows):
                if user == op and start <= t <= end:
                    o = e.get("objectRef") or {}
                    res = o.get("resource", "") + ("/" + o["subresource"] if o.get("subresource") else "")
                    counts[i][(e["verb"], res)] += 1


def fmt(x, digits=1):
    return "-" if x is None else f"{x:.{digits}f}"


def main():
    phases_path, audit_path, out, header = sys.argv[1:5]
    phases = [json.loads(l) for l in open(phases_path) if l.strip()]
    counts = audit_counts(audit_path, phases)
    lines = [header, "",
             "| phase | operator | Kueue | jobs x pods | all pods exist s | all Running s | all Succeeded s "
             "| jobs/s to Running | Kueue: last admitted s | peak RSS MiB | CPU s | API requests per job "
             "| writes per job | status writes per job | latency to Running p50/p99 s "
             "| latency to Succeeded p50/p99 s | reconcile p50/p99 ms |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, (p, c) in enumerate(zip(phases, counts), 1):
        jobs = p["jobs"]
        total = sum(c.values())
        writes = sum(v for (verb, _), v in c.items() if verb in ("create", "update", "patch", "delete"))
        status = sum(v for (verb, res), v in c.items()
                     if verb in ("update", "patch") and res.endswith("/status"))
        lr, ls, rt = p["latency_running_s"], p["latency_succeeded_s"], p.get("reconcile_time_s") or {}
        lines.append(
            f"| {p['namespace'].rsplit('-', 1)[-1]} | {p['operator']} | {'yes' if p['kueue'] else 'no'} | {jobs} x {p['pods_per_job']} "
            f"| {fmt(p.get('all_pods_exist_s'))} | {fmt(p.get('all_pods_running_s'))} "
            f"| {fmt(p.get('all_jobs_done_s'))} | {fmt(p.get('pods_running_jobs_per_s'), 2)} "
            f"| {fmt(p.get('last_admitted_s'))} | {fmt(p['peak_rss_mib'])} | {fmt(p['cpu_s'])} "
            f"| {total / jobs:.1f} | {writes / jobs:.1f} | {status / jobs:.1f} "
            f"| {fmt(lr['p50'], 2)}/{fmt(lr['p99'], 2)} | {fmt(ls['p50'], 2)}/{fmt(ls['p99'], 2)} "
            f"| {fmt((rt.get('p50') or 0) * 1000)}/{fmt((rt.get('p99') or 0) * 1000)} |")
    label = [p["namespace"].rsplit("-", 1)[-1] for p in phases]
    lines += ["", "Jobs that did not succeed, per phase: " + ", ".join(
        f"{n}: {p['jobs'] - p['jobs_succeeded']}" for n, p in zip(label, phases)) + ".", "",
        "API requests per job by verb and resource (from the audit log, the operator's own user):", ""]
    keys = sorted({k for c in counts for k in c}, key=lambda k: (k[1], k[0]))
    lines.append("| verb resource | " + " | ".join(f"phase {n}" for n in label) + " |")
    lines.append("|---|" + "---|" * len(phases))
    for k in keys:
        lines.append(f"| {k[0]} {k[1] or '(none)'} | " + " | ".join(
            f"{c[k] / p['jobs']:.2f}" if c[k] else "" for c, p in zip(counts, phases)) + " |")
    open(out, "w").write("\n".join(lines) + "\n")
    json.dump([{**p, "requests": {f"{v} {r}": n for (v, r), n in c.items()}}
               for p, c in zip(phases, counts)], open(out.replace(".md", ".json"), "w"), indent=1)


if __name__ == "__main__":
    main()
