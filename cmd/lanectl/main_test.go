package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lanes-dev/lanes/internal/redistest"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

// lanectlBin is the lanectl binary the binary-level tests run, built once
// by TestMain.
var lanectlBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lanectl-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	quietRedisLogs()
	lanectlBin = filepath.Join(dir, "lanectl")
	build := exec.Command("go", "build", "-o", lanectlBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building lanectl:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// waitFor bounds every wait of a test for another process.
const waitFor = 20 * time.Second

// server is a Redis server the tests run lanectl against, with a fresh
// namespace of their own.
type server struct {
	name string // "miniredis" or "redis"
	url  string
	ns   string
	c    redis.UniversalClient
	b    *redislane.Backend

	closed bool
}

// newMiniredis starts a miniredis server for t, on the real clock (lanes'
// scripts read TIME, so leases expire as they would on Redis).
func newMiniredis(t *testing.T) *server {
	t.Helper()
	m := miniredis.RunT(t)
	return newServer(t, "miniredis", "redis://"+m.Addr())
}

// realRedisURL names the real Redis server of the tests: LANES_REDIS_URL,
// else REDIS_URL, else the local default.
func realRedisURL() string {
	for _, v := range []string{"LANES_REDIS_URL", "REDIS_URL"} {
		if u := os.Getenv(v); u != "" {
			return u
		}
	}
	return "redis://127.0.0.1:6379"
}

// newRealRedis returns the real Redis server, or skips t with a visible
// message when none answers PING within a second (fails t under
// LANES_REQUIRE_REDIS=1).
func newRealRedis(t *testing.T) *server {
	t.Helper()
	u := realRedisURL()
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("bad LANES_REDIS_URL %q: %v", redactURL(u), err)
	}
	c := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		redistest.Unavailable(t, "no real Redis at %s (%v); set LANES_REDIS_URL to run the real-Redis tests", redactURL(u), err)
	}
	c.Close()
	return newServer(t, "redis", u)
}

// newServer connects to url in a fresh namespace, and deletes every key of
// that namespace when t ends.
func newServer(t *testing.T, name, url string) *server {
	t.Helper()
	s := connect(t, name, url)
	t.Cleanup(func() { s.close(true) })
	return s
}

// connect connects to url in a fresh namespace.
func connect(t *testing.T, name, url string) *server {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	var r [6]byte
	_, _ = rand.Read(r[:])
	s := &server{name: name, url: url, ns: "lanectl-test-" + hex.EncodeToString(r[:]), c: redis.NewClient(opt)}
	if s.b, err = redislane.New(s.c, s.ns); err != nil {
		t.Fatal(err)
	}
	return s
}

// close disconnects from s, after deleting every key of its namespace
// (fencing counters too) if del.
func (s *server) close(del bool) {
	if s.closed {
		return
	}
	s.closed = true
	s.b.Close()
	if del {
		redistest.Delete(s.c, s.b) // the state, fencing counters and run records
	}
	s.c.Close()
}

// forEachServer runs f against miniredis, then against the real Redis
// server (skipped, visibly, when none answers).
func forEachServer(t *testing.T, f func(t *testing.T, s *server)) {
	t.Run("miniredis", func(t *testing.T) { f(t, newMiniredis(t)) })
	t.Run("redis", func(t *testing.T) { f(t, newRealRedis(t)) })
}

// inspect returns the snapshot of every key of s's namespace.
func (s *server) inspect(t *testing.T) *lanes.Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	snap, err := s.b.Inspect(ctx, nil)
	if err != nil {
		t.Fatalf("Inspect() = %v", err)
	}
	return snap
}

// assertEmpty fails t unless s's namespace has no holder and no waiter.
func (s *server) assertEmpty(t *testing.T) {
	t.Helper()
	for _, k := range s.inspect(t).Keys {
		if len(k.Holders)+len(k.Waiters) > 0 { // a rate key's window alone is no leftover
			t.Errorf("Inspect() after the run: key %+v; want no holders or waiters left", k)
		}
	}
}

// session starts a lanes Session on s for the test itself: to hold keys or
// queue entries that lanectl then sees.
func (s *server) session(t *testing.T) *lanes.Session {
	t.Helper()
	sess, err := lanes.NewSession(context.Background(), s.b, lanes.WithTTL(10*time.Second), lanes.WithOwner("test-host", 4242))
	if err != nil {
		t.Fatalf("NewSession() = %v", err)
	}
	t.Cleanup(func() { sess.Close() })
	return sess
}

// hold makes the test's session hold key (limit 1) and returns the lease.
func (s *server) hold(t *testing.T, key string) *lanes.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := s.session(t).Acquire(ctx, lanes.Request{Lanes: []lanes.Lane{{Key: key, Limit: 1}}, Tool: "test"})
	if err != nil {
		t.Fatalf("Acquire(%s) = %v", key, err)
	}
	return l
}

// args prepends the global flags that point lanectl at s.
func (s *server) args(args ...string) []string {
	return append([]string{"--redis", s.url, "--namespace", s.ns}, args...)
}

// noEnv is the environment of in-process runs: empty, so the tests do not
// depend on the caller's LANES_* variables.
func noEnv(string) string { return "" }

// runInProcess runs lanectl in this process with args and returns its exit
// status and output.
func runInProcess(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	code = run(ctx, nil, args, strings.NewReader(""), &out, &errb, noEnv)
	return code, out.String(), errb.String()
}

// assertOneLine fails t unless stderr is exactly one line that starts with
// "lanectl: ".
func assertOneLine(t *testing.T, stderr string) {
	t.Helper()
	if !strings.HasPrefix(stderr, "lanectl: ") || !strings.HasSuffix(stderr, "\n") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("stderr = %q; want exactly one line starting with %q", stderr, "lanectl: ")
	}
}

// syncBuffer is a bytes.Buffer safe to read while a process writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// proc is a lanectl process started by a test.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{}
}

// startBin starts the lanectl binary with args and LANES_* unset in its
// environment; t's end kills it if it still runs.
func startBin(t *testing.T, args ...string) *proc {
	t.Helper()
	return startBinEnv(t, nil, args...)
}

// startBinEnv is startBin with env (KEY=VALUE) added to the environment.
func startBinEnv(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(lanectlBin, args...), stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	// A process lanectl's command left behind may hold the output pipes:
	// the test that checks for it fails, instead of waiting forever.
	p.cmd.WaitDelay = time.Second
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LANES_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(p.cmd.Env, env...)
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting lanectl: %v", err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits for p to exit and returns its exit status.
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(waitFor):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("lanectl %q did not exit within %v; stderr: %s", p.cmd.Args[1:], waitFor, p.stderr)
	}
	return p.cmd.ProcessState.ExitCode()
}

// signal sends sig to p.
func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}

// runBin runs the lanectl binary with args to its end.
func runBin(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := startBin(t, args...)
	code = p.wait(t)
	return code, p.stdout.String(), p.stderr.String()
}

// eventually polls cond until it holds, or fails t after waitFor.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", waitFor, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fileExists reports whether path exists.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// writeFile writes a file for t, with mode perm.
func writeFile(t *testing.T, path, content string, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
}
