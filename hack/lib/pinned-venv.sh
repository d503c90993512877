# shellcheck shell=bash
# A virtual environment of Debian's python3 from a pinned list of wheels, downloaded once:
# what hack/tensorflow.sh and hack/pytorch.sh share. The caller sets
#   VENV_NAME     the cache names' prefix (tensorflow, pytorch)
#   VENV_LIST     the list: one name==version line per wheel, dependencies included
#   VENV_IMPORTS  the Python statement that proves the venv complete (import ...)
# then sources this file and calls pinned_venv_main "$@". Wheels and venv live in
# ${TJ_CACHE_DIR:-~/.cache/tj-operator}, named after the SHA-256 of the list's pins, so a change
# of the list makes new ones and the old ones can be removed. The download needs PyPI (or
# PIP_INDEX_URL / PIP_FIND_LINKS); the venv and the image builds do not.

CACHE_ROOT=${TJ_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tj-operator}
# The pins alone (not the comments) name the cache.
KEY=$(grep -v '^#' "$VENV_LIST" | sha256sum | cut -c1-12)
WHEELS=$CACHE_ROOT/wheels/$VENV_NAME-$KEY
VENV=$CACHE_ROOT/$VENV_NAME-venv-$KEY
# The interpreter of the images (Debian 12's python3) and of the venv.
PYTHON=${TJ_VENV_PYTHON:-/usr/bin/python3}

log() { echo "$VENV_NAME: $*" >&2; }
die() { log "error: $*"; exit 1; }

# once DIR STEP: runs STEP, which makes DIR whole, unless DIR/.complete says it is made; one
# process at a time (a lock beside DIR), so concurrent callers wait for the first one's DIR.
once() {
  local dir=$1 step=$2
  [ -f "$dir/.complete" ] && return 0
  mkdir -p "$(dirname "$dir")"
  exec 9>"$dir.lock"
  flock 9
  if [ ! -f "$dir/.complete" ]; then
    "$step"
    touch "$dir/.complete"
  fi
  exec 9>&-
}

download_wheels() {
  "$PYTHON" -m pip --version >/dev/null 2>&1 ||
    die "$PYTHON has no pip: run hack/install-deps.sh (python3-pip)"
  log "downloading the wheels of $VENV_LIST into $WHEELS (once)"
  rm -rf "$WHEELS.partial"
  # --no-deps: the list is complete. Every manylinux tag a CPython 3.11 on Debian 12
  # (glibc 2.36) accepts: NVIDIA's wheels come as manylinux_2_18, _2_25 and others.
  local platforms=() v
  for v in $(seq 36 -1 17); do platforms+=(--platform "manylinux_2_${v}_x86_64"); done
  "$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps \
    --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
    "${platforms[@]}" --platform manylinux2014_x86_64 --platform manylinux2010_x86_64 \
    --platform manylinux1_x86_64 --platform any \
    -d "$WHEELS.partial" -r "$VENV_LIST" >&2 ||
    die "pip download failed (PyPI unreachable? set PIP_INDEX_URL or PIP_FIND_LINKS)"
  local want have
  want=$(grep -c '^[a-zA-Z]' "$VENV_LIST")
  have=$(find "$WHEELS.partial" -name '*.whl' | wc -l)
  [ "$have" -eq "$want" ] || die "downloaded $have wheels for $want packages of $VENV_LIST"
  rm -rf "$WHEELS"
  mv "$WHEELS.partial" "$WHEELS"
  log "$(du -sh "$WHEELS" | cut -f1) of wheels in $WHEELS"
}

make_venv() {
  "$PYTHON" -m venv --help >/dev/null 2>&1 ||
    die "$PYTHON has no venv module: run hack/install-deps.sh (python3-venv)"
  log "making $VENV from $WHEELS (offline)"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-index \
    --no-deps --find-links "$WHEELS" -r "$VENV_LIST" >&2
  "$VENV/bin/python" -c "$VENV_IMPORTS" || die "the venv $VENV fails: $VENV_IMPORTS"
}

cmd_wheels() {
  once "$WHEELS" download_wheels
  echo "$WHEELS"
}

cmd_venv() {
  once "$WHEELS" download_wheels
  once "$VENV" make_venv
  echo "$VENV/bin/python"
}

cmd_python() {
  [ -f "$VENV/.complete" ] || return 1
  echo "$VENV/bin/python"
}

pinned_venv_main() {  # the wrapper's "$@"; its usage: the comment at the top of $0
  case "${1:-}" in
    wheels) cmd_wheels ;;
    venv) cmd_venv ;;
    python) cmd_python ;;
    *) sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
}
