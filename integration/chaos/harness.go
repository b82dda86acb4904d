package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BuildWorker builds the chaosworker binary into dir and returns its path.
func BuildWorker(dir string) (string, error) {
	bin := filepath.Join(dir, "chaosworker")
	tmp := bin + fmt.Sprintf(".%d.tmp", os.Getpid())
	cmd := exec.Command("go", "build", "-o", tmp, "github.com/lanes-dev/lanes/integration/chaosworker")
	if os.Getenv("LANES_CHAOS_RACE") != "" {
		cmd.Args = append(cmd.Args[:2], append([]string{"-race"}, cmd.Args[2:]...)...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build chaosworker: %v: %s", err, out)
	}
	return bin, os.Rename(tmp, bin)
}

// Harness runs one scenario: its history directory, its replica processes
// and the harness's own events (kills, stops, faults), which go into the
// same history.
type Harness struct {
	TB     testing.TB
	Worker string // chaosworker binary
	Dir    string // history directory: one file per process
	Rec    *Recorder

	mu    sync.Mutex
	procs map[string]*Proc
}

// NewHarness starts a scenario's harness. Every process it starts is killed
// (its whole process group) when tb ends.
func NewHarness(tb testing.TB, worker string) *Harness {
	dir := tb.TempDir()
	rec, err := NewRecorder(filepath.Join(dir, "harness.jsonl"), "harness")
	if err != nil {
		tb.Fatal(err)
	}
	h := &Harness{TB: tb, Worker: worker, Dir: dir, Rec: rec, procs: map[string]*Proc{}}
	tb.Cleanup(func() {
		h.mu.Lock()
		ps := make([]*Proc, 0, len(h.procs))
		for _, p := range h.procs {
			ps = append(ps, p)
		}
		h.mu.Unlock()
		for _, p := range ps {
			p.signal(syscall.SIGCONT)
			p.signal(syscall.SIGKILL)
			<-p.done
		}
		rec.Close()
	})
	return h
}

// Proc is one replica process (one incarnation).
type Proc struct {
	Name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	out  *strings.Builder
}

// Start starts a chaosworker incarnation named name (e.g. "r2.1") with
// args, in its own process group, recording into the harness's directory.
func (h *Harness) Start(name string, args ...string) *Proc {
	h.TB.Helper()
	args = append([]string{"-proc", name, "-history", filepath.Join(h.Dir, name+".jsonl")}, args...)
	cmd := exec.Command(h.Worker, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = &syncWriter{w: out}, &syncWriter{w: out}
	if err := cmd.Start(); err != nil {
		h.TB.Fatalf("starting %s: %v", name, err)
	}
	p := &Proc{Name: name, cmd: cmd, done: make(chan struct{}), out: out}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	h.mu.Lock()
	h.procs[name] = p
	h.mu.Unlock()
	return p
}

// syncWriter serializes writes to a strings.Builder shared by stdout and
// stderr.
type syncWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w.Len() < 1<<20 {
		s.w.Write(b)
	}
	return len(b), nil
}

func (p *Proc) signal(sig syscall.Signal) { _ = syscall.Kill(-p.cmd.Process.Pid, sig) }

// Done is closed when the process has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Killed reports whether the process ended by SIGKILL (its own crash point
// or the harness's kill).
func (p *Proc) Killed() bool {
	select {
	case <-p.done:
	default:
		return false
	}
	if ee, ok := p.err.(*exec.ExitError); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
			return ws.Signaled() && ws.Signal() == syscall.SIGKILL
		}
	}
	return false
}

// Output returns what the process printed.
func (p *Proc) Output() string { return p.cmd.Stdout.(*syncWriter).String() }

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

