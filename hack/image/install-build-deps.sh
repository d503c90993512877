#!/bin/sh
# The build stages' packages (Dockerfile: build-cpu and build-trainer): the compiler, CMake,
# ccache and the -dev packages of hack/install-deps.sh that the two programs link (Highway: the
# trainer's CPU kernels; libjpeg and libpng: its image datasets, under the names Debian 12 and
# Ubuntu 24.04 both give them; HDF5: Keras' .weights.h5 files). GoogleTest too: the top-level CMakeLists.txt requires it even
# when no test is built.
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends \
  build-essential cmake ninja-build pkg-config ccache \
  libcurl4-openssl-dev nlohmann-json3-dev libssl-dev libgtest-dev libgmock-dev \
  libgloo-dev libyaml-cpp-dev zlib1g-dev libcli11-dev libjemalloc-dev libmicrohttpd-dev \
  libhwy-dev libjpeg-dev libpng-dev libhdf5-dev
rm -rf /var/lib/apt/lists/*
