# shellcheck shell=bash
# write_private FILE: writes standard input to FILE, readable and writable by its owner alone
# (mode 0600 from its creation: no moment at which another user can open it). For the local
# cluster's credentials: its bearer token, the API server's token file, the kubeconfig.
# Sourced by hack/local-cluster.sh and hack/training-operator.sh (its own kubeconfig).
write_private() {
  rm -f "$1"
  (umask 077 && cat >"$1")
}
