"""RESULTS.md of bench/tf_failures from faults.py's JSON lines: the machine, then one row per
run (the survivors' exit codes, seconds from the fault to their first error line and to their
exit), then each case's survivors' last log lines from its first run.

    python3 summarize.py raw.jsonl > RESULTS.md
"""
import collections
import json
import os
import sys


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def survivor_cell(s):
    rc = s.get("returncode")
    if rc is None:
        return f"running at {s.get('running_at_s', '?'):g} s"
    err = s.get("first_error_s")
    err = f", error at {err:.1f} s" if err is not None else ""
    exc = s.get("exception")
    exc = f", {exc.rsplit('.', 1)[-1]}" if exc else ""
    return f"exit {rc} at {s['exit_s']:.1f} s{err}{exc}"


def main(path):
    runs = [json.loads(l) for l in open(path) if l.strip()]
    print("# What TensorFlow programs do when one replica fails: raw figures\n")
    print(f"Machine: {os.cpu_count()} CPUs (`nproc`), {cpu_model()}, shared with other builds.")
    print("Load average 8 to 12 when looked at during the first round, up to 19 near the end")
    print("(other builds). Commands: `sudo bash")
    print("bench/tf_failures/run.sh` (ROUNDS=2, CAP=120), then the rows with a heartbeat timeout:")
    print("`HEARTBEAT_MS=60000 sudo bash bench/tf_failures/run.sh keras_fit:stop:worker:1")
    print("custom_loop:stop:worker:1`. TensorFlow from")
    print("`hack/tensorflow.sh venv` (examples/tensorflow/requirements.txt); chief + 2 workers on")
    print("127.0.0.1, one thread each; the fault 3 s after the chief's first `epoch_end` (50")
    print("steps per epoch). Times are seconds from the fault (for `oom`, from the victim's death)")
    print("to the survivor's first C++ error line and to its exit, and the Python exception it")
    print("died of (not recorded in the first runs of round 1). Exit codes as Python's")
    print("`subprocess` reports them: -9 is SIGKILL (a pod's 137), -15 SIGTERM (143).\n")
    print("| program | fault | victim | victim's end | chief:0 | worker:0 | worker:1 |")
    print("|---|---|---|---|---|---|---|")
    firsts = collections.OrderedDict()
    for r in runs:
        fault = r["fault"]
        if r.get("heartbeat_timeout_ms"):
            fault += f" (heartbeat timeout {r['heartbeat_timeout_ms'] / 1000:g} s)"
        key = (r["program"], fault, r["victim"])
        if "error" in r and "survivors" not in r:
            print(f"| {key[0]} | {key[1]} | {key[2]} | not measured: {r['error']} | | | |")
            continue
        v = r["victim_end"]
        vend = f"{v['returncode']}"
        if r["fault"] == "oom":
            vend += f" (OOM kills {r.get('oom_kills')}, after {r.get('allocating_s')} s allocating)"
        elif v.get("exit_s") is not None and r["fault"] != "kill":
            vend += f" at {v['exit_s']:.1f} s"
        elif r["fault"] == "stop":
            vend = "stopped, SIGKILLed by the bench at the end"
        elif v["returncode"] is None:
            vend = "still running at the cap, SIGKILLed by the bench"
        cells = []
        for task in ("chief:0", "worker:0", "worker:1"):
            cells.append("victim" if task == r["victim"] else survivor_cell(r["survivors"][task]))
        print(f"| {key[0]} | {key[1]} | {key[2]} | {vend} | " + " | ".join(cells) + " |")
        firsts.setdefault(key, r)
    print("\n## Last log lines (first run of each case)\n")
    for key, r in firsts.items():
        print(f"### {' '.join(key)}\n")
        print("```")
        for task, s in r["survivors"].items():
            for line in s.get("log", []):
                print(f"{task}: {line}")
        print("```\n")


if __name__ == "__main__":
    main(sys.argv[1])
