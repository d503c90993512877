# shellcheck shell=bash
# Helpers of the scripts that run another project's controller manager as a process of this
# machine beside the local cluster (hack/local-cluster.sh), its admission webhooks served on
# 127.0.0.1 with a certificate of the install's own: hack/kueue.sh (Kueue) and
# hack/training-operator.sh (Kubeflow's training-operator). The sourcing script sets REPO_ROOT
# and STATE_DIR and defines log and die first.

pid_alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

cluster_env() {
  { [ -f "$STATE_DIR/kubeconfig" ] && [ -d "$STATE_DIR/pids" ]; } ||
    die "no local cluster runs in $STATE_DIR: start one with hack/local-cluster.sh up" \
      "(the same TJ_LOCAL_CLUSTER_DIR)"
  export KUBECONFIG=$STATE_DIR/kubeconfig
  KUBECTL=$("$REPO_ROOT/hack/build-kubernetes.sh" path kubernetes)/kubectl
  [ -x "$KUBECTL" ] || die "no kubectl at $KUBECTL: run hack/build-kubernetes.sh kubernetes"
}

# A Python with PyYAML: the one first on PATH, else Debian's (python3-yaml, install-deps.sh).
python_yaml() {
  local p
  for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null && "$p" -c 'import yaml' 2>/dev/null; then echo "$p"; return; fi
  done
  die "no python3 with PyYAML (Debian: apt-get install python3-yaml; hack/install-deps.sh)"
}

# module_dir MODULE@VERSION SUBDIR: the module's directory in Go's module cache (downloaded by
# the build; `go mod download` only looks it up then), which must hold SUBDIR.
module_dir() {
  local tmp dir
  tmp=$(mktemp -d)
  dir=$(cd "$tmp" && GOTOOLCHAIN=local GOFLAGS=-mod=mod \
    go mod download -json "$1" |
    python3 -c 'import json,sys; print(json.load(sys.stdin).get("Dir", ""))')
  rm -rf "$tmp"
  { [ -n "$dir" ] && [ -d "$dir/$2" ]; } ||
    die "$1 has no $2 in Go's module cache ($dir)"
  echo "$dir"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# webhook_certs DIR CA_NAME [DNS_NAME...]: a CA of this install (DIR/ca.crt, DIR/ca.key) and
# the webhook server's certificate for 127.0.0.1 and localhost, and the DNS names given
# (DIR/tls.crt, DIR/tls.key), signed by it. The CA names itself (subject CN and DNS name
# CA_NAME) and its key is PKCS#1: cert-controller, which keeps the training-operator's
# certificate Secret, keeps a CA only in that form (hack/training-operator.sh).
webhook_certs() {
  local d=$1 ca_name=$2 san=IP:127.0.0.1,DNS:localhost n
  shift 2
  for n in "$@"; do san+=",DNS:$n"; done
  mkdir -p "$d"
  openssl genrsa -traditional -out "$d/ca.key" 2048 2>/dev/null
  openssl req -x509 -new -key "$d/ca.key" -days 3650 -subj "/CN=$ca_name" \
    -addext "subjectAltName=DNS:$ca_name" -out "$d/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$d/tls.key" -out "$d/tls.csr" 2>/dev/null
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$san" >"$d/ext.cnf"
  openssl x509 -req -in "$d/tls.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
    -days 3650 -extfile "$d/ext.cnf" -out "$d/tls.crt" 2>/dev/null
  rm -f "$d/tls.csr" "$d/ext.cnf" "$d/ca.srl"
}

wait_for() {  # wait_for SECONDS WHAT CMD...
  local t=$1 what=$2 deadline
  shift 2
  deadline=$((SECONDS + t))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 1
  done
  log "$what"
}

# health_ready PORT_FILE: the manager's /readyz, on the port written in PORT_FILE, answers 200.
health_ready() {
  local port
  port=$(cat "$1" 2>/dev/null) || return 1
  curl -fsS --max-time 3 "http://127.0.0.1:$port/readyz" >/dev/null
}

# stop_host_process NAME: the process recorded in <state>/pids/NAME (started with setsid: its
# group), SIGTERM, SIGKILL after 10 s; the record goes.
stop_host_process() {
  local pid
  pid=$(cat "$STATE_DIR/pids/$1" 2>/dev/null || true)
  if pid_alive "$pid"; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 10))
    while pid_alive "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
    pid_alive "$pid" && { kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true; }
    log "stopped the manager (pid $pid)"
  fi
  rm -f "$STATE_DIR/pids/$1"
}

# placeholder_cert DIR CN WHY: a self-signed pair DIR/tls.crt and DIR/tls.key that a program
# insists on finding at a fixed path of the machine but never serves with; made once (as root)
# and shared by every cluster, left in place at uninstall. WHY ends the error and the log line.
placeholder_cert() {
  local dir=$1 cn=$2 why=$3
  [ -r "$dir/tls.crt" ] && [ -r "$dir/tls.key" ] && return 0
  { mkdir -p "$dir" 2>/dev/null && [ -w "$dir" ]; } ||
    die "$why needs a certificate in $dir (a fixed path); run this once as root"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=$cn" \
    -keyout "$dir/tls.key" -out "$dir/tls.crt" 2>/dev/null
  log "made the placeholder certificate $why waits for in $dir"
}
