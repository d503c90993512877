#!/usr/bin/env bash
# Builds the local cluster's Kubernetes, its node runtime and its clients from the Go module
# proxy, cached:
#   hack/build-kubernetes.sh kubernetes   kube-apiserver, kube-controller-manager,
#                                         kube-scheduler, kubelet, kube-proxy, kubectl
#   hack/build-kubernetes.sh etcd         etcd, etcdctl, etcdutl
#   hack/build-kubernetes.sh containerd   containerd, containerd-shim-runc-v2, ctr
#   hack/build-kubernetes.sh runc         runc (cgo; gcc and libseccomp-dev)
#   hack/build-kubernetes.sh coredns      coredns (the cluster DNS)
#   hack/build-kubernetes.sh crictl       crictl (cri-tools)
#   hack/build-kubernetes.sh helm         helm (Helm 4)
#   hack/build-kubernetes.sh helm3        helm (Helm 3)
#   hack/build-kubernetes.sh kueue        kueue (Kueue's manager; hack/kueue.sh installs it)
#   hack/build-kubernetes.sh kube-router  kube-router (its NetworkPolicy controller;
#                                         hack/network-policy.sh runs it on the real node)
#   hack/build-kubernetes.sh kwok         kwok (fake nodes and pods: the scale cluster,
#                                         TJ_NODE=kwok of hack/local-cluster.sh)
#   hack/build-kubernetes.sh training-operator   Kubeflow's training-operator (TFJob), the
#                                         peer of bench/scale (hack/training-operator.sh)
#   hack/build-kubernetes.sh all          all of the above that the local cluster uses
#   hack/build-kubernetes.sh path NAME    print the bin directory of NAME (no build)
#   hack/build-kubernetes.sh NAME...      build each NAME
# Versions: hack/versions.env. Binaries go to ~/.cache/tj-operator/<name>-<version>-<go>/bin
# (TJ_CACHE_DIR overrides the root, as for every cache of the project) and are built only when
# missing. Why a consumer module:
# k8s.io/kubernetes requires its staging modules at v0.0.0 through `replace` lines, which a
# dependency's go.mod cannot carry, so `go install k8s.io/kubernetes/cmd/...@v1.x` is refused;
# a module of our own requires k8s.io/kubernetes and replaces each staging module with the
# published k8s.io/<name> v0.<minor>.<patch> of the same release. docs/local-cluster.md.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=hack/versions.env
. hack/versions.env
# TJ_KUBE_VERSION picks another release of KUBE_VERSIONS, as for hack/local-cluster.sh.
KUBE_VERSION=$(kube_version_for "${TJ_KUBE_VERSION:-}") || {
  echo "build-kubernetes: error: TJ_KUBE_VERSION=$TJ_KUBE_VERSION: use one of" \
    "${KUBE_VERSIONS// /, } (hack/versions.env)" >&2
  exit 2
}
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
CACHE=${TJ_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tj-operator}
GO_VERSION=$(go env GOVERSION 2>/dev/null) || GO_VERSION=nogo
KUBE_PROGRAMS="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl"
ETCD_PROGRAMS="etcd etcdctl etcdutl"
CONTAINERD_PROGRAMS="containerd containerd-shim-runc-v2 ctr"
# What `all` builds, in the order the local cluster needs it.
ALL="etcd kubernetes containerd coredns crictl helm helm3"
COMPONENTS="kubernetes etcd containerd runc coredns crictl helm helm3 kueue kube-router kwok"
COMPONENTS+=" training-operator"

log() { echo "build-kubernetes: $*" >&2; }
die() { log "error: $*"; exit 1; }

