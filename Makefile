# kvscope: `make run` builds everything and serves the app on 127.0.0.1:8080;
# `make test` runs every test. Both fetch what they need (Go modules, the
# ECharts bundle from npm) on first use.

GO       ?= go
BIN      := bin/kvscope
GOFILES  := $(shell find app core server static web agent -name '*.go' 2>/dev/null) go.mod go.sum
# The bundled model configs, embedded by core/catalog (the app.wasm too);
# the directory itself changes when a config is added or removed.
CATALOG  := core/catalog/models $(wildcard core/catalog/models/*.json)
ECHARTS  := static/assets/vendor/echarts.min.js
WASM     := web/app.wasm
# A count, not a duration: go1.26's fuzz coordinator can fail a clean run with
# "context deadline exceeded" when a -fuzztime duration ends (golang/go#75804).
FUZZTIME ?= 12000x
# go test's limit per test binary: a hang's ceiling, not a budget (the
# slowest package, server, takes about 4 minutes on this 2-core machine;
# go test's default of 10 minutes failed a machine three times slower).
TESTTIMEOUT ?= 40m
AGENT    := bin/kvscope-agent
# go-nvml's cgo preamble trips a deprecation warning in newer C compilers.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

.PHONY: run build wasm assets test check unit fuzz bench bench-nixl budgets soak sweep site clean nixl test-nixl corpus dashboards

run: build
	./$(BIN) serve --addr 127.0.0.1:8080

build: assets $(WASM)
	$(GO) build -o $(BIN) ./server
	$(GO) build -o $(AGENT) ./agent

wasm: $(WASM)

# The browser app: core and app compiled to WebAssembly, and a gzip copy
# the server sends to browsers that accept it. The view code (package app)
# is built without inlining: 33 kB less gzipped, and nothing hot runs
# there (planning, the oracle and tune keep theirs; server/BENCHMARKS.md).
$(WASM): $(ECHARTS) $(GOFILES) $(CATALOG)
	GOOS=js GOARCH=wasm $(GO) build -trimpath -gcflags='github.com/kvscope/kvscope/app=-l' -ldflags='-s -w' -o $@ ./app/wasm
	gzip -9 -k -f $@

# ECharts from npm. (The bundled model configs need no step: core/catalog
# embeds them where they are.)
assets: $(ECHARTS)

$(ECHARTS): static/package.json static/package-lock.json
	cd static && npm ci --ignore-scripts --no-audit --no-fund
	mkdir -p $(dir $@) && cp static/node_modules/echarts/dist/echarts.min.js $@

test: build check fuzz unit test-nixl

# The nixl backend against real NIXL over UCX (agent/transfer/NIXL.md):
# NIXL_PREFIX names an installed NIXL; otherwise ../shared's installer puts
# NIXL v1.4.0 with UCX into the user cache (seconds). Without either the
# tests are skipped with one line, unless KVSCOPE_REQUIRE_NIXL is set (CI).
NIXL_ENV := agent/transfer/nixl-env.sh
NIXL_AGENT := bin/kvscope-agent-nixl

nixl:
	@env=$$(./$(NIXL_ENV)) && eval "$$env" && $(GO) build -tags nixl -o $(NIXL_AGENT) ./agent && \
		echo "built $(NIXL_AGENT); run it with: eval \"\$$(./$(NIXL_ENV))\"; ./$(NIXL_AGENT) --backend nixl"

test-nixl:
	@why=$$(mktemp); trap 'rm -f $$why' EXIT; \
	if env=$$(./$(NIXL_ENV) 2>$$why); then \
		eval "$$env" && $(GO) test -tags nixl -count=1 -timeout $(TESTTIMEOUT) ./agent/...; \
	elif [ -n "$$KVSCOPE_REQUIRE_NIXL" ]; then \
		cat $$why; echo "KVSCOPE_REQUIRE_NIXL is set: the real-NIXL tests must run"; exit 1; \
	else \
		echo "skipping the real-NIXL tests: $$(cat $$why) (then make test-nixl)"; \
	fi

# Formatting, vet, the wasm and no-cgo builds.
check:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...
	GOOS=js GOARCH=wasm $(GO) vet ./core/... ./app/...
	GOOS=js GOARCH=wasm $(GO) build ./core/...
	CGO_ENABLED=0 $(GO) build ./...

unit:
	$(GO) test -count=1 -timeout $(TESTTIMEOUT) ./...

# Each fuzz target runs briefly; failures land in testdata/fuzz and replay in unit.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) -timeout $(TESTTIMEOUT) ./core/model
	$(GO) test -run '^$$' -fuzz '^FuzzPlan$$' -fuzztime $(FUZZTIME) -timeout $(TESTTIMEOUT) ./core/plan
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeFrame$$' -fuzztime $(FUZZTIME) -timeout $(TESTTIMEOUT) ./core/event
	$(GO) test -run '^$$' -fuzz '^FuzzPeek$$' -fuzztime $(FUZZTIME) -timeout $(TESTTIMEOUT) ./core/event
	$(GO) test -run '^$$' -fuzz '^FuzzReadJSONL$$' -fuzztime $(FUZZTIME) -timeout $(TESTTIMEOUT) ./core/event
	$(GO) test -run '^$$' -fuzz '^FuzzCredential$$' -fuzztime $(FUZZTIME) -timeout $(TESTTIMEOUT) ./core/event
	$(GO) test -run '^$$' -fuzz '^FuzzPeerRead$$' -fuzztime $(FUZZTIME) -timeout $(TESTTIMEOUT) ./agent/transfer
	$(GO) test -run '^$$' -fuzz '^FuzzParseRead$$' -fuzztime $(FUZZTIME) -timeout $(TESTTIMEOUT) ./agent/transfer/peer
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) -timeout $(TESTTIMEOUT) ./agent/scenario
	$(GO) test -run '^$$' -fuzz '^FuzzParseID$$' -fuzztime $(FUZZTIME) -timeout $(TESTTIMEOUT) ./server/internal/hub
	$(GO) test -run '^$$' -fuzz '^FuzzCheck$$' -fuzztime $(FUZZTIME) -timeout $(TESTTIMEOUT) ./core/check
	$(GO) test -run '^$$' -fuzz '^FuzzParseLiteral$$' -fuzztime $(FUZZTIME) -timeout $(TESTTIMEOUT) ./core/vlog
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) -timeout $(TESTTIMEOUT) ./agent/watch
	$(GO) test -run '^$$' -fuzz '^FuzzParseMetrics$$' -fuzztime $(FUZZTIME) -timeout $(TESTTIMEOUT) ./agent/watch
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeHandshake$$' -fuzztime $(FUZZTIME) -timeout $(TESTTIMEOUT) ./agent/watch
	$(GO) test -run '^$$' -fuzz '^FuzzZMTP$$' -fuzztime $(FUZZTIME) -timeout $(TESTTIMEOUT) ./agent/watch

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./core/... ./agent/...
	$(GO) test -run '^$$' -bench LiveEvents -benchtime 20000x ./server/live
	$(GO) test -run '^$$' -bench Fleet -benchtime 1x ./server/live
	$(GO) test -run '^$$' -bench FleetScale -benchtime 1x -timeout 20m ./server
	@$(MAKE) --no-print-directory bench-nixl
	@$(MAKE) --no-print-directory budgets

# The wall-clock budgets (server/internal/budget): the first plan in the
# browser, a recompute, the Tune search and the page's stalls and
# keystroke waits while it runs, the admission's refusals and hang-ups.
# make test holds each timing only to ten times its budget (a hang); here
# the tests run alone and are held to the budgets themselves, and each
# figure is printed as a "budget:" line (server/BENCHMARKS.md quotes
# them). It fails when a figure is over its budget; KVSCOPE_BUDGETS_LOG
# keeps the whole log.
BUDGETS := TestBrowserApp|TestFirstNumbersBeforeWasm|TestRecomputeBudget|TestTuneView|TestHostileBodiesAreRefusedFromTheirEstimate|TestAdmission|TestPDHangUp|TestHubAcksNeverWaitForSubscribers
budgets: build
	@log=$${KVSCOPE_BUDGETS_LOG:-$$(mktemp)}; \
	KVSCOPE_BUDGETS=1 KVSCOPE_REQUIRE_BROWSER=1 $(GO) test -count=1 -timeout $(TESTTIMEOUT) -run '^($(BUDGETS))$$' -v ./server/... >$$log 2>&1; rc=$$?; \
	grep -E '^budget:|store latency|^--- FAIL|^(ok|FAIL)\b' $$log; \
	if [ $$rc -ne 0 ]; then echo "make budgets: a test failed or a figure is over its budget (the log: $$log)"; \
	elif [ -z "$$KVSCOPE_BUDGETS_LOG" ]; then rm -f $$log; fi; exit $$rc

# The nixl backend's nixlbench-style table (agent/transfer/nixl_bench_test.go),
# one process over UCX_TLS=tcp,self and two processes over tcp,self and
# tcp,shm,self, as markdown rows (skipped without NIXL, as test-nixl is).
bench-nixl:
	@why=$$(mktemp); trap 'rm -f $$why' EXIT; \
	if env=$$(./$(NIXL_ENV) 2>$$why); then \
		eval "$$env" && UCX_TLS=tcp,self UCX_NET_DEVICES=lo NIXL_LOG_LEVEL=ERROR \
		$(GO) test -tags nixl -run '^$$' -bench 'BenchmarkNIXL$$|BenchmarkNIXLPrepare' -benchtime 200ms ./agent/transfer | tee bench-nixl.txt | \
		awk -f agent/transfer/benchtable.awk; \
	else \
		echo "skipping the NIXL benchmark: $$(cat $$why)"; \
	fi

# The hostile storms against a real kvscope serve (a few minutes): issue
# 10's (50 parallel oracles, the hostile pd body, 200 churning
# subscribers) in TestSoak, and each later hostile case's storm in a
# TestStorm* beside the code it attacks; each prints "soak:" lines with the
# figures server/BENCHMARKS.md quotes.
soak: build
	KVSCOPE_SOAK=1 KVSCOPE_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout $(TESTTIMEOUT) -run '^(TestSoak|TestStorm.*)$$' -v ./server/... ./agent/... | grep -E '^soak:|^--- |^(ok|FAIL)'

# Every command line of server/testdata/corpus.txt through an earlier build
# (BASE=path/to/old/kvscope) and this one: the outputs must match byte for
# byte (a refactor's guard; server/corpus_test.go).
corpus: build
	@test -n "$(BASE)" || { echo "give BASE=path/to/an/earlier/kvscope"; exit 2; }
	KVSCOPE_BASELINE=$(abspath $(BASE)) KVSCOPE_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -run '^TestCorpus$$' ./server

# The full oracle sweep (about a minute on 2 cores); make test runs the quick one.
sweep: build
	./$(BIN) oracle --sweep

# The Grafana dashboards (agent/deploy/grafana), generated with Grafana's
# foundation SDK into agent/deploy/grafana/dashboards/*.json, which are
# committed: make unit fails while they differ from the generator's.
dashboards:
	$(GO) run ./agent/deploy/grafana/cmd/dashboards -out agent/deploy/grafana/dashboards

# A static website that runs without any server: the planning runs in WASM.
site: build
	./$(BIN) site --out site

clean:
	rm -rf bin site web/app.wasm web/app.wasm.gz static/assets/vendor static/node_modules
