#!/usr/bin/env bash
# Builds the local cluster's Kubernetes from the Go module proxy, cached:
#   hack/build-kubernetes.sh kubernetes   kube-apiserver, kube-controller-manager,
#                                         kube-scheduler, kubelet, kube-proxy, kubectl
#   hack/build-kubernetes.sh etcd         etcd, etcdctl, etcdutl
#   hack/build-kubernetes.sh path NAME    print the bin directory of NAME (no build)
# Versions: hack/versions.env. Binaries go to ~/.cache/tj-operator/<name>-<version>-<go>/bin
# (TJ_CACHE overrides the root) and are built only when missing. Why a consumer module:
# k8s.io/kubernetes requires its staging modules at v0.0.0 through `replace` lines, which a
# dependency's go.mod cannot carry, so `go install k8s.io/kubernetes/cmd/...@v1.x` is refused;
# a module of our own requires k8s.io/kubernetes and replaces each staging module with the
# published k8s.io/<name> v0.<minor>.<patch> of the same release. docs/local-cluster.md.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=hack/versions.env
. hack/versions.env
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
CACHE=${TJ_CACHE:-$HOME/.cache/tj-operator}
GO_VERSION=$(go env GOVERSION)
KUBE_PROGRAMS="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl"
ETCD_PROGRAMS="etcd etcdctl etcdutl"

log() { echo "build-kubernetes: $*" >&2; }
die() { log "error: $*"; exit 1; }

dir_of() {
  case $1 in
    kubernetes) echo "$CACHE/kubernetes-$KUBE_VERSION-$GO_VERSION" ;;
    etcd) echo "$CACHE/etcd-$ETCD_VERSION-$GO_VERSION" ;;
    *) die "unknown component '$1' (kubernetes, etcd)" ;;
  esac
}

have_all() {  # have_all DIR NAME...
  local d=$1; shift
  for n in "$@"; do [ -x "$d/$n" ] || return 1; done
}

# consumer_module DIR NAME: a fresh go.mod in DIR
consumer_module() {
  rm -rf "$1" && mkdir -p "$1"
  printf 'module local.invalid/%s\n\ngo 1.26.0\n\ngodebug default=go1.26\n' "$2" >"$1/go.mod"
}

build_kubernetes() {
  local dest=$1 work=$1/src
  local staging="v0.${KUBE_VERSION#v1.}"
  consumer_module "$work" kube-build
  cd "$work"
  local mods
  # The staging modules are those k8s.io/kubernetes requires at v0.0.0.
  mods=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])' |
    xargs awk '$2 == "v0.0.0" && $1 ~ /^k8s.io\// {print $1}')
  [ -n "$mods" ] || die "found no staging modules in k8s.io/kubernetes@$KUBE_VERSION's go.mod"
  for m in $mods; do go mod edit -replace="$m=$m@$staging"; done
  local pkgs=() c
  for c in $KUBE_PROGRAMS; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  go get -tool "${pkgs[@]/%/@$KUBE_VERSION}"
  local minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
  local date ld="-s -w" p
  date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ld+=" -X $p.gitTreeState=clean -X $p.buildDate=$date"
  done
  mkdir -p "$dest/bin.tmp"
  go build -trimpath -ldflags "$ld" -o "$dest/bin.tmp/" "${pkgs[@]}"
}

build_etcd() {
  local dest=$1 work=$1/src p=go.etcd.io/etcd
  consumer_module "$work" etcd-build
  cd "$work"
  go get -tool "$p/server/v3@$ETCD_VERSION" "$p/etcdctl/v3@$ETCD_VERSION" \
    "$p/etcdutl/v3@$ETCD_VERSION"
  mkdir -p "$dest/bin.tmp"
  local n
  for n in server etcdctl etcdutl; do
    local out=$n; [ "$n" = server ] && out=etcd
    go build -trimpath -ldflags "-s -w" -o "$dest/bin.tmp/$out" "$p/$n/v3"
  done
}

build() {  # build NAME
  local name=$1 dest programs
  dest=$(dir_of "$name")
  case $name in kubernetes) programs=$KUBE_PROGRAMS ;; etcd) programs=$ETCD_PROGRAMS ;; esac
  have_all "$dest/bin" $programs && return 0
  command -v go >/dev/null || die "'go' is missing (Go 1.26 is needed)"
  mkdir -p "$dest"
  exec 9>"$dest/.lock"
  flock 9
  have_all "$dest/bin" $programs && return 0
  local start=$SECONDS
  log "building $name ($programs) into $dest (log: $dest/build.log)"
  if ! ( "build_$name" "$dest" ) >"$dest/build.log" 2>&1; then
    tail -n 30 "$dest/build.log" >&2
    die "building $name failed; the whole log: $dest/build.log"
  fi
  rm -rf "$dest/bin" && mv "$dest/bin.tmp" "$dest/bin"
  log "built $name in $((SECONDS - start)) s"
}

case ${1:-} in
  kubernetes|etcd) build "$1" ;;
  all) build etcd; build kubernetes ;;
  path) echo "$(dir_of "${2:?path NAME}")/bin" ;;
  *) die "usage: $0 kubernetes|etcd|all|path NAME" ;;
esac
