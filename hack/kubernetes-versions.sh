#!/usr/bin/env bash
# Runs the operator, Kueue and install-path end-to-end suites on other Kubernetes releases than
# the one CI runs (`make test-kubernetes-versions`):
#   hack/kubernetes-versions.sh [BUILD_DIR [VERSION...]]
# VERSION: a release of KUBE_VERSIONS in hack/versions.env (1.35, 1.36.3, ...); by default
# every one but KUBE_VERSION. Each is built from the Go module proxy on first use (cached, about
# 15 minutes of 2 cores each; hack/build-kubernetes.sh) and its clusters are made by the suites
# themselves with TJ_KUBE_VERSION set (hack/local-cluster.sh). TJ_VERSIONS_TESTS overrides the
# ctest regular expression of the suites. Writes a Markdown table of what passed where to
# $BUILD_DIR/kubernetes-versions.md (docs/deploy.md, "Kubernetes versions", cites it) and
# exits non-zero when a suite failed on any release.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true
# shellcheck source=hack/versions.env
. hack/versions.env
TESTS=${TJ_VERSIONS_TESTS:-'^(operator_e2e_test|kueue_e2e_test|install_paths_e2e_test)$'}
[ -d "$BUILD" ] || { echo "kubernetes-versions: error: no build directory $BUILD (make build)" >&2; exit 2; }
versions=("$@")
if [ ${#versions[@]} -eq 0 ]; then
  for v in $KUBE_VERSIONS; do [ "$v" = "$KUBE_VERSION" ] || versions+=("$v"); done
fi

log() { echo "kubernetes-versions: $*" >&2; }
OUT=$BUILD/kubernetes-versions.md
# What is tested: the commit (and whether the tree had changes) as the run starts.
commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+changes')
started=$(date -u +%Y-%m-%dT%H:%MZ)
rows=()
failed=0
for want in "${versions[@]}"; do
  v=$(kube_version_for "$want") || {
    log "error: $want is none of $KUBE_VERSIONS (hack/versions.env)"; exit 2; }
  log "Kubernetes $v: building (cached after the first time)"
  TJ_KUBE_VERSION=$v bash hack/build-kubernetes.sh kubernetes
  log "Kubernetes $v: ctest -R '$TESTS'"
  start=$(date +%s)
  junit=$BUILD/kubernetes-versions-${v}.xml
  set +e
  (cd "$BUILD" && TJ_KUBE_VERSION=$v TJ_REQUIRE_CLUSTER=1 \
     ctest --output-on-failure -R "$TESTS" --output-junit "$PWD/${junit##*/}")
  rc=$?
  set -e
  [ "$rc" -eq 0 ] || failed=1
  # One row per suite: its result and seconds, from ctest's JUnit report.
  while IFS=$'\t' read -r name status secs; do
    rows+=("| $v | $name | $status | $secs |")
  done < <(python3 - "$junit" <<'EOF'
import sys
import xml.etree.ElementTree as ET
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    status = case.get("status", "")
    if status == "run":
        status = "failed" if case.find("failure") is not None else "passed"
    print(f'{case.get("name")}\t{status}\t{float(case.get("time", 0)):.0f}')
EOF
  )
  log "Kubernetes $v: ctest exit $rc after $(( $(date +%s) - start )) s"
done
{
  echo "Kubernetes releases beside $KUBE_VERSION (CI's): \`hack/kubernetes-versions.sh\` on"
  echo "$(hostname) ($(nproc) cores), commit $commit, from $started."
  echo
  echo "| Kubernetes | suite | result | seconds |"
  echo "|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} >"$OUT"
cat "$OUT"
exit "$failed"
