package sched_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lanes-dev/lanes/internal/redistest"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backend is one place the lanes can live.
type backend struct {
	name string
	new  func(t *testing.T) lanes.Backend
}

// backends are the three the scheduler's rules are checked on: in memory,
// miniredis, and the real Redis server (skipped, visibly, when none answers).
var backends = []backend{
	{"memory", func(t *testing.T) lanes.Backend { return lanes.NewMemory() }},
	{"miniredis", func(t *testing.T) lanes.Backend {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { c.Close() })
		return redistest.Backend(t, c, "sched-")
	}},
	{"redis", func(t *testing.T) lanes.Backend {
		return redistest.Backend(t, redistest.Client(t), "sched-")
	}},
}

// env is one test's scheduler, on one backend.
type env struct {
	t       *testing.T
	backend lanes.Backend
	session *lanes.Session
	probe   *probe
}

// eachBackend runs fn once per backend, as subtests.
func eachBackend(t *testing.T, fn func(t *testing.T, e *env)) {
	eachBackendWith(t, nil, fn)
}

// eachBackendWith is eachBackend with more Session options, applied after
// the defaults (a TTL of 30s, a heartbeat every 50ms).
func eachBackendWith(t *testing.T, opts []lanes.Option, fn func(t *testing.T, e *env)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			be := b.new(t)
			s, err := lanes.NewSession(context.Background(), be, append([]lanes.Option{lanes.WithTTL(30 * time.Second), lanes.WithHeartbeat(50 * time.Millisecond)}, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			fn(t, &env{t: t, backend: be, session: s, probe: newProbe()})
		})
	}
}

// scheduler returns a Scheduler for cfg on the env's session. When the test
// ends, every gate of the probe opens and then the test waits, at most
// bound, for the scheduler's stragglers: a test that stopped early (a
// failed assertion) leaves no body waiting for it.
func (e *env) scheduler(cfg sched.Config) *sched.Scheduler {
	e.t.Helper()
	s, err := sched.New(cfg, e.session)
	if err != nil {
		e.t.Fatalf("sched.New() = %v", err)
	}
	e.t.Cleanup(func() { within(e.t, "the scheduler's stragglers (Scheduler.Wait)", s.Wait) })
	e.t.Cleanup(e.probe.openAll) // runs first
	return s
}

func (e *env) run(s *sched.Scheduler, calls []sched.Call, o sched.Options) *sched.Result {
	e.t.Helper()
	return e.runWithin(bound, s, calls, o)
}

// runWithin is run for a batch that may take longer than bound.
func (e *env) runWithin(limit time.Duration, s *sched.Scheduler, calls []sched.Call, o sched.Options) *sched.Result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	res, err := s.Run(ctx, calls, o)
	if err != nil {
		e.t.Fatalf("Run() = %v", err)
	}
	return res
}

// inspect returns the holders and waiters of a lane key.
func (e *env) inspect(key string) (holders, waiters []string) {
	e.t.Helper()
	snap, err := e.backend.Inspect(testCtx(e.t), []string{key})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, ks := range snap.Keys {
		for _, h := range ks.Holders {
			holders = append(holders, h.CallID)
		}
		for _, w := range ks.Waiters {
			waiters = append(waiters, w.CallID)
		}
	}
	return holders, waiters
}

// waitFree waits, at most bound, until nobody holds or waits for key.
func (e *env) waitFree(key string) {
	e.t.Helper()
	for deadline := time.Now().Add(bound); ; time.Sleep(time.Millisecond) {
		holders, waiters := e.inspect(key)
		if len(holders)+len(waiters) == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s still has holders %v and waiters %v after %v", key, holders, waiters, bound)
		}
	}
}

// probe records what bodies do: when each starts and ends, in one global
// order, and how many run at once.
type probe struct {
	mu      sync.Mutex
	log     []string // "start ID" and "end ID", in order
	running map[string]bool
	most    int
	gates   map[string]chan struct{} // bodies that wait for the test
	started map[string]chan struct{}
}

func newProbe() *probe {
	return &probe{running: map[string]bool{}, gates: map[string]chan struct{}{}, started: map[string]chan struct{}{}}
}

// gate makes the body of call id wait until open(id); started(id) closes
// when it begins.
func (p *probe) gate(ids ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range ids {
		p.gates[id] = make(chan struct{})
		p.started[id] = make(chan struct{})
	}
}

// open lets the gated body of call id go on; opening twice is harmless.
func (p *probe) open(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	openGate(p.gates[id])
}

