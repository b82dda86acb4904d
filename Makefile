# lanes: make test | make demo | make bench | make lint
GO ?= go
BIN := bin

.PHONY: all build test test-summary demo bench lint clean

all: build

build:
	$(GO) build -o $(BIN)/lanectl ./cmd/lanectl

# Every package under -race. The real-Redis tests use LANES_REDIS_URL (or
# REDIS_URL, or redis://127.0.0.1:6379) and skip, saying so, when none answers.
test:
	$(GO) test -race -count=1 ./...
	@$(MAKE) --no-print-directory test-summary

# Which backends the conformance suite covered in this run's environment.
test-summary:
	@echo "conformance suite, by backend:"
	@$(GO) test -count=1 -run '^TestConformance' -v ./lanes ./redislane 2>&1 \
	  | grep -E '^--- (PASS|FAIL|SKIP): TestConformance|SKIP: ' | sed 's/^/  /'

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
