package integration_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lanes-dev/lanes/integration/chaos"
	"github.com/lanes-dev/lanes/internal/redistest"
	"github.com/lanes-dev/lanes/redislane"
)

// The chaos scenarios (chaos_*_test.go) run a short version under `make
// test` and a long one under `make chaos` (LANES_CHAOS=long). Each starts
// its own redis-server (skipping, visibly, when there is none on PATH),
// never touches the shared server, and leaves no process behind.

// chaosLong reports whether the long versions run.
var chaosLong = os.Getenv("LANES_CHAOS") == "long"

// chaosSize returns short or long, by mode.
func chaosSize[T any](short, long T) T {
	if chaosLong {
		return long
	}
	return short
}

var (
	chaosWorkerOnce sync.Once
	chaosWorkerBin  string
	chaosWorkerErr  error
)

// chaosWorker builds the chaosworker binary once per test binary, into
// this run's own directory (runDir, made by TestMain and removed at its
// end): two runs at once (two checkouts, a developer and CI, or `make
// test` twice in one tree) each run their own worker, never another's.
func chaosWorker(t *testing.T) string {
	t.Helper()
	chaosWorkerOnce.Do(func() {
		chaosWorkerBin, chaosWorkerErr = chaos.BuildWorker(runDir)
	})
	if chaosWorkerErr != nil {
		t.Fatal(chaosWorkerErr)
	}
	return chaosWorkerBin
}

// chaosScenario is one scenario's run: its harness, resource directory,
// and the facts that go into its report.
type chaosScenario struct {
	t        *testing.T
	name     string
	h        *chaos.Harness
	resDir   string
	begin    time.Time
	faults   []string
	extra    []chaos.Violation
	backends []chaosNS
	lanes    string
	ttl      time.Duration
}

// chaosNS is a namespace to check for leaks at the end.
type chaosNS struct {
	b *redislane.Backend
	c redis.UniversalClient
}

// chaosStart begins a scenario: it skips without redis-server, builds the
// worker, and checks at the end that the test left no goroutine running.
func chaosStart(t *testing.T, name string) *chaosScenario {
	t.Helper()
	chaos.RequireRedisServer(t)
	leak := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		if err := goleak.Find(leak); err != nil {
			t.Errorf("goroutines left behind: %v", err)
		}
	})
	s := &chaosScenario{t: t, name: name, h: chaos.NewHarness(t, chaosWorker(t)), resDir: t.TempDir(), begin: time.Now(),
		lanes: "m0:1,m1:1,s0:3", ttl: time.Second}
	t.Logf("history in %s; mode %s", s.h.Dir, chaosSize("short", "long (LANES_CHAOS=long)"))
	return s
}

// fault notes a fault injected, for the report.
func (s *chaosScenario) fault(f string) { s.faults = append(s.faults, f) }

// args returns the worker arguments every scenario shares, then extra
// (later flags win).
func (s *chaosScenario) args(redisURL, ns string, seed uint64, extra ...string) []string {
	a := []string{"-redis", redisURL, "-ns", ns, "-seed", strconv.FormatUint(seed, 10),
		"-lanes", s.lanes, "-multi", "0.25", "-ttl", s.ttl.String(), "-hold", "3ms", "-pace", "2ms",
		"-cancel", "0.1", "-cancel-wait", "5ms", "-probe", "0.2", "-guard", chaos.GuardFile, "-resource", s.resDir}
	return append(a, extra...)
}

// namespace registers a fresh namespace on c to be checked for leaks.
func (s *chaosScenario) namespace(c redis.UniversalClient, prefix string) *redislane.Backend {
	b, err := redislane.New(c, redistest.Namespace(prefix))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { b.Close() })
	s.backends = append(s.backends, chaosNS{b, c})
	return b
}

// violation adds a scenario-specific violation.
func (s *chaosScenario) violation(checker, format string, args ...any) {
	s.extra = append(s.extra, chaos.Violation{Checker: checker, Msg: fmt.Sprintf(format, args...)})
}

