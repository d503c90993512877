# syntax=docker/dockerfile:1
# TrainingJob Operator images. Two targets, the trainer in two variants:
#
#   operator     tj-operator, the controller: small, no CUDA (Debian 12 slim)
#   trainer      tj-trainer and Fashion-MNIST. TRAINER_VARIANT=gpu (the default): the GPU
#                backend on the CUDA runtime with cuDNN and NCCL; TRAINER_VARIANT=cpu: Gloo
#                collectives only, on Debian 12 slim
#   tensorflow   TensorFlow (tensorflow-cpu, Keras 3 and tf-keras, pinned in
#                examples/tensorflow/requirements.txt), the examples of examples/tensorflow and
#                Fashion-MNIST, on Debian 12 slim: an image for TensorFlow programs under the
#                operator. Installed offline from wheels given as the build context
#                `tensorflow-wheels` (hack/tensorflow.sh wheels downloads them):
#                  docker build --target tensorflow \
#                    --build-context tensorflow-wheels=<wheel dir> -t <registry>/tj-tensorflow .
#
#   make images     # operator + the cpu trainer with buildah, no daemon, no registry
#                   # (hack/images.sh)
#   make images-tensorflow   # the tensorflow target, the same way
#   docker build --target trainer -t <registry>/tj-trainer:0.1.0 .   # the CUDA image
#   docker build --target trainer --build-arg TRAINER_VARIANT=cpu \
#     -t <registry>/tj-trainer-cpu:0.1.0 .
#
# Each runtime image is built in a stage on the same distribution it runs on, so the shared
# libraries it links (libcurl, libmicrohttpd, yaml-cpp, Gloo, OpenSSL, glibc) are the ones it
# finds:
#   build-cpu:     Debian 12 (bookworm) with -DTJ_WITH_CUDA=OFF: tj-operator and the CPU
#                  tj-trainer;
#   build-trainer: NVIDIA's CUDA 13.0 devel image with cuDNN (Ubuntu 24.04), the GPU backend
#                  configured because nvcc is found.
# The package lists and the user are one definition for every stage: hack/image/*.sh. The
# build stages compile through ccache in a build cache mount, so a rebuild after a change
# recompiles only what changed. Tags are pinned; pin digests too (image@sha256:...) where your
# registry policy asks for it. hack/images.sh points DEBIAN_IMAGE and DEBIAN_SLIM_IMAGE at
# base images made locally with mmdebstrap.

ARG DEBIAN_IMAGE=debian:12.11
ARG DEBIAN_SLIM_IMAGE=debian:12.11-slim
ARG CUDA_DEVEL_IMAGE=nvidia/cuda:13.0.0-cudnn-devel-ubuntu24.04
ARG CUDA_RUNTIME_IMAGE=nvidia/cuda:13.0.0-cudnn-runtime-ubuntu24.04
# The non-root user every image runs as (the chart's runAsUser).
ARG APP_UID=65532
# The trainer image's variant: gpu or cpu (see above).
ARG TRAINER_VARIANT=gpu

# ---------------------------------------------------------------------------------------------
FROM ${DEBIAN_IMAGE} AS build-cpu
COPY hack/image/install-build-deps.sh /usr/local/sbin/
RUN /usr/local/sbin/install-build-deps.sh
COPY . /src
RUN --mount=type=cache,target=/root/.cache/ccache /src/hack/image/build.sh cpu

# ---------------------------------------------------------------------------------------------
# The GPU architectures are the project's (trainer/cuda/CMakeLists.txt: sm_80 and sm_90 code
# plus compute_90 PTX, which newer GPUs JIT-compile). The configure output says whether the
# GPU backend is on; a trainer image without it fails.
FROM ${CUDA_DEVEL_IMAGE} AS build-trainer
COPY hack/image/install-build-deps.sh /usr/local/sbin/
RUN /usr/local/sbin/install-build-deps.sh
COPY . /src
RUN --mount=type=cache,target=/root/.cache/ccache /src/hack/image/build.sh gpu

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
# tj-operator: no CUDA, no compiler; runs as a non-root user with a read-only root file system
# (it writes nothing).
FROM ${DEBIAN_SLIM_IMAGE} AS operator
ARG APP_UID
COPY hack/image/install-runtime.sh /usr/local/sbin/
RUN /usr/local/sbin/install-runtime.sh operator "${APP_UID}"
COPY --from=build-cpu /src/build/bin/tj-operator /usr/local/bin/tj-operator
# Fail the image build, not the pod, when a shared library is missing.
RUN if ldd /usr/local/bin/tj-operator | grep 'not found'; then exit 1; fi
USER ${APP_UID}:${APP_UID}
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/tj-operator"]

