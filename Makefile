# Tokenpath — the two commands a new user needs are `make run` and `make test`.
SHELL := /bin/bash
GO ?= go
export GOFLAGS ?= -mod=mod

NODE_STAMP := node_modules/.package-lock.json

.PHONY: run test test-reliability deps js-producers build generate check-generated lint fuzz docs bench-ingest bench-query clean

## run: install what is missing, then start the server with demo traffic on the embedded defaults
# Each step says what it does first: the first run downloads modules and
# npm packages and compiles for a minute or two.
run:
	@echo "==> [1/4] installing dependencies (npm packages, Go modules; first run only)"
	@$(MAKE) --no-print-directory -s deps
	@echo "==> [2/4] generating page templates"
	@$(MAKE) --no-print-directory -s generate
	@echo "==> [3/4] building bin/tokenpath-server"
	@$(GO) build -o bin/tokenpath-server ./cmd/server
	@echo "==> [4/4] starting the server with demo traffic (Ctrl-C stops it)"
	@./bin/tokenpath-server --demo

## test: the whole suite (vet, staticcheck, generated code current, unit + integration + browser tests, the JS producer suite, short fuzz)
test: deps js-producers check-generated lint
	$(GO) test -count=1 -timeout 45m ./...
	$(MAKE) fuzz FUZZTIME=10000x

## test-reliability: the reliability suite in long mode (~10 min): PostgreSQL outage, disk full and read-only data dir, overload, slow/idle clients, sustained load against the real server binary; `make test` runs its short mode
test-reliability: deps
	TOKENPATH_RELIABILITY_LONG=1 $(GO) test -count=1 -timeout 60m -v ./reliability/

deps: $(NODE_STAMP) web/static/vendor/.stamp
	$(GO) mod download

# Browser libraries come from npm and are embedded into the binary.
web/static/vendor/.stamp: $(NODE_STAMP)
	mkdir -p web/static/vendor
	cp node_modules/uplot/dist/uPlot.iife.min.js node_modules/uplot/dist/uPlot.min.css node_modules/htmx.org/dist/htmx.min.js web/static/vendor/
	touch $@

# npm ci only when the lockfile changed since the last install.
$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error

# The JS producer suite's own packages (the real npm LLM instrumentations,
# ingest/jsproducers_test.go): test-only, so `make run` never installs them.
JS_PRODUCERS := testdata/producers/js
js-producers: $(JS_PRODUCERS)/node_modules/.package-lock.json

$(JS_PRODUCERS)/node_modules/.package-lock.json: $(JS_PRODUCERS)/package.json $(JS_PRODUCERS)/package-lock.json
	npm ci --prefix $(JS_PRODUCERS) --no-audit --no-fund

build: deps generate
	$(GO) build -o bin/ ./cmd/...

generate:
	@$(GO) tool templ generate -log-level error -path web

# templ output is committed; fail when it is stale.
check-generated: generate
	@git diff --exit-code -- web || (echo "templ output is stale: run 'make generate' and commit" && exit 1)

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1)
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

FUZZTIME ?= 30s
## fuzz: run every fuzz target for FUZZTIME each (a duration, or a count
## such as 10000x: `make test` counts inputs, because a time limit fails with
## "context deadline exceeded" when a loaded machine is slow to warm up)
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for t in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/func //'); do \
	    echo "fuzz $$pkg $$t"; $(GO) test -run='^$$' -fuzz="^$$t$$" -fuzztime=$(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

## docs: regenerate the configuration table in README.md from the config code
docs:
	$(GO) run ./cmd/server --print-config-table > /tmp/tokenpath-config-table.md
	node scripts/replace-between.mjs README.md '<!-- config-table -->' '<!-- /config-table -->' /tmp/tokenpath-config-table.md

clean:
	rm -rf bin data

## bench-ingest: OTLP gRPC/HTTP ingest throughput, export latency, server RSS and a no-loss check against a real server process (BENCH_FLAGS="--duration 30s …")
bench-ingest: deps
	$(GO) run ./cmd/bench ingest $(BENCH_FLAGS)

## bench-query: requests/series/diagnose/compare latency over 1M and 10M llm_requests on the embedded engine (BENCH_FLAGS="--quick" for a smoke run)
bench-query: deps
	$(GO) run ./cmd/bench query $(BENCH_FLAGS)