// Kill sends SIGKILL to p's process group, records it, and waits for it.
func (h *Harness) Kill(p *Proc) {
	h.Rec.Record(Event{Op: OpKill, Phase: Ok, ID: p.Name})
	p.signal(syscall.SIGCONT)
	p.signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGSTOP to p's process group and records it.
func (h *Harness) Stop(p *Proc) {
	h.Rec.Record(Event{Op: OpPause, Phase: Ok, ID: p.Name})
	p.signal(syscall.SIGSTOP)
}

// Cont sends SIGCONT to p's process group and records it.
func (h *Harness) Cont(p *Proc) {
	h.Rec.Record(Event{Op: OpResume, Phase: Ok, ID: p.Name})
	p.signal(syscall.SIGCONT)
}

// Fault records that a fault began (Invoke) or ended (Ok), and returns the
// time it recorded.
func (h *Harness) Fault(what string, ph Phase) time.Time {
	e := h.Rec.Record(Event{Op: OpFault, Phase: ph, Err: what})
	return time.Unix(0, e.Time)
}

// Wait waits for p to end, within limit; a process still running then gets
// SIGQUIT (its goroutines go to its output) and SIGKILL, and fails the test.
// A process that exited with an error fails the test too, unless it was
// killed.
func (h *Harness) Wait(p *Proc, limit time.Duration) {
	h.TB.Helper()
	select {
	case <-p.done:
	case <-time.After(limit):
		p.signal(syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(2 * time.Second):
			p.signal(syscall.SIGKILL)
			<-p.done
		}
		h.TB.Fatalf("%s still running after %v; its output:\n%s", p.Name, limit, tail(p.Output(), 4000))
	}
	if p.err != nil && !p.Killed() {
		h.TB.Fatalf("%s: %v; its output:\n%s", p.Name, p.err, tail(p.Output(), 4000))
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// History loads what every process recorded so far.
func (h *Harness) History() *History {
	h.TB.Helper()
	hist, err := Load(h.Dir)
	if err != nil {
		h.TB.Fatal(err)
	}
	return hist
}

// Until polls cond every 5ms until it holds, failing the test after limit.
func (h *Harness) Until(limit time.Duration, what string, cond func() bool) {
	h.TB.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			h.TB.Fatalf("%s: not true after %v", what, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Seen reports whether some process recorded an event that match accepts.
func (h *Harness) Seen(match func(Event) bool) bool {
	evs, err := ReadHistory(h.Dir)
	if err != nil {
		return false
	}
	for _, e := range evs {
		if match(e) {
			return true
		}
	}
	return false
}

// Holding reports whether process proc holds a lease now, as far as the
// tail of its history file tells (a grant recorded, its release not yet
// invoked, no loss noticed): a harness that wants its fault to land while
// a process holds polls it first.
func (h *Harness) Holding(proc string) bool {
	f, err := os.Open(filepath.Join(h.Dir, proc+".jsonl"))
	if err != nil {
		return false
	}
	defer f.Close()
	const tailLen = 32 << 10
	st, err := f.Stat()
	if err != nil {
		return false
	}
	off := max(st.Size()-tailLen, 0)
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil {
		return false
	}
	lines := strings.Split(string(buf), "\n")
	if off > 0 {
		lines = lines[1:] // cut short
	}
	held := map[string]bool{}
	for _, l := range lines {
		var e Event
		if json.Unmarshal([]byte(l), &e) != nil {
			continue
		}
		switch {
		case e.Op == OpAcquire && e.Phase == Ok:
			held[e.ID] = true
		case e.Op == OpRelease && e.Phase == Invoke, e.Op == OpLost:
			delete(held, e.ID)
		}
	}
	return len(held) > 0
}

// Fleet keeps N replicas running: each replica runs incarnations one after
// another (<prefix><i>.<n>), each started by next(i, n), until next returns
// nil args. An incarnation that was killed, by
// the harness or by its own crash point, is followed by the next one.
type Fleet struct {
	h    *Harness
	wg   sync.WaitGroup
	mu   sync.Mutex
	live map[int]*Proc
	incs int
	stop chan struct{}
}

// RunFleet starts n replicas named prefix0, prefix1, .... next returns the
// arguments of incarnation inc of replica i, or nil to stop that replica.
func (h *Harness) RunFleet(prefix string, n int, next func(i, inc int) []string) *Fleet {
	f := &Fleet{h: h, live: map[int]*Proc{}, stop: make(chan struct{})}
	for i := range n {
		f.wg.Go(func() {
			for inc := 0; ; inc++ {
				args := next(i, inc)
				if args == nil {
					return
				}
				select {
				case <-f.stop:
					return
				default:
				}
				p := h.Start(fmt.Sprintf("%s%d.%d", prefix, i, inc), args...)
				f.mu.Lock()
				f.live[i] = p
				f.incs++
				f.mu.Unlock()
				<-p.done
				f.mu.Lock()
				delete(f.live, i)
				f.mu.Unlock()
				if !p.Killed() {
					if p.err != nil {
						h.TB.Errorf("%s: %v; its output:\n%s", p.Name, p.err, tail(p.Output(), 4000))
					}
					return
				}
			}
		})
	}
	return f
}

// Done is closed when every replica has finished.
func (f *Fleet) Done() <-chan struct{} {
	ch := make(chan struct{})
	go func() { f.wg.Wait(); close(ch) }()
	return ch
}

// Live returns the running incarnation of replica i, or nil.
func (f *Fleet) Live(i int) *Proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.live[i]
}

// Incarnations returns how many processes the fleet started.
func (f *Fleet) Incarnations() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.incs
}

// Wait waits for every replica to finish, within limit; then it kills what
// is left and fails the test.
func (f *Fleet) Wait(limit time.Duration) {
	f.h.TB.Helper()
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-time.After(limit):
	}
	close(f.stop)
	f.mu.Lock()
	var outs []string
	for _, p := range f.live {
		p.signal(syscall.SIGQUIT)
		outs = append(outs, p.Name)
	}
	f.mu.Unlock()
	time.Sleep(time.Second)
	f.mu.Lock()
	var dump strings.Builder
	for _, p := range f.live {
		fmt.Fprintf(&dump, "--- %s:\n%s\n", p.Name, tail(p.Output(), 3000))
		p.signal(syscall.SIGKILL)
	}
	f.mu.Unlock()
	<-done
	f.h.TB.Fatalf("replicas %v still running after %v:\n%s", outs, limit, dump.String())
}

// Context returns a context that ends in limit, or when tb ends.
func Context(tb testing.TB, limit time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	tb.Cleanup(cancel)
	return ctx
}
