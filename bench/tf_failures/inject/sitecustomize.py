"""Loaded by Python at start-up when this directory is on PYTHONPATH (bench/tf_failures only);
does nothing without the variables below.

TJ_BENCH_OOM_TRIGGER=PATH: a daemon thread waits for that file to appear, then allocates and
touches memory in 64 MiB pieces until the kernel's OOM killer ends the process (the bench
runs it in a memory cgroup with a limit): an OOM kill at a moment the bench chooses, in the
middle of training, without changing the program.

TJ_BENCH_HEARTBEAT_TIMEOUT_MS=N: configures TensorFlow's coordination service as
MultiWorkerMirroredStrategy does (from TF_CONFIG), with a heartbeat timeout of N ms instead
of TensorFlow's default; the strategy, finding the service configured, keeps it. TensorFlow
has no public API for it: this is `tensorflow.python.eager.context`'s own.
"""
import json
import os
import threading
import time


def _grow(trigger):
    while not os.path.exists(trigger):
        time.sleep(0.05)
    hoard = []
    while True:
        hoard.append(b"\x01" * (64 << 20))  # a new bytes object: every page written


def _heartbeat_timeout(ms):
    from tensorflow.core.protobuf import coordination_config_pb2
    from tensorflow.python.distribute import multi_worker_util
    from tensorflow.python.eager import context
    from tensorflow.python.training import server_lib

    cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
    spec = server_lib.ClusterSpec(cluster)
    jobs = [coordination_config_pb2.CoordinatedJob(name=job, num_tasks=spec.num_tasks(job))
            for job in ("chief", "worker") if job in cluster]
    context.context().configure_coordination_service(
        service_type="standalone", service_leader=multi_worker_util.coordination_leader(spec),
        coordinated_jobs=jobs, heartbeat_timeout_in_ms=ms)


if os.environ.get("TJ_BENCH_OOM_TRIGGER"):
    threading.Thread(target=_grow, args=(os.environ["TJ_BENCH_OOM_TRIGGER"],),
                     daemon=True).start()
if os.environ.get("TJ_BENCH_HEARTBEAT_TIMEOUT_MS"):
    _heartbeat_timeout(int(os.environ["TJ_BENCH_HEARTBEAT_TIMEOUT_MS"]))