dir_of() {
  case $1 in
    kubernetes) echo "$CACHE/kubernetes-$KUBE_VERSION-$GO_VERSION" ;;
    etcd) echo "$CACHE/etcd-$ETCD_VERSION-$GO_VERSION" ;;
    containerd) echo "$CACHE/containerd-$CONTAINERD_VERSION-$GO_VERSION" ;;
    runc) echo "$CACHE/runc-$RUNC_VERSION-$GO_VERSION" ;;
    coredns) echo "$CACHE/coredns-$COREDNS_VERSION-$GO_VERSION" ;;
    crictl) echo "$CACHE/crictl-$CRICTL_VERSION-$GO_VERSION" ;;
    helm) echo "$CACHE/helm-$HELM_VERSION-$GO_VERSION" ;;
    helm3) echo "$CACHE/helm-$HELM3_VERSION-$GO_VERSION" ;;
    kueue) echo "$CACHE/kueue-$KUEUE_VERSION-$GO_VERSION" ;;
    kube-router) echo "$CACHE/kube-router-$KUBE_ROUTER_VERSION-$GO_VERSION" ;;
    kwok) echo "$CACHE/kwok-$KWOK_VERSION-$GO_VERSION" ;;
    training-operator) echo "$CACHE/training-operator-$TRAINING_OPERATOR_VERSION-$GO_VERSION" ;;
    *) die "unknown component '$1' (${COMPONENTS// /, })" ;;
  esac
}

programs_of() {
  case $1 in
    kubernetes) echo "$KUBE_PROGRAMS" ;;
    etcd) echo "$ETCD_PROGRAMS" ;;
    containerd) echo "$CONTAINERD_PROGRAMS" ;;
    helm3) echo helm ;;
    *) echo "$1" ;;
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
  # shellcheck disable=SC2016  # awk's $1 and $2, not the shell's
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

# build_one DEST MODULE@VERSION PACKAGE OUT [GO BUILD FLAGS...]: one program through a
# consumer module of its own (a dependency's replace and exclude lines do not apply there).
build_one() {
  local dest=$1 mod=$2 pkg=$3 out=$4
  shift 4
  consumer_module "$dest/src" "$out-build"
  cd "$dest/src"
  go get -tool "$pkg@${mod#*@}"
  mkdir -p "$dest/bin.tmp"
  go build -trimpath "$@" -o "$dest/bin.tmp/$out" "$pkg"
}

build_containerd() {
  local dest=$1 work=$1/src p=github.com/containerd/containerd/v2
  consumer_module "$work" containerd-build
  cd "$work"
  local pkgs=() c
  for c in $CONTAINERD_PROGRAMS; do pkgs+=("$p/cmd/$c"); done
  go get -tool "${pkgs[@]/%/@$CONTAINERD_VERSION}"
  mkdir -p "$dest/bin.tmp"
  # no_btrfs: the btrfs snapshotter needs cgo and btrfs headers; the node uses overlayfs.
  go build -trimpath -tags "no_btrfs urfave_cli_no_docs" \
    -ldflags "-s -w -X $p/version.Version=$CONTAINERD_VERSION -X $p/version.Package=$p" \
    -o "$dest/bin.tmp/" "${pkgs[@]}"
}

build_runc() {  # cgo: runc's nsenter is C; seccomp through libseccomp
  local dest=$1
  command -v gcc >/dev/null || die "runc needs gcc (build-essential)"
  pkg-config --exists libseccomp 2>/dev/null || die "runc needs libseccomp-dev"
  CGO_ENABLED=1 build_one "$dest" "github.com/opencontainers/runc@$RUNC_VERSION" \
    github.com/opencontainers/runc runc -tags "seccomp urfave_cli_no_docs" \
    -ldflags "-s -w -X main.version=${RUNC_VERSION#v}"
}

build_coredns() {
  build_one "$1" "github.com/coredns/coredns@$COREDNS_VERSION" github.com/coredns/coredns \
    coredns -ldflags "-s -w"
}

build_crictl() {
  local p=sigs.k8s.io/cri-tools
  build_one "$1" "$p@$CRICTL_VERSION" "$p/cmd/crictl" crictl \
    -ldflags "-s -w -X $p/pkg/version.Version=$CRICTL_VERSION"
}

