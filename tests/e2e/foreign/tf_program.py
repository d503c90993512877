#!/usr/bin/env python3
"""A foreign training program, as a TensorFlow user writes one: not tj-trainer.

It parses its arguments strictly (argparse exits 2 on any argument it does not know), reads
TF_CONFIG the way MultiWorkerMirroredStrategy does, and forms its "collective" over plain TCP:
the chief (or worker 0) listens on its own TF_CONFIG address, every other chief/worker replica
connects to it through the hostnames TF_CONFIG names, and all go on together. With
--collective they stay connected and meet at every step, as an all-reduce does: a peer's
loss (its connection closed or reset, or silent for 30 s) makes every survivor exit 1, as
TensorFlow's programs do ("Collective ops is aborted by: ..."). --fill-mib writes that much
memory at a chosen step of a chosen gang: an OOM kill under a container's memory limit. It
optionally serves the documented /status JSON on $TJ_STATUS_PORT, or (--hostile-status) the
answers a hostile tenant can give instead. Standard library only.

Exit codes: 0 done, 1 on --exit-code 1 or a lost peer (a failure the operator must not retry
by the exit code alone), 2 usage.
"""
import argparse
import http.server
import json
import os
import socket
import sys
import threading
import time


def log(event, **fields):
    print(json.dumps({"event": event, **fields}), flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, required=True, help="steps to 'train'")
    p.add_argument("--step-seconds", type=float, default=0.05)
    p.add_argument("--exit-code", type=int, default=0)
    p.add_argument("--serve-status", action="store_true")
    p.add_argument("--hostile-status", action="store_true",
                   help="answer each /status request with the next of HOSTILE_ANSWERS")
    p.add_argument("--hang-on-first-gang", action="store_true",
                   help="chief and workers of restart 0 never finish (a test kills one)")
    p.add_argument("--collective", action="store_true",
                   help="meet every peer at every step; exit 1 when one is lost")
    p.add_argument("--fill-mib", type=int, default=0,
                   help="write this many MiB of memory at --fill-at-step of gang --fill-gang")
    p.add_argument("--fill-at-step", type=int, default=1)
    p.add_argument("--fill-gang", type=int, default=0)
    return p.parse_args()


def host_port(address):
    host, _, port = address.rpartition(":")
    return host, int(port)


