#!/usr/bin/env bash
# Usage: private_files_test.sh REPO_ROOT. The local cluster's credentials are readable by
# their owner alone from the moment they exist: write_private (hack/private-file.sh) makes a
# file of mode 0600 under a permissive umask, replaces a world-readable one, and is how
# hack/local-cluster.sh writes the API server's token file, the bearer token and the
# kubeconfig. No cluster is started.
set -uo pipefail
ROOT=${1:?usage: private_files_test.sh REPO_ROOT}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
failed=0
fail() { echo "FAIL $*"; failed=1; }

# shellcheck source=../../../hack/private-file.sh
. "$ROOT/hack/private-file.sh"
umask 022
echo "secret,admin,admin,system:masters" | write_private "$WORK/tokens.csv"
mode=$(stat -c %a "$WORK/tokens.csv")
[ "$mode" = 600 ] || fail "a new file has mode $mode, not 600"
[ "$(cat "$WORK/tokens.csv")" = "secret,admin,admin,system:masters" ] || fail "the content differs"
echo old >"$WORK/kubeconfig"; chmod 644 "$WORK/kubeconfig"
echo new | write_private "$WORK/kubeconfig"
mode=$(stat -c %a "$WORK/kubeconfig")
[ "$mode" = 600 ] || fail "a replaced world-readable file has mode $mode, not 600"
[ "$(umask)" = 0022 ] || fail "write_private changed the caller's umask to $(umask)"

# Every credential hack/local-cluster.sh writes goes through write_private.
LC=$ROOT/hack/local-cluster.sh
for file in tokens.csv token; do
  grep -qE "\| write_private \"\\\$STATE_DIR/$file\"" "$LC" ||
    fail "hack/local-cluster.sh does not write \$STATE_DIR/$file with write_private"
  if grep -qE ">\"\\\$STATE_DIR/$file\"" "$LC"; then
    fail "hack/local-cluster.sh writes \$STATE_DIR/$file with a plain redirection (mode from the umask)"
  fi
done
# shellcheck disable=SC2016  # a literal "$1" in the script's text
grep -A3 '^write_kubeconfig()' "$LC" | grep -q 'write_private "\$1"' ||
  fail "write_kubeconfig does not write the kubeconfig with write_private"
[ $failed -eq 0 ] && echo "ok   the local cluster's credentials are mode 0600 from creation"
exit $failed
