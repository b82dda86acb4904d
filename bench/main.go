// Command bench sets lanes side by side with the physical floor (raw
// EVALSHA round trips, a trivial Lua spin mutex), with its peers on Redis
// (redsync, bsm/redislock) and with an in-process semaphore, on one real
// Redis server, and prints one table: rows are contenders, columns are
// measurements. docs/BENCHMARKS.md explains every column and holds the
// results of one run.
//
//	go run ./bench                      # everything, about 2 to 3 minutes
//	go run ./bench -only lanes,redislock -cols handoff,throughput -dur 5s
//	go run ./bench -spawn -md           # a private redis-server, Markdown table
//
// The server is LANES_REDIS_URL, else REDIS_URL, else redis://127.0.0.1:6379;
// when none answers (or with -spawn) the program starts a private
// redis-server on a free port and stops it when done. Every contender uses
// keys under its own prefix, and the program deletes them when done; it
// never flushes the server.
//
// Each file holds one kind of measurement: uncontended.go, handoff.go,
// throughput.go (and fairness from its 8-contender cell), commands.go,
// waiters.go (connections and Redis load with waiters, memory per waiter),
// scale.go; contenders.go has the contenders, redis.go the server.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"
)

// config is every flag.
type config struct {
	url         string
	spawn       bool
	pin         bool
	only        []string // contender ids
	cols        []string // measurement groups
	cells       []string // throughput cells
	n           int
	handoffs    int
	handoffTime time.Duration
	dur         time.Duration
	waiters     int
	waitWindow  time.Duration
	memWaiters  int
	scale       bool
	scaleOps    int
	md          bool
	cpuprofile  string
	lockBackoff time.Duration
	syncDelay   time.Duration
}

var allCols = []string{"uncontended", "handoff", "throughput", "fairness", "commands", "waiters", "memory"}

