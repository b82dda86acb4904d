package redislane_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

func one(key string, limit int) []lanes.Lane { return []lanes.Lane{{Key: key, Limit: limit}} }

// Real Redis: a thousand waiting requests of one process use the client's
// pool and one pub/sub connection, not a connection each.
func TestConnectionsDoNotGrowWithWaitersRealRedis(t *testing.T) {
	base := realClient(t)
	const pool, waiters = 4, 1000
	name := uniqueNS(t)
	opt := *base.Options()
	opt.PoolSize, opt.ClientName = pool, name
	c := redis.NewClient(&opt)
	t.Cleanup(func() { c.Close() })
	sb := newBackend(t, c)
	// Every wait ends within a minute (a thousand hand-offs by hint take
	// seconds), and at once when the test stops early: then the deferred
	// cancel ends the waits and the test waits for its goroutines.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	s, err := lanes.NewSession(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	view, err := redislane.New(base, sb.Namespace()) // inspects through another client
	if err != nil {
		t.Fatal(err)
	}

	h, err := s.Acquire(ctx, lanes.Request{Lanes: one("k", 1)})
	if err != nil {
		t.Fatal(err)
	}
	leases := make(chan *lanes.Lease, waiters)
	var failed atomic.Int64
	for range waiters {
		wg.Go(func() {
			l, err := s.Acquire(ctx, lanes.Request{Lanes: one("k", 1)})
			if err != nil {
				if failed.Add(1) == 1 { // the count of grants below says the rest
					t.Errorf("a waiter's Acquire() = %v", err)
				}
				return
			}
			leases <- l
			_ = l.Release(ctx)
		})
	}
	snapWaiters := func() int {
		snap, err := view.Inspect(ctx, []string{"k"})
		if err != nil || len(snap.Keys) == 0 {
			return 0
		}
		return len(snap.Keys[0].Waiters)
	}
	deadline := time.Now().Add(20 * time.Second)
	for snapWaiters() < waiters {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d waiters enqueued after 20s", snapWaiters(), waiters)
		}
		time.Sleep(10 * time.Millisecond)
	}
	list, err := base.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	conns := strings.Count(list, "name="+name+" ")
	if conns > pool+1 {
		t.Fatalf("%d connections named %s with %d waiters; want at most pool %d + 1 subscription", conns, name, waiters, pool)
	}
	t.Logf("%d waiters, %d connections (pool %d + 1 subscription)", waiters, conns, pool)
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if len(leases) != waiters {
		t.Fatalf("%d of %d waiters granted", len(leases), waiters)
	}
}

// Real Redis: the waiter learns of a release from the hint, not from its next
// poll (its poll interval here is longer than the test's deadline), and the
// hint carries the grant: the waiting process makes no round trip for it.
func TestHandoffByHintRealRedis(t *testing.T) {
	c := realClient(t)
	b := newBackend(t, c)
	wc := realClient(t)
	rt := &roundTrips{}
	wc.AddHook(rt)
	wb, err := redislane.New(wc, b.Namespace())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wb.Close() })
	holder := slowPoller(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := holder.Acquire(ctx, lanes.Request{Lanes: one("k", 1)})
	if err != nil {
		t.Fatal(err)
	}
	// The waiter subscribes after the holder's grant made the namespace:
	// that first grant tells every subscriber to look (a poll the waiter
	// would otherwise make at a moment of its own, inside the count below).
	waiter := slowPoller(t, wb)
	tk, err := waiter.Enqueue(ctx, lanes.Request{Lanes: one("k", 1)})
	if err != nil {
		t.Fatal(err)
	}
	before := rt.n.Load()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second) // the next poll is 20s away
	defer cancel()
	l, err := tk[0].Wait(wctx)
	if err != nil {
		t.Fatalf("Wait() = %v; the grant hint did not arrive", err)
	}
	if n := rt.n.Load() - before; n != 0 {
		t.Errorf("the waiter made %d round trips to learn of its grant; want 0: the hint carries it", n)
	}
	if l.Token("k") == 0 {
		t.Errorf("the hinted grant has no token: %v", l.Tokens())
	}
	_ = l.Release(ctx)
}

// slowPoller is a Session whose heartbeat (and fallback poll) runs every 20s.
func slowPoller(t *testing.T, b lanes.Backend) *lanes.Session {
	s, err := lanes.NewSession(context.Background(), b, lanes.WithTTL(time.Minute), lanes.WithHeartbeat(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// deaf drops every grant hint, as a cut pub/sub connection would.
type deaf struct{ lanes.Backend }

func (deaf) Subscribe(context.Context, string, func([]lanes.Hint)) (func(), error) {
	return func() {}, nil
}

// Miniredis: with every hint lost, the heartbeat's poll still finds the grant.
func TestLostHintFoundByPollMiniredis(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	b := newBackend(t, c)
	s, err := lanes.NewSession(context.Background(), deaf{b}, lanes.WithHeartbeat(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := s.Acquire(ctx, lanes.Request{Lanes: one("k", 1)})
	if err != nil {
		t.Fatal(err)
	}
	tk, err := s.Enqueue(ctx, lanes.Request{Lanes: one("k", 1)})
	if err != nil {
		t.Fatal(err)
	}
	_ = h.Release(ctx)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := tk[0].Wait(wctx)
	if err != nil {
		t.Fatalf("Wait() with hints lost = %v", err)
	}
	_ = l.Release(ctx)
}

// No server at all: every step fails fast with ErrUnavailable, and nothing
// hangs past the caller's deadline.
func TestUnreachableRedis(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	b, err := redislane.New(c, "unreachable")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := lanes.NewSession(ctx, b); !errors.Is(err, lanes.ErrUnavailable) {
		t.Fatalf("NewSession() = %v; want ErrUnavailable", err)
	}
	o := lanes.Owner{ID: "o"}
	if _, err := b.Enqueue(ctx, o, time.Second, []lanes.Request{{ID: "a", Lanes: one("k", 1)}}); !errors.Is(err, lanes.ErrUnavailable) {
		t.Fatalf("Enqueue() = %v; want ErrUnavailable", err)
	}
	if _, err := b.Inspect(ctx, nil); !errors.Is(err, lanes.ErrUnavailable) {
		t.Fatalf("Inspect() = %v; want ErrUnavailable", err)
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { c.Close() })
	for _, ns := range []string{"", "a b", "{x}", strings.Repeat("n", 129)} {
		if _, err := redislane.New(c, ns); !errors.Is(err, lanes.ErrInvalid) {
			t.Errorf("New(%q) = %v; want ErrInvalid", ns, err)
		}
	}
	for _, p := range []string{"", "a{b", "a b"} {
		if _, err := redislane.New(c, "ns", redislane.WithPrefix(p)); !errors.Is(err, lanes.ErrInvalid) {
			t.Errorf("New(WithPrefix(%q)) = %v; want ErrInvalid", p, err)
		}
	}
}

// Every key of a namespace carries the namespace as its hash tag (the first
// {...} of the name, which Redis Cluster hashes alone), so a Cluster puts
// them in one slot and a script may touch them all.
func TestKeysShareOneHashTag(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { c.Close() })
	b, err := redislane.New(c, "agents-7")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range b.Keys() {
		open := strings.IndexByte(k, '{')
		end := strings.IndexByte(k[open+1:], '}')
		if open < 0 || end < 0 || k[open+1:open+1+end] != "agents-7" {
			t.Errorf("key %q does not hash on {agents-7}", k)
		}
	}
}
