package main

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// downProxy relays TCP to a Redis server until down closes its listener
// and every connection it relays: from then on a dial is refused, as when
// the server's process is gone.
type downProxy struct {
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
	gone  bool
}

func newDownProxy(t *testing.T, backend string) *downProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &downProxy{l: l}
	t.Cleanup(p.down)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", backend)
			if err != nil || !p.keep(c, u) {
				c.Close()
				if u != nil {
					u.Close()
				}
				continue
			}
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
	return p
}

// keep records a relayed pair, unless the proxy is down.
func (p *downProxy) keep(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.gone {
		p.conns = append(p.conns, cs...)
	}
	return !p.gone
}

func (p *downProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gone = true
	p.l.Close()
	for _, c := range p.conns {
		c.Close()
	}
}

// TestLockRedisDownAtReleaseSaysSoAndExits: Redis goes away (every
// connection refused) while lock's command runs. Once the command exits,
// lock's release gives up at the refusals instead of trying for its release
// timeout (and go-redis redialing each try five times, 100ms apart): it
// exits with the command's status and one line that says the release could
// not reach Redis and the lease expires at its deadline. Before, that line
// named a timeout ("context deadline exceeded"), after about 2.4s. The
// real Redis server, behind a proxy the test takes down.
func TestLockRedisDownAtReleaseSaysSoAndExits(t *testing.T) {
	s := newRealRedis(t)
	p := newDownProxy(t, strings.TrimPrefix(s.url, "redis://"))
	url := "redis://" + p.l.Addr().String()
	ready := filepath.Join(t.TempDir(), "ready")
	lock := startBin(t, "--redis", url, "--namespace", s.ns, "lock", "--ttl", "1m", "k", "--",
		"sh", "-c", `touch "$1"; while [ -e "$1" ]; do sleep 0.02; done; exit 3`, "sh", ready)
	eventually(t, "the command runs", func() bool { return fileExists(ready) })
	p.down()
	os.Remove(ready)
	if code := lock.wait(t); code != 3 {
		t.Errorf("lock whose release could not reach Redis = %d; want the command's 3", code)
	}
	stderr := lock.stderr.String()
	assertOneLine(t, stderr)
	want := "lanectl: warning: could not release k: cannot reach Redis at " + url + ": dial tcp " + p.l.Addr().String() + ": connect: connection refused; the lease expires at its deadline, within 1m0s\n"
	if stderr != want {
		t.Errorf("stderr = %q; want %q", stderr, want)
	}
}

// (Found by a break-it review.) lanectl batch whose calls finished while
// Redis was gone exited 0 and said nothing, its entries left in Redis
// until their deadlines: each call's release failed inside the scheduler
// and was settled in the background, and Session.Close, with nothing left
// of its own to release, returned nil. Close now returns the background
// settles that gave up too, and batch prints its warning. The real Redis
// server, behind a proxy the test takes down.
func TestBatchRedisDownAtReleaseSaysSo(t *testing.T) {
	s := newRealRedis(t)
	p := newDownProxy(t, strings.TrimPrefix(s.url, "redis://"))
	url := "redis://" + p.l.Addr().String()
	ready := filepath.Join(t.TempDir(), "ready")
	d := newBatchDir(t, `
[tools.waiter]
command = ["sh", "-c", 'touch "$1"; while [ -e "$1" ]; do sleep 0.02; done', "sh", "`+ready+`"]
concurrency = { key = "w", limit = 2 }
safe = true
`)
	b := startBin(t, "--redis", url, "--namespace", s.ns, "batch", "--json", "--ttl", "1m", "--tools", d.tools,
		"--calls", d.calls(t, "anthropic", toolCall{"c1", "waiter", `{}`}))
	eventually(t, "the call runs", func() bool { return fileExists(ready) })
	p.down()
	os.Remove(ready)
	if code := b.wait(t); code != 0 {
		t.Errorf("batch whose release could not reach Redis = %d; want 0 (its call ran): %s", code, b.stderr.String())
	}
	checkOutcomes(t, decodeBatch(t, b.stdout.String()), []want{{"c1", "waiter", "ok", ""}})
	stderr := b.stderr.String()
	if !strings.HasPrefix(stderr, "lanectl: warning: could not release the batch's entries (they expire within 1m0s): cannot reach Redis at "+url) {
		t.Errorf("stderr = %q; want the warning that the batch's entries could not be released, and why", stderr)
	}
}
