// Command testreport is `make test` (scripts/test.sh): it runs `go test
// -json` for each package, a few at a time, prints each package's result
// the moment it finishes, and then a summary: which backends the
// conformance suite covered, the skipped tests grouped by reason, and on a
// failure the failing tests' names first and then only their output. The
// whole output, package by package as `go test -v` prints it, goes to the
// log file.
//
//	go run ./scripts/testreport [-p N] [-log FILE] [-times FILE] [-goflags FLAGS] [PACKAGE...]
//
// Without packages it tests every module of the workspace (go.work: the
// library, cmd/lanectl, integration, bench...), each as DIR/...
//
// The slowest packages of the last run (-times keeps their durations)
// start first, so the run takes about as long as its slowest package, or
// the sum divided by -p. It exits 1 when a package failed.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	parallel := flag.Int("p", runtime.GOMAXPROCS(0), "packages tested at once")
	logPath := flag.String("log", ".cache/test.log", "file for the whole output")
	timesPath := flag.String("times", ".cache/test-times.json", "file keeping each package's duration, to start the slowest first next time")
	goflags := flag.String("goflags", "-race -count=1", "flags for go test, space-separated")
	flag.Parse()
	patterns := flag.Args()
	if len(patterns) == 0 {
		var err error
		if patterns, err = modules(); err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
	}
	code, err := run(os.Stdout, *parallel, *logPath, *timesPath, strings.Fields(*goflags), patterns)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	os.Exit(code)
}

// pkg is one package: its tests' results and output, as go test reported
// them.
type pkg struct {
	path    string
	tests   bool // it has test files
	result  string
	elapsed float64
	log     bytes.Buffer             // everything, in order
	output  map[string]*bytes.Buffer // by test ("" for the package itself)
	results map[string]string        // by test: pass, fail or skip
	order   []string                 // tests in the order they started
}

// run tests the packages of patterns, parallel at a time, and prints their
// results and the summary to out. It returns the exit status.
func run(out io.Writer, parallel int, logPath, timesPath string, goflags, patterns []string) (int, error) {
	start := time.Now()
	pkgs, err := list(patterns)
	if err != nil {
		return 0, err
	}
	times := readTimes(timesPath)
	var todo, none []*pkg
	for _, p := range pkgs {
		if p.tests {
			todo = append(todo, p)
		} else {
			none = append(none, p)
		}
	}
	// The slowest first; a package without a recorded time may be slow.
	slices.SortStableFunc(todo, func(a, b *pkg) int {
		ta, oka := times[a.path]
		tb, okb := times[b.path]
		switch {
		case oka != okb && !oka:
			return -1
		case oka != okb:
			return 1
		case ta > tb:
			return -1
		case ta < tb:
			return 1
		}
		return 0
	})
	logFile, err := os.Create(logPath)
	if err != nil {
		return 0, err
	}
	defer logFile.Close()

	r := &runner{out: out, goflags: goflags, log: logFile, width: width(todo)}
	stop := r.forwardSignals()
	defer stop()
	queue := make(chan *pkg)
	var wg sync.WaitGroup
	var ranMu sync.Mutex
	var ran []*pkg // the packages started, in order
	for range max(parallel, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range queue {
				if r.signaled() != nil {
					continue // interrupted: nothing new starts
				}
				ranMu.Lock()
				ran = append(ran, p)
				ranMu.Unlock()
				r.test(p)
			}
		}()
	}
	for _, p := range todo {
		if r.signaled() != nil {
			break
		}
		queue <- p
	}
	close(queue)
	wg.Wait()

	if sig := r.signaled(); sig != nil {
		code := summary(out, ran, none, logPath, time.Since(start))
		fmt.Fprintf(out, "INTERRUPTED by %v: %d of %d packages ran (those it stopped show as FAIL), %d did not start\n",
			sig, len(ran), len(todo), len(todo)-len(ran))
		if s, ok := sig.(syscall.Signal); ok {
			return 128 + int(s), nil
		}
		return max(code, 1), nil
	}
	for _, p := range todo {
		times[p.path] = p.elapsed
	}
	writeTimes(timesPath, times)
	return summary(out, todo, none, logPath, time.Since(start)), nil
}

// modules returns a pattern for every package of every module of the
// workspace (go.work), or of the main module without one: "./...",
// "./bench/..."... A nested module's packages are not in its parent's
// "./...", so each module needs its own.
func modules() ([]string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("go list -m: %v: %s", err, bytes.TrimSpace(ee.Stderr))
		}
		return nil, fmt.Errorf("go list -m: %v", err)
	}
	wd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	var patterns []string
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(wd, dir)
		if err != nil {
			return nil, err
		}
		patterns = append(patterns, "./"+filepath.ToSlash(filepath.Join(rel, "...")))
	}
	return patterns, nil
}

