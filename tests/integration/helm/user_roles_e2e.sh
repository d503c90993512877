#!/usr/bin/env bash
# The users' roles for TrainingJobs on a real API server (the local cluster's control plane, no
# node needed): the CRD and manifests/rbac's viewer and editor ClusterRoles are applied, the
# clusterrole-aggregation controller folds them into view, edit and admin, and then
#   - alice (edit in team-a) creates, patches and deletes a TrainingJob there, may not write
#     its status and may do nothing in another namespace;
#   - bob (view in team-a) reads it and its status and may not create, change or delete it.
# Usage: user_roles_e2e.sh REPO_ROOT BUILD_DIR. Exit 77 (ctest: skipped) without the
# Kubernetes binaries, unless CI or TJ_REQUIRE_CLUSTER is set.
set -euo pipefail
ROOT=${1:?REPO_ROOT}
BUILD=${2:?BUILD_DIR}
export TJ_LOCAL_CLUSTER_DIR=${TJ_LOCAL_CLUSTER_DIR:-$BUILD/user-roles-cluster}
export TJ_NODE=process
# The control plane only: no node agent (no pod is run here).
export TJ_LOCAL_NODE_BIN=/nonexistent
skip() {
  if [ -n "${CI:-}${TJ_REQUIRE_CLUSTER:-}" ]; then echo "FAIL $*"; exit 1; fi
  echo "SKIP: $*"; exit 77
}
command -v kubectl >/dev/null || skip "no kubectl"
"$ROOT/hack/local-cluster.sh" build >/dev/null 2>&1 || skip "no Kubernetes binaries"
fails=0
pass() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
trap '"$ROOT/hack/local-cluster.sh" down >/dev/null 2>&1 || true' EXIT
export KUBECONFIG
KUBECONFIG=$("$ROOT/hack/local-cluster.sh" up | tail -n1)

kubectl apply -f "$ROOT/manifests/crd/" -f "$ROOT/manifests/rbac/trainingjob_viewer_role.yaml" \
  -f "$ROOT/manifests/rbac/trainingjob_editor_role.yaml" >/dev/null
kubectl wait --for=condition=Established crd/trainingjobs.tjo.dev --timeout=60s >/dev/null
for ns in team-a team-b; do kubectl create namespace "$ns" >/dev/null; done
kubectl -n team-a create rolebinding alice-edit --clusterrole=edit --user=alice >/dev/null
kubectl -n team-a create rolebinding bob-view --clusterrole=view --user=bob >/dev/null

# The aggregation controller fills in view/edit/admin within seconds.
aggregated() {
  kubectl get clusterrole "$1" -o jsonpath='{.rules[*].apiGroups}' 2>/dev/null | grep -q tjo.dev
}
for _ in $(seq 1 60); do
  aggregated view && aggregated edit && aggregated admin && break
  sleep 0.5
done
for r in view edit admin; do
  if aggregated "$r"; then pass "ClusterRole $r includes TrainingJobs"
  else fail "ClusterRole $r lacks TrainingJobs"; fi
done

can() {  # can USER NS VERB RESOURCE [SUBRESOURCE]: prints yes or no
  local sub=()
  [ -n "${5:-}" ] && sub=(--subresource="$5")
  kubectl auth can-i "$3" "$4" -n "$2" --as="$1" "${sub[@]}" 2>/dev/null || true
}
expect() {  # expect ANSWER USER NS VERB RESOURCE [SUBRESOURCE]
  local want=$1; shift
  local got
  got=$(can "$@")
  if [ "$got" = "$want" ]; then pass "$1 in $2: $3 $4${5:+/$5}: $got"
  else fail "$1 in $2: $3 $4${5:+/$5}: $got, expected $want"; fi
}
for v in get list watch create update patch delete deletecollection; do
  expect yes alice team-a "$v" trainingjobs.tjo.dev
  expect no alice team-b "$v" trainingjobs.tjo.dev
done
for v in get list watch; do expect yes bob team-a "$v" trainingjobs.tjo.dev; done
expect yes bob team-a get trainingjobs.tjo.dev status
for v in create update patch delete deletecollection; do expect no bob team-a "$v" trainingjobs.tjo.dev; done
for v in update patch; do
  expect no alice team-a "$v" trainingjobs.tjo.dev status
  expect no bob team-a "$v" trainingjobs.tjo.dev status
done

# The same through real requests.
job() {
  sed -n '/^kind: TrainingJob/,$p' "$ROOT/manifests/examples/fmnist.yaml" |
    sed '1i apiVersion: tjo.dev/v1alpha1' | sed "s/^  name: .*/  name: $1/" | sed '/^  namespace:/d'
}
if job alice-job | kubectl -n team-a create --as=alice -f - >/dev/null 2>&1; then
  pass "alice creates a TrainingJob in team-a"
else fail "alice could not create a TrainingJob"; fi
if kubectl -n team-a get trainingjob alice-job --as=bob >/dev/null 2>&1; then pass "bob reads it"
else fail "bob could not read it"; fi
if out=$(job bob-job | kubectl -n team-a create --as=bob -f - 2>&1); then
  fail "bob created a TrainingJob"
elif grep -q Forbidden <<<"$out"; then pass "bob's create is Forbidden"
else fail "bob's create: $out"; fi
if out=$(kubectl -n team-a delete trainingjob alice-job --as=bob 2>&1); then
  fail "bob deleted alice's job"
elif grep -q Forbidden <<<"$out"; then pass "bob's delete is Forbidden"
else fail "bob's delete: $out"; fi
if kubectl -n team-a delete trainingjob alice-job --as=alice >/dev/null 2>&1; then
  pass "alice deletes her job"
else fail "alice could not delete her job"; fi

[ $fails -eq 0 ] || { echo "user_roles_e2e: $fails failed"; exit 1; }
echo "user_roles_e2e: all passed"
