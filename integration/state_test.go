package integration_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/integration/chaos"
	"github.com/lanes-dev/lanes/internal/redistest"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
	"github.com/lanes-dev/lanes/scripts/lua"
)

// The cases of issue 10 that need a Redis server: state keys deleted or
// evicted one at a time, a server that lost its data, and eviction policies.

func newSession(t *testing.T, b lanes.Backend, opts ...lanes.Option) *lanes.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := lanes.NewSession(ctx, b, opts...)
	if err != nil {
		t.Fatalf("NewSession() = %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func bounded(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Real Redis: whichever state key vanishes (DEL, as eviction would), the
// next step resets the namespace: the holder is told at once that its lease
// ended, and no one is granted its key before the holder's deadline in the
// backend has passed; then the key is granted again (not wedged).
func TestStateKeyDeletedRealRedis(t *testing.T) {
	c := redistest.Client(t)
	for i, name := range []string{"entries", "lanes", "queue", "deadlines", "nested", "meta"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := redistest.Backend(t, c, "it-del-")
			// 5s, not 1.5s: A and W must keep their entries through two new
			// Sessions, an enqueue and an Inspect, though a loaded machine
			// may starve this process for a second or two.
			const ttl = 5 * time.Second
			a := newSession(t, b, lanes.WithTTL(ttl))
			la, err := a.Acquire(bounded(t, 5*time.Second), lanes.Request{ID: "A", Lanes: []lanes.Lane{{Key: "K", Limit: 1}}})
			if err != nil {
				t.Fatal(err)
			}
			// A waiter too, so that queue, waiting and nested hold members.
			w := newSession(t, b, lanes.WithTTL(ttl))
			if _, err := w.Enqueue(bounded(t, 5*time.Second), lanes.Request{ID: "W", Lanes: []lanes.Lane{{Key: "K", Limit: 1}}, Lineage: []string{"P"}}); err != nil {
				t.Fatal(err)
			}
			snap, err := b.Inspect(bounded(t, 5*time.Second), []string{"K"})
			if err != nil || len(snap.Keys) != 1 || len(snap.Keys[0].Holders) != 1 {
				t.Fatalf("Inspect(K) = %+v, %v", snap, err)
			}
			expires := snap.Keys[0].Holders[0].Expires
			if err := c.Del(context.Background(), b.Keys()[i]).Err(); err != nil {
				t.Fatal(err)
			}
			bs := newSession(t, b)
			tk, err := bs.Enqueue(bounded(t, 5*time.Second), lanes.Request{ID: "B", Lanes: []lanes.Lane{{Key: "K", Limit: 1}}})
			if err != nil {
				t.Fatalf("Enqueue(B) after %s vanished = %v", name, err)
			}
			select {
			case <-la.Lost():
			case <-time.After(ttl): // its local deadline is later than the reset's announcement
				t.Fatalf("after %s vanished, A was not told its lease ended", name)
			}
			lb, err := tk[0].Wait(bounded(t, 20*time.Second))
			if err != nil {
				t.Fatalf("B after the reset = %v; want granted once A's lease ran out", err)
			}
			snap, err = b.Inspect(bounded(t, 5*time.Second), []string{"K"})
			if err != nil || len(snap.Keys) != 1 || len(snap.Keys[0].Holders) != 1 {
				t.Fatalf("Inspect(K) = %+v, %v", snap, err)
			}
			if granted := snap.Keys[0].Holders[0].Granted; granted.Before(expires) {
				t.Fatalf("B was granted K at %v, before A's lease ended at %v", granted, expires)
			}
			if snap.Stats.Resets != 1 {
				t.Errorf("Stats.Resets = %d; want 1", snap.Stats.Resets)
			}
			if err := lb.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Private redis-server: a server that lost its data (FLUSHALL, or a restart
// without persistence) is recognised at the next step: the holder hears of
// it through the namespace's channel, well before its next heartbeat. (The
// new holder may be granted before that: a known limit, which the fencing
// tokens cover; they keep growing across the loss.)
func TestDataLossAnnouncedRealRedis(t *testing.T) {
	srv := chaos.StartServer(t, chaos.ServerOptions{})
	c := srv.Client()
	b, err := redislane.New(c, "loss")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	a := newSession(t, b, lanes.WithTTL(time.Minute), lanes.WithHeartbeat(20*time.Second))
	la, err := a.Acquire(bounded(t, 5*time.Second), lanes.Request{Lanes: []lanes.Lane{{Key: "K", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	lb, err := newSession(t, b).Acquire(bounded(t, 5*time.Second), lanes.Request{Lanes: []lanes.Lane{{Key: "K", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-la.Lost():
	case <-time.After(5 * time.Second): // the next heartbeat is 20s away
		t.Fatal("the holder did not hear within 5s that Redis lost its data")
	}
	if !strings.Contains(la.Err().Error(), "reset") {
		t.Errorf("A.Err() = %v; want it to say the state was reset", la.Err())
	}
	if lb.Token("K") <= la.Token("K") {
		t.Errorf("the token after the loss %d is not above the one before %d", lb.Token("K"), la.Token("K"))
	}
	_ = lb.Release(context.Background())
}

// Private redis-servers: a Session refuses a server whose maxmemory-policy
// may evict keys without a TTL, unless asked not to; noeviction and the
// volatile-* policies pass (the lanes' keys carry no TTL).
func TestEvictionPolicyRealRedis(t *testing.T) {
	for _, c := range []struct {
		policy string
		refuse bool
	}{{"allkeys-lru", true}, {"allkeys-random", true}, {"volatile-lru", false}, {"noeviction", false}} {
		t.Run(c.policy, func(t *testing.T) {
			srv := chaos.StartServer(t, chaos.ServerOptions{Extra: []string{"--maxmemory", "64mb", "--maxmemory-policy", c.policy}})
			b, err := redislane.New(srv.Client(), "evict")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			s, err := lanes.NewSession(bounded(t, 5*time.Second), b)
			if s != nil {
				s.Close()
			}
			if c.refuse != errors.Is(err, redislane.ErrEvictable) {
				t.Fatalf("NewSession() = %v; want refused %v", err, c.refuse)
			}
			if !c.refuse {
				return
			}
			b2, _ := redislane.New(srv.Client(), "evict", redislane.WithEvictionAllowed())
			t.Cleanup(func() { b2.Close() })
			s, err = lanes.NewSession(bounded(t, 5*time.Second), b2)
			if err != nil {
				t.Fatalf("NewSession(WithEvictionAllowed) = %v", err)
			}
			s.Close()
		})
	}
}

// Private redis-server with maxmemory and volatile-lru under cache
// pressure (issue 10): the cache's keys with a TTL are evicted, the lanes'
// keys (no TTL) never are: the lease holds, the waiter waits, no reset.
// Instead of sleeping past a short TTL (a process the machine starves for a
// second would then lose its lease, and the test with it), it waits for a
// heartbeat after the pressure to renew the lease: the renewal finds the
// holder's records where the step before the pressure left them.
func TestCachePressureVolatileLRURealRedis(t *testing.T) {
	srv := chaos.StartServer(t, chaos.ServerOptions{Extra: []string{"--maxmemory", "4mb", "--maxmemory-policy", "volatile-lru"}})
	c := srv.Client()
	b, err := redislane.New(c, "pressure")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	s := newSession(t, b, lanes.WithTTL(10*time.Second), lanes.WithHeartbeat(200*time.Millisecond))
	l, err := s.Acquire(bounded(t, 5*time.Second), lanes.Request{ID: "A", Lanes: []lanes.Lane{{Key: "K", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := newSession(t, b).Enqueue(bounded(t, 5*time.Second), lanes.Request{ID: "W", Lanes: []lanes.Lane{{Key: "K", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	value := strings.Repeat("x", 4096)
	for i := range 3000 { // 12 MB of cache entries with a TTL into 4 MB
		if err := c.Set(ctx, fmt.Sprintf("cache:%d", i), value, time.Hour).Err(); err != nil {
			t.Fatalf("SET cache:%d = %v", i, err)
		}
	}
	if n, _ := c.DBSize(ctx).Result(); n >= 3000 {
		t.Fatalf("DBSIZE %d: nothing was evicted; the test did not put Redis under pressure", n)
	}
	// Every key of the namespace is still there, none with a TTL.
	var kept int
	iter := c.Scan(ctx, 0, "*pressure*", 100).Iterator()
	for iter.Next(ctx) {
		kept++
		if ttl, err := c.PTTL(ctx, iter.Val()).Result(); err != nil || ttl != -1 {
			t.Errorf("PTTL %s = %v, %v; want -1 (no TTL: volatile-lru never evicts it)", iter.Val(), ttl, err)
		}
	}
	if err := iter.Err(); err != nil || kept == 0 {
		t.Fatalf("SCAN *pressure* found %d keys, %v; want the namespace's keys", kept, err)
	}
	holder := func() (lanes.Holder, bool) {
		snap, err := b.Inspect(bounded(t, 5*time.Second), []string{"K"})
		if err != nil {
			t.Fatalf("Inspect(K) = %v", err)
		}
		if snap.Stats.Resets != 0 {
			t.Fatalf("Inspect(K) counts %d resets; want none", snap.Stats.Resets)
		}
		if len(snap.Keys) != 1 || len(snap.Keys[0].Holders) != 1 || len(snap.Keys[0].Waiters) != 1 {
			t.Fatalf("Inspect(K) = %+v; want holder A and waiter W", snap.Keys)
		}
		return snap.Keys[0].Holders[0], snap.Keys[0].Waiters[0].ID == "W"
	}
	after, ok := holder()
	if after.ID != "A" || !ok {
		t.Fatalf("after the pressure K is held by %s (waiter W: %v); want A, with W waiting", after.ID, ok)
	}
	until(t, 10*time.Second, "a heartbeat after the pressure renews A", func() bool {
		h, _ := holder()
		return h.Expires.After(after.Expires)
	})
	if err := l.Err(); err != nil {
		t.Fatalf("the lease under cache pressure: %v", err)
	}
	select {
	case <-w[0].Ready():
		t.Fatal("the waiter was granted while the holder holds")
	default:
	}
	_ = l.Release(ctx)
	lw, err := w[0].Wait(bounded(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_ = lw.Release(ctx)
}

// Private redis-server with busy-reply-threshold lowered, as operators do:
// while another client's script holds the server, lanes' steps get BUSY;
// they are sent again, so a release reports success and its lane passes.
func TestBusyRetriedRealRedis(t *testing.T) {
	srv := chaos.StartServer(t, chaos.ServerOptions{Extra: []string{"--busy-reply-threshold", "20"}})
	c := srv.Client()
	b, err := redislane.New(c, "busy")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	s := newSession(t, b)
	l, err := s.Acquire(bounded(t, 5*time.Second), lanes.Request{Lanes: []lanes.Lane{{Key: "K", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := newSession(t, b).Enqueue(bounded(t, 5*time.Second), lanes.Request{Lanes: []lanes.Lane{{Key: "K", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	side := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { side.Close() })
	done := make(chan error, 1)
	go func() {
		// A read-only script that spins for 3s of the server's clock: the
		// probe must see BUSY meanwhile though a loaded machine may starve
		// this process (700ms was too short); the release below, sent again
		// while BUSY, still ends within its 5s default release timeout.
		done <- side.Eval(context.Background(), `local t0 = redis.call('TIME')
while true do
  local t = redis.call('TIME')
  if (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) > 3000000 then return 1 end
end`, nil).Err()
	}()
	probe := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { probe.Close() })
	until(t, 5*time.Second, "the server busy", func() bool {
		err := probe.Ping(context.Background()).Err()
		return err != nil && strings.HasPrefix(err.Error(), "BUSY")
	})
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("Release() while another script holds Redis = %v; want nil once it is done", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the spinning script: %v", err)
	}
	lw, err := w[0].Wait(bounded(t, 5*time.Second))
	if err != nil {
		t.Fatalf("the waiter after a release that met BUSY = %v", err)
	}
	_ = lw.Release(context.Background())
}

// Private redis-server (issue 19): an Acquire with no id whose enqueue
// replies are lost (the client's read timeout is 5ms; the server is paused
// 3s by CLIENT PAUSE) ran in Redis all the same. The Session settles what
// it sent, so the next acquirer is granted at once, not after the lost
// entry's TTL (here a minute).
func TestLostEnqueueReplySettledRealRedis(t *testing.T) {
	srv := chaos.StartServer(t, chaos.ServerOptions{})
	admin := srv.Client()
	impatient := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: 5 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { impatient.Close() })
	b, err := redislane.New(impatient, "lost")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	s := newSession(t, b, lanes.WithTTL(time.Minute), lanes.WithHeartbeat(20*time.Second))
	// The pause outlasts the Acquire: its enqueue runs once the pause ends,
	// after the Acquire gave up and settled what it sent. 3s, not 400ms:
	// the Acquire must begin within the pause though a loaded machine may
	// starve this process; the Acquire below waits 10s, past its end.
	if err := admin.Do(context.Background(), "CLIENT", "PAUSE", 3000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	if l, err := s.Acquire(bounded(t, 250*time.Millisecond), lanes.Request{Lanes: []lanes.Lane{{Key: "K", Limit: 1}}}); err == nil {
		_ = l.Release(context.Background())
		t.Fatal("Acquire() during a 3s pause with a 250ms wait succeeded; the test did not lose the reply")
	}
	b2, err := redislane.New(admin, "lost")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b2.Close() })
	l, err := newSession(t, b2).Acquire(bounded(t, 10*time.Second), lanes.Request{Lanes: []lanes.Lane{{Key: "K", Limit: 1}}})
	if err != nil {
		t.Fatalf("Acquire(K) after a lost enqueue = %v; want granted: the lost entry settled, not left to its TTL of a minute", err)
	}
	_ = l.Release(context.Background())
}

// Private redis-server behind a proxy (issue 19): a release whose reply is
// lost after it ran (the proxy cuts the connection once the release reached
// Redis), sent again, finds its entry gone: that is success, the release
// ran; and the lane passes on.
func TestResentReleaseIsSuccessRealRedis(t *testing.T) {
	srv := chaos.StartServer(t, chaos.ServerOptions{})
	proxy := chaos.StartProxy(t, srv.Addr(), 1)
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { c.Close() })
	b, err := redislane.New(c, "resent")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	s := newSession(t, b, lanes.WithTTL(time.Minute), lanes.WithHeartbeat(20*time.Second))
	fn := lua.Function("release.lua") // FCALL of the Functions library (Redis 7)
	for i := range 5 {
		l, err := s.Acquire(bounded(t, 5*time.Second), lanes.Request{Lanes: []lanes.Lane{{Key: "K", Limit: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		before := proxy.Dropped()
		proxy.DropReplies(fn, 1)
		if err := l.Release(context.Background()); err != nil {
			t.Fatalf("try %d: Release() whose reply was lost and that was sent again = %v; want nil", i, err)
		}
		if proxy.Dropped() != before+1 {
			t.Fatalf("try %d: the proxy dropped %d replies; want 1: the test proves nothing", i, proxy.Dropped()-before)
		}
	}
}

// Real Redis (issue 19): a process holding "small" is killed while 20,000
// of its entries wait on "big"; a fresh process asks for "small" once the
// holder's TTL passed and is granted at once, whatever the backlog of dead
// waiters (holders are reaped first).
func TestDeadHolderBehindBigBacklogRealRedis(t *testing.T) {
	_, b, _ := namespace(t)
	ctx := context.Background()
	dead := lanes.Owner{ID: "dead-process", Host: "gone", PID: 1}
	const ttl = 2 * time.Second
	if _, err := b.Enqueue(ctx, dead, ttl, []lanes.Request{{ID: "holder", Lanes: []lanes.Lane{{Key: "small", Limit: 1}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Enqueue(ctx, dead, ttl, []lanes.Request{{ID: "big-holder", Lanes: []lanes.Lane{{Key: "big", Limit: 1}}}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20000; i += 250 {
		var reqs []lanes.Request
		for j := i; j < i+250; j++ {
			reqs = append(reqs, lanes.Request{ID: fmt.Sprintf("w%05d", j), Lanes: []lanes.Lane{{Key: "big", Limit: 1}}})
		}
		if _, err := b.Enqueue(ctx, dead, ttl, reqs); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(ttl + 100*time.Millisecond) // every entry of the dead process expired
	s := newSession(t, b, lanes.WithTTL(2*time.Second))
	start := time.Now()
	l, err := s.Acquire(bounded(t, 5*time.Second), lanes.Request{Lanes: []lanes.Lane{{Key: "small", Limit: 1}}})
	if err != nil {
		t.Fatalf("Acquire(small) behind 20,000 dead waiters = %v", err)
	}
	t.Logf("granted %v after asking", time.Since(start).Round(time.Millisecond))
	_ = l.Release(ctx)
	n, err := b.Reap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Reap removed %d dead entries left", n)
}
