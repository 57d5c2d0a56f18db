# kvcache-operator. Every target works on a brand-new machine: tools are built from the Go module
# proxy by hack/tools.sh and cached under ~/.cache/kvcache-tools.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
TOOLS := hack/tools.sh
CRD_DIR := config/crd
GO_TEST_FLAGS ?=

.PHONY: all help build demo generate verify-generate test test-unit soak snapshots lint tools images cluster-up cluster-down playground playground-down clean

all: build

## help: this list, from each target's `## name: what it does` comment
help:
	@awk 'function out() { if (name == "") return; n = split(text, w, " "); l = sprintf("  %-26s", name); len0 = length(l); cur = l; \
			for (k = 1; k <= n; k++) { if (length(cur) + 1 + length(w[k]) > 100 && length(cur) > len0) { print cur; cur = sprintf("%" len0 "s", "") } \
			cur = cur " " w[k] } print cur; name = "" } \
		/^## [a-z][a-z /-]*: / { out(); sub(/^## /, ""); i = index($$0, ": "); name = substr($$0, 1, i - 1); text = substr($$0, i + 2); next } \
		/^## / && name != "" { sub(/^## */, ""); text = text " " $$0; next } \
		{ out() } END { out() }' $(MAKEFILE_LIST)

## build: the kvcache binary in bin/
build:
	go build -buildvcs=auto -o bin/kvcache ./cmd/kvcache

## demo: render the built-in walkthrough example (no cluster needed)
demo:
	@go run ./cmd/kvcache render

## generate: deepcopy and CRDs from api/v1 (controller-gen), the engine support table and its
## matrix in the docs from engines/releases.json; never edit their output by hand
generate:
	cg="$$($(TOOLS) path controller-gen)"; \
	"$$cg" object:headerFile=hack/boilerplate.go.txt paths=./api/...; \
	rm -rf $(CRD_DIR) && "$$cg" crd paths=./api/... output:crd:artifacts:config=$(CRD_DIR); \
	hack/chart-generate.sh
	go generate ./engines/

## verify-generate: fail when generated files differ from what the types and the support table produce
GENERATED = api $(CRD_DIR) charts engines/releases_gen.go docs/engines.md
verify-generate: generate
	@if [ -n "$$(git status --porcelain -- $(GENERATED))" ]; then \
	  git --no-pager diff -- $(GENERATED); git status --porcelain -- $(GENERATED); \
	  echo "generated files drifted from api/v1 or engines/releases.json: run 'make generate' and commit the result" >&2; exit 1; \
	fi

## tools: build every tool the tests need (cached; a no-op when present)
tools:
	$(TOOLS) all

## images: the operator, store, stand-in engine, real vLLM (its venv beside it), etcd and pause
## images as OCI archives (cached; no registry)
images:
	hack/images.sh build

## cluster-up / cluster-down: the real two-node Kubernetes of hack/cluster.sh (host processes)
cluster-up: tools
	hack/cluster.sh up
cluster-down:
	hack/cluster.sh down

## playground: the whole system live on the real two-node cluster of hack/cluster.sh: the images
## loaded, the chart installed with its default values (helm install --wait), the walkthrough
## applied as adapted to this machine (test/cluster/walkthrough: 256Mi per member, the stand-in
## engine on no InstanceType), the store's capacity as its members registered it, then two real
## vLLM engines injected by the webhook, one per node: one prompt to the first, the same to the
## second, which loads it from the store (hack/prompt prints their own counters and times). Run
## again, it upgrades the release and keeps the engines that are current. The steps are
## hack/playground.sh's, which test/cluster runs twice in a row.
playground: tools images
	hack/playground.sh up

## playground-down: stop the playground's cluster and check the host is as it was (no cni
## bridge, no KUBE-/CNI- chains, ip_forward restored, no process or cgroup of the cluster)
playground-down:
	hack/playground.sh down

## test-unit: the day-to-day run: every package outside test/ (unit tests, snapshots, the fuzz
## seeds), pure: no cluster, no API server, nothing from PyPI (the tests that need the real store
## or a real API server carry the build tags realstore / envtest, which make test sets)
test-unit:
	go test $(GO_TEST_FLAGS) $$(go list ./... | grep -v '/test/')

