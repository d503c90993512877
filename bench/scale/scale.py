#!/usr/bin/env python3
"""One phase of the scale benchmark (bench/scale/run.sh drives it; docs/scale.md).

Creates M jobs of one chief and W workers in a fresh namespace, as TrainingJobs (for
tj-operator) or TFJobs (for Kubeflow's training-operator), on the local cluster's kwok nodes,
watches pods and jobs until every job has Succeeded (or a deadline), samples the operator's
memory and CPU from /proc, and prints one JSON object: the times, the latencies, the
operator's cost. The API requests come from the audit log, read by report.py afterwards.

The cluster is reached with the admin kubeconfig (the operators have identities of their
own, so that the audit log tells the benchmark's requests from theirs). Standard library only.
"""
import argparse
import base64
import concurrent.futures
import json
import os
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import http.client

TRAINING_JOB = ("tjo.dev", "v1alpha1", "trainingjobs")
TFJOB = ("kubeflow.org", "v1", "tfjobs")
WORKLOAD = ("kueue.x-k8s.io", "v1beta2", "workloads")


class Api:
    """The API server as the admin kubeconfig names it (token auth, the cluster's CA)."""

    def __init__(self, kubeconfig):
        cfg = _load_kubeconfig(kubeconfig)
        cluster = cfg["clusters"][0]["cluster"]
        url = urllib.parse.urlparse(cluster["server"])
        self.host, self.port = url.hostname, url.port
        self.token = cfg["users"][0]["user"]["token"]
        ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
        self.ctx = ssl.create_default_context(cadata=ca)

    def conn(self, timeout=60):
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=timeout)

    def request(self, method, path, body=None, conn=None, ok=(200, 201, 202, 404, 409)):
        own = conn is None
        c = conn or self.conn()
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        c.request(method, path, body=data, headers=headers)
        r = c.getresponse()
        payload = r.read()
        if own:
            c.close()
        if r.status not in ok:
            raise RuntimeError(f"{method} {path}: {r.status} {payload[:300]!r}")
        return r.status, (json.loads(payload) if payload else {})

    def watch(self, path, on_event, stop, resource_version=""):
        """Calls on_event(type, obj, t) for every event of a watch on PATH until stop is set;
        starts again from a fresh list after a 410 or a dropped stream."""
        while not stop.is_set():
            if not resource_version:
                _, lst = self.request("GET", path)
                t = time.monotonic()
                for obj in lst.get("items", []):
                    on_event("ADDED", obj, t)
                resource_version = lst["metadata"]["resourceVersion"]
            q = f"watch=1&allowWatchBookmarks=true&timeoutSeconds=60&resourceVersion={resource_version}"
            sep = "&" if "?" in path else "?"
            c = self.conn(timeout=90)
            try:
                c.request("GET", f"{path}{sep}{q}", headers={"Authorization": f"Bearer {self.token}"})
                r = c.getresponse()
                if r.status != 200:
                    resource_version = ""
                    r.read()
                    continue
                while not stop.is_set():
                    line = r.readline()
                    if not line:
                        break
                    ev = json.loads(line)
                    if ev["type"] == "ERROR":
                        resource_version = ""  # 410 Gone: list again
                        break
                    obj = ev["object"]
                    resource_version = obj["metadata"].get("resourceVersion", resource_version)
                    if ev["type"] != "BOOKMARK":
                        on_event(ev["type"], obj, time.monotonic())
            except (OSError, http.client.HTTPException, json.JSONDecodeError):
                time.sleep(0.5)
            finally:
                c.close()


