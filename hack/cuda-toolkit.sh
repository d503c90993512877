#!/usr/bin/env bash
# The CUDA 13 toolkit the GPU backend is compiled with, on a machine that has none of its own:
# nvcc, cudart, cuBLAS, cuDNN and NCCL (headers and libraries) from PyPI's wheels (the
# `cuda-toolkit` meta-package's nvcc, cudart, cublas and cccl extras, nvidia-cudnn-cu13,
# nvidia-nccl-cu13), unpacked into the directory layout of NVIDIA's installer:
#   bin/nvcc (+ ptxas, nvlink, fatbinary, cudafe++)   nvvm/ (cicc, libdevice, libnvvm)
#   targets/x86_64-linux/{include,lib}                include -> .../include, lib64 -> .../lib
# with the libX.so -> libX.so.N links a linker needs, so that CMake's CUDA language and
# FindCUDAToolkit take it as they take /usr/local/cuda. Versions: hack/versions.env. Cached in
# ~/.cache/tj-operator/cuda-<key>/ (wheels/ and toolkit/); a cold fetch downloads about 1.1 GB
# and the tree takes about 1.7 GB (README, "The GPU backend's build").
#
#   bash hack/cuda-toolkit.sh [ensure] [CMAKE FLAG...]
#       what `make configure` runs: nothing when the build has a CUDA already (the flags name
#       a CUDA compiler or toolkit, or -DTJ_WITH_CUDA=OFF; $CUDACXX or $CUDAToolkit_ROOT is
#       set; /usr/local/cuda/bin/nvcc exists; nvcc is on PATH) or TJ_CUDA_FETCH=0; otherwise
#       the cached toolkit, fetched and assembled the first time
#   bash hack/cuda-toolkit.sh path      the cached toolkit's root (exit 1 when not assembled);
#                                       CMakeLists.txt asks this, and fetches nothing
#   bash hack/cuda-toolkit.sh fetch     fetch and assemble, whatever the machine has
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/versions.env
. "$REPO/hack/versions.env"
CACHE=${TJ_CACHE_DIR:-$HOME/.cache/tj-operator}
KEY="cuda-$CUDA_TOOLKIT_VERSION-cudnn-$CUDNN_VERSION-nccl-$NCCL_VERSION"
DIR=$CACHE/$KEY
TREE=$DIR/toolkit
LAYOUT=1         # the assembly below; a change here reassembles from the cached wheels
NEED_MIB=4096    # wheels (1.1 GB) + tree (1.7 GB) + unpacking room
TARGET=targets/x86_64-linux

log() { echo "cuda-toolkit: $*" >&2; }
die() { log "$*"; exit 1; }

assembled() { [ "$(cat "$TREE/.tj-layout" 2>/dev/null)" = "$LAYOUT" ]; }

# The CUDA a build would use without us, or nothing (exit 1).
machine_cuda() {
  local flag
  for flag in "$@"; do
    case $flag in
      -DTJ_WITH_CUDA=OFF | -DTJ_WITH_CUDA:BOOL=OFF) echo "none (-DTJ_WITH_CUDA=OFF)"; return ;;
      -DCMAKE_CUDA_COMPILER=* | -DCMAKE_CUDA_COMPILER:*=* | -DCUDAToolkit_ROOT=*)
        echo "the one CMake is given ($flag)"; return ;;
    esac
  done
  [ -n "${CUDACXX:-}" ] && { echo "\$CUDACXX ($CUDACXX)"; return; }
  [ -n "${CUDAToolkit_ROOT:-}" ] && { echo "\$CUDAToolkit_ROOT ($CUDAToolkit_ROOT)"; return; }
  [ -x /usr/local/cuda/bin/nvcc ] && { echo /usr/local/cuda; return; }
  command -v nvcc >/dev/null 2>&1 && { echo "nvcc on PATH ($(command -v nvcc))"; return; }
  return 1
}

# A python whose pip can download (the machine's python3 first).
pick_pip() {
  local py
  for py in "${TJ_PYTHON:-python3}" python3.11 python3 /usr/bin/python3; do
    if command -v "$py" >/dev/null 2>&1 && "$py" -m pip --version >/dev/null 2>&1; then
      echo "$py"
      return
    fi
  done
  die "no python with pip to download the CUDA wheels: install python3-pip (Debian), set" \
    "TJ_PYTHON, or TJ_CUDA_FETCH=0 to build CPU-only"
}

download() {
  local py free_mib
  mkdir -p "$DIR/wheels"
  [ -f "$DIR/wheels/.complete" ] && return
  free_mib=$(df -Pm "$DIR" | awk 'NR == 2 {print $4}')
  [ "$free_mib" -ge "$NEED_MIB" ] ||
    die "$DIR has $free_mib MiB free; the CUDA toolkit needs about $NEED_MIB MiB: free some" \
      "(older toolkits: $CACHE/cuda-*) or set TJ_CACHE_DIR, or TJ_CUDA_FETCH=0 for CPU-only"
  py=$(pick_pip)
  log "downloading CUDA $CUDA_TOOLKIT_VERSION (nvcc, cudart, cuBLAS), cuDNN $CUDNN_VERSION and" \
    "NCCL $NCCL_VERSION wheels from PyPI into $DIR/wheels (about 1.1 GB)"
  # --no-cache-dir: pip's own cache would keep a second copy of every wheel.
  "$py" -m pip download --disable-pip-version-check --no-cache-dir --progress-bar off \
    --only-binary=:all: --dest "$DIR/wheels" \
    "cuda-toolkit[nvcc,cudart,cublas,cccl]==$CUDA_TOOLKIT_VERSION" \
    "nvidia-cudnn-cu13==$CUDNN_VERSION" "nvidia-nccl-cu13==$NCCL_VERSION" >"$DIR/pip.log" 2>&1 ||
    { tail -20 "$DIR/pip.log" >&2
      die "pip could not download the CUDA wheels (above; $DIR/pip.log). PyPI unreachable?" \
        "Install CUDA 13 at /usr/local/cuda, or TJ_CUDA_FETCH=0 to build CPU-only"; }
  touch "$DIR/wheels/.complete"
}

