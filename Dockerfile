# syntax=docker/dockerfile:1
# TrainingJob Operator images. Two targets:
#
#   docker build --target operator -t tj-operator:0.1.0 .   # small, no CUDA (debian:12-slim)
#   docker build --target trainer  -t tj-trainer:0.1.0 .    # CUDA runtime with cuDNN and NCCL
#
# Each runtime image is built in a stage on the same distribution it runs on, so the shared
# libraries it links (cpprestsdk, yaml-cpp, Gloo, OpenSSL, glibc) are the ones it finds:
#   build-operator: debian:12 (bookworm), the distribution the project is developed on, with
#                   -DTJ_WITH_CUDA=OFF: the operator needs no CUDA;
#   build-trainer:  NVIDIA's CUDA 13.0 devel image with cuDNN (Ubuntu 24.04), the GPU backend
#                   configured because nvcc is found.
# Both build with -DTJ_NATIVE=OFF (x86-64-v3 instead of -march=native: an image runs on other
# machines than the one that built it) and only the target they ship.
# Tags are pinned; pin digests too (image@sha256:...) where your registry policy asks for it.

ARG DEBIAN_IMAGE=debian:12.11
ARG DEBIAN_SLIM_IMAGE=debian:12.11-slim
ARG CUDA_DEVEL_IMAGE=nvidia/cuda:13.0.0-cudnn-devel-ubuntu24.04
ARG CUDA_RUNTIME_IMAGE=nvidia/cuda:13.0.0-cudnn-runtime-ubuntu24.04
# The non-root user both images run as (the chart's runAsUser).
ARG APP_UID=65532

# ---------------------------------------------------------------------------------------------
FROM ${DEBIAN_IMAGE} AS build-operator
ARG DEBIAN_FRONTEND=noninteractive
# The libraries of hack/install-deps.sh that the build needs (GoogleTest too: the top-level
# CMakeLists.txt requires it even when no test is built).
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config \
      libcpprest-dev libcurl4-openssl-dev nlohmann-json3-dev libssl-dev libgtest-dev \
      libgmock-dev libgloo-dev libyaml-cpp-dev zlib1g-dev libcli11-dev libjemalloc-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTJ_NATIVE=OFF -DTJ_WITH_CUDA=OFF \
 && cmake --build build --target tj-operator \
 && strip build/bin/tj-operator

# ---------------------------------------------------------------------------------------------
# The GPU architectures are the project's (trainer/cuda/CMakeLists.txt: sm_80 and sm_90 code
# plus compute_90 PTX, which newer GPUs JIT-compile).
FROM ${CUDA_DEVEL_IMAGE} AS build-trainer
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config \
      libcpprest-dev libcurl4-openssl-dev nlohmann-json3-dev libssl-dev libgtest-dev \
      libgmock-dev libgloo-dev libyaml-cpp-dev zlib1g-dev libcli11-dev libjemalloc-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The configure output says whether the GPU backend is on; a trainer image without it fails.
RUN { cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTJ_NATIVE=OFF -DTJ_WITH_CUDA=ON \
        -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc >configure.log 2>&1 \
      || { cat configure.log; exit 1; }; } \
 && grep 'tj: GPU backend' configure.log \
 && grep -q 'tj: GPU backend ON' configure.log \
 && cmake --build build --target tj-trainer \
 && strip build/bin/tj-trainer

# ---------------------------------------------------------------------------------------------
# Fashion-MNIST, the trainer's default --data-dir, from Debian's dataset-fashion-mnist (four
# arch-independent IDX files). Taken from Debian 12, where the package is known to exist, rather
# than from Ubuntu's universe.
FROM ${DEBIAN_SLIM_IMAGE} AS dataset
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends dataset-fashion-mnist \
 && rm -rf /var/lib/apt/lists/* \
 && test -s /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz

# ---------------------------------------------------------------------------------------------
# tj-operator: the controller. No CUDA, no compiler; runs as a non-root user with a read-only
# root file system (it writes nothing).
FROM ${DEBIAN_SLIM_IMAGE} AS operator
ARG DEBIAN_FRONTEND=noninteractive
ARG APP_UID
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates libcpprest2.10 libcurl4 libjemalloc2 libyaml-cpp0.7 libssl3 zlib1g \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid "${APP_UID}" tj \
 && useradd --uid "${APP_UID}" --gid "${APP_UID}" --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin tj
COPY --from=build-operator /src/build/bin/tj-operator /usr/local/bin/tj-operator
# Fail the image build, not the pod, when a shared library is missing.
RUN if ldd /usr/local/bin/tj-operator | grep 'not found'; then exit 1; fi
USER ${APP_UID}:${APP_UID}
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/tj-operator"]

# ---------------------------------------------------------------------------------------------
# tj-trainer: CUDA runtime with cuDNN and NCCL (from the base image), Gloo for CPU collectives
# (Ubuntu 24.04 universe: libgloo0), cpprestsdk (libcpprest2.10), Fashion-MNIST (the default
# --data-dir). tj-trainer does not link yaml-cpp (only tj-operator does). Runs as a non-root
# user; backups, checkpoints and logs go to the volumes the TrainingJob mounts.
FROM ${CUDA_RUNTIME_IMAGE} AS trainer
ARG DEBIAN_FRONTEND=noninteractive
ARG APP_UID
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates libcpprest2.10 libgloo0 zlib1g \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid "${APP_UID}" tj \
 && useradd --uid "${APP_UID}" --gid "${APP_UID}" --create-home --home-dir /home/tj \
      --shell /usr/sbin/nologin tj
COPY --from=build-trainer /src/build/bin/tj-trainer /usr/local/bin/tj-trainer
COPY --from=dataset /usr/share/datasets/fashion-mnist /usr/share/datasets/fashion-mnist
RUN if ldd /usr/local/bin/tj-trainer | grep 'not found'; then exit 1; fi
USER ${APP_UID}:${APP_UID}
WORKDIR /home/tj
# TF_CONFIG's default port. The status endpoint the operator reads is per replica (--status-port,
# 8470 + the replica's place in TF_CONFIG), so it is not declared here.
EXPOSE 2222
ENTRYPOINT ["/usr/local/bin/tj-trainer"]
