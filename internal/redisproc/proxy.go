package redisproc

import (
	"bytes"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy on a loopback port between clients and a Redis
// server, that injects network faults: latency, connection cuts, a reply
// dropped after its request reached the server (the script committed, the
// client never hears of it), a frozen direction (a replica that lags), and
// a switch of upstream (a failover behind a virtual address).
//
// It is safe for concurrent use and closes with the test.
type Proxy struct {
	ln net.Listener
	wg sync.WaitGroup

	mu       sync.Mutex
	upstream string
	links    map[*link]struct{}
	rng      *rand.Rand
	latency  time.Duration  // longest delay added to each client-to-server chunk
	drops    map[string]int // requests containing a pattern have their reply dropped, this many more times
	longest  int            // longest pattern
	dropped  int            // replies dropped so far
	cuts     int            // connections cut so far
	thaw     chan struct{}  // nil unless frozen: closed by Thaw
	closed   bool
}

// link is one proxied connection.
type link struct {
	client, server net.Conn
	dropArmed      atomic.Bool // its last request matched: cut before the reply
	once           sync.Once
	done           chan struct{}
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		l.client.Close()
		l.server.Close()
	})
}

// StartProxy starts a proxy to upstream (host:port) with a fixed seed for
// its latencies, closed when tb ends.
func StartProxy(tb testing.TB, upstream string, seed uint64) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{ln: ln, upstream: upstream, links: map[*link]struct{}{}, rng: rand.New(rand.NewPCG(seed, 0x9e3779b9))}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL returns the redis:// URL of the proxy.
func (p *Proxy) URL() string { return "redis://" + p.Addr() }

// SetUpstream points new connections at addr; existing ones stay (CutAll
// them to move every client).
func (p *Proxy) SetUpstream(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.upstream = addr
}

// SetLatency delays each chunk from a client to the server by a random
// duration from 0 to max (0: none).
func (p *Proxy) SetLatency(max time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = max
}

// DropReplies forwards the next n requests that contain pattern (e.g. a
// script's SHA) to the server, then cuts their connection before the reply
// reaches the client: the step commits and its caller sees a network error.
// Each pattern keeps its own count.
func (p *Proxy) DropReplies(pattern string, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drops == nil {
		p.drops = map[string]int{}
	}
	p.drops[pattern] += n
	p.longest = max(p.longest, len(pattern))
}

// Dropped returns how many replies were dropped, and Cuts how many
// connections CutAll cut.
func (p *Proxy) Dropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// Cuts returns how many connections CutAll closed.
func (p *Proxy) Cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

// CutAll closes every open connection, as a network failure would.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	ls := make([]*link, 0, len(p.links))
	for l := range p.links {
		ls = append(ls, l)
	}
	p.cuts += len(ls)
	p.mu.Unlock()
	for _, l := range ls {
		l.close()
	}
}

// Freeze stops forwarding from the server to the clients: what the server
// sends waits in the proxy until Thaw, or is lost when the connection is
// closed. Behind a replica's link to its master, the replica lags.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.thaw == nil {
		p.thaw = make(chan struct{})
	}
}

// Thaw forwards again what Freeze held.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.thaw != nil {
		close(p.thaw)
		p.thaw = nil
	}
}

// Close stops accepting, closes every connection (dropping what Freeze
// held) and waits for the proxy's goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.CutAll()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		up := p.upstream
		p.mu.Unlock()
		s, err := net.DialTimeout("tcp", up, time.Second)
		if err != nil {
			c.Close()
			continue
		}
		l := &link{client: c, server: s, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.close()
			return
		}
		p.links[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.up(l)
		go p.down(l)
	}
}

func (p *Proxy) forget(l *link) {
	l.close()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// up forwards client to server, with latency, arming a drop when a chunk
// matches the pattern. The pattern may straddle two reads, so the tail of
// the last chunk is searched with the next.
func (p *Proxy) up(l *link) {
	defer p.wg.Done()
	defer p.forget(l)
	buf := make([]byte, 64*1024)
	var tail []byte
	for {
		n, err := l.client.Read(buf)
		if err != nil {
			return
		}
		chunk := buf[:n]
		p.mu.Lock()
		var delay time.Duration
		if p.latency > 0 {
			delay = time.Duration(p.rng.Int64N(int64(p.latency) + 1))
		}
		if len(p.drops) > 0 {
			seen := append(tail, chunk...)
			for pat, n := range p.drops {
				if n > 0 && bytes.Contains(seen, []byte(pat)) {
					p.drops[pat]--
					l.dropArmed.Store(true)
					break
				}
			}
		}
		if k := p.longest - 1; k > 0 {
			tail = append(tail[:0], chunk[max(0, len(chunk)-k):]...)
		}
		p.mu.Unlock()
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-l.done:
				return
			}
		}
		if _, err := l.server.Write(chunk); err != nil {
			return
		}
	}
}

// down forwards server to client, holding data while frozen, and cuts the
// connection instead of forwarding a reply whose drop is armed.
func (p *Proxy) down(l *link) {
	defer p.wg.Done()
	defer p.forget(l)
	buf := make([]byte, 64*1024)
	for {
		n, err := l.server.Read(buf)
		if err != nil {
			return
		}
		p.mu.Lock()
		thaw := p.thaw
		p.mu.Unlock()
		if thaw != nil {
			select {
			case <-thaw:
			case <-l.done:
				return
			}
		}
		if l.dropArmed.Load() {
			p.mu.Lock()
			p.dropped++
			p.mu.Unlock()
			return // forget closes both sides: the reply is lost
		}
		if _, err := l.client.Write(buf[:n]); err != nil {
			return
		}
	}
}
