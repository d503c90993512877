#!/usr/bin/env bash
# Runs Helm for the project's tests and the local cluster: `hack/helm.sh lint helm/tj-operator`.
#
# The Helm pinned in hack/versions.env (HELM_VERSION, Helm 4; HELM3_VERSION with
# TJ_HELM_MAJOR=3), built once from the Go module proxy by hack/build-kubernetes.sh and cached
# in ${TJ_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tj-operator}/helm-<version>-<go>/bin.
# The Debian archive has no Helm; users install Helm their own way.
#
#   hack/helm.sh ARGS...     run helm with ARGS
#   hack/helm.sh --path      print the path of the helm binary (building it when needed)
#
# TJ_HELM=/path/to/helm uses that binary instead (your own Helm, say).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)

log() { echo "helm.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

find_helm() {
  if [ -n "${TJ_HELM:-}" ]; then
    [ -x "$TJ_HELM" ] || die "TJ_HELM=$TJ_HELM is not an executable"
    echo "$TJ_HELM"; return
  fi
  local name
  case "${TJ_HELM_MAJOR:-4}" in
    4) name=helm ;;
    3) name=helm3 ;;
    *) die "TJ_HELM_MAJOR=$TJ_HELM_MAJOR: use 4 (the default) or 3" ;;
  esac
  "$ROOT/hack/build-kubernetes.sh" "$name" >&2 || die "building Helm failed (above)"
  echo "$("$ROOT/hack/build-kubernetes.sh" path "$name")/helm"
}

if [ "${1:-}" = "--path" ]; then
  find_helm
  exit 0
fi
HELM=$(find_helm)
exec "$HELM" "$@"
