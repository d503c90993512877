#!/usr/bin/env bash
# Usage: build_kubernetes_args_test.sh REPO_ROOT. See CMakeLists.txt.
set -uo pipefail
ROOT=${1:?usage: build_kubernetes_args_test.sh REPO_ROOT}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
failed=0
# expect NAME WANT_RC PATTERN COMMAND...: COMMAND exits WANT_RC ("nonzero": any but 0) and its
# output (stdout and stderr) matches the extended regular expression PATTERN.
expect() {
  local name=$1 want=$2 pattern=$3 out rc
  shift 3
  out=$("$@" 2>&1); rc=$?
  if { [ "$want" = nonzero ] && [ "$rc" -eq 0 ]; } || { [ "$want" != nonzero ] && [ "$rc" -ne "$want" ]; }; then
    echo "FAIL $name: exit $rc (expected $want): $out"; failed=1; return
  fi
  grep -qE -- "$pattern" <<<"$out" || { echo "FAIL $name: output does not match '$pattern': $out"; failed=1; return; }
  echo "ok   $name"
}
# shellcheck source=../../../hack/versions.env
. "$ROOT/hack/versions.env"
BK=$ROOT/hack/build-kubernetes.sh

# A go that says it is 1.19 (as Debian 12's /usr/bin/go), first on PATH.
mkdir -p "$WORK/oldgo"
# shellcheck disable=SC2016  # a script's text: its $1 and $2 are its own
printf '#!/bin/sh\n[ "$1 $2" = "env GOVERSION" ] && echo go1.19.8 && exit 0\nexit 3\n' >"$WORK/oldgo/go"
chmod +x "$WORK/oldgo/go"

expect "an unknown component is refused by name" nonzero "unknown component 'kubelet2'.*kubernetes, etcd, containerd" \
  env TJ_CACHE_DIR="$WORK/cache" "$BK" kubelet2
expect "no arguments: the usage" nonzero "usage: .*all\|path NAME" "$BK"
expect "an old Go is refused, naming the version and what to do" nonzero "Go 1.26 or newer is needed.*go1.19.8" \
  env TJ_CACHE_DIR="$WORK/cache" PATH="$WORK/oldgo:$PATH" "$BK" crictl
[ ! -e "$WORK/cache/crictl-$CRICTL_VERSION-go1.19.8/bin" ] || { echo "FAIL the old Go built something"; failed=1; }
expect "path: <cache>/<name>-<version>-<go>/bin" 0 "^$WORK/cache/kubernetes-$KUBE_VERSION-go[0-9.]+/bin$" \
  env TJ_CACHE_DIR="$WORK/cache" "$BK" path kubernetes
expect "path of Helm 3" 0 "^$WORK/cache/helm-$HELM3_VERSION-go[0-9.]+/bin$" \
  env TJ_CACHE_DIR="$WORK/cache" "$BK" path helm3
[ ! -e "$WORK/cache/kubernetes-$KUBE_VERSION" ] || { echo "FAIL path built or made something"; failed=1; }

LC=$ROOT/hack/local-cluster.sh
expect "an unsupported TJ_KUBE_VERSION is refused, naming those supported" 2 \
  "TJ_KUBE_VERSION=1.34: the local cluster runs Kubernetes ${KUBE_VERSIONS// /, }" \
  env TJ_KUBE_VERSION=1.34 "$LC" status
expect "build-kubernetes refuses it too" 2 "TJ_KUBE_VERSION=1.34: use one of ${KUBE_VERSIONS// /, }" \
  env TJ_KUBE_VERSION=1.34 TJ_CACHE_DIR="$WORK/cache" "$BK" path kubernetes
other=${KUBE_VERSIONS%% *}  # the oldest supported release
expect "another supported minor: its own build, for the cluster and for build-kubernetes" 0 \
  "/kubernetes-$other-go[0-9.]+/bin$" \
  env TJ_KUBE_VERSION="$(cut -d. -f1,2 <<<"${other#v}")" TJ_CACHE_DIR="$WORK/cache" \
  "$LC" kubectl-dir
expect "build-kubernetes path with TJ_KUBE_VERSION" 0 "^$WORK/cache/kubernetes-$other-go[0-9.]+/bin$" \
  env TJ_KUBE_VERSION="$other" TJ_CACHE_DIR="$WORK/cache" "$BK" path kubernetes
expect "the pinned minor is accepted; kubectl comes from the proxy build" 0 \
  "/kubernetes-$KUBE_VERSION-go[0-9.]+/bin$" \
  env TJ_KUBE_VERSION="$(cut -d. -f1,2 <<<"${KUBE_VERSION#v}")" TJ_CACHE_DIR="$WORK/cache" \
  "$LC" kubectl-dir
expect "kubectl-dir without TJ_KUBE_VERSION" 0 "/kubernetes-$KUBE_VERSION-go[0-9.]+/bin$" \
  env TJ_CACHE_DIR="$WORK/cache" "$LC" kubectl-dir
expect "an unknown Helm major is refused" nonzero "TJ_HELM_MAJOR=5: use 4 .* or 3" \
  env TJ_HELM_MAJOR=5 "$ROOT/hack/helm.sh" --path
expect "TJ_HELM that is no program is refused" nonzero "TJ_HELM=$WORK/nohelm is not an executable" \
  env TJ_HELM="$WORK/nohelm" "$ROOT/hack/helm.sh" version
exit $failed