// finish loads the history, runs every checker and the leak check, logs
// and reports the scenario's numbers, and fails the test on any violation.
// want lists checkers whose violations are expected (the unguarded run);
// it returns what they found.
//
// Every scenario must make progress: unless o asks for more, each process
// that exited cleanly was granted at least once, and the scenario at least
// once per process that took part, so a fleet that granted nothing (or
// little) fails however clean its history.
func (s *chaosScenario) finish(o chaos.Options, want ...string) []chaos.Violation {
	t := s.t
	t.Helper()
	hist := s.h.History()
	if o.MinGrantsPerProc == 0 {
		o.MinGrantsPerProc = 1
	}
	if o.MinGrants == 0 {
		for p := range hist.Procs {
			if p != "harness" {
				o.MinGrants++
			}
		}
		o.MinGrants = max(o.MinGrants, 1)
	}
	if o.Final == nil {
		var nss []string
		for _, n := range s.backends {
			nss = append(nss, n.b.Namespace())
		}
		ls, err := chaos.ParseLanes(s.lanes)
		if err != nil {
			t.Fatal(err)
		}
		if o.Final, err = chaos.ReadCounters(s.resDir, nss, ls); err != nil {
			t.Fatal(err)
		}
	}
	o.VisualizeDir = s.h.Dir
	vs := append(chaos.Check(hist, o), s.extra...)
	// Every worker ran this source tree's scripts (not another
	// checkout's binary).
	digest := chaos.ScriptsDigest()
	for _, e := range hist.Events {
		if e.Op == chaos.OpStart && !strings.HasSuffix(e.Err, "scripts "+digest) {
			vs = append(vs, chaos.Violation{Checker: "scenario", Msg: fmt.Sprintf("worker %s ran other scripts than this tree's (%s; want %s)", e.Proc, e.Err, digest)})
		}
	}
	ctx := chaos.Context(t, time.Minute)
	for _, n := range s.backends {
		if err := chaos.WaitNoLeak(ctx, n.b, n.c, 3*s.ttl+5*time.Second); err != nil {
			vs = append(vs, chaos.Violation{Checker: "leak", Msg: err.Error()})
		}
	}
	var expected, unexpected []chaos.Violation
	for _, v := range vs {
		if contains(want, v.Checker) {
			expected = append(expected, v)
		} else {
			unexpected = append(unexpected, v)
		}
	}
	rec := chaos.Recoveries(hist)
	var took []time.Duration
	for _, r := range rec {
		took = append(took, r.Took)
	}
	c := hist.Count()
	procs := 0
	for p := range hist.Procs {
		if p != "harness" {
			procs++
		}
	}
	row := chaos.Row{Scenario: s.name, Processes: procs, Requests: len(hist.Attempts), Granted: c["granted"],
		Faults: strings.Join(s.faults, "; "), Violations: len(unexpected), Recovery: took, Took: time.Since(s.begin),
		Command: fmt.Sprintf("%sgo test -count=1 -run '^%s$' ./integration/", chaosSize("", "LANES_CHAOS=long "), t.Name())}
	t.Logf("%s", hist)
	t.Logf("report: %s", row.Markdown())
	if err := chaos.AppendReport(row); err != nil {
		t.Error(err)
	}
	for _, v := range unexpected {
		t.Errorf("VIOLATION %s", v)
	}
	keepDir(t, s.h.Dir)
	return expected
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// keepDir copies a run's history (and the porcupine visualizations, *.html,
// of a failed check) into $LANES_CHAOS_KEEP when set, since t.TempDir is
// removed at the end of the test.
func keepDir(t *testing.T, dir string) {
	dst := os.Getenv("LANES_CHAOS_KEEP")
	if dst == "" {
		return
	}
	dst = filepath.Join(dst, strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.CopyFS(dst, os.DirFS(dir)); err != nil {
		t.Logf("keeping the history: %v", err)
	} else {
		t.Logf("history copied to %s", dst)
	}
}

// chaosWaitEvent waits until some process recorded an event match accepts.
func chaosWaitEvent(s *chaosScenario, limit time.Duration, what string, match func(chaos.Event) bool) {
	s.t.Helper()
	s.h.Until(limit, what, func() bool { return s.h.Seen(match) })
}

// chaosSeq reads a namespace's sequence number (field seq of meta, the
// sixth key: docs/PROTOCOL.md).
func chaosSeq(ctx context.Context, t *testing.T, c redis.UniversalClient, b *redislane.Backend) int64 {
	t.Helper()
	v, err := c.HGet(ctx, b.Keys()[5], "seq").Int64() // meta
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	return v
}

// chaosTokens returns the last fencing token of every key of b's namespace,
// from its key records ("epoch limit token waiters holders...").
func chaosTokens(ctx context.Context, t *testing.T, c redis.UniversalClient, b *redislane.Backend) map[string]string {
	t.Helper()
	recs, err := c.HGetAll(ctx, b.Keys()[1]).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for k, rec := range recs {
		// (a field that starts with a control byte, the marker, the pad
		// or a rate record, is no lane key)
		if f := strings.Fields(rec); k != "" && k[0] >= 0x20 && len(f) >= 3 {
			out[k] = f[2]
		}
	}
	return out
}

// TestChaosWorkerPerRun: the worker is built into this run's own
// directory, so that two runs at once never run each other's binaries
// (issue 13, part 5: a fixed per-user path let them).
func TestChaosWorkerPerRun(t *testing.T) {
	bin := chaosWorker(t)
	if filepath.Dir(bin) != runDir || !strings.HasPrefix(filepath.Base(runDir), "lanes-integration-") {
		t.Errorf("chaosWorker() = %s; want it in this run's directory %s", bin, runDir)
	}
	if fi, err := os.Stat(bin); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("stat(%s) = %v, %v; want an executable", bin, fi, err)
	}
}