# ---------------------------------------------------------------------------------------------
# tj-trainer: one recipe for both variants, on the base and with the build that
# TRAINER_VARIANT picks:
#   gpu  (the default) the GPU backend, on the CUDA runtime image with cuDNN and NCCL;
#   cpu  Gloo only, on Debian 12 slim (hack/images.sh: localhost/tj-trainer-cpu).
# Fashion-MNIST is the default --data-dir; tj-dataset converts datasets (it, say, to TFRecord
# or image folders as a job's first step: manifests/examples/declared-model.yaml). Runs as a
# non-root user; backups, checkpoints and logs go to the volumes the job mounts. The status
# endpoint is per replica ($TJ_STATUS_PORT, set by the operator), so only TF_CONFIG's default
# port is declared. A builder builds only the stages the variant needs.
FROM ${DEBIAN_SLIM_IMAGE} AS trainer-runtime-cpu
FROM ${CUDA_RUNTIME_IMAGE} AS trainer-runtime-gpu
FROM build-cpu AS trainer-build-cpu
FROM build-trainer AS trainer-build-gpu
FROM trainer-build-${TRAINER_VARIANT} AS trainer-build

FROM trainer-runtime-${TRAINER_VARIANT} AS trainer
ARG APP_UID
COPY hack/image/install-runtime.sh /usr/local/sbin/
RUN /usr/local/sbin/install-runtime.sh trainer "${APP_UID}"
COPY --from=trainer-build /src/build/bin/tj-trainer /src/build/bin/tj-dataset /usr/local/bin/
COPY --from=dataset /usr/share/datasets/fashion-mnist /usr/share/datasets/fashion-mnist
RUN for b in tj-trainer tj-dataset; do \
      if ldd "/usr/local/bin/$b" | grep 'not found'; then exit 1; fi; \
    done
USER ${APP_UID}:${APP_UID}
WORKDIR /home/tj
EXPOSE 2222
ENTRYPOINT ["/usr/local/bin/tj-trainer"]

# ---------------------------------------------------------------------------------------------
# TensorFlow programs (examples/tensorflow): Debian 12's python3 (3.11) with a venv in
# /opt/tensorflow first on PATH, so `python` is the one with TensorFlow. The pinned list is
# installed without resolution and without the network, from the wheels of the build context
# `tensorflow-wheels` (hack/tensorflow.sh wheels; see the list's header on why). Fashion-MNIST
# in /usr/share/datasets/fashion-mnist, as in the trainer image. Runs as the same non-root user.
FROM ${DEBIAN_SLIM_IMAGE} AS tensorflow
ARG APP_UID
COPY hack/image/install-runtime.sh /usr/local/sbin/
RUN /usr/local/sbin/install-runtime.sh tensorflow "${APP_UID}"
COPY examples/tensorflow/requirements.txt /opt/tensorflow-requirements.txt
RUN --mount=type=bind,from=tensorflow-wheels,target=/wheels \
    python3 -m venv /opt/tensorflow \
 && /opt/tensorflow/bin/pip install --no-cache-dir --disable-pip-version-check --no-index \
      --no-deps --find-links /wheels -r /opt/tensorflow-requirements.txt \
 && /opt/tensorflow/bin/python -c 'import tensorflow, tf_keras, keras, tensorboard'
COPY --from=dataset /usr/share/datasets/fashion-mnist /usr/share/datasets/fashion-mnist
COPY examples/tensorflow/*.py /opt/tj/examples/tensorflow/
ENV PATH=/opt/tensorflow/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
USER ${APP_UID}:${APP_UID}
WORKDIR /home/tj
EXPOSE 2222
