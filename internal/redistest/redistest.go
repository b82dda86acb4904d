// Package redistest gives tests the real Redis server they run against:
// LANES_REDIS_URL, else REDIS_URL, else redis://127.0.0.1:6379. When none
// answers, a test that asks for it skips with a message that says so; the
// server is probed once per test binary, so a run without Redis stays fast.
//
// With LANES_REQUIRE_REDIS=1 (CI sets it: .ci/run) a missing server is a
// failure instead: a test that would skip for want of Redis, or of the
// redis-server binary, fails with the same message, so a CI run cannot go
// green by skipping the real-Redis tests.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
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

// RequireEnv names the variable that turns a missing Redis from a skip into
// a failure.
const RequireEnv = "LANES_REQUIRE_REDIS"

// Required reports whether LANES_REQUIRE_REDIS is set to anything but ""
// or "0": then a test that cannot get its Redis (a server that does not
// answer, no redis-server binary) fails instead of skipping.
func Required() bool {
	v := os.Getenv(RequireEnv)
	return v != "" && v != "0"
}

// Unavailable ends tb because what it needs from Redis is missing: a skip
// with the message (prefixed "SKIP: ", which `make test` lists), or, when
// Required, a failure with the same message.
func Unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if Required() {
		tb.Fatalf("%s=%s: a test needs Redis and cannot get it: %s", RequireEnv, os.Getenv(RequireEnv), msg)
	}
	tb.Skip("SKIP: " + msg)
}

// Client returns a client of the real Redis server, closed when t ends.
// When the server does not answer it skips t with a visible message, or
// fails t when Required.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	if err := Reachable(); err != nil {
		Unavailable(t, "no real Redis at %s (%v); set LANES_REDIS_URL to run the real-Redis tests", redacted(URL()), err)
	}
	opt, err := redis.ParseURL(URL())
	if err != nil {
		t.Fatalf("LANES_REDIS_URL %q: %v", redacted(URL()), err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// redacted is u with its password, if any, replaced by "xxxxx".
func redacted(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Redacted()
	}
	return u
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
