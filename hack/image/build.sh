#!/bin/sh
# The build stages' compile step (Dockerfile): build.sh TARGET... -- CMAKE_FLAG...
# Release, x86-64-v3 rather than -march=native (an image runs on other machines than the one
# that built it), ccache in /root/.cache/ccache (a build cache mount where the builder has
# one), stripped binaries in /src/build/bin.
set -eu
targets=
while [ $# -gt 0 ] && [ "$1" != -- ]; do targets="$targets $1"; shift; done
[ $# -gt 0 ] && shift
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTJ_NATIVE=OFF -DTJ_CCACHE=ON "$@" \
  >configure.log 2>&1 || { cat configure.log; exit 1; }
grep 'tj: GPU backend' configure.log || true
# shellcheck disable=SC2086
cmake --build build --target $targets
for t in $targets; do strip "build/bin/$t"; done