// openAll opens every gate: at the end of a test, so that no body waits
// for a test that stopped early.
func (p *probe) openAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, g := range p.gates {
		openGate(g)
	}
}

func openGate(g chan struct{}) {
	select {
	case <-g:
	default:
		close(g)
	}
}

func (p *probe) waitStarted(t *testing.T, id string) {
	t.Helper()
	p.mu.Lock()
	started := p.started[id]
	p.mu.Unlock()
	recv(t, started, "call "+id+" to start")
}

// waitLogged waits, at most bound, until the probe's log has line.
func (p *probe) waitLogged(t *testing.T, line string) {
	t.Helper()
	for deadline := time.Now().Add(bound); p.index(line) < 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log after %v: %v", line, bound, p.snapshot())
		}
	}
}

// body returns a Body that records itself, waits at its gate if any, and
// then returns out (or fails when args has "fail": true).
func (p *probe) body() sched.Body {
	return func(ctx context.Context, inv sched.Invocation) (string, error) {
		id := opName(inv)
		p.mu.Lock()
		p.log = append(p.log, "start "+id)
		p.running[id] = true
		p.most = max(p.most, len(p.running))
		gate, started := p.gates[id], p.started[id]
		p.mu.Unlock()
		if started != nil {
			close(started)
		}
		var err error
		if gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
				err = context.Cause(ctx)
			}
		}
		p.mu.Lock()
		p.log = append(p.log, "end "+id)
		delete(p.running, id)
		p.mu.Unlock()
		if err != nil {
			return "", err
		}
		var a struct {
			Fail bool `json:"fail"`
		}
		_ = json.Unmarshal(inv.Args, &a)
		if a.Fail {
			return "", &toolError{id}
		}
		return "done " + id, nil
	}
}

type toolError struct{ id string }

func (e *toolError) Error() string { return "tool failed on " + e.id }

// opName is the name a body records: the "op" argument of an operation,
// else the call id.
func opName(inv sched.Invocation) string {
	var m map[string]any
	_ = json.Unmarshal(inv.Args, &m)
	if s, ok := m["op"].(string); ok {
		return s
	}
	return inv.CallID
}

// index returns where line is in the log, or -1.
func (p *probe) index(line string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, l := range p.log {
		if l == line {
			return i
		}
	}
	return -1
}

func (p *probe) snapshot() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.log...)
}

// bound is the longest any wait of these tests may last: a broken
// scheduler fails its test within it, never hangs the package. A batch of
// a few calls takes milliseconds, even under -race on busy cores.
const bound = 10 * time.Second

// testCtx returns a context that ends after bound, or when t ends.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	return ctx
}

// recv waits, at most bound, for a value on ch (or its close).
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(bound):
		t.Fatalf("waited %v for %s", bound, what)
		panic("unreachable")
	}
}

// within runs wait, a wait with no deadline of its own (Scheduler.Wait, a
// WaitGroup), and marks t failed if it has not returned after bound. It
// does not stop t, so it may run in a Cleanup.
func within(t *testing.T, what string, wait func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(bound):
		t.Errorf("waited %v for %s", bound, what)
	}
}

// async is a batch running on its own goroutine.
type async struct {
	ch chan asyncResult
}

type asyncResult struct {
	res *sched.Result
	err error
}

// runAsync runs the batch on a goroutine, under ctx bounded by bound and
// cancelled when t ends (before the scheduler's stragglers are waited for).
func runAsync(t *testing.T, ctx context.Context, s *sched.Scheduler, cs []sched.Call, o sched.Options) *async {
	ctx, cancel := context.WithTimeout(ctx, bound)
	t.Cleanup(cancel)
	a := &async{ch: make(chan asyncResult, 1)}
	go func() {
		res, err := s.Run(ctx, cs, o)
		a.ch <- asyncResult{res, err}
	}()
	return a
}

// wait returns the batch's result, failing t if Run failed or took more
// than bound.
func (a *async) wait(t *testing.T) *sched.Result {
	t.Helper()
	r := recv(t, a.ch, "the batch's result")
	if r.err != nil {
		t.Fatalf("Run() = %v", r.err)
	}
	return r.res
}

// calls builds calls from specs "id:tool" or "id:tool:args".
func calls(specs ...string) []sched.Call {
	var out []sched.Call
	for _, s := range specs {
		parts := strings.SplitN(s, ":", 3)
		c := sched.Call{ID: parts[0], Tool: parts[1], Args: json.RawMessage(`{}`)}
		if len(parts) == 3 {
			c.Args = json.RawMessage(parts[2])
		}
		out = append(out, c)
	}
	return out
}