func main() {
	var cfg config
	var only, cols, cellList string
	flag.StringVar(&cfg.url, "redis", "", "Redis URL (default: $LANES_REDIS_URL, $REDIS_URL, redis://127.0.0.1:6379)")
	flag.BoolVar(&cfg.spawn, "spawn", false, "start a private redis-server even if the URL answers (quiet numbers on a shared machine)")
	flag.BoolVar(&cfg.pin, "pin", true, "with a spawned server on Linux and 2+ CPUs: give redis-server the last CPU and this program the others")
	flag.StringVar(&only, "only", "", "comma-separated contenders to run (default all): "+strings.Join(kindIDs(), ","))
	flag.StringVar(&cols, "cols", "", "comma-separated measurements to run (default all): "+strings.Join(allCols, ","))
	flag.StringVar(&cellList, "cells", "", "comma-separated throughput cells, processes x keys (default all): "+strings.Join(cellNames(), ","))
	flag.IntVar(&cfg.n, "n", 2000, "uncontended acquire+release operations per contender")
	flag.IntVar(&cfg.handoffs, "handoffs", 300, "handoffs measured per contender (at most)")
	flag.DurationVar(&cfg.handoffTime, "handoff-time", 8*time.Second, "time spent measuring handoffs per contender (at most)")
	flag.DurationVar(&cfg.dur, "dur", 2*time.Second, "duration of each throughput cell")
	flag.IntVar(&cfg.waiters, "waiters", 1000, "waiting requests in one process for the connections column")
	flag.DurationVar(&cfg.waitWindow, "wait-window", 4*time.Second, "window over which the waiters' Redis load is counted")
	flag.IntVar(&cfg.memWaiters, "mem-waiters", 10000, "waiting requests for the memory column")
	flag.BoolVar(&cfg.scale, "scale", true, "run the lanes scale table (cost with 10, 1,000, 10,000 entries)")
	flag.IntVar(&cfg.scaleOps, "scale-ops", 300, "operations measured per scale cell")
	flag.BoolVar(&cfg.md, "md", false, "print Markdown tables")
	flag.StringVar(&cfg.cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.DurationVar(&cfg.lockBackoff, "redislock-backoff", time.Millisecond, "redislock LinearBackoff")
	flag.DurationVar(&cfg.syncDelay, "redsync-delay", time.Millisecond, "retry delay of the tuned redsync row")
	flag.Parse()
	cfg.only = splitList(only)
	cfg.cols = splitList(cols)
	cfg.cells = splitList(cellList)
	for _, c := range cfg.cells {
		if !slices.Contains(cellNames(), c) {
			fatalf("-cells: unknown cell %q (have %s)", c, strings.Join(cellNames(), ","))
		}
	}
	for _, id := range cfg.only {
		if !slices.Contains(kindIDs(), id) {
			fatalf("-only: unknown contender %q (have %s)", id, strings.Join(kindIDs(), ","))
		}
	}
	for _, c := range cfg.cols {
		if !slices.Contains(allCols, c) {
			fatalf("-cols: unknown measurement %q (have %s)", c, strings.Join(allCols, ","))
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, cfg))
}

func run(ctx context.Context, cfg config) int {
	srv, err := connect(ctx, cfg.url, cfg.spawn)
	if err != nil {
		if srv == nil && isNoServer(err) {
			fmt.Println("bench: skipped:", err)
			return 0
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer srv.close()

	if cfg.cpuprofile != "" {
		f, err := os.Create(cfg.cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}

	if srv.proc != nil && cfg.pin && runtime.NumCPU() >= 2 {
		desc, err := pinSplit(srv.proc.Process.Pid)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: not pinned:", err)
		}
		srv.pinned = desc
	}

	e := newEnv(srv, cfg)
	defer e.cleanup()
	fmt.Fprintf(os.Stderr, "bench: Redis %s at %s (%s%s); Go %s, GOMAXPROCS %d; run id %s\n",
		srv.version, srv.addr, srv.origin, srv.pinned, runtime.Version(), runtime.GOMAXPROCS(0), e.run)

	kinds := selectedKinds(cfg)
	res := newResults(kinds)
	start := time.Now()
	steps := []struct {
		col string
		fn  func(context.Context, *env, []*kind, *results) error
	}{
		{"uncontended", measureUncontended},
		{"commands", measureCommands},
		{"handoff", measureHandoff},
		{"throughput", measureThroughput}, // also fills fairness
		{"fairness", measureFairnessOnly},
		{"waiters", measureWaiters},
		{"memory", measureMemory},
	}
	for _, st := range steps {
		if !e.wants(st.col) || ctx.Err() != nil {
			continue
		}
		if st.col == "fairness" && e.wants("throughput") {
			continue // the throughput step measured it
		}
		t0 := time.Now()
		if err := st.fn(ctx, e, kinds, res); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", st.col, err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "bench: %s done in %v\n", st.col, time.Since(t0).Round(time.Millisecond))
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "bench: interrupted")
		return 130
	}
	printTable(os.Stdout, e, kinds, res)
	printHeadline(os.Stdout, res)

	if cfg.scale && slices.ContainsFunc(kinds, func(k *kind) bool { return k.id == "lanes" }) {
		t0 := time.Now()
		rows, err := measureScale(ctx, e)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: scale:", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "bench: scale done in %v\n", time.Since(t0).Round(time.Millisecond))
		printScale(os.Stdout, e, rows)
	}
	fmt.Fprintf(os.Stderr, "bench: total %v\n", time.Since(start).Round(time.Second))
	return 0
}

// pinSplit gives the server the last CPU and this process the others, so
// that a round trip always crosses CPUs, as it crosses machines in real
// use: on a small VM a loopback round trip takes about 3x longer between
// CPUs than on one, and the kernel moves processes between the two cases
// at random, which makes runs disagree.
func pinSplit(server int) (string, error) {
	last := runtime.NumCPU() - 1
	var mine []int
	for c := range last {
		mine = append(mine, c)
	}
	if err := pin(server, []int{last}); err != nil {
		return "", err
	}
	if err := pin(os.Getpid(), mine); err != nil {
		return "", err
	}
	runtime.GOMAXPROCS(len(mine))
	cpus := fmt.Sprintf("CPUs 0-%d", last-1)
	if last == 1 {
		cpus = "CPU 0"
	}
	return fmt.Sprintf("; redis-server pinned to CPU %d, bench to %s", last, cpus), nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	os.Exit(2)
}
