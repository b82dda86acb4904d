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
