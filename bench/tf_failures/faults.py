"""One fault in a running TensorFlow gang, and what the survivors do (bench/tf_failures).

Starts an example program of examples/tensorflow as chief + 2 workers on 127.0.0.1 with
TF_CONFIG, as a TrainingJob's gang runs it, waits until the chief has finished its first
epoch (training is under way on all three), waits --after seconds more, does the fault to one
replica, then watches every process until all have exited or --cap seconds have passed since
the fault. Prints one JSON line: the fault, the victim's end, and per survivor its exit code
(or null: still running at the cap, then SIGKILLed by the bench), the seconds from the fault
to its first C++ error line and to its exit, and the last lines of its log.

Faults:
  kill   SIGKILL (a crash, a kill, a lost node's process)
  oom    the victim runs in a cgroup v1 memory cgroup with --memory-limit; at the fault it
         starts allocating (inject/sitecustomize.py) until the kernel's OOM killer ends it
         (the fault's time is then the victim's death, seen by waitpid)
  stop   SIGSTOP: the process stays, its sockets stay open, it answers nothing (what a node
         that vanished from the network looks like to its peers: no FIN, no RST)
  term   SIGTERM (an eviction, a drain)

    python3 faults.py --python VENV_PYTHON --program keras_fit --fault kill --victim worker:1
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXAMPLES = os.path.join(ROOT, "examples", "tensorflow")
CGROUP_MEMORY = "/sys/fs/cgroup/memory"
TASKS = ["chief:0", "worker:0", "worker:1"]


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def program_args(program, work):
    common = ["--epochs", "1000", "--steps-per-epoch", "50", "--threads", "1"]
    if program == "keras_fit":
        # tf-keras (Keras 3's fit does not run under MultiWorkerMirroredStrategy), a backup
        # every 10 steps.
        return ["keras_fit.py"] + common + ["--backup-dir", os.path.join(work, "backup"),
                                            "--save-freq", "10"], {"TF_USE_LEGACY_KERAS": "1"}
    return ["custom_loop.py"] + common + ["--checkpoint-dir", os.path.join(work, "ckpt")], {}


def tail(path, n, paths):
    """The last `n` non-empty lines of a log, each cut at 300 characters, with the
    directories of `paths` (name -> directory) written as <name>."""
    try:
        with open(path, errors="replace") as f:
            lines = [l.rstrip("\n") for l in f if l.strip()]
    except OSError:
        return []
    out = []
    for line in lines[-n:]:
        for name, directory in paths.items():
            line = line.replace(directory, f"<{name}>")
        out.append(line[:300])
    return out


# TensorFlow's C++ log lines: "E0000 00:00:<seconds since the epoch>.<micros> <tid> <file>]"
ERROR_LINE = re.compile(r"^E\d{4} \d\d:\d\d:(\d+\.\d+) ")


def first_error(path, since):
    """The wall time of the first C++ error line logged after `since`, or None."""
    try:
        with open(path, errors="replace") as f:
            for line in f:
                m = ERROR_LINE.match(line)
                if m and float(m.group(1)) >= since:
                    return float(m.group(1))
    except OSError:
        pass
    return None


# The Python exception a process died of: the last line of its traceback.
EXCEPTION_LINE = re.compile(r"^((?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit)\b)")


def exception(path):
    """The class of the last exception printed in the log, or None."""
    found = None
    try:
        with open(path, errors="replace") as f:
            for line in f:
                m = EXCEPTION_LINE.match(line)
                if m:
                    found = m.group(1)
    except OSError:
        pass
    return found


def chief_epoch_done(path):
    try:
        with open(path, errors="replace") as f:
            return any('"event": "epoch_end"' in l for l in f)
    except OSError:
        return False


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--python", required=True, help="the python of hack/tensorflow.sh venv")
    p.add_argument("--program", choices=["keras_fit", "custom_loop"], required=True)
    p.add_argument("--fault", choices=["kill", "oom", "stop", "term"], required=True)
    p.add_argument("--victim", choices=TASKS, required=True)
    p.add_argument("--after", type=float, default=3.0,
                   help="seconds after the chief's first epoch_end to do the fault")
    p.add_argument("--cap", type=float, default=150.0,
                   help="seconds after the fault to wait for the survivors")
    p.add_argument("--start-timeout", type=float, default=600.0)
    p.add_argument("--memory-limit", default="3G", help="the OOM victim's cgroup limit")
    p.add_argument("--heartbeat-timeout-ms", type=int, default=0,
                   help="the coordination service's heartbeat timeout (0: TensorFlow's)")
    p.add_argument("--tail", type=int, default=4, help="log lines kept per process")
    p.add_argument("--keep", help="keep the logs in this directory")
    a = p.parse_args(argv)

    work = a.keep or tempfile.mkdtemp(prefix="tf-failures-")
    os.makedirs(work, exist_ok=True)
    ports = free_ports(3)
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"],
               "worker": [f"127.0.0.1:{ports[1]}", f"127.0.0.1:{ports[2]}"]}
    args, extra_env = program_args(a.program, work)
    trigger = os.path.join(work, "oom-now")
    cgroup = None
    if a.fault == "oom":
        cgroup = os.path.join(CGROUP_MEMORY, f"tf-failures-{os.getpid()}")
        os.mkdir(cgroup)
        with open(os.path.join(cgroup, "memory.limit_in_bytes"), "w") as f:
            f.write(a.memory_limit)

    # Logs name these; the results do not.
    paths = {"venv": os.path.dirname(os.path.dirname(a.python)), "work": work,
             "repository": ROOT}
    procs, logs = {}, {}
    for task in TASKS:
        ttype, index = task.split(":")
        env = dict(os.environ, **extra_env)
        env["TF_CONFIG"] = json.dumps({"cluster": cluster,
                                       "task": {"type": ttype, "index": int(index)}})
        env.setdefault("TF_NUM_INTEROP_THREADS", "1")
        env.setdefault("TF_NUM_INTRAOP_THREADS", "1")
        env.setdefault("OMP_NUM_THREADS", "1")
        env["PYTHONUNBUFFERED"] = "1"
        preexec = None
        if a.heartbeat_timeout_ms:
            env["PYTHONPATH"] = os.path.join(HERE, "inject")
            env["TJ_BENCH_HEARTBEAT_TIMEOUT_MS"] = str(a.heartbeat_timeout_ms)
        if task == a.victim and a.fault == "oom":
            env["PYTHONPATH"] = os.path.join(HERE, "inject")
            env["TJ_BENCH_OOM_TRIGGER"] = trigger
            procs_file = os.path.join(cgroup, "cgroup.procs")

            def preexec(path=procs_file):
                with open(path, "w") as f:
                    f.write(str(os.getpid()))
        logs[task] = os.path.join(work, task.replace(":", "-") + ".log")
        with open(logs[task], "w") as out:
            procs[task] = subprocess.Popen([a.python] + args, cwd=EXAMPLES, env=env,
                                           stdout=out, stderr=subprocess.STDOUT,
                                           preexec_fn=preexec)

    result = {"program": a.program, "fault": a.fault, "victim": a.victim}
    if a.heartbeat_timeout_ms:
        result["heartbeat_timeout_ms"] = a.heartbeat_timeout_ms
    try:
        t0 = time.monotonic()
        while not chief_epoch_done(logs["chief:0"]):
            if any(pr.poll() is not None for pr in procs.values()):
                result["error"] = "a process exited before the first epoch's end"
                result["logs"] = {t: tail(logs[t], a.tail, paths) for t in TASKS}
                return result
            if time.monotonic() - t0 > a.start_timeout:
                result["error"] = "no epoch_end within the start timeout"
                return result
            time.sleep(0.1)
        result["first_epoch_s"] = round(time.monotonic() - t0, 1)
        time.sleep(a.after)

        victim = procs[a.victim]
        fault_at, fault_wall = time.monotonic(), time.time()
        if a.fault == "kill":
            victim.send_signal(signal.SIGKILL)
        elif a.fault == "stop":
            victim.send_signal(signal.SIGSTOP)
        elif a.fault == "term":
            victim.send_signal(signal.SIGTERM)
        else:
            open(trigger, "w").close()

        ended, errors_since = {}, fault_wall
        while time.monotonic() - fault_at < a.cap:
            for task, pr in procs.items():
                if task not in ended and pr.poll() is not None:
                    ended[task] = time.monotonic()
            if all(t in ended for t in TASKS if not (t == a.victim and a.fault == "stop")):
                break
            time.sleep(0.05)
        if a.fault == "oom":
            if a.victim not in ended:
                result["error"] = "the victim was not OOM-killed within the cap"
            else:
                result["allocating_s"] = round(ended[a.victim] - fault_at, 2)
                # From here on the fault is the victim's death; the survivors' errors are
                # searched from the start of the allocation (a socket can close before
                # waitpid sees the death), so an error can come a little before it.
                errors_since = fault_wall
                fault_wall += ended[a.victim] - fault_at
                fault_at = ended[a.victim]
            with open(os.path.join(cgroup, "memory.oom_control")) as f:
                result["oom_kills"] = int(f.read().split("oom_kill ")[1].split()[0])
        v = {"returncode": victim.returncode}
        if a.victim in ended and a.fault != "oom":
            v["exit_s"] = round(ended[a.victim] - fault_at, 2)
        v["log"] = tail(logs[a.victim], a.tail, paths)
        result["victim_end"] = v
        survivors = {}
        for task in TASKS:
            if task == a.victim:
                continue
            s = {"returncode": procs[task].returncode}
            if task in ended:
                s["exit_s"] = round(ended[task] - fault_at, 2)
            else:
                s["running_at_s"] = a.cap
            first = first_error(logs[task], errors_since)
            if first is not None:
                s["first_error_s"] = round(first - fault_wall, 2)
            s["exception"] = exception(logs[task])
            s["log"] = tail(logs[task], a.tail, paths)
            survivors[task] = s
        result["survivors"] = survivors
        return result
    finally:
        for pr in procs.values():
            if pr.poll() is None:
                pr.kill()
                pr.wait()
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
        if cgroup:
            for _ in range(50):
                try:
                    os.rmdir(cgroup)
                    break
                except OSError:
                    time.sleep(0.1)


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])), flush=True)
