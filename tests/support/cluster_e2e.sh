# shellcheck shell=bash
# Shared by the shell tests that run the operator on the local cluster through the Helm chart
# (tests/integration/helm/*_e2e.sh, tests/security/security_e2e.sh, the real node's e2e).
# Source it with the repository, the build directory and the name of the test's cluster:
#   . "$1/tests/support/cluster_e2e.sh" "$1" "$2" NAME
# It sets ROOT, BUILD and TJ_LOCAL_CLUSTER_DIR=BUILD/NAME, and defines:
#   skip REASON          exit 77 (ctest: skipped), or fail when CI / TJ_REQUIRE_CLUSTER /
#                        TJ_REQUIRE_HELM is set
#   step TEXT            prints TEXT after the seconds since the test began
#   e2e_prerequisites    skips unless tj-process-node, tj-operator, tj-trainer are built, Helm
#                        can be had (sets HELM) and the Kubernetes binaries are there; on the
#                        real node (TJ_NODE=containerd) also unless root and the images exist
#   e2e_cleanup_on_exit [PATH...]   on exit: the cluster goes down; on failure the operator's
#                        log and the pods are printed and the state kept, on success the state
#                        and PATHs are removed
#   e2e_cluster_up       starts the local cluster and exports its KUBECONFIG
ROOT=${1:?usage: . cluster_e2e.sh REPO_ROOT BUILD_DIR CLUSTER_NAME}
BUILD=${2:?usage: . cluster_e2e.sh REPO_ROOT BUILD_DIR CLUSTER_NAME}
export TJ_LOCAL_CLUSTER_DIR=$BUILD/${3:?usage: . cluster_e2e.sh REPO_ROOT BUILD_DIR CLUSTER_NAME}
export TJ_BUILD_DIR=$BUILD
# The process node unless ctest chose the real one for this test (TJ_TEST_NODE=containerd,
# tests/CMakeLists.txt); a caller's TJ_NODE is the demo's choice, not the tests'.
export TJ_NODE=${TJ_TEST_NODE:-process}
required() { [ -n "${CI:-}${TJ_REQUIRE_CLUSTER:-}${TJ_REQUIRE_HELM:-}" ]; }
skip() { if required; then echo "FAIL $*"; exit 1; fi; echo "SKIP: $*"; exit 77; }
t0=$SECONDS
step() { echo "[$((SECONDS - t0))s] $*"; }

e2e_prerequisites() {
  local b
  for b in tj-process-node tj-operator tj-trainer; do
    [ -x "$BUILD/bin/$b" ] || skip "$BUILD/bin/$b is not built"
  done
  # shellcheck disable=SC2034  # HELM is for the scripts that source this file
  HELM=$("$ROOT/hack/helm.sh" --path) || skip "no Helm (hack/helm.sh could not fetch it)"
  "$ROOT/hack/local-cluster.sh" build >/dev/null || skip "no Kubernetes binaries"
  if [ "$TJ_NODE" = containerd ]; then
    [ "$(id -u)" -eq 0 ] || skip "the real node (TJ_NODE=containerd) needs root"
    export CONTAINERS_CONF=${TJ_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tj-operator}/images/containers.conf
    local img
    for img in $("$ROOT/hack/images.sh" names); do
      podman image exists "$img" 2>/dev/null || skip "no image $img (make images)"
    done
  fi
}

E2E_REMOVE_ON_SUCCESS=()
e2e_cleanup() {
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "--- operator log"; kubectl -n tj-system logs deploy/tj-operator --tail=30 || true
    echo "--- pods"; kubectl get pods -A -o wide || true
    echo "(cluster state kept in $TJ_LOCAL_CLUSTER_DIR ${E2E_REMOVE_ON_SUCCESS[*]})"
  fi
  "$ROOT/hack/local-cluster.sh" down >/dev/null 2>&1 || true
  [ $rc -ne 0 ] || rm -rf "$TJ_LOCAL_CLUSTER_DIR" "${E2E_REMOVE_ON_SUCCESS[@]}"
}
e2e_cleanup_on_exit() {
  E2E_REMOVE_ON_SUCCESS=("$@")
  trap e2e_cleanup EXIT
}

e2e_cluster_up() {
  export KUBECONFIG
  KUBECONFIG=$("$ROOT/hack/local-cluster.sh" up 2>/dev/null | tail -n1)
}
