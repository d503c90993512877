"""Progress of a Keras program for tj-operator: `kubectl get tj` shows its epoch, loss, accuracy
and images/s.

One file, standard library only besides Keras. Copy it next to your program (or into your
image) and add the callback:

    import tj_status
    model.fit(..., callbacks=[..., tj_status.StatusCallback(global_batch_size=64 * workers)])

Under tj-operator it answers `GET /status` on $TJ_STATUS_PORT (the operator sets it for each
replica) with the JSON document the operator reads (common/status_schema.h, docs/tfjob.md):
role, state, epoch (1-based, the one in progress), total_epochs, step (in the epoch),
global_step, and the last finished epoch's loss, accuracy and images_per_sec. Where
TJ_STATUS_PORT is unset or 0 (a run by hand, another operator) it serves nothing and changes
nothing. A port it cannot listen on is a warning on stderr, never the end of training.

Keras 3 and tf-keras: the callback derives from the Keras that TensorFlow loads, tf-keras when
TF_USE_LEGACY_KERAS is 1/true/True (TensorFlow's own rule), else Keras 3.

Where the job resumes: BackupAndRestore here is Keras' own, and each backup it makes is also
written as the container's termination message ({"lastBackup": {"epoch", "step", "time"}}, on
the chief only; $TJ_TERMINATION_MESSAGE_PATH, else the kubelet's /dev/termination-log). The
file is rewritten at each backup, so it holds the last one however the process ends (a
SIGKILL, an OOM kill), and the operator copies it into the job's status.progress.lastBackup:

    callbacks=[tj_status.BackupAndRestore(backup_dir, save_freq=50), ...]

A custom loop reports its own saves with report_backup(epoch, step).

Programs without model.fit (a custom training loop, an evaluator) use StatusServer directly:

    status = tj_status.StatusServer(role="evaluator")
    status.update(state="evaluating", evaluation={"checkpoint": "ckpt-3", "epoch": 3,
                                                  "loss": 0.41, "accuracy": 0.85})
"""
import datetime
import json
import math
import os
import stat
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["StatusServer", "StatusCallback", "BackupAndRestore", "report_backup"]

_LEGACY = os.environ.get("TF_USE_LEGACY_KERAS") in ("1", "true", "True")
if _LEGACY:
    import tf_keras as _keras
else:
    import keras as _keras


def _task_type():
    try:
        return json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {}).get("type")
    except ValueError:
        return None


def _is_chief():
    """The replica that writes the backups: the chief, else worker 0 of a cluster without one
    (TensorFlow's rule); a process without TF_CONFIG is its own chief."""
    try:
        config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    except ValueError:
        return False
    task = config.get("task") or {}
    if not task:
        return True
    if task.get("type") == "chief":
        return True
    return (task.get("type") == "worker" and int(task.get("index", -1)) == 0
            and "chief" not in (config.get("cluster") or {}))


