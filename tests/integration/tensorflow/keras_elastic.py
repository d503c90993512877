"""keras_fit.py (tf-keras) resumes a BackupAndRestore backup at another worker count, as the
gangs of an elastic job do: 2 workers, SIGKILLed after a backup in epoch 2; 1 worker from the
same backup directory, SIGKILLed after a backup in epoch 3; 2 workers again to the end. Each
gang is a set of processes on 127.0.0.1 with a TF_CONFIG of its size (task indices 0..n-1), as
the operator writes it after a resize, and TJ_ELASTIC_SHARDS=2 (the job's largest size) with
--batch-size 64, as under the operator.

Checks: every gang trains with the same global batch (128: 64 per worker at 2, 128 at 1) and
steps per epoch; each later gang's first step is the one after the last backup (tj_status'
termination message, read after the kill), not epoch 1 step 0, and its input skips the
batches trained before it; the resumed weights are the trained ones (the first epoch a resumed
gang ends has a lower loss than the first gang's first epoch); the last gang exits 0 after the
remaining epochs at a test accuracy above 0.6, and its last epoch's loss and its test accuracy
are those of an uninterrupted run of 1 worker up to float rounding (the gradient sums are
added in another order at another size; measured: 1e-7 for the loss, the same accuracy).

    python keras_elastic.py EXAMPLES_DIR DATA_DIR    (the venv's python; bash keras_elastic_test.sh)
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

EPOCHS, STEPS, SHARDS, BATCH = 4, 20, 2, 64
GLOBAL_BATCH = SHARDS * BATCH
# (workers, SIGKILL them all once the chief's last backup is at or past (epoch, step))
GANGS = [(2, (2, 5)), (1, (3, 5)), (2, None)]


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def last_backup(path):
    try:
        with open(path) as f:
            b = json.load(f)["lastBackup"]
        return b["epoch"], b["step"]
    except (OSError, ValueError, KeyError):
        return None


def events(path):
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    return out


def run_gang(name, workers, kill_at, examples, data, work):
    """Starts the gang, SIGKILLs it at kill_at (or lets it end); returns (exit codes, logs,
    the last backup after it ended)."""
    ports = free_ports(workers)
    message = os.path.join(work, name + "-termination-message")
    open(message, "a").close()  # tj_status writes the message into an existing file only
    procs, logs = [], []
    for i in range(workers):
        env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2",
                   PYTHONUNBUFFERED="1", TJ_TERMINATION_MESSAGE_PATH=message,
                   TJ_ELASTIC_SHARDS=str(SHARDS),
                   TF_CONFIG=json.dumps({
                       "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                       "task": {"type": "worker", "index": i}}))
        logs.append(os.path.join(work, f"{name}-worker{i}.log"))
        with open(logs[-1], "w") as out:
            procs.append(subprocess.Popen(
                [sys.executable, "keras_fit.py", "--data-dir", data, "--epochs", str(EPOCHS),
                 "--steps-per-epoch", str(STEPS), "--batch-size", str(BATCH),
                 "--threads", "1", "--step-delay", "0.05", "--save-freq", "5",
                 "--backup-dir", os.path.join(work, name.split("-")[0] + "-backup")],
                cwd=examples, env=env, stdout=out, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + 240
    while kill_at and time.monotonic() < deadline:
        if (last_backup(message) or (0, 0)) >= kill_at or any(p.poll() is not None
                                                              for p in procs):
            break
        time.sleep(0.02)
    if kill_at:
        for p in procs:
            p.send_signal(signal.SIGKILL)
    try:
        codes = [p.wait(timeout=max(1, deadline - time.monotonic())) for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        codes = [p.wait() for p in procs]
    return codes, logs, last_backup(message)


def main(examples, data):
    work = tempfile.mkdtemp(prefix="keras-elastic-")
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            failures.append(what)

    resume_at, first_epoch_loss = (1, 0), None
    try:
        started = time.monotonic()
        codes, logs, _ = run_gang("reference", 1, None, examples, data, work)
        reference = events(logs[0])
        want = ([e["loss"] for e in reference if e["event"] == "epoch_end"][-1:] +
                [e["test_accuracy"] for e in reference if e["event"] == "train_end"])
        print(f"uninterrupted, 1 worker: exit {codes}, last epoch's loss and test accuracy "
              f"{want}, {time.monotonic() - started:.1f} s", flush=True)
        check(codes == [0] and len(want) == 2, "the uninterrupted run ends")
        for number, (workers, kill_at) in enumerate(GANGS):
            started = time.monotonic()
            codes, logs, backup = run_gang(f"elastic-{number}", workers, kill_at, examples,
                                           data, work)
            print(f"gang {number}: {workers} worker(s), exit {codes}, last backup {backup}, "
                  f"{time.monotonic() - started:.1f} s", flush=True)
            per_worker = [events(log) for log in logs]
            chief = per_worker[0]
            for i, evs in enumerate(per_worker):
                start = next((e for e in evs if e["event"] == "start"), {})
                first = next((e for e in evs if e["event"] == "first_step"), {})
                check((start.get("workers"), start.get("global_batch"),
                       start.get("per_replica_batch"), start.get("steps_per_epoch")) ==
                      (workers, GLOBAL_BATCH, GLOBAL_BATCH // workers, STEPS),
                      f"gang {number} worker {i}: {workers} workers, global batch "
                      f"{GLOBAL_BATCH}, {GLOBAL_BATCH // workers} each, {STEPS} steps an "
                      f"epoch" + ("" if start else " (no start line)"))
                check((first.get("epoch"), first.get("step")) == resume_at,
                      f"gang {number} worker {i}: first step is epoch {resume_at[0]} step "
                      f"{resume_at[1]} (got {first.get('epoch')}, {first.get('step')})")
                skipped = next((e["steps"] for e in evs if e["event"] == "input_skipped"), 0)
                done = (resume_at[0] - 1) * STEPS + resume_at[1]
                check(skipped == done, f"gang {number} worker {i}: the input skips the {done} "
                                       f"batches trained (skipped {skipped})")
            ends = [e for e in chief if e["event"] == "epoch_end"]
            if number == 0:
                first_epoch_loss = ends[0]["loss"] if ends else None
                check(first_epoch_loss is not None, "gang 0 ended epoch 1")
            elif ends:
                check(first_epoch_loss is not None and ends[0]["loss"] < first_epoch_loss,
                      f"gang {number}: the resumed weights are trained (epoch "
                      f"{ends[0]['epoch']} loss {ends[0]['loss']:.4f} < epoch 1's "
                      f"{first_epoch_loss or float('nan'):.4f})")
            if kill_at:
                check(backup is not None and backup >= kill_at,
                      f"gang {number}: SIGKILLed after a backup at or past {kill_at} "
                      f"(last backup {backup})")
                if backup is None:
                    break
                epoch, step = backup
                resume_at = (epoch + 1, 0) if step >= STEPS else (epoch, step)
            else:
                end = next((e for e in chief if e["event"] == "train_end"), {})
                check(codes == [0] * workers, f"gang {number} exits 0 (exit {codes})")
                check(end.get("epochs_run") == EPOCHS - resume_at[0] + 1,
                      f"gang {number} ran epochs {resume_at[0]}-{EPOCHS} (history of "
                      f"{end.get('epochs_run')})")
                check(end.get("test_accuracy", 0) > 0.6,
                      f"test accuracy {end.get('test_accuracy')} > 0.6")
                if len(want) == 2 and ends:
                    got = [ends[-1]["loss"], end.get("test_accuracy", 0)]
                    check(abs(got[0] - want[0]) < 1e-3 and abs(got[1] - want[1]) <= 2e-3,
                          f"the last epoch's loss and the test accuracy {got} are the "
                          f"uninterrupted run's {want}")
        if failures:
            for log in sorted(os.listdir(work)):
                if log.endswith(".log"):
                    print(f"--- {log} (last lines)")
                    with open(os.path.join(work, log), errors="replace") as f:
                        print("".join(f.readlines()[-15:]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("keras_fit.py resumed at 2 -> 1 -> 2 workers")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