build_helm() {  # build_helm DEST VERSION (major 3 or 4)
  local major=${2%%.*}; major=${major#v}
  local p=helm.sh/helm/v$major
  build_one "$1" "$p@$2" "$p/cmd/helm" helm \
    -ldflags "-s -w -X $p/internal/version.version=$2 -X $p/internal/version.gitTreeState=clean"
}
build_helm3() { build_helm "$1" "$HELM3_VERSION"; }
build_helm4() { build_helm "$1" "$HELM_VERSION"; }

build_kueue() {  # Kueue's manager (cmd/kueue); its manifests stay in the module cache
  local p=sigs.k8s.io/kueue
  build_one "$1" "$p@$KUEUE_VERSION" "$p/cmd/kueue" kueue \
    -ldflags "-s -w -X $p/pkg/version.GitVersion=$KUEUE_VERSION"
}

build_kube_router() {  # only its network policy controller is used (hack/network-policy.sh)
  local p=github.com/cloudnativelabs/kube-router/v2
  build_one "$1" "$p@$KUBE_ROUTER_VERSION" "$p/cmd/kube-router" kube-router \
    -ldflags "-s -w -X $p/pkg/version.Version=$KUBE_ROUTER_VERSION"
}

build_kwok() {  # the kwok controller only: the local cluster runs the control plane itself
  local p=sigs.k8s.io/kwok
  build_one "$1" "$p@$KWOK_VERSION" "$p/cmd/kwok" kwok \
    -ldflags "-s -w -X $p/pkg/consts.Version=$KWOK_VERSION"
}

build_training_operator() {  # cmd/training-operator.v1; its CRDs stay in the module cache
  local p=github.com/kubeflow/training-operator
  build_one "$1" "$p@$TRAINING_OPERATOR_VERSION" "$p/cmd/training-operator.v1" \
    training-operator -ldflags "-s -w"
}

build() {  # build NAME
  local name=$1 dest programs
  dest=$(dir_of "$name")
  read -ra programs <<<"$(programs_of "$name")"
  have_all "$dest/bin" "${programs[@]}" && return 0
  # Kubernetes 1.37 and containerd 2.4 need Go 1.26 (go.mod's go line; GOTOOLCHAIN=local).
  local minor=${GO_VERSION#go1.}; minor=${minor%%.*}
  case "$minor" in ''|*[!0-9]*) minor=0 ;; esac
  [ "$minor" -ge 26 ] || die "Go 1.26 or newer is needed first on PATH; 'go' is" \
    "${GO_VERSION/nogo/missing} (https://go.dev/dl/, or /usr/local/go/bin first on PATH)"
  mkdir -p "$dest"
  exec 9>"$dest/.lock"
  flock 9
  have_all "$dest/bin" "${programs[@]}" && return 0
  local start=$SECONDS
  log "building $name (${programs[*]}) into $dest (log: $dest/build.log)"
  local fn=build_${name//-/_}
  [ "$name" = helm ] && fn=build_helm4
  if ! ( "$fn" "$dest" ) >"$dest/build.log" 2>&1; then
    tail -n 30 "$dest/build.log" >&2
    die "building $name failed; the whole log: $dest/build.log"
  fi
  rm -rf "${dest:?}/bin" && mv "$dest/bin.tmp" "$dest/bin"
  log "built $name in $((SECONDS - start)) s"
}

usage="usage: $0 all|path NAME|NAME... ($COMPONENTS)"
case ${1:-} in
  all) for n in $ALL; do build "$n"; done ;;
  path) echo "$(dir_of "${2:?path NAME}")/bin" ;;
  ""|-h|--help) die "$usage" ;;
  *) for n in "$@"; do dir_of "$n" >/dev/null; done
     for n in "$@"; do build "$n"; done ;;
esac
