# kvscope: `make run` builds and runs on embedded defaults; `make test` runs
# every test. Both fetch what they need (Go modules) on first use.

GO      ?= go
BIN     := bin/kvscope
MODELS  := $(wildcard testdata/models/*.json)
FUZZTIME ?= 4s

.PHONY: run build test check unit fuzz bench sweep clean

run: build
	./$(BIN) plan --model Qwen/Qwen3.6-35B-A3B --draft z-lab/Qwen3.6-35B-A3B-DFlash \
		--max-model-len 262144 --tensor-parallel-size 2 --num-speculative-tokens 7

build: static/models
	$(GO) build -o $(BIN) ./server

# The bundled model configs are embedded into the server from static/models.
static/models: $(MODELS)
	rm -rf $@ && mkdir -p $@ && cp $(MODELS) $@/

test: static/models check unit fuzz

# Formatting, vet, the wasm and no-cgo builds.
check:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...
	GOOS=js GOARCH=wasm $(GO) vet ./core/...
	GOOS=js GOARCH=wasm $(GO) build ./core/...
	CGO_ENABLED=0 $(GO) build ./...

unit:
	$(GO) test -count=1 ./...

# Each fuzz target runs briefly; failures land in testdata/fuzz and replay in unit.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./core/model
	$(GO) test -run '^$$' -fuzz '^FuzzPlan$$' -fuzztime $(FUZZTIME) ./core/plan

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./core/...

# The full oracle sweep (about a minute on 2 cores); make test runs the quick one.
sweep: build
	./$(BIN) oracle --sweep

clean:
	rm -rf bin static/models
