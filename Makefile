# The two commands of the README, and a few conveniences. Each does its own set-up.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: deps configure build test demo demo-local bench clean manifests helm-lint

deps:
	bash hack/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j$(JOBS)

# Every test: unit, integration, e2e, fault; GPU tests skip with a reason without a GPU.
# The local cluster's Kubernetes binaries are built once (7-9 minutes idle) and cached,
# before the tests start, rather than inside a test's timeout.
test: build
	bash hack/local-cluster.sh build
	bash hack/helm.sh version --short
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) $(CTEST_ARGS)

# The example TrainingJob on the local cluster, through the Helm chart.
demo: build
	bash hack/local-cluster.sh build
	bash hack/demo.sh

# The trainer alone: 2 workers + an evaluator as local processes, no Kubernetes.
demo-local: build
	bash hack/demo-local.sh

bench: build
	bash bench/run-all.sh

# helm/tj-operator -> manifests/rbac, manifests/operator; manifests/crd -> helm/tj-operator/crds/
manifests:
	bash hack/generate-manifests.sh

helm-lint:
	bash hack/helm.sh lint --strict helm/tj-operator

clean:
	rm -rf $(BUILD)
