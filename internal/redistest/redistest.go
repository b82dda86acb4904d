// Package redistest gives tests the real Redis server they run against:
// LANES_REDIS_URL, else REDIS_URL, else redis://127.0.0.1:6379. When none
// answers, a test that asks for it skips with a message that says so; the
// server is probed once per test binary, so a run without Redis stays fast.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/redislane"
)

// URL returns the URL of the real Redis server of the tests.
func URL() string {
	for _, v := range []string{"LANES_REDIS_URL", "REDIS_URL"} {
		if u := os.Getenv(v); u != "" {
			return u
		}
	}
	return "redis://127.0.0.1:6379"
}

var (
	probeOnce sync.Once
	probeErr  error
)

// Reachable reports whether the real Redis server answers PING within a
// second, and why not.
func Reachable() error {
	probeOnce.Do(func() {
		opt, err := redis.ParseURL(URL())
		if err != nil {
			probeErr = err
			return
		}
		c := redis.NewClient(opt)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		probeErr = c.Ping(ctx).Err()
	})
	return probeErr
}

// Client returns a client of the real Redis server, closed when t ends, or
// skips t with a visible message when the server does not answer.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	if err := Reachable(); err != nil {
		t.Skipf("SKIP: no real Redis at %s (%v); set LANES_REDIS_URL to run the real-Redis tests", URL(), err)
	}
	opt, err := redis.ParseURL(URL())
	if err != nil {
		t.Fatalf("LANES_REDIS_URL %q: %v", URL(), err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// Namespace returns a namespace no other test uses: prefix and random hex.
func Namespace(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Backend returns a redislane Backend on c in a fresh namespace, and deletes
// every key of that namespace (its fencing counters and run records too)
// when t ends.
func Backend(t testing.TB, c redis.UniversalClient, prefix string) *redislane.Backend {
	t.Helper()
	b, err := redislane.New(c, Namespace(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.Close()
		Delete(c, b)
	})
	return b
}

// Delete deletes every key of b's namespace from c: its state, fencing
// counters, and the hashes of its runs' records (<prefix>:{ns}:run:*,
// which live until their retention otherwise).
func Delete(c redis.UniversalClient, b *redislane.Backend) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys := b.Keys()
	c.Del(ctx, keys...)
	pattern := strings.TrimSuffix(keys[0], "entries") + "run:*"
	var cursor uint64
	for {
		found, next, err := c.Scan(ctx, cursor, pattern, 500).Result()
		if err != nil {
			return
		}
		if len(found) > 0 {
			c.Del(ctx, found...)
		}
		if cursor = next; cursor == 0 {
			return
		}
	}
}
