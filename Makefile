# The two commands of the README, and a few conveniences. Each does its own set-up.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# The demo's node: containerd (real containers from `make images`; needs root) or process
# (tj-process-node runs pods as local processes). Default: containerd when root. Not exported:
# under `make test` each test chooses its node (tests/CMakeLists.txt, tj_on_real_node).
TJ_NODE ?= $(shell [ "$$(id -u)" = 0 ] && echo containerd || echo process)

# The kubectl of the local cluster's Kubernetes release (hack/build-kubernetes.sh) first on PATH.
KUBE_BIN := $(shell bash hack/local-cluster.sh kubectl-dir 2>/dev/null)
ifneq ($(KUBE_BIN),)
export PATH := $(KUBE_BIN):$(PATH)
endif

.PHONY: deps configure build images images-tensorflow test test-tensorflow test-sanitized fuzz ci demo \
        demo-local bench bench-scale test-kubernetes-versions clean \
        manifests helm-lint tidy

deps:
	bash hack/install-deps.sh

# The GPU backend's CUDA: the machine's, or else CUDA 13 from PyPI's wheels, fetched once into
# ~/.cache/tj-operator (hack/cuda-toolkit.sh; TJ_CUDA_FETCH=0: none, CPU-only where none is).
# TJ_TENSORFLOW_E2E=OFF: the TensorFlow e2e is a suite of its own (test-tensorflow), never part
# of `make test`, even in a build directory that test-tensorflow configured.
configure: deps
	bash hack/cuda-toolkit.sh ensure $(CMAKE_FLAGS)
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DTJ_TENSORFLOW_E2E=OFF $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j$(JOBS)

# The images, with buildah from the Dockerfile (no daemon, no registry): operator and
# trainer-cpu as localhost/tj-*:<version>, and the real node's pause image. hack/images.sh.
images: deps
	bash hack/images.sh build

# The TensorFlow example image (localhost/tj-tensorflow:<version>; docs/tensorflow.md): apart
# from `images`, being several times their size. Its wheels are downloaded once. The opt-in
# TensorFlow e2e (cmake -DTJ_TENSORFLOW_E2E=ON) runs it.
images-tensorflow: deps
	bash hack/images.sh build-tensorflow

# Every test: unit, integration, e2e, fault; GPU tests skip with a reason without a GPU.
# The local cluster's programs (Kubernetes, etcd, and the real node's containerd, CoreDNS and
# crictl, hack/local-cluster.sh build), both Helms (4 and 3) and Kueue's manager are built once
# and cached, and the images built, before the tests start rather than inside a test's timeout. Suites on the
# real node need root; without it they skip (or fail in CI).
test: build
	[ "$$(id -u)" != 0 ] || { bash hack/images.sh build && bash hack/images.sh build-test; }
	bash hack/tensorflow.sh venv
	bash hack/local-cluster.sh build
	bash hack/helm.sh version --short
	TJ_HELM_MAJOR=3 bash hack/helm.sh version --short
	bash hack/build-kubernetes.sh kueue kwok
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) $(CTEST_ARGS)

# The TensorFlow suite, apart from `make test` (docs/tensorflow.md, "Tests": too long for CI's
# budget): builds localhost/tj-tensorflow, registers tensorflow_e2e_test
# (-DTJ_TENSORFLOW_E2E=ON) and runs it with the interop test on the real node (root).
test-tensorflow: build
	bash hack/images.sh build
	bash hack/images.sh build-tensorflow
	bash hack/tensorflow.sh venv
	bash hack/local-cluster.sh build
	cmake -S . -B $(BUILD) -DTJ_TENSORFLOW_E2E=ON $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS) --target tensorflow_e2e_test
	cd $(BUILD) && ctest --output-on-failure -L tensorflow $(CTEST_ARGS)

# ASan + UBSan over the unit and integration tests (build-asan/), ThreadSanitizer over the
# work queue, informer and leader election (build-tsan/); see hack/test-sanitized.sh.
test-sanitized: deps
	TJ_SANITIZE_JOBS=$(JOBS) bash hack/test-sanitized.sh all

# Every libFuzzer target (clang, build-fuzz/) for FUZZ_SECONDS each from its corpus.
FUZZ_SECONDS ?= 45
fuzz: deps
	TJ_FUZZ_JOBS=$(JOBS) bash tests/fuzz/run.sh $(FUZZ_SECONDS)

# What CI runs (.ci/run): make test, then the sanitizer runs and the bounded fuzzing, with a
# table of the time of each phase at the end.
ci:
	bash .ci/run

# The example TrainingJob on the local cluster, through the Helm chart. On the real node
# (TJ_NODE=containerd) it needs only the images; on the process node only the three
# programs the demo runs, not every test.
PROGRAMS = tj-operator tj-trainer tj-process-node

demo: deps
ifeq ($(TJ_NODE),containerd)
	bash hack/images.sh build
else
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS) --target $(PROGRAMS)
endif
	TJ_NODE=$(TJ_NODE) bash hack/local-cluster.sh build
	TJ_NODE=$(TJ_NODE) bash hack/demo.sh

# The trainer alone: 2 workers + an evaluator as local processes, no Kubernetes.
demo-local: configure
	cmake --build $(BUILD) -j$(JOBS) --target tj-trainer
	bash hack/demo-local.sh

bench: build
	bash bench/run-all.sh

# The operator, Kueue and install-path e2e suites on the other Kubernetes releases docs/deploy.md
# supports (KUBE_VERSIONS of hack/versions.env; CI runs KUBE_VERSION): each release built from
# the Go module proxy on first use, cached. Results: $(BUILD)/kubernetes-versions.md.
test-kubernetes-versions: build
	[ "$$(id -u)" != 0 ] || bash hack/images.sh build
	bash hack/local-cluster.sh build
	bash hack/helm.sh version --short
	bash hack/build-kubernetes.sh kueue
	bash hack/kubernetes-versions.sh $(BUILD)

# tj-operator beside Kubeflow's training-operator on the scale cluster (kwok), without and with
# Kueue: bench/scale/RESULTS.md (docs/scale.md). SCALE_JOBS jobs of a chief and 7 workers.
SCALE_JOBS ?= 1000
bench-scale: build
	bash bench/scale/run.sh $(SCALE_JOBS) 7

# helm/tj-operator -> manifests/rbac, manifests/operator; manifests/crd -> helm/tj-operator/crds/
manifests:
	bash hack/generate-manifests.sh

helm-lint:
	bash hack/helm.sh lint --strict helm/tj-operator

# clang-tidy (.clang-tidy) over every C++ source of the build; sources unchanged since they
# last passed are skipped (hack/tidy.sh). CI runs it after `make test`.
tidy: configure
	TJ_TIDY_JOBS=$(JOBS) bash hack/tidy.sh $(BUILD)

clean:
	rm -rf $(BUILD)
