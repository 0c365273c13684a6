# bookrecon — `make help` lists the targets.
SHELL := /bin/bash
export BOOKRECON_DATABASE_URL ?= postgres://bookrecon:bookrecon@127.0.0.1:5432/bookrecon?sslmode=disable
export BOOKRECON_KAFKA_BROKERS ?= 127.0.0.1:19092
GO ?= go
FUZZTIME ?= 10s

.PHONY: help up down tools demo test test-faults test-short fuzz bench lint build

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

up: ## start PostgreSQL and the Kafka broker (idempotent)
	@scripts/stack.sh up

tools: ## install what the tests need beyond the stack: promtool (Debian's prometheus package)
	@command -v promtool >/dev/null || { echo "tools: installing promtool (Debian's prometheus package)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

down: ## stop the Kafka broker
	@scripts/stack.sh down

build: ## build every binary into bin/
	@echo "build: compiling the binaries into bin/ (the first build downloads the Go modules: a minute or two)"
	$(GO) build -o bin/ ./cmd/...

lint: ## gofmt and go vet
	@test -z "$$(gofmt -l .)" || { gofmt -l .; echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...
	$(GO) vet -tags faults ./...

test: up tools lint ## all tests (race detector, shuffled) and a short fuzz run, on the real stack
	$(GO) test -race -shuffle=on -count=1 -timeout 20m ./...
	$(MAKE) fuzz FUZZTIME=5s

test-faults: up tools ## fault tests (build tag faults): the load run on a three-node cluster whose nodes die (SIGKILL)
	$(GO) test -tags faults -race -count=1 -timeout 30m -run '^TestLoadBrokerFailover$$' -v ./internal/check/

test-short: ## unit tests only (no stack needed)
	$(GO) test -race -short -count=1 ./...

fuzz: ## run each fuzz target for FUZZTIME
	@for f in $$(grep -ho '^func Fuzz[A-Za-z]*' events/*_test.go | sed 's/func //'); do \
		echo "fuzz $$f"; $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) ./events/ || exit 1; done

demo: up build ## run the whole pipeline on samples/ (a copy of ../shared/samples) and print the report
	bin/bookrecon demo

bench: up ## benchmarks on the real stack; prints events/s, WAL per event and the ratios (docs/performance.md)
	$(GO) test -run='^$$' -bench='^(BenchmarkIngest|BenchmarkClaim)$$' -benchtime=1x -timeout 60m ./internal/bench/