# Unpacks every wheel into $1 in the installer's layout.
assemble() {
  local out=$1 x=$1.unpacked w lib base
  mkdir -p "$x" "$out/bin" "$out/nvvm/lib64" "$out/$TARGET/include" "$out/$TARGET/lib"
  for w in "$DIR"/wheels/nvidia_*.whl; do
    unzip -q -o "$w" 'nvidia/*' -d "$x" || die "cannot unpack $w (a damaged download? rm it)"
  done
  for d in cu13/bin cu13/include cu13/lib cu13/nvvm cudnn/include cudnn/lib nccl/include nccl/lib; do
    [ -d "$x/nvidia/$d" ] || die "the wheels have no nvidia/$d: not the layout this script knows"
  done
  mv "$x"/nvidia/cu13/bin/* "$out/bin/"
  mv "$x"/nvidia/cu13/nvvm/* "$out/nvvm/"
  mv "$x"/nvidia/cu13/lib/libnvvm.so* "$out/nvvm/lib64/"
  for d in cu13 cudnn nccl; do
    cp -a "$x/nvidia/$d/include/." "$out/$TARGET/include/"
    cp -a "$x/nvidia/$d/lib/." "$out/$TARGET/lib/"
  done
  rm -rf "$x"
  ln -s "$TARGET/include" "$out/include"
  ln -s "$TARGET/lib" "$out/lib64"
  # libX.so for the linker beside each libX.so.N (libnvrtc-builtins.so.13.0 too).
  for lib in "$out/$TARGET"/lib/lib*.so.* "$out"/nvvm/lib64/lib*.so.*; do
    base=${lib%%.so.*}.so
    [ -e "$base" ] || ln -s "$(basename "$lib")" "$base"
  done
  local v
  v=$("$out/bin/nvcc" --version | sed -n 's/.*release [0-9.]*, V\([0-9.]*\).*/\1/p')
  [ -n "$v" ] || die "the assembled nvcc does not run: $out/bin/nvcc --version"
  for f in include/cuda_runtime.h include/cublas_v2.h include/cudnn.h include/nccl.h \
           lib64/libcudart.so lib64/libcudart_static.a lib64/libcublas.so lib64/libcublasLt.so \
           lib64/libcudnn.so lib64/libnccl.so nvvm/bin/cicc nvvm/libdevice/libdevice.10.bc; do
    [ -e "$out/$f" ] || die "the assembled toolkit lacks $f"
  done
  # NVIDIA's installer writes version.json; FindCUDAToolkit and people read it.
  cat >"$out/version.json" <<EOF
{
  "cuda": {"name": "CUDA SDK", "version": "$v"},
  "source": "PyPI wheels assembled by hack/cuda-toolkit.sh",
  "cuda-toolkit": "$CUDA_TOOLKIT_VERSION", "cudnn": "$CUDNN_VERSION", "nccl": "$NCCL_VERSION",
  "wheels": [$(find "$DIR/wheels" -maxdepth 1 -name '*.whl' -printf '"%f"\n' | sort | paste -sd, -)]
}
EOF
  echo "$LAYOUT" >"$out/.tj-layout"
}

fetch() {
  mkdir -p "$CACHE"
  exec 9>"$CACHE/cuda.lock"
  flock -w 1800 9 || die "another hack/cuda-toolkit.sh has held $CACHE/cuda.lock for 30 min"
  if assembled; then echo "$TREE"; return; fi
  local t0=$SECONDS
  download
  log "assembling $TREE"
  rm -rf "$TREE" "$TREE.new" "$TREE.new.unpacked"
  assemble "$TREE.new"
  mv "$TREE.new" "$TREE"
  log "CUDA $(sed -n 's/.*"cuda": {.*"version": "\([^"]*\)".*/\1/p' "$TREE/version.json") at" \
    "$TREE: $(du -sh "$DIR/wheels" | cut -f1) of wheels, $(du -sh "$TREE" | cut -f1) unpacked," \
    "$((SECONDS - t0)) s"
  local other
  for other in "$CACHE"/cuda-*/; do
    [ "${other%/}" = "$DIR" ] || log "an older toolkit takes $(du -sh "$other" | cut -f1): $other"
  done
  echo "$TREE"
}

mode=ensure
case "${1:-}" in
  path | fetch | ensure) mode=$1; shift ;;
  "" | -*) ;;
  *) echo "usage: cuda-toolkit.sh [ensure] [CMAKE FLAG...] | path | fetch" >&2; exit 2 ;;
esac
case $mode in
  path) assembled && echo "$TREE" ;;
  fetch) fetch ;;
  ensure)
    if [ "${TJ_CUDA_FETCH:-1}" = 0 ]; then
      log "TJ_CUDA_FETCH=0: nothing fetched (the build uses the machine's CUDA or is CPU-only)"
    elif have=$(machine_cuda "$@"); then
      log "using $have, nothing fetched"
    elif assembled; then
      log "CUDA from PyPI's wheels at $TREE"
    else
      fetch >/dev/null
    fi ;;
esac
