#!/bin/sh
# The runtime stages' set-up, one definition for every image (Dockerfile):
#   install-runtime.sh operator|trainer|tensorflow UID
# installs the shared libraries the program links (names that Debian 12 and Ubuntu 24.04,
# the CUDA base image's distribution, both use; for tensorflow: python3, the wheels bring the
# rest) and creates the non-root user `tj` with
# uid = gid = UID, the user every image runs as (the chart's and the operator's runAsUser).
set -eu
image=${1:?usage: install-runtime.sh operator|trainer|tensorflow UID}
uid=${2:?usage: install-runtime.sh operator|trainer|tensorflow UID}
case "$image" in
  # tj-operator: libcurl (bounded reads), libmicrohttpd (its endpoints), jemalloc, yaml-cpp
  # (its config), OpenSSL.
  operator) packages="ca-certificates libcurl4 libmicrohttpd12 libjemalloc2 libyaml-cpp0.7
                      libssl3 zlib1g" ;;
  # tj-trainer: Gloo (CPU collectives), libmicrohttpd (/status, /metrics), OpenSSL (checksums
  # of data and backups, the rendezvous' authentication), Highway (the CPU kernels' choice of
  # SIMD target), HDF5 (Keras' .weights.h5 files), libjpeg-turbo and libpng (image folders
  # and TFRecord datasets); CUDA, cuDNN and NCCL come with the CUDA base image of the GPU
  # target.
  trainer) packages="ca-certificates libgloo0 libmicrohttpd12 libssl3 zlib1g libhwy1
                     libhdf5-103-1 libjpeg62-turbo|libjpeg-turbo8 libpng16-16" ;;
  # The TensorFlow example image: Python 3.11 and venv; the wheels bring their own libraries.
  tensorflow) packages="ca-certificates python3 python3-venv" ;;
  *) echo "install-runtime.sh: unknown image '$image' (operator, trainer or tensorflow)" >&2
     exit 2 ;;
esac
export DEBIAN_FRONTEND=noninteractive
apt-get update
# The names above are Debian 12's. Ubuntu 24.04 (the GPU image's base) renamed the libraries
# whose ABI holds a time_t with a "t64" suffix (libssl3t64, libmicrohttpd12t64): take that name
# where the archive has it. "DEBIAN|UBUNTU" names a package the two call differently
# (libjpeg62-turbo, libjpeg-turbo8): the first the archive has.
names=""
for p in $packages; do
  case "$p" in
    *"|"*) if apt-cache show "${p%%|*}" >/dev/null 2>&1; then p=${p%%|*}; else p=${p#*|}; fi ;;
  esac
  if apt-cache show "${p}t64" >/dev/null 2>&1; then p="${p}t64"; fi
  names="$names $p"
done
# shellcheck disable=SC2086
apt-get install -y --no-install-recommends $names
rm -rf /var/lib/apt/lists/*
groupadd --gid "$uid" tj
if [ "$image" != operator ]; then
  # A home for programs that want one (Python caches, say); backups go to the job's volumes.
  useradd --uid "$uid" --gid "$uid" --create-home --home-dir /home/tj --shell /usr/sbin/nologin tj
else
  useradd --uid "$uid" --gid "$uid" --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin tj
fi
