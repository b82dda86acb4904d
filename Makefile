# lanes: make test | make demo | make bench | make lint | make mutate
GO ?= go
BIN := bin

# The modules of go.work (the library, cmd/lanectl, integration, bench...),
# each as DIR/...: a nested module's packages are not in its parent's ./...
MODULES = $(patsubst $(CURDIR)%,.%,$(shell $(GO) list -m -f '{{.Dir}}/...'))

.PHONY: all build install image test demo demo-lock bench luacost lint mutate clean

all: build

# `lanectl --version` prints VERSION (git describe: the last tag, or the
# commit, and -dirty for uncommitted changes); without it, what go build
# recorded (nothing where GOFLAGS has -buildvcs=false).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
LDFLAGS := $(if $(VERSION),-ldflags "-X main.version=$(VERSION)")

build:
	$(GO) build $(LDFLAGS) -o $(BIN)/lanectl ./cmd/lanectl

# lanectl into $(go env GOPATH)/bin (or $GOBIN).
install:
	$(GO) install $(LDFLAGS) ./cmd/lanectl

# The runtime image (Dockerfile: non-root, CA certificates), lanectl
# stamped with VERSION; needs a Docker engine.
image:
	docker build --build-arg VERSION=$(VERSION) -t lanes/lanectl:$(or $(VERSION),dev) .

# Every package under -race, each package's result as it finishes, then
# which backends the conformance suite covered and what was skipped; on a
# failure the failing tests' names, then only their output
# (scripts/testreport). The real-Redis tests use LANES_REDIS_URL (or
# REDIS_URL, or redis://127.0.0.1:6379) and skip, saying so, when none answers.
test:
	./scripts/test.sh

# RFD 129's failure: three replicas run model responses through `lanectl
# batch` on an embedded server, with lanes (right) and without (collisions).
demo: build
	$(BIN)/lanectl demo

# Eight `lanectl lock --limit 2` processes on the embedded dev-server append
# their fencing tokens to a real file; the run checks the file.
demo-lock: build
	./scripts/demo.sh $(BIN)/lanectl

# Side-by-side benchmarks (bench/; results and column meanings in
# docs/BENCHMARKS.md): lanes against raw round trips, a Lua spin mutex,
# redsync, redislock and an in-process semaphore. Unpinned, every
# measurement repeated 5 times (-reps) with the contenders in a new random
# order each time; every cell and ratio printed as median [min–max], then
# issue 12's targets, met or not; about 7 minutes. By default on a private
# redis-server it starts and stops (-spawn: INFO's server-wide counters
# then count only this program); BENCHFLAGS= (empty) uses LANES_REDIS_URL,
# REDIS_URL or 127.0.0.1:6379 instead. Other flags go in BENCHFLAGS (go
# run ./bench -h), e.g. BENCHFLAGS='-spawn -md' as in docs/BENCHMARKS.md,
# or BENCHFLAGS='-spawn -pin' for the pinned aside. Then the Go benchmarks
# of the packages, which report round trips and Redis commands per
# operation (against LANES_REDIS_URL or 127.0.0.1:6379).
BENCHFLAGS ?= -spawn
bench:
	$(GO) run ./bench $(BENCHFLAGS)
	$(GO) test -run '^$$' -bench . -benchmem ./redislane ./lanes

# Counts the machine instructions Redis spends in the lanes scripts for a
# few common steps (bench/luacost: a redis-server of its own under
# valgrind's callgrind), a figure the machine's load does not move, so a
# change to the scripts is measured to the percent on a busy machine.
# LUACOSTFLAGS='-base REV' counts another commit's scripts beside; -fcall
# counts real FCALLs of the library loaded once (the whole server's work).
LUACOSTFLAGS ?=
luacost:
	cd bench && $(GO) run ./luacost $(LUACOSTFLAGS)

# Plants each mutation of a curated list (scripts/mutate/mutations.go: a
# realistic bug each, as an exact text edit) in a temporary copy of the
# repository, runs the fast tests that must catch it, and prints each with
# the tests that caught it. Fails if one survives, or if its edit no longer
# matches the code. MUTATEFLAGS: -run REGEXP, -list, -race, -v.
MUTATEFLAGS ?=
mutate:
	$(GO) run ./scripts/mutate $(MUTATEFLAGS)

# gofmt, go vet and staticcheck over every module.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet $(MODULES)
	$(GO) run $(STATICCHECK) $(MODULES)

clean:
	rm -rf $(BIN)

# The fault-injection suite at full size (docs/RELIABILITY.md): the checkers'
# unit tests, then every chaos scenario's long run (the soak alone makes
# 10,000+ lane requests from 8+ processes), each against a redis-server it
# starts itself (redis-server must be on PATH). The results table goes to
# .cache/chaos.md, the whole log to .cache/chaos.log.
.PHONY: chaos
chaos:
	@mkdir -p .cache && rm -f .cache/chaos.md
	@LANES_CHAOS=long LANES_CHAOS_REPORT=$(CURDIR)/.cache/chaos.md $(GO) test -count=1 -timeout 60m -v \
		-run '^Test(Chaos|Check|Models|Recorder)' ./integration/ ./integration/chaos/ >.cache/chaos.log 2>&1; status=$$?; \
	grep -E '^(--- |ok|FAIL)|VIOLATION|SKIP: ' .cache/chaos.log; echo; \
	echo '| scenario | processes | lane requests | faults injected | violations | recovery after a holder crash p50 / p99 | run time | reproduce |'; \
	echo '|---|---|---|---|---|---|---|---|'; cat .cache/chaos.md; exit $$status
