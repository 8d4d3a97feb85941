# fleetd: AI coding agents as declarative Kubernetes members.

SHELL := /usr/bin/env bash -o errexit -o nounset -o pipefail
.SHELLFLAGS := -c

BIN ?= $(CURDIR)/bin
CONTROLPLANE_BIN ?= $(BIN)/controlplane
export KUBEBUILDER_ASSETS ?= $(CONTROLPLANE_BIN)
GO_TOOL := go tool -modfile=$(CURDIR)/hack/tools/go.mod
HELM := $(BIN)/helm
CONTROLLER_GEN := $(GO_TOOL) controller-gen
STATICCHECK := $(GO_TOOL) staticcheck
# Packages of the main module (the nested tool modules build on their own).
PKGS := ./...
# The test module (test/, a module of its own so that the product's go.mod
# never requires what only the tests need): e2e, the local cluster, the
# Helm chart, the dashboard in a browser, and their commands.
GO_TEST_MODULE := go -C test
TEST_FLAGS ?= -race -count=1
FUZZTIME ?= 20000x

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-15s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: ## Generate CRDs and RBAC from the API types and controller markers.
	$(CONTROLLER_GEN) rbac:roleName=fleetd-manager crd paths="./api/..." paths="./controllers/..." paths="./gateway/..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	@# The chart installs what config/ holds: its CRDs, RBAC, Service and
	@# admission policies are copies, kept here so that verify sees drift.
	rm -f charts/fleetd/crds/*.yaml charts/fleetd/files/*/*.yaml
	cp config/crd/bases/*.yaml charts/fleetd/crds/
	cp config/rbac/role.yaml config/rbac/role_binding.yaml config/rbac/service_account.yaml \
		config/rbac/leader_election_role.yaml config/rbac/leader_election_role_binding.yaml \
		config/rbac/delegator_role.yaml charts/fleetd/files/rbac/
	cp config/manager/service.yaml config/manager/pdb.yaml charts/fleetd/files/manager/
	cp config/admission/policy_*.yaml charts/fleetd/files/admission/

.PHONY: generate
generate: ## Generate deepcopy functions and apply configurations.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths="./api/..."
	$(CONTROLLER_GEN) applyconfiguration:headerFile=hack/boilerplate.go.txt paths="./api/..."

.PHONY: ui
ui: ## Build the dashboard (gateway/ui/src) into gateway/ui/dist with the pinned front-end packages from npm.
	hack/ui.sh

.PHONY: fmt
fmt: ## Run gofmt on the tree.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet on the main module and the test module.
	go vet $(PKGS)
	$(GO_TEST_MODULE) vet ./...

.PHONY: lint
lint: ## Run gofmt -l and staticcheck.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [[ -n "$$out" ]]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(STATICCHECK) $(PKGS)
	cd test && $(STATICCHECK) ./...

.PHONY: verify
verify: manifests generate ui chart-lint ## Regenerate everything and fail if the tree changed; lint and render the Helm chart.
	@git diff --exit-code -- api config charts gateway/ui/dist || { echo "generated files drifted: run 'make manifests generate ui' and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- api config charts gateway/ui/dist)" || { git status --porcelain -- api config charts gateway/ui/dist; echo "generated files are not committed"; exit 1; }

.PHONY: chart-lint
chart-lint: helm ## Lint charts/fleetd and render it with its default values and with ci/all-values.yaml (every value set).
	$(HELM) lint --strict charts/fleetd
	$(HELM) lint --strict charts/fleetd -f charts/fleetd/ci/all-values.yaml
	$(HELM) template fleetd charts/fleetd --namespace fleetd-system --include-crds >/dev/null
	$(HELM) template fleetd charts/fleetd --namespace fleetd-system --include-crds -f charts/fleetd/ci/all-values.yaml >/dev/null

.PHONY: test
test: controlplane build agents chromium conformance helm jaeger ## Run unit, integration, browser, MCP conformance, Helm chart, tracing, monitoring and e2e tests (the real agent CLIs included) against a real API server.
	FLEETD_REQUIRE_APISERVER=1 FLEETD_REQUIRE_BROWSER=1 FLEETD_REQUIRE_CONFORMANCE=1 FLEETD_REQUIRE_HELM=1 FLEETD_REQUIRE_JAEGER=1 go test $(TEST_FLAGS) $(PKGS)
	FLEETD_REQUIRE_APISERVER=1 FLEETD_REQUIRE_BROWSER=1 FLEETD_REQUIRE_CONFORMANCE=1 FLEETD_REQUIRE_HELM=1 FLEETD_REQUIRE_JAEGER=1 $(GO_TEST_MODULE) test $(TEST_FLAGS) ./...
	$(MAKE) test-monitoring
	$(MAKE) fuzz

.PHONY: test-monitoring
test-monitoring: ## Load config/monitoring's alerts and dashboard with Prometheus' own parsers (test/monitoring, a module of its own).
	cd test/monitoring && go test -count=1 ./...

.PHONY: test-e2e
test-e2e: controlplane agents chromium ## Run only the end-to-end suite (real fleetd, pane server and agents as processes).
	$(GO_TEST_MODULE) test -count=1 -v ./e2e/...

.PHONY: test-agents
test-agents: controlplane agents ## Run every flow with the real Claude Code (and Codex) CLIs against the scripted model.
	$(GO_TEST_MODULE) test -count=1 -v -run 'TestClaudeCode|TestCodex' ./e2e/...

.PHONY: test-e2e-kind
test-e2e-kind: ## Run the end-to-end suite against a kind cluster (needs Docker and kind).
	hack/e2e-kind.sh

.PHONY: fuzz
fuzz: ## Run each fuzz target briefly (FUZZTIME inputs each, default 20000x).
	@hack/fuzz.sh $(FUZZTIME)

.PHONY: bench
bench: controlplane chromium ## Run the benchmarks (the main module's, then the test module's: the dashboard's in a browser, e2e's).
	go test -run '^$$' -bench . -benchmem $(PKGS)
	$(GO_TEST_MODULE) test -run '^$$' -bench . -benchmem ./...

.PHONY: test-cluster
test-cluster: cluster-bin controlplane agents helm cluster ## Run the local cluster's tests (root; a test cluster of their own: machine unchanged after up and down, reuse, killed bring-up, NotReady node, fleetd deployed with kustomize and with Helm, a 3-minute chaos soak), then the end-to-end suite in cluster mode on make cluster's.
	FLEETD_CLUSTER_TESTS=1 $(GO_TEST_MODULE) test -count=1 -v -timeout 60m ./cluster/...
	hack/e2e-cluster.sh

.PHONY: test-e2e-cluster
test-e2e-cluster: controlplane agents cluster ## Run the end-to-end suite in cluster mode on the local cluster (root): images built and loaded, fleetd deployed, members in Pods over the nodes, the real CLIs among them.
	hack/e2e-cluster.sh

# CLUSTER_BENCH selects make bench-cluster's benchmarks.
CLUSTER_BENCH ?= .

.PHONY: bench-cluster
bench-cluster: cluster-bin ## Benchmark the local cluster (root): bring-up, memory, image builds, fleetd at 150 members and 1,000 delegations, 100 members suspended and resumed, and a chaos soak of 2,000 delegations while replicas, member Pods and a node are killed (45-60 min; CLUSTER_BENCH=BenchmarkScale runs one alone).
	FLEETD_CLUSTER_TESTS=1 $(GO_TEST_MODULE) test -count=1 -run '^$$' -bench '$(CLUSTER_BENCH)' -benchtime 1x -timeout 90m ./cluster/...

.PHONY: bench-compare
bench-compare: controlplane ## Run BENCH (a regexp; default BenchmarkThousandDelegations) of BENCH_PKG (packages; PKG=BASEPKG where it moved) on BASE (default HEAD) and on the working tree, in one run.
	hack/bench-compare.sh '$(or $(BASE),HEAD)' '$(or $(BENCH),BenchmarkThousandDelegations)' '$(or $(BENCH_PKG),./controllers/)'

##@ Build

.PHONY: controlplane
controlplane: ## Build kube-apiserver, kube-controller-manager, etcd and kubectl from pinned modules into bin/controlplane.
	CONTROLPLANE_BIN=$(CONTROLPLANE_BIN) hack/controlplane.sh

.PHONY: build
build: ## Build the fleetd binaries into bin/, and the stand-in model (test/cmd/stubmodel).
	go build -o $(BIN)/ ./cmd/...
	go build -o $(BIN)/scripted-agent ./hack/scriptedagent
	$(GO_TEST_MODULE) build -o $(BIN)/stubmodel ./cmd/stubmodel

.PHONY: helm
helm: ## Build the pinned Helm CLI (hack/helm) into bin/helm.
	cd hack/helm && go build -o $(HELM) helm.sh/helm/v4/cmd/helm

.PHONY: cluster-bin
cluster-bin: controlplane ## Build the local cluster's node components (kube-scheduler, kubelet, kube-proxy), CoreDNS and the NetworkPolicy engine (kube-network-policies) into bin/controlplane.
	CONTROLPLANE_BIN=$(CONTROLPLANE_BIN) hack/controlplane.sh node
	CONTROLPLANE_BIN=$(CONTROLPLANE_BIN) hack/controlplane.sh coredns
	CONTROLPLANE_BIN=$(CONTROLPLANE_BIN) hack/controlplane.sh netpol

.PHONY: images
images: cluster-bin agents ## Build the fleetd, worker, pause and CoreDNS images (OCI, reproducible, no Docker) into bin/images; load them into the local cluster if it runs.
	$(GO_TEST_MODULE) run ./cmd/images --out=$(BIN)/images --load

.PHONY: chromium
chromium: ## Install Debian's chromium for the dashboard's browser tests, when /usr/bin/chromium is missing.
	hack/chromium.sh

.PHONY: agents
agents: ## Install the pinned agent CLIs (hack/agents: Claude Code, Codex) from npm into bin/.
	hack/agents.sh $(BIN)

.PHONY: conformance
conformance: ## Install the pinned MCP conformance suite and the Node.js 22 it needs (hack/conformance) from npm into bin/.
	hack/conformance.sh $(BIN)

.PHONY: jaeger
jaeger: ## Build the pinned Jaeger all-in-one (hack/jaeger, a module of its own) into bin/, for the tracing tests.
	cd hack/jaeger && go build -o $(BIN)/jaeger github.com/jaegertracing/jaeger/cmd/jaeger

.PHONY: run
run: manifests generate ## Run fleetd against the cluster in KUBECONFIG.
	go run ./cmd/fleetd

.PHONY: demo
demo: ## Walk every flow against a running `make dev` (two scripted members, a primary over MCP).
	go run ./hack/demo

.PHONY: dev
dev: controlplane build ## Run fleetd locally: control plane, pane server, controllers and gateway (state in .dev/).
	$(BIN)/fleetd dev $(DEV_ARGS)

##@ Local cluster

NODES ?= 3
CLUSTER_PORT ?= 26443
CLUSTER := $(GO_TEST_MODULE) run ./cmd/cluster

.PHONY: cluster
cluster: cluster-bin ## Start (or reuse) a local cluster of NODES=3 nodes in a network namespace of its own (root; state in .cluster/).
	NODES=$(NODES) CLUSTER_PORT=$(CLUSTER_PORT) $(CLUSTER) up

.PHONY: cluster-down
cluster-down: ## Stop the local cluster and undo every change it made to the machine (root).
	$(CLUSTER) down