def serve_status(state, own_host):
    port = int(os.environ.get("TJ_STATUS_PORT", "0"))
    if port == 0:
        return

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps(state).encode()
            self.send_response(200 if self.path == "/status" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    # Listen where this replica's own TF_CONFIG name resolves: its pod IP.
    server = http.server.ThreadingHTTPServer((resolve_own(own_host), port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()


# What a hostile (or broken) program serves on its status port, one answer per connection in
# turn: a body that never ends, a body nested 10,000 deep (under the operator's 64 KiB cap),
# bytes that are not HTTP, a body that stops coming (one byte every half second).
HOSTILE_ANSWERS = ("endless", "deep", "garbage", "slowloris")


def serve_hostile_status(own_host):
    port = int(os.environ.get("TJ_STATUS_PORT", "0"))
    if port == 0:
        return
    served = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            answer = HOSTILE_ANSWERS[served[0] % len(HOSTILE_ANSWERS)]
            served[0] += 1
            log("hostile_served", answer=answer)
            try:
                if answer == "endless":
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
                    self.wfile.write(b'{"loss":"')
                    chunk = b"x" * 65536
                    while True:
                        self.wfile.write(chunk)
                elif answer == "deep":
                    body = b'{"a":' * 10000 + b"1" + b"}" * 10000
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body))
                    self.wfile.write(body)
                elif answer == "garbage":
                    self.wfile.write(bytes(range(256)) * 16)
                else:
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{")
                    for _ in range(120):
                        time.sleep(0.5)
                        self.wfile.write(b" ")
                        self.wfile.flush()
            except OSError:
                pass  # the operator gave up and closed: as it should
            self.close_connection = True

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer((resolve_own(own_host), port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()


def resolve(host, seconds=120):
    """The address of `host`, asked again until it resolves: a pod's own DNS name appears a
    few seconds after the pod starts (TensorFlow's gRPC retries the same way)."""
    deadline = time.time() + seconds
    while True:
        try:
            return socket.gethostbyname(host)
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)


def resolve_own(host, seconds=120):
    """This replica's own address: `host` resolved, asked again while it names an address this
    pod does not have (a record not yet updated for a pod re-created under the same name)."""
    deadline = time.time() + seconds
    while True:
        ip = resolve(host, seconds)
        try:
            with socket.socket() as s:
                s.bind((ip, 0))
            return ip
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)


def rendezvous(cluster, task_type, task_index, keep=False):
    """Meets every chief/worker replica through the leader. keep: returns the connections
    (the leader's to every other member; a member's to the leader) for the steps."""
    members = [(t, i) for t in ("chief", "worker") for i in range(len(cluster.get(t, [])))]
    leader = members[0]
    me = (task_type, task_index)
    host, port = host_port(cluster[leader[0]][leader[1]])
    if me == leader:
        srv = socket.create_server((resolve_own(host), port))
        conns = []
        srv.settimeout(120)
        while len(conns) < len(members) - 1:
            c, _ = srv.accept()
            c.recv(64)
            conns.append(c)
        for c in conns:
            c.sendall(b"go\n")
            if not keep:
                c.close()
        srv.close()
        return conns if keep else []
    deadline = time.time() + 120
    while True:
        try:
            c = socket.create_connection((host, port), timeout=5)
            c.sendall(f"{task_type}:{task_index}\n".encode())
            if c.recv(3).startswith(b"go"):
                if keep:
                    return [c]
                c.close()
                return []
            c.close()
        except OSError:
            if time.time() > deadline:
                log("error", message=f"chief {host}:{port} unreachable")
                sys.exit(75)
            time.sleep(0.2)


def meet(conns, leader, step):
    """One step's exchange, as an all-reduce: the leader sends the step to every member and
    waits for each one's answer. A lost peer: exit 1, as TensorFlow's survivors do."""
    message = f"{step}\n".encode()
    try:
        for c in conns:
            c.settimeout(30)
            if leader:
                c.sendall(message)
            got = c.recv(len(message))
            if got != message:
                raise ConnectionError("connection closed" if not got else f"got {got!r}")
            if not leader:
                c.sendall(message)
    except OSError as e:
        log("peer_lost", step=step, error=str(e) or type(e).__name__)
        sys.exit(1)


def main():
    args = parse_args()
    log("args", argv=sys.argv[1:])
    tf_config = json.loads(os.environ["TF_CONFIG"])
    cluster, task = tf_config["cluster"], tf_config["task"]
    task_type, task_index = task["type"], int(task["index"])
    assert task_index < len(cluster[task_type]), "task index outside its cluster list"
    restart = int(os.environ.get("TJ_RESTART_COUNT", "0"))
    log("start", task=task, restart=restart)
    state = {"role": task_type, "state": "training", "epoch": 0, "total_epochs": 1,
             "step": 0, "loss": 1.0, "accuracy": 0.0}
    if args.serve_status:
        serve_status(state, host_port(cluster[task_type][task_index])[0])
    if args.hostile_status:
        serve_hostile_status(host_port(cluster[task_type][task_index])[0])
    conns = []
    if task_type != "evaluator":
        conns = rendezvous(cluster, task_type, task_index, keep=args.collective)
        log("rendezvous_done")
    if args.hang_on_first_gang and restart == 0 and task_type != "evaluator":
        time.sleep(3600)
    leader = (task_type, task_index) == next(
        (t, 0) for t in ("chief", "worker") if cluster.get(t))
    filled = []
    for step in range(args.steps):
        if args.fill_mib and restart == args.fill_gang and step + 1 == args.fill_at_step:
            log("fill", mib=args.fill_mib, step=step + 1)
            for _ in range(args.fill_mib):
                filled.append(b"\x01" * (1 << 20))  # every page written
        time.sleep(args.step_seconds)
        if conns:
            meet(conns, leader, step + 1)
        state["step"] = step + 1
    state.update(state="done", epoch=1)
    log("train_end", steps=args.steps)
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