def _load_kubeconfig(path):
    """The local cluster's kubeconfig is YAML of a fixed shape (hack/local-cluster.sh); a JSON
    conversion through the cluster's kubectl keeps this free of a YAML library."""
    out = subprocess.run(["kubectl", "--kubeconfig", path, "config", "view", "--raw", "-o", "json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def group_path(group, version, resource, ns=None, name=None):
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    if ns:
        base += f"/namespaces/{ns}"
    base += f"/{resource}"
    return base + (f"/{name}" if name else "")


def tfjob(name, ns, workers, image, succeed_after, queue, status_port=0):
    def replica(n, annotations, env):
        return {"replicas": n, "restartPolicy": "Never", "template": {
            "metadata": {"annotations": annotations},
            "spec": {"containers": [{"name": "tensorflow", "image": image, "env": env,
                                     "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}}}
    # The chief's /status port: where StatusResponder answers for every chief (kwok's pod
    # addresses are this machine's). Both operators get the same template; only tj-operator
    # reads /status.
    chief_env = [{"name": "TJ_STATUS_PORT", "value": str(status_port)}] if status_port else []
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"runPolicy": {"cleanPodPolicy": "Running"},
                     "tfReplicaSpecs": {
                         "Chief": replica(1, {"scale.tjo.dev/succeed-after": succeed_after},
                                          chief_env),
                         "Worker": replica(workers, {}, [])}}}


class StatusResponder(threading.Thread):
    """Answers GET /status for every chief, as a trainer does, with a step that advances on
    every answer (the worst case for polling: every answer differs). Counts the reads per
    pod address: the polls as the pods see them, whatever the operator says of itself."""

    def __init__(self):
        super().__init__(daemon=True)
        import http.server
        outer = self
        self.lock, self.reads, self.step = threading.Lock(), {}, 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                with outer.lock:
                    outer.step += 1
                    step = outer.step
                    pod = self.connection.getsockname()[0]
                    outer.reads.setdefault(pod, []).append(time.monotonic())
                body = json.dumps({"role": "chief", "state": "training", "epoch": 1,
                                   "total_epochs": 3, "step": step, "loss": 1.0 / step,
                                   "images_per_sec": 1000.0}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Handler)
        self.port = self.server.server_address[1]

    def run(self):
        self.server.serve_forever(poll_interval=0.2)


def as_training_jobs(tfjobs, operator_bin):
    """The same jobs as TrainingJobs, through the operator's own converter (docs/tfjob.md)."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write("\n---\n".join(json.dumps(j) for j in tfjobs))
    try:
        out = subprocess.run([operator_bin, "convert", "--filename", f.name], check=True,
                             capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    dec, docs, i = json.JSONDecoder(), [], 0
    while i < len(out):
        while i < len(out) and out[i].isspace():
            i += 1
        if i >= len(out):
            break
        obj, i = dec.raw_decode(out, i)
        docs.extend(obj.get("items", [obj]) if obj.get("kind") == "List" else [obj])
    return docs


def condition_true(obj, kind):
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return True
    return False


class Tracker:
    """First times (monotonic seconds) at which each pod and job reached each state."""

    def __init__(self, job_label):
        self.lock = threading.Lock()
        self.job_label = job_label
        self.pod_created, self.pod_running, self.pod_succeeded = {}, {}, {}
        self.pod_job = {}
        self.job_running, self.job_succeeded, self.job_failed = {}, {}, {}
        self.admitted = {}
        self.pod_uids = set()

    def on_pod(self, typ, pod, t):
        md = pod["metadata"]
        name = md["name"]
        with self.lock:
            if typ == "DELETED":
                return
            self.pod_uids.add(md["uid"])
            self.pod_created.setdefault(name, t)
            job = (md.get("labels") or {}).get(self.job_label)
            if job:
                self.pod_job[name] = job
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Running", "Succeeded"):
                self.pod_running.setdefault(name, t)
            if phase == "Succeeded":
                self.pod_succeeded.setdefault(name, t)

    def on_job(self, typ, job, t):
        name = job["metadata"]["name"]
        with self.lock:
            if condition_true(job, "Running") or condition_true(job, "Succeeded"):
                self.job_running.setdefault(name, t)
            if condition_true(job, "Succeeded"):
                self.job_succeeded.setdefault(name, t)
            if condition_true(job, "Failed"):
                self.job_failed.setdefault(name, t)

    def on_workload(self, typ, wl, t):
        owners = wl["metadata"].get("ownerReferences") or []
        with self.lock:
            if condition_true(wl, "Admitted") and owners:
                self.admitted.setdefault(owners[0]["name"], t)


class ProcSampler(threading.Thread):
    """Peak RSS and CPU seconds of one process, from /proc, every 0.2 s."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak_rss_kib, self.stop = pid, 0, threading.Event()
        self.cpu_start = self.cpu_s()

    def cpu_s(self):
        try:
            fields = open(f"/proc/{self.pid}/stat").read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            return 0.0

    def rss_kib(self):
        try:
            for line in open(f"/proc/{self.pid}/status"):
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except OSError:
            pass
        return 0

    def run(self):
        while not self.stop.is_set():
            self.peak_rss_kib = max(self.peak_rss_kib, self.rss_kib())
            time.sleep(0.2)


def percentile(values, p):
    if not values:
        return None
    v = sorted(values)
    k = (len(v) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def scrape(url):
    try:
        c = http.client.HTTPConnection(*url.split(":"), timeout=5)
        c.request("GET", "/metrics")
        return c.getresponse().read().decode()
    except (OSError, http.client.HTTPException):
        return ""


def metric_value(text, name):
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def histogram_quantiles(text, name, qs=(50, 99)):
    """Quantiles of a Prometheus histogram (summed over its label sets), linear in buckets."""
    buckets = {}
    for line in text.splitlines():
        if not line.startswith(name + "_bucket"):
            continue
        le = line.split('le="', 1)[1].split('"', 1)[0]
        bound = float("inf") if le == "+Inf" else float(le)
        buckets[bound] = buckets.get(bound, 0) + float(line.rsplit(" ", 1)[1])
    if not buckets:
        return {}
    bounds = sorted(buckets)
    total = buckets[bounds[-1]]
    out = {}
    for q in qs:
        target, prev_b, prev_c = total * q / 100, 0.0, 0.0
        for b in bounds:
            if buckets[b] >= target:
                if b == float("inf"):
                    out[f"p{q}"] = prev_b
                else:
                    span = buckets[b] - prev_c
                    out[f"p{q}"] = prev_b + (b - prev_b) * ((target - prev_c) / span if span else 1)
                break
            prev_b, prev_c = b, buckets[b]
    out["count"] = total
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--operator", choices=["tj-operator", "training-operator"], required=True)
    ap.add_argument("--pid", type=int, required=True, help="the operator's PID (for /proc)")
    ap.add_argument("--metrics", default="", help="host:port of the operator's /metrics")
    ap.add_argument("--operator-bin", default="build/bin/tj-operator", help="for `convert`")
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=7)
    ap.add_argument("--succeed-after", default="30s")
    ap.add_argument("--image", default="localhost/tj-trainer-cpu:0.1.0")
    ap.add_argument("--queue", default="", help="Kueue LocalQueue (with Kueue in front)")
    ap.add_argument("--clients", type=int, default=8, help="concurrent creators")
    ap.add_argument("--deadline", type=float, default=1800)
    a = ap.parse_args()

    api = Api(a.kubeconfig)
    ns = a.namespace
    api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": {"name": ns}})
    if a.queue:
        api.request("POST", group_path("kueue.x-k8s.io", "v1beta2", "localqueues", ns),
                    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                     "metadata": {"name": a.queue, "namespace": ns},
                     "spec": {"clusterQueue": "scale"}})
    responder = StatusResponder()
    responder.start()
    names = [f"j-{i:05d}" for i in range(a.jobs)]
    tfjobs = [tfjob(n, ns, a.workers, a.image, a.succeed_after, a.queue, responder.port)
              for n in names]
    if a.operator == "tj-operator":
        objs, res, job_label = as_training_jobs(tfjobs, a.operator_bin), TRAINING_JOB, "tjo.dev/job-name"
    else:
        objs, res, job_label = tfjobs, TFJOB, "training.kubeflow.org/job-name"

    tr = Tracker(job_label)
    stop = threading.Event()
    watches = [
        threading.Thread(target=api.watch, args=(f"/api/v1/namespaces/{ns}/pods", tr.on_pod, stop), daemon=True),
        threading.Thread(target=api.watch, args=(group_path(*res, ns), tr.on_job, stop), daemon=True),
    ]
    if a.queue:
        watches.append(threading.Thread(target=api.watch, args=(
            group_path(*WORKLOAD, ns), tr.on_workload, stop), daemon=True))
    for w in watches:
        w.start()
    time.sleep(1)
    sampler = ProcSampler(a.pid)
    sampler.start()

    t0 = time.monotonic()
    wall_start = time.time()

    def create(obj):
        api.request("POST", group_path(*res, ns), obj, ok=(201,))

    with concurrent.futures.ThreadPoolExecutor(a.clients) as pool:
        list(pool.map(create, objs))
    t_applied = time.monotonic() - t0
    pods_total = a.jobs * (1 + a.workers)
    deadline = t0 + a.deadline
    marks = {}
    while time.monotonic() < deadline:
        with tr.lock:
            n_pods, n_run, n_succ = len(tr.pod_created), len(tr.pod_running), len(tr.job_succeeded)
            n_fail, n_adm = len(tr.job_failed), len(tr.admitted)
        now = time.monotonic() - t0
        if n_pods >= pods_total:
            marks.setdefault("all_pods_exist_s", now)
        if n_run >= pods_total:
            marks.setdefault("all_pods_running_s", now)
        if a.queue and n_adm >= a.jobs:
            marks.setdefault("all_admitted_s", now)
        if n_succ + n_fail >= a.jobs:
            marks.setdefault("all_jobs_done_s", now)
            break
        time.sleep(0.25)
    metrics_after = scrape(a.metrics) if a.metrics else ""
    wall_end = time.time()
    cpu_end = sampler.cpu_s()
    sampler.stop.set()
    stop.set()

    with tr.lock:
        # Latency of the operator from an object change to its status write, measured the
        # same way for both: the last pod of a job Running -> the job's Running condition;
        # the chief Succeeded -> the job's Succeeded condition.
        pods_of = {}
        for pod, job in tr.pod_job.items():
            pods_of.setdefault(job, []).append(pod)
        run_lat, succ_lat = [], []
        for job, t in tr.job_running.items():
            ts = [tr.pod_running[p] for p in pods_of.get(job, []) if p in tr.pod_running]
            if len(ts) == 1 + a.workers:
                run_lat.append(t - max(ts))
        for job, t in tr.job_succeeded.items():
            ts = [tr.pod_succeeded[p] for p in pods_of.get(job, []) if p in tr.pod_succeeded]
            if ts:
                succ_lat.append(t - min(ts))
        result = {
            "operator": a.operator, "namespace": ns, "jobs": a.jobs, "pods_per_job": 1 + a.workers,
            "kueue": bool(a.queue), "clients": a.clients, "succeed_after": a.succeed_after,
            "wall_start": wall_start, "wall_end": wall_end,
            "applied_s": t_applied, **marks,
            "jobs_running": len(tr.job_running), "jobs_succeeded": len(tr.job_succeeded),
            "jobs_failed": len(tr.job_failed), "pods_seen": len(tr.pod_created),
            "pods_per_job_seen": len(tr.pod_uids) / max(a.jobs, 1),
            "latency_running_s": {"p50": percentile(run_lat, 50), "p99": percentile(run_lat, 99),
                                  "n": len(run_lat)},
            "latency_succeeded_s": {"p50": percentile(succ_lat, 50), "p99": percentile(succ_lat, 99),
                                    "n": len(succ_lat)},
            "peak_rss_mib": sampler.peak_rss_kib / 1024, "cpu_s": cpu_end - sampler.cpu_start,
            "status_reads": sum(len(r) for r in responder.reads.values()),
            "status_reads_max_per_pod": max((len(r) for r in responder.reads.values()), default=0),
            # The mean time between reads of one chief over its run, and the shortest: the
            # poll period as kept (the shortest includes the responder's own delays).
            "status_read_interval_median_s": percentile(
                [(r[-1] - r[0]) / (len(r) - 1) for r in responder.reads.values() if len(r) > 1], 50),
            "status_reads_min_gap_s": min((b - a for r in responder.reads.values()
                                           for a, b in zip(r, r[1:])), default=None),
            "status_polls_reported": metric_value(metrics_after, "tj_operator_trainer_status_polls_total"),
            "reconcile_time_s": histogram_quantiles(metrics_after, "controller_runtime_reconcile_time_seconds"),
            "queue_time_s": histogram_quantiles(metrics_after, "workqueue_queue_duration_seconds"),
        }
        if a.queue:
            adm = [t - t0 for t in tr.admitted.values()]
            result["admitted"] = len(adm)
            result["last_admitted_s"] = max(adm) if adm else None
    for key in ("all_pods_exist_s", "all_pods_running_s", "all_jobs_done_s"):
        if key in result:
            result[key.replace("_s", "_jobs_per_s").replace("all_", "")] = a.jobs / result[key]
    json.dump(result, sys.stdout)
    print()
    return 0 if result["jobs_succeeded"] == a.jobs else 1


if __name__ == "__main__":
    sys.exit(main())
