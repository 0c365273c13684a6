# bookrecon — `make help` lists the targets.
SHELL := /bin/bash
export BOOKRECON_DATABASE_URL ?= postgres://bookrecon:bookrecon@127.0.0.1:5432/bookrecon?sslmode=disable
export BOOKRECON_KAFKA_BROKERS ?= 127.0.0.1:19092
GO ?= go
# FUZZTIME counts executions (Nx), never a duration: with a duration Go 1.26's fuzz coordinator can
# report its own deadline as a failure ("context deadline exceeded", no failing input; go.dev/issue/75804,
# fixed in Go 1.27). It failed CI so on FuzzOutputID. A count has no deadline to race. The
# minimization of a new interesting input is a count too (2000x): under a count budget its
# default of 60 s per input ran on alone (a 66 s FuzzRequestDigestsMatchRef in CI).
FUZZTIME ?= 100000x
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(or $(shell $(GO) env GOBIN),$(shell $(GO) env GOPATH)/bin)/golangci-lint

.PHONY: help up down tools golangci-lint demo test test-faults test-short fuzz bench lint build

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

up: ## start PostgreSQL and the Kafka broker (idempotent)
	@scripts/stack.sh up

tools: golangci-lint ## install what the tests need beyond the stack: promtool (Debian's prometheus package), golangci-lint
	@command -v promtool >/dev/null || { echo "tools: installing promtool (Debian's prometheus package)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

golangci-lint: # install golangci-lint $(GOLANGCI_LINT_VERSION) into $(GOLANGCI_LINT) unless that version is there
	@$(GOLANGCI_LINT) version 2>/dev/null | grep -q 'has version $(GOLANGCI_LINT_VERSION:v%=%) ' || { \
		echo "tools: installing golangci-lint $(GOLANGCI_LINT_VERSION) (the first build takes a few minutes)"; \
		$(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION); }

down: ## stop the Kafka broker
	@scripts/stack.sh down

build: ## build every binary into bin/
	@echo "build: compiling the binaries into bin/ (the first build downloads the Go modules: a minute or two)"
	$(GO) build -o bin/ ./cmd/...

# golangci-lint lints with the build tag faults (.golangci.yml); go vet covers the build without it.
lint: golangci-lint ## golangci-lint (.golangci.yml: errcheck, govet, staticcheck, unused, ineffassign, errorlint, sloglint, gofmt, goimports) and go vet
	@test -z "$$(gofmt -l .)" || { gofmt -l .; echo "gofmt: files above need formatting"; exit 1; }
	$(GOLANGCI_LINT) run ./...
	$(GO) vet ./...

test: up tools lint ## all tests (race detector, shuffled) and a short fuzz run, on the real stack; then test-short with no stack
	$(GO) test -race -shuffle=on -count=1 -timeout 20m ./...
	$(MAKE) fuzz FUZZTIME=40000x
	$(MAKE) test-short

test-faults: up tools ## fault tests (build tag faults): the load run on a three-node cluster whose nodes die (SIGKILL)
	$(GO) test -tags faults -race -count=1 -timeout 30m -run '^TestLoadBrokerFailover$$' -v ./internal/harness/check/

# test-short points PostgreSQL and Kafka at a closed port (127.0.0.1:1), so that a test that needs
# the stack and does not skip under -short fails here instead of passing on a machine that has one.
NO_STACK := BOOKRECON_DATABASE_URL='postgres://bookrecon:bookrecon@127.0.0.1:1/bookrecon?sslmode=disable' \
	BOOKRECON_KAFKA_BROKERS=127.0.0.1:1

test-short: ## unit tests only: no stack needed (PostgreSQL and Kafka are pointed at a closed port to prove it)
	$(NO_STACK) $(GO) test -race -short -count=1 ./...

fuzz: ## run each fuzz target for FUZZTIME executions
	@for f in $$(grep -ho '^func Fuzz[A-Za-z]*' events/*_test.go | sed 's/func //'); do \
		echo "fuzz $$f"; $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=2000x ./events/ || exit 1; done

demo: up build ## run the whole pipeline on samples/ (the normative sample, kept in the repository) and print the report
	bin/bookrecon demo

bench: up ## benchmarks on the real stack; prints events/s, WAL per event and the ratios (docs/performance.md)
	$(GO) test -run='^$$' -bench='^(BenchmarkIngest|BenchmarkClaim)$$' -benchtime=1x -timeout 60m ./internal/harness/bench/
