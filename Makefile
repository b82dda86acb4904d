# lanes: make test | make demo | make bench | make lint
GO ?= go
BIN := bin

.PHONY: all build install test demo bench lint clean

all: build

build:
	$(GO) build -o $(BIN)/lanectl ./cmd/lanectl

# lanectl into $(go env GOPATH)/bin (or $GOBIN).
install:
	$(GO) install ./cmd/lanectl

# Every package under -race, then which backends the conformance suite
# covered and what was skipped. The real-Redis tests use LANES_REDIS_URL (or
# REDIS_URL, or redis://127.0.0.1:6379) and skip, saying so, when none answers.
test:
	./scripts/test.sh

# Eight `lanectl lock --limit 2` processes on the embedded dev-server append
# their fencing tokens to a real file; the run checks the file.
demo: build
	./scripts/demo.sh $(BIN)/lanectl

# Benchmarks against the real Redis server (started by .ci/run or yours).
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./redislane ./lanes

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...

clean:
	rm -rf $(BIN)