def report_backup(epoch, step, path=None):
    """Writes {"lastBackup": {"epoch", "step", "time"}} as the container's termination message:
    the backup a restarted gang resumes from (epoch 1-based, step within it). path: default
    $TJ_TERMINATION_MESSAGE_PATH, else /dev/termination-log. Only to a regular file that
    exists (the kubelet makes it; nothing is created outside a pod). True when written."""
    path = path or os.environ.get("TJ_TERMINATION_MESSAGE_PATH") or "/dev/termination-log"
    now = datetime.datetime.now(datetime.timezone.utc)
    message = json.dumps({"lastBackup": {
        "epoch": int(epoch), "step": int(step),
        "time": now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"}})
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        os.write(fd, message.encode())
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _finite(value):
    """A number the operator accepts (a float, finite), else None (JSON null)."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


class StatusServer:
    """The /status document and the HTTP server that answers it, on a thread of its own.

    port: None reads $TJ_STATUS_PORT; 0 (or unset) serves nothing. update() merges fields into
    the document; any thread may call it.
    """

    def __init__(self, port=None, role=None, host="0.0.0.0"):
        if port is None:
            text = os.environ.get("TJ_STATUS_PORT", "").strip() or "0"
            try:
                port = int(text)
            except ValueError:
                print(f"tj_status: TJ_STATUS_PORT={text!r} is not a port number; not serving "
                      "/status", file=sys.stderr, flush=True)
                port = 0
        self._lock = threading.Lock()
        self._doc = {"role": role or _task_type() or "chief", "state": "starting"}
        self._server = None
        self.port = 0
        if port:
            self._listen(host, port)

    def _listen(self, host, port):
        status = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path.split("?")[0] != "/status":
                    self.send_error(404, "only /status is served here")
                    return
                body = status.document_bytes()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # no access log on the program's output
                pass

        try:
            server = ThreadingHTTPServer((host, port), Handler)
        except OSError as e:
            print(f"tj_status: cannot listen on {host}:{port} for /status ({e.strerror}); "
                  "training goes on without progress in the TrainingJob's status",
                  file=sys.stderr, flush=True)
            return
        server.daemon_threads = True
        self._server = server
        self.port = server.server_address[1]
        threading.Thread(target=server.serve_forever, name="tj-status", daemon=True).start()

    def update(self, **fields):
        with self._lock:
            self._doc.update(fields)

    def document(self):
        with self._lock:
            return dict(self._doc)

    def document_bytes(self):
        # numpy scalars (what Keras hands callbacks) as Python numbers.
        return json.dumps(self.document(), allow_nan=False,
                          default=lambda o: o.item() if hasattr(o, "item") else str(o)).encode()

    def close(self):
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class StatusCallback(_keras.callbacks.Callback):
    """Keras callback that keeps a StatusServer's document up to date during model.fit.

    global_batch_size: images per step over all workers, for images_per_sec (None: not
    reported). server: a StatusServer to fill (default: one on $TJ_STATUS_PORT).
    """

    def __init__(self, global_batch_size=None, server=None):
        super().__init__()
        self.global_batch_size = global_batch_size
        self.server = server if server is not None else StatusServer()
        self._epoch_start = None
        self._steps = 0
        self._global_step = 0

    def _iterations(self):
        try:
            return int(self.model.optimizer.iterations.numpy())
        except (AttributeError, TypeError, ValueError):
            return self._global_step

    def on_train_begin(self, logs=None):
        self.server.update(state="training", total_epochs=int(self.params.get("epochs") or 0))

    # Keras passes numpy integers after a BackupAndRestore resume (tf-keras): int() them.
    def on_epoch_begin(self, epoch, logs=None):
        epoch = int(epoch)
        self._epoch_start = time.monotonic()
        self._steps = 0
        self._global_step = self._iterations()
        self.server.update(epoch=epoch + 1, step=0, global_step=self._global_step)

    def on_train_batch_end(self, batch, logs=None):
        self._steps = int(batch) + 1
        self._global_step += 1
        self.server.update(step=self._steps, global_step=self._global_step)

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        seconds = time.monotonic() - (self._epoch_start or time.monotonic())
        rate = None
        if self.global_batch_size and seconds > 0 and self._steps:
            rate = self._steps * self.global_batch_size / seconds
        accuracy = logs.get("accuracy", logs.get("sparse_categorical_accuracy"))
        self.server.update(epoch=int(epoch) + 1, step=self._steps,
                           global_step=self._iterations(), loss=_finite(logs.get("loss")),
                           accuracy=_finite(accuracy), images_per_sec=_finite(rate))

    def on_train_end(self, logs=None):
        self.server.update(state="succeeded")


class BackupAndRestore(_keras.callbacks.BackupAndRestore):
    """Keras' BackupAndRestore (same arguments), and each backup it makes reported with
    report_backup() on the chief: the epoch it was in (1-based) and the steps done in it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._tj_epoch = 0
        self._tj_step = 0
        self._tj_chief = _is_chief()

    def on_epoch_begin(self, epoch, logs=None):
        self._tj_epoch, self._tj_step = int(epoch), 0
        super().on_epoch_begin(epoch, logs)

    def on_train_batch_end(self, batch, logs=None):
        self._tj_step = int(batch) + 1
        super().on_train_batch_end(batch, logs)

    def on_epoch_end(self, epoch, logs=None):
        # With save_freq="epoch" the batch hooks may not run: the epoch's steps, from fit.
        self._tj_epoch = int(epoch)
        self._tj_step = int(self.params.get("steps") or self._tj_step)
        super().on_epoch_end(epoch, logs)

    def _tj_report(self):
        if self._tj_chief:
            report_backup(self._tj_epoch + 1, self._tj_step)

    # Where each Keras writes a backup: Keras 3's _save_model(), tf-keras' _backup().
    def _save_model(self, *args, **kwargs):
        result = super()._save_model(*args, **kwargs)
        self._tj_report()
        return result

    def _backup(self, *args, **kwargs):
        result = super()._backup(*args, **kwargs)
        self._tj_report()
        return result
