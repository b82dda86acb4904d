package redislane_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lanes-dev/lanes/lanes/lanestest"
	"github.com/lanes-dev/lanes/redislane"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// redisURL names the real Redis server of the tests: LANES_REDIS_URL, else
// REDIS_URL, else the local default.
func redisURL() string {
	for _, v := range []string{"LANES_REDIS_URL", "REDIS_URL"} {
		if u := os.Getenv(v); u != "" {
			return u
		}
	}
	return "redis://127.0.0.1:6379"
}

// realClient returns a client of the real Redis server, or skips the test
// with a visible message when none answers.
func realClient(t testing.TB) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(redisURL())
	if err != nil {
		t.Fatalf("bad LANES_REDIS_URL %q: %v", redisURL(), err)
	}
	c := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		t.Skipf("SKIP: no real Redis at %s (%v); set LANES_REDIS_URL to run the real-Redis tests", redisURL(), err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// uniqueNS returns a namespace no other test uses.
func uniqueNS(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "test-" + hex.EncodeToString(b[:])
}

// newBackend makes a Backend on c in a fresh namespace, and deletes every key
// of that namespace (tokens too) when the test ends.
func newBackend(t testing.TB, c redis.UniversalClient) *redislane.Backend {
	t.Helper()
	b, err := redislane.New(c, uniqueNS(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.Close()
		c.Del(context.Background(), b.Keys()...)
	})
	return b
}

// fakeClock makes a miniredis server read the real clock plus an offset: a
// hook sets the server's time before each command.
type fakeClock struct {
	m      *miniredis.Miniredis
	mu     sync.Mutex
	offset time.Duration
}

func (c *fakeClock) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *fakeClock) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.sync()
		return next(ctx, cmd)
	}
}
func (c *fakeClock) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.sync()
		return next(ctx, cmds)
	}
}
func (c *fakeClock) sync() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m.SetTime(time.Now().Add(c.offset))
}
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
	c.sync()
}

func TestConformanceMiniredis(t *testing.T) {
	lanestest.Run(t, lanestest.Harness{New: func(t *testing.T) lanestest.Instance {
		m := miniredis.RunT(t)
		clock := &fakeClock{m: m}
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		c.AddHook(clock)
		t.Cleanup(func() { c.Close() })
		return lanestest.Instance{Backend: newBackend(t, c), Advance: clock.advance}
	}})
}

func TestConformanceRealRedis(t *testing.T) {
	realClient(t) // skips the whole suite, visibly, when no server answers
	t.Logf("real Redis at %s", redisURL())
	lanestest.Run(t, lanestest.Harness{New: func(t *testing.T) lanestest.Instance {
		return lanestest.Instance{Backend: newBackend(t, realClient(t))}
	}})
}
