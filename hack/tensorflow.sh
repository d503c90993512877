#!/usr/bin/env bash
# TensorFlow for the example image, the tests and the bench, from one pinned list
# (examples/tensorflow/requirements.txt), downloaded once:
#
#   hack/tensorflow.sh wheels   download the wheels of the list (once; CPython 3.11, x86-64
#                               Linux) and print their directory
#   hack/tensorflow.sh venv     a virtual environment of Debian's python3 (3.11, as in the
#                               image) with the list installed offline from those wheels; prints
#                               its python. Tests and the bench run TensorFlow with it.
#   hack/tensorflow.sh python   print the venv's python if it is complete, else exit 1
#
# Both live in ${TJ_CACHE_DIR:-~/.cache/tj-operator}, named after the SHA-256 of its pins, so a
# change of the list makes new ones and the old ones can be removed. The download needs PyPI
# (or PIP_INDEX_URL / PIP_FIND_LINKS); the image build and the venv do not.
#
# To regenerate the list for another TensorFlow: `pip download --only-binary=:all:
# --python-version 3.11 tensorflow-cpu==X keras==Y tensorboard==X` into an empty directory,
# then `pip download --no-deps tf-keras==X`, and write one name==version line per wheel.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE_ROOT=${TJ_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tj-operator}
LIST=$REPO_ROOT/examples/tensorflow/requirements.txt
# The pins alone (not the comments) name the cache.
KEY=$(grep -v '^#' "$LIST" | sha256sum | cut -c1-12)
WHEELS=$CACHE_ROOT/wheels/tensorflow-$KEY
VENV=$CACHE_ROOT/tensorflow-venv-$KEY
# The interpreter of the image (Debian 12's python3) and of the venv.
PYTHON=${TJ_TENSORFLOW_PYTHON:-/usr/bin/python3}

log() { echo "tensorflow: $*" >&2; }
die() { log "error: $*"; exit 1; }

cmd_wheels() {
  if [ -f "$WHEELS/.complete" ]; then echo "$WHEELS"; return 0; fi
  mkdir -p "$CACHE_ROOT/wheels"
  exec 9>"$WHEELS.lock"
  flock 9
  if [ ! -f "$WHEELS/.complete" ]; then
    "$PYTHON" -m pip --version >/dev/null 2>&1 ||
      die "$PYTHON has no pip: run hack/install-deps.sh (python3-pip)"
    log "downloading the wheels of $LIST into $WHEELS (once)"
    rm -rf "$WHEELS.partial"
    # --no-deps: the list is complete (see its header on tf-keras). Every manylinux tag a
    # CPython 3.11 on Debian 12 (glibc 2.36) accepts.
    "$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps \
      --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      --platform manylinux2010_x86_64 --platform manylinux1_x86_64 --platform any \
      -d "$WHEELS.partial" -r "$LIST" >&2 ||
      die "pip download failed (PyPI unreachable? set PIP_INDEX_URL or PIP_FIND_LINKS)"
    local want have
    want=$(grep -c '^[a-zA-Z]' "$LIST")
    have=$(find "$WHEELS.partial" -name '*.whl' | wc -l)
    [ "$have" -eq "$want" ] || die "downloaded $have wheels for $want packages of $LIST"
    rm -rf "$WHEELS"
    mv "$WHEELS.partial" "$WHEELS"
    touch "$WHEELS/.complete"
    log "$(du -sh "$WHEELS" | cut -f1) of wheels in $WHEELS"
  fi
  exec 9>&-
  echo "$WHEELS"
}

cmd_venv() {
  if [ -f "$VENV/.complete" ]; then echo "$VENV/bin/python"; return 0; fi
  local wheels
  wheels=$(cmd_wheels)
  exec 9>"$VENV.lock"
  flock 9
  if [ ! -f "$VENV/.complete" ]; then
    "$PYTHON" -m venv --help >/dev/null 2>&1 ||
      die "$PYTHON has no venv module: run hack/install-deps.sh (python3-venv)"
    log "making $VENV from $wheels (offline)"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-index \
      --no-deps --find-links "$wheels" -r "$LIST" >&2
    "$VENV/bin/python" -c 'import tensorflow, tf_keras, keras, tensorboard' ||
      die "the venv $VENV cannot import TensorFlow"
    touch "$VENV/.complete"
  fi
  exec 9>&-
  echo "$VENV/bin/python"
}

cmd_python() {
  [ -f "$VENV/.complete" ] || return 1
  echo "$VENV/bin/python"
}

case "${1:-}" in
  wheels) cmd_wheels ;;
  venv) cmd_venv ;;
  python) cmd_python ;;
  *) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
