// Command bench sets lanes side by side with the physical floor (raw
// EVALSHA round trips, a trivial Lua spin mutex), with its peers on Redis
// (redsync, bsm/redislock) and with an in-process semaphore, on one real
// Redis server. It runs every measurement -reps times (5 by default); in
// each repetition each measurement takes the contenders in a new random
// order, so that noise on the machine falls on every row alike. It prints
// every cell, and every ratio of lanes to a peer or a floor (taken within
// each repetition), as median [min–max] across repetitions, and then each
// target of issue 12 as met or not. Nothing is pinned unless -pin says so:
// the machine's cores are shared as users share them. docs/BENCHMARKS.md
// explains every column and holds the results of one run.
//
//	go run ./bench -spawn               # everything, about 6 minutes on 2 CPUs
//	go run ./bench -reps 3 -only lanes,redislock -cols handoff,throughput -dur 2s
//	go run ./bench -spawn -md           # a private redis-server, Markdown tables
//
// The server is LANES_REDIS_URL, else REDIS_URL, else redis://127.0.0.1:6379;
// when none answers (or with -spawn) the program starts a private
// redis-server on a free port and stops it when done. Every contender uses
// keys under its own prefix, and the program deletes them when done; it
// never flushes the server.
//
// Each file holds one kind of measurement: uncontended.go, handoff.go (and
// the releases with and without a waiter, and the raw round trip),
// throughput.go (and fairness from its 8-contender cell), commands.go
// (commands, script time and CPU per operation), waiters.go (connections
// and Redis load with waiters), memory.go (memory per waiter,
// Session.Close), enqstep.go (one step of 1,000 requests), scale.go;
// contenders.go has the contenders, redis.go the server, reps.go the
// repetitions' summary, the ratios and the targets.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// defaultBatchBaseline is the lanes grants/s of the goroutines cell (64
// goroutines of one process on 1,024 keys) in the run of docs/BENCHMARKS.md
// (2026-11-30, lanes at 6adb8c4, before automatic batching): the figure its
// 2x target is measured against. defaultBatchRatio is that cell's lanes /
// redislock ratio in the same run: doubling it is the same target judged
// against a control run beside it, which the machine's load moves far less
// (three runs that day gave 4,994, 7,496 and 10,663 grants/s, and 0.33x,
// 0.30x and 0.32x).
const (
	defaultBatchBaseline = 10663
	defaultBatchRatio    = 0.32
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
	reps        int
	gGoroutines int
	gKeys       int
	enqStep     int
	verbose     bool
	args        []string
	// batchBaseline is the lanes grants/s of the goroutines cell that the
	// automatic-batching target doubles (0: none); batchRatio the same
	// cell's lanes / redislock ratio, the control against a machine
	// faster or slower than on the day of the baseline.
	batchBaseline float64
	batchRatio    float64
}

var allCols = []string{"uncontended", "commands", "handoff", "throughput", "fairness", "waiters", "memory", "enqstep"}

