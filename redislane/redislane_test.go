package redislane_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lanes-dev/lanes/internal/redistest"
	"github.com/lanes-dev/lanes/lanes/lanestest"
	"github.com/lanes-dev/lanes/redislane"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// realClient returns a client of the real Redis server, or skips t.
func realClient(t testing.TB) *redis.Client { return redistest.Client(t) }

func uniqueNS(t testing.TB) string { return redistest.Namespace("test-") }

// newBackend makes a Backend on c in a fresh namespace, deleted at the end.
func newBackend(t testing.TB, c redis.UniversalClient) *redislane.Backend {
	return redistest.Backend(t, c, "test-")
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
	c.m.FastForward(d) // keys with a TTL (a run's records) age as well
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
	t.Logf("real Redis at %s", redistest.URL())
	lanestest.Run(t, lanestest.Harness{New: func(t *testing.T) lanestest.Instance {
		return lanestest.Instance{Backend: newBackend(t, realClient(t))}
	}})
}