// list returns the packages patterns name, and whether each has tests.
func list(patterns []string) ([]*pkg, error) {
	args := append([]string{"list", "-f", "{{.ImportPath}} {{len .TestGoFiles}} {{len .XTestGoFiles}}"}, patterns...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("go list: %v: %s", err, bytes.TrimSpace(ee.Stderr))
		}
		return nil, fmt.Errorf("go list: %v", err)
	}
	var pkgs []*pkg
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		pkgs = append(pkgs, &pkg{path: f[0], tests: f[1] != "0" || f[2] != "0",
			output: map[string]*bytes.Buffer{}, results: map[string]string{}})
	}
	return pkgs, nil
}

// runner runs the packages' tests and prints their results as they end.
type runner struct {
	out     io.Writer
	goflags []string
	width   int

	mu    sync.Mutex
	log   io.Writer
	procs map[*os.Process]bool
	sig   os.Signal // the SIGINT or SIGTERM that interrupted the run; nil if none
}

// signaled returns the signal that interrupted the run, or nil.
func (r *runner) signaled() os.Signal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sig
}

// event is one line of `go test -json` (test2json), with the build events
// of Go 1.24 on.
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// test runs go test on p and prints its result line.
func (r *runner) test(p *pkg) {
	begin := time.Now()
	cmd := exec.Command("go", append(append([]string{"test", "-json"}, r.goflags...), p.path)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		p.result = "fail"
		p.add("", fmt.Sprintf("go test could not start: %v\n", err))
		r.done(p, time.Since(begin))
		return
	}
	r.track(cmd.Process, true)
	br := bufio.NewReaderSize(out, 1<<16)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			p.event(line)
		}
		if err != nil {
			break
		}
	}
	werr := cmd.Wait()
	r.track(cmd.Process, false)
	if stderr.Len() > 0 {
		p.add("", stderr.String())
	}
	if p.result == "" || (werr != nil && p.result != "fail") {
		// No verdict from go test (a build failure before Go 1.24, a crash),
		// or a status that contradicts it.
		p.result = "fail"
		if werr != nil {
			p.add("", fmt.Sprintf("go test: %v\n", werr))
		}
	}
	r.done(p, time.Since(begin))
}

// event applies one line of go test's JSON output to p.
func (p *pkg) event(line []byte) {
	var e event
	if err := json.Unmarshal(line, &e); err != nil {
		p.add("", string(line)) // not JSON: keep it as it is
		return
	}
	switch e.Action {
	case "output", "build-output":
		p.add(e.Test, e.Output)
	case "run":
		if _, seen := p.results[e.Test]; !seen {
			p.order = append(p.order, e.Test)
			p.results[e.Test] = ""
		}
	case "pass", "fail", "skip":
		if e.Test == "" {
			p.result, p.elapsed = e.Action, e.Elapsed
		} else {
			p.results[e.Test] = e.Action
		}
	case "build-fail":
		p.result = "fail"
	}
}

// add appends text to test's output and to the package's log.
func (p *pkg) add(test, text string) {
	p.log.WriteString(text)
	b := p.output[test]
	if b == nil {
		b = &bytes.Buffer{}
		p.output[test] = b
	}
	b.WriteString(text)
}

// done prints p's result line and appends its output to the log.
func (r *runner) done(p *pkg, took time.Duration) {
	if p.elapsed == 0 {
		p.elapsed = took.Seconds()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	verdict := map[string]string{"pass": "ok", "fail": "FAIL", "skip": "ok"}[p.result]
	note := ""
	if p.result == "fail" && len(p.failed()) > 0 {
		note = fmt.Sprintf("  %d failed", len(p.failed()))
	}
	fmt.Fprintf(r.out, "%-4s  %-*s  %6.1fs%s\n", verdict, r.width, p.path, p.elapsed, note)
	fmt.Fprintf(r.log, "### %s: %s (%.1fs)\n", p.path, verdict, p.elapsed)
	r.log.Write(p.log.Bytes())
}

// failed returns the tests of p that failed, in the order they started.
func (p *pkg) failed() []string {
	var out []string
	for _, t := range p.order {
		if p.results[t] == "fail" {
			out = append(out, t)
		}
	}
	return out
}

func (r *runner) track(proc *os.Process, running bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.procs == nil {
		r.procs = map[*os.Process]bool{}
	}
	if running {
		r.procs[proc] = true
	} else {
		delete(r.procs, proc)
	}
}

// forwardSignals passes SIGINT and SIGTERM on to the running go test
// processes (from a terminal they have them already), so that they end and
// print what they have; no package starts after it, and testreport prints
// the summary of those that ran, says it was interrupted, and exits 128
// plus the signal's number.
func (r *runner) forwardSignals() (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case s := <-ch:
				r.mu.Lock()
				if r.sig == nil {
					r.sig = s
				}
				for p := range r.procs {
					_ = p.Signal(s)
				}
				r.mu.Unlock()
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

func width(pkgs []*pkg) int {
	w := 0
	for _, p := range pkgs {
		w = max(w, len(p.path))
	}
	return w
}

func readTimes(path string) map[string]float64 {
	times := map[string]float64{}
	if b, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(b, &times) // a bad file only loses the order
	}
	return times
}

func writeTimes(path string, times map[string]float64) {
	if b, err := json.MarshalIndent(times, "", "  "); err == nil {
		_ = os.WriteFile(path, append(b, '\n'), 0o644)
	}
}