func main() {
	var cfg config
	var only, cols, cellList string
	flag.StringVar(&cfg.url, "redis", "", "Redis URL (default: $LANES_REDIS_URL, $REDIS_URL, redis://127.0.0.1:6379)")
	flag.BoolVar(&cfg.spawn, "spawn", false, "start a private redis-server even if the URL answers (quiet numbers on a shared machine)")
	flag.BoolVar(&cfg.pin, "pin", false, "with a spawned server on Linux and 2+ CPUs: give redis-server the last CPU and this program the others (hides the scripts' cost: every round trip crosses CPUs)")
	flag.IntVar(&cfg.reps, "reps", 5, "repetitions of every measurement, each taking the contenders in a new random order")
	flag.IntVar(&cfg.gGoroutines, "g-goroutines", 64, "goroutines of one process in the goroutines throughput cell")
	flag.IntVar(&cfg.gKeys, "g-keys", 1024, "keys the goroutines cell picks from at random")
	flag.Float64Var(&cfg.batchBaseline, "batch-baseline", defaultBatchBaseline, "lanes grants/s of the goroutines cell before automatic batching (the target is 2x); 0: print the figure only")
	flag.Float64Var(&cfg.batchRatio, "batch-baseline-ratio", defaultBatchRatio, "lanes / redislock grants/s of the goroutines cell before automatic batching (a second target line: 2x it); 0: none")
	flag.IntVar(&cfg.enqStep, "enq-step", lanes.MaxStepRequests, "requests in the one Enqueue step timed by enqstep")
	flag.BoolVar(&cfg.verbose, "v", false, "print the details of every repetition (default: the last)")
	flag.StringVar(&only, "only", "", "comma-separated contenders to run (default all): "+strings.Join(kindIDs(), ","))
	flag.StringVar(&cols, "cols", "", "comma-separated measurements to run (default all): "+strings.Join(allCols, ","))
	flag.StringVar(&cellList, "cells", "", "comma-separated throughput cells, processes x keys (default all): "+strings.Join(cellNames(), ","))
	flag.IntVar(&cfg.n, "n", 1000, "uncontended acquire+release operations per contender per repetition")
	flag.IntVar(&cfg.handoffs, "handoffs", 200, "handoffs measured per contender per repetition (at most)")
	flag.DurationVar(&cfg.handoffTime, "handoff-time", 4*time.Second, "time spent measuring handoffs per contender per repetition (at most)")
	flag.DurationVar(&cfg.dur, "dur", time.Second, "duration of each throughput cell per repetition")
	flag.IntVar(&cfg.waiters, "waiters", 1000, "waiting requests in one process for the connections column")
	flag.DurationVar(&cfg.waitWindow, "wait-window", 2*time.Second, "window over which the waiters' Redis load is counted")
	flag.IntVar(&cfg.memWaiters, "mem-waiters", 10000, "waiting requests for the memory column")
	flag.BoolVar(&cfg.scale, "scale", true, "run the lanes scale table (cost with 10, 1,000, 10,000 entries; one run after the repetitions)")
	flag.IntVar(&cfg.scaleOps, "scale-ops", 300, "operations measured per scale cell")
	flag.BoolVar(&cfg.md, "md", false, "print Markdown tables")
	flag.StringVar(&cfg.cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.DurationVar(&cfg.lockBackoff, "redislock-backoff", time.Millisecond, "redislock LinearBackoff")
	flag.DurationVar(&cfg.syncDelay, "redsync-delay", time.Millisecond, "retry delay of the tuned redsync row")
	flag.Parse()
	cfg.args = os.Args[1:]
	if cfg.reps < 1 {
		fatalf("-reps must be at least 1")
	}
	if cfg.enqStep < 1 || cfg.enqStep > lanes.MaxStepRequests {
		fatalf("-enq-step must be from 1 to %d", lanes.MaxStepRequests)
	}
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
	pinned := "not pinned: Redis and this program share every CPU"
	if srv.pinned != "" {
		pinned = strings.TrimPrefix(srv.pinned, "; ")
	}
	out := os.Stdout
	load0 := loadAverage()
	fmt.Fprintf(out, "lanes bench: go run ./bench %s\n", strings.Join(cfg.args, " "))
	fmt.Fprintf(out, "machine: %s, %d CPUs, %s; Go %s, GOMAXPROCS %d\n", cpuModel(), runtime.NumCPU(), kernel(), runtime.Version(), runtime.GOMAXPROCS(0))
	fmt.Fprintf(out, "Redis %s at %s (%s); %s\n", srv.version, srv.addr, srv.origin, pinned)
	fmt.Fprintf(out, "load average at the start: %s (1, 5, 15 min)\n", load0)
	fmt.Fprintf(out, "%d repetitions; in each, every measurement takes the contenders in a new random order; run id %s; started %s\n",
		cfg.reps, e.run, time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(os.Stderr, "bench: Redis %s at %s (%s; %s); run id %s; load %s\n", srv.version, srv.addr, srv.origin, pinned, e.run, load0)

	kinds := selectedKinds(cfg)
	sum := &summary{kinds: kinds}
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
		{"enqstep", measureEnqueueStep},
	}
	var repLines []string
	for rep := range cfg.reps {
		res := newResults(kinds)
		r0, l0 := time.Now(), loadAverage()
		for _, st := range steps {
			if !e.wants(st.col) || ctx.Err() != nil {
				continue
			}
			if st.col == "fairness" && e.wants("throughput") {
				continue // the throughput step measured it
			}
			t0 := time.Now()
			if err := st.fn(ctx, e, shuffled(kinds), res); err != nil {
				fmt.Fprintf(os.Stderr, "bench: repetition %d: %s: %v\n", rep+1, st.col, err)
				return 1
			}
			fmt.Fprintf(os.Stderr, "bench: repetition %d/%d: %s done in %v\n", rep+1, cfg.reps, st.col, time.Since(t0).Round(time.Millisecond))
		}
		if ctx.Err() != nil {
			break
		}
		sum.reps = append(sum.reps, res)
		repLines = append(repLines, fmt.Sprintf("%d: %v, load %s → %s", rep+1, time.Since(r0).Round(time.Second), firstField(l0), firstField(loadAverage())))
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "bench: interrupted")
		return 130
	}
	fmt.Fprintf(out, "load average at the end: %s; by repetition (1-min load at its start → end): %s\n", loadAverage(), strings.Join(repLines, "; "))
	printTables(out, e, sum)
	printRatios(out, e, sum)
	printDetails(out, e, sum)

	if cfg.scale && slices.ContainsFunc(kinds, func(k *kind) bool { return k.id == "lanes" }) {
		t0 := time.Now()
		rows, err := measureScale(ctx, e)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: scale:", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "bench: scale done in %v\n", time.Since(t0).Round(time.Millisecond))
		printScale(out, e, rows)
	}
	printTargets(out, e, sum)
	fmt.Fprintf(out, "\ntotal %v; load average at the end %s\n", time.Since(start).Round(time.Second), loadAverage())
	return 0
}

// printDetails prints the notes of the last repetition, or of every one
// with -v.
func printDetails(w io.Writer, e *env, s *summary) {
	if len(s.reps) == 0 {
		return
	}
	first := len(s.reps) - 1
	if e.cfg.verbose {
		first = 0
	}
	for i := first; i < len(s.reps); i++ {
		fmt.Fprintln(w)
		if e.cfg.verbose || len(s.reps) == 1 {
			fmt.Fprintf(w, "Details of repetition %d:\n", i+1)
		} else {
			fmt.Fprintf(w, "Details of repetition %d of %d (-v prints every repetition's):\n", i+1, len(s.reps))
		}
		for _, n := range s.reps[i].notes {
			fmt.Fprintln(w, "  "+n)
		}
	}
}

// shuffled returns ks in a random order.
func shuffled(ks []*kind) []*kind {
	out := slices.Clone(ks)
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// loadAverage is /proc/loadavg's three load averages, or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func firstField(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return s
}

// cpuModel is the first "model name" of /proc/cpuinfo, or GOARCH.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				return strings.TrimSpace(v)
			}
		}
	}
	return runtime.GOARCH
}

// kernel is the OS and its release.
func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return runtime.GOOS
	}
	return runtime.GOOS + " " + strings.TrimSpace(string(b))
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