## test: the whole suite: unit, snapshots, envtest against a real kube-apiserver, real store,
## and the real cluster (test/cluster starts and stops its own unless one is up)
# Two streams at once: test/cluster (one cluster for all its tests), and everything else one
# suite at a time (the tagged tests of the packages outside test/, the envtest and real-store
# suites, test/ha, the race run). The cluster suite's figures are timers and watches more than
# CPU, and the other stream never runs two suites at once; within test/ha, the warm stores' tests
# run three at a time (-parallel 3): each store is its own (etcd, masters, members on their own
# ports) and a failover's floor is its timers (measured: 9m31s against 17m40s one at a time).
# test/cluster takes over go test's default 10 minutes; a binary stopped by that timeout never
# runs its cleanup (the cluster would stay up), so the bound is set well above the suite.
test: tools images
	@export KUBEBUILDER_ASSETS="$$($(TOOLS) assets)" KVCACHE_HELM="$$($(TOOLS) path helm)"; \
	t0=$$(date +%s); status=0; \
	go test -p 1 -timeout 60m $(GO_TEST_FLAGS) ./test/cluster/ & cluster=$$!; \
	{ go test -tags $(TEST_TAGS) $(GO_TEST_FLAGS) $$(go list ./... | grep -v '/test/') && \
	  go test -p 1 -parallel 3 -timeout 45m $(GO_TEST_FLAGS) $$(go list ./test/... | grep -v '/test/cluster$$') && \
	  go test -race $(GO_TEST_FLAGS) $(RACE_PACKAGES); } || status=1; \
	echo "make test: everything but test/cluster done after $$(( $$(date +%s) - t0 ))s"; \
	wait $$cluster || status=1; \
	echo "make test: done after $$(( $$(date +%s) - t0 ))s"; exit $$status

## soak: test/cluster's TestSoak alone for SOAK_DURATION (default 60m; make test runs it for 5m):
## the walkthrough's store under Pod, ModelDeployment and Binding churn while leaders, masters,
## managers, a node, the API server and a containerd fail on a schedule, every invariant checked
## as it goes; the report (a table per fault kind) and the run's timeline and logs land in
## SOAK_OUT (default _output/soak/<UTC time>). No go test timeout: the run's own bounds end it.
SOAK_DURATION ?= 60m
ifeq ($(origin SOAK_OUT), undefined)
SOAK_OUT := _output/soak/$(shell date -u +%Y%m%dT%H%M%SZ)
endif
soak: tools images
	mkdir -p "$(abspath $(SOAK_OUT))"
	export KVCACHE_HELM="$$($(TOOLS) path helm)" SOAK_DURATION=$(SOAK_DURATION) SOAK_OUT="$(abspath $(SOAK_OUT))"; \
	set +e; go test -timeout 0 -count=1 -v ./test/cluster/ -run '^TestSoak$$' 2>&1 | tee "$(abspath $(SOAK_OUT))/go-test.log"; \
	rc=$${PIPESTATUS[0]}; echo "soak: report in $(abspath $(SOAK_OUT))/report.md"; exit $$rc

# The tags of the tests in packages outside test/ that need the real store (hack/mooncake.sh) or
# a real API server (envtest); make test-unit leaves them out.
TEST_TAGS := realstore,envtest

# The packages whose code runs concurrently (one Renderer and one Injector shared by every
# admission and worker; the launcher's elector, master and label goroutines), run again under
# the race detector.
RACE_PACKAGES := ./generator/ ./injection/ ./webhook/ ./leader/

## snapshots: refresh golden files (review every diff before committing)
# (only the packages whose tests use internal/golden know the -update flag; -p 1 because one
# package rewrites goldens another reads)
snapshots: tools
	export KUBEBUILDER_ASSETS="$$($(TOOLS) assets)" KVCACHE_HELM="$$($(TOOLS) path helm)"; \
	go test $$(go list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./... | \
		awk '/ github.com\/kvcache-operator\/kvcache\/internal\/golden( |$$)/ {print $$1}') -p 1 -run 'Snapshot|Golden' -update

## lint: gofmt, go vet and golangci-lint with the repo config
lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting" >&2; exit 1; }
	go vet -tags $(TEST_TAGS) ./...
	"$$($(TOOLS) path golangci-lint)" run ./...

clean:
	rm -rf bin
