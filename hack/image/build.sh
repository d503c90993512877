#!/bin/sh
# The build stages' compile step (Dockerfile): build.sh cpu|gpu, from anywhere in the source
# tree it belongs to.
#   cpu  tj-operator, tj-trainer and tj-dataset without CUDA (Gloo collectives): the Debian
#        images
#   gpu  tj-trainer with the GPU backend, and tj-dataset (nvcc from /usr/local/cuda); fails unless CMake
#        configured it
# Release, the portable x86-64-v2 baseline rather than -march=native (an image runs on other
# machines than the one that built it; the CPU kernels pick AVX-512, AVX2 or SSE4 at run time),
# ccache in /root/.cache/ccache (a build cache mount where the builder has one), stripped
# binaries in <source>/build/bin.
set -eu
cd "$(dirname "$0")/../.."
case "${1:-}" in
  cpu) targets="tj-operator tj-trainer tj-dataset"; set -- -DTJ_WITH_CUDA=OFF ;;
  gpu) targets="tj-trainer tj-dataset"
       set -- -DTJ_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc ;;
  *) echo "usage: build.sh cpu|gpu" >&2; exit 2 ;;
esac
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTJ_NATIVE=OFF -DTJ_CCACHE=ON "$@" \
  >configure.log 2>&1 || { cat configure.log; exit 1; }
grep 'tj: GPU backend' configure.log || true
if [ "$1" = -DTJ_WITH_CUDA=ON ] && ! grep -q 'tj: GPU backend ON' configure.log; then
  echo "build.sh gpu: CMake did not configure the GPU backend (configure.log above)" >&2
  exit 1
fi
# shellcheck disable=SC2086
cmake --build build --target $targets
for t in $targets; do strip "build/bin/$t"; done
