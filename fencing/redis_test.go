package fencing_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/fencing"
	"github.com/lanes-dev/lanes/internal/redisproc"
	"github.com/lanes-dev/lanes/internal/redistest"
	"github.com/lanes-dev/lanes/scripts/lua"
)

// backend is a Redis server a test runs against.
type backend struct {
	name string
	open func(t *testing.T) *redis.Client
}

// backends are miniredis and the real Redis named by LANES_REDIS_URL,
// REDIS_URL or the default local one.
var backends = []backend{
	{"miniredis", miniredisClient},
	{"redis", realRedisClient},
}

// miniredisClient starts a miniredis server and a client for it, both
// closed when t ends.
func miniredisClient(t *testing.T) *redis.Client {
	s := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { c.Close() })
	return c
}

// realRedisClient returns a client of the real Redis at LANES_REDIS_URL,
// REDIS_URL or redis://127.0.0.1:6379 (internal/redistest), closed when t
// ends. When none answers it skips t with a visible message, or fails t
// under LANES_REQUIRE_REDIS=1, as every real-Redis test does.
func realRedisClient(t *testing.T) *redis.Client {
	c := redistest.Client(t)
	shown := redistest.URL()
	if u, err := url.Parse(shown); err == nil {
		shown = u.Redacted()
	}
	t.Logf("testing against the real Redis at %s", shown)
	return c
}

// newGuard returns a RedisGuard on c in a namespace of its own, whose key
// is deleted when t ends.
func newGuard(t *testing.T, c *redis.Client) *fencing.RedisGuard {
	ns := "fencing-test-" + rand.Text()[:12]
	g, err := fencing.NewRedisGuard(c, ns)
	if err != nil {
		t.Fatalf("NewRedisGuard(%q) = %v", ns, err)
	}
	t.Cleanup(func() {
		if err := c.Del(context.Background(), g.Key()).Err(); err != nil {
			t.Errorf("DEL %s = %v", g.Key(), err)
		}
	})
	return g
}

func TestRedisGuard(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			c := b.open(t)
			testGuard(t, suite{newGuard: func(t *testing.T) fencing.Guard { return newGuard(t, c) }})
		})
	}
}

func TestRedisGuardStoresDecimalText(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			c := b.open(t)
			g := newGuard(t, c)
			ctx := context.Background()
			if !strings.HasPrefix(g.Key(), "lanes:fence:{fencing-test-") || !strings.HasSuffix(g.Key(), "}") {
				t.Errorf("Key() = %q; want lanes:fence:{<namespace>}", g.Key())
			}
			if err := g.Check(ctx, "res", 9007199254740993); err != nil {
				t.Fatalf("Check(res, 9007199254740993) = %v", err)
			}
			got, err := c.HGet(ctx, g.Key(), "res").Result()
			if err != nil || got != "9007199254740993" {
				t.Errorf("HGET %s res = %q, %v; want \"9007199254740993\"", g.Key(), got, err)
			}
		})
	}
}

// TestFenceScriptRejectsMalformedArgs runs fence.lua directly, as a runner
// in another language would, with ARGV that Go never sends.
func TestFenceScriptRejectsMalformedArgs(t *testing.T) {
	src := lua.Source("fence.lua")
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			c := b.open(t)
			key := newGuard(t, c).Key()
			ctx := context.Background()
			for _, args := range [][]any{
				{"res", "0"}, {"res", "007"}, {"res", "-1"}, {"res", "+1"}, {"res", "1.5"},
				{"res", "1e3"}, {"res", ""}, {"res", " 1"}, {"res", "18446744073709551616"},
				{"res", "99999999999999999999"}, {"", "1"}, {"res"},
			} {
				err := c.Eval(ctx, src, []string{key}, args...).Err()
				if err == nil || !strings.HasPrefix(err.Error(), "LANES_BADARG ") {
					t.Errorf("EVAL fence.lua %q = %v; want a LANES_BADARG error", args, err)
				}
			}
			if n, err := c.Exists(ctx, key).Result(); err != nil || n != 0 {
				t.Errorf("EXISTS %s = %v, %v after malformed calls; want 0", key, n, err)
			}
			got, err := c.Eval(ctx, src, []string{key}, "res", "18446744073709551615").Result()
			if err != nil || got != "OK" {
				t.Errorf("EVAL fence.lua res 18446744073709551615 = %v, %v; want OK", got, err)
			}
			err = c.Eval(ctx, src, []string{key}, "res", "18446744073709551614").Err()
			if err == nil || err.Error() != "LANES_STALE 18446744073709551615" {
				t.Errorf("EVAL fence.lua res 18446744073709551614 = %v; want LANES_STALE 18446744073709551615", err)
			}
		})
	}
}

func TestRedisGuardCorruptRecord(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			c := b.open(t)
			g := newGuard(t, c)
			ctx := context.Background()
			for _, bad := range []string{"abc", "007", "1.5e3", "18446744073709551616"} {
				if err := c.HSet(ctx, g.Key(), "res", bad).Err(); err != nil {
					t.Fatal(err)
				}
				err := g.Check(ctx, "res", 5)
				if err == nil || errors.Is(err, fencing.ErrStale) || !strings.Contains(err.Error(), "not a token") {
					t.Errorf("Check(res, 5) over stored %q = %v; want a 'not a token' error, not ErrStale", bad, err)
				}
				if got := c.HGet(ctx, g.Key(), "res").Val(); got != bad {
					t.Errorf("stored value after refused Check = %q; want %q left alone", got, bad)
				}
			}
		})
	}
}

func TestRedisGuardUnreachable(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	g, err := fencing.NewRedisGuard(c, "down")
	if err != nil {
		t.Fatal(err)
	}
	err = g.Check(context.Background(), "res", 1)
	if err == nil || errors.Is(err, fencing.ErrStale) || errors.Is(err, fencing.ErrInvalid) {
		t.Fatalf("Check on an unreachable Redis = %v; want a connection error", err)
	}
	for _, want := range []string{`"res"`, "lanes:fence:{down}"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Check on an unreachable Redis = %q; want it to name %s", err, want)
		}
	}
}

func TestNewRedisGuardInvalid(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, ns := range []string{
		"", "a b", "{x}", "a{b", "a}b", "tab\there", "nul\x00", "é", "\x7f",
		strings.Repeat("n", fencing.MaxNamespaceLen+1),
	} {
		if g, err := fencing.NewRedisGuard(c, ns); !errors.Is(err, fencing.ErrInvalid) {
			t.Errorf("NewRedisGuard(%.20q) = %v, %v; want ErrInvalid", ns, g, err)
		}
	}
	if _, err := fencing.NewRedisGuard(nil, "ns"); !errors.Is(err, fencing.ErrInvalid) {
		t.Errorf("NewRedisGuard(nil, ns) = %v; want ErrInvalid", err)
	}
	for _, ns := range []string{"n", "prod", "tenant-7:eu_west.1", strings.Repeat("n", fencing.MaxNamespaceLen)} {
		g, err := fencing.NewRedisGuard(c, ns)
		if err != nil {
			t.Errorf("NewRedisGuard(%.20q) = %v; want nil", ns, err)
			continue
		}
		if want := fmt.Sprintf("lanes:fence:{%s}", ns); g.Key() != want {
			t.Errorf("Key() = %q; want %q", g.Key(), want)
		}
	}
}

// Private redis-servers (real Redis): a guard refuses, with ErrEvictable
// and recording nothing, a server whose maxmemory-policy may evict its
// hash, unless made WithEvictionAllowed; noeviction and volatile-* pass. A
// refusal is not remembered: once the policy is fixed, Check passes.
func TestRedisGuardEvictionPolicyRealRedis(t *testing.T) {
	for _, c := range []struct {
		policy string
		refuse bool
	}{{"allkeys-lru", true}, {"allkeys-lfu", true}, {"allkeys-random", true}, {"volatile-lru", false}, {"noeviction", false}} {
		t.Run(c.policy, func(t *testing.T) {
			srv := redisproc.StartServer(t, redisproc.ServerOptions{Extra: []string{"--maxmemory", "64mb", "--maxmemory-policy", c.policy}})
			rc := srv.Client()
			ctx := context.Background()
			g, err := fencing.NewRedisGuard(rc, "evict")
			if err != nil {
				t.Fatal(err)
			}
			err = g.Check(ctx, "res", 5)
			if c.refuse != errors.Is(err, fencing.ErrEvictable) || (!c.refuse && err != nil) {
				t.Fatalf("Check under %s = %v; want refused (ErrEvictable): %v", c.policy, err, c.refuse)
			}
			if !c.refuse {
				return
			}
			if !strings.Contains(err.Error(), c.policy) || !strings.Contains(err.Error(), "WithEvictionAllowed") {
				t.Errorf("Check under %s = %q; want it to name the policy and the option", c.policy, err)
			}
			if n := rc.Exists(ctx, g.Key()).Val(); n != 0 {
				t.Errorf("a refused Check recorded the token: %s exists", g.Key())
			}
			allowed, err := fencing.NewRedisGuard(rc, "evict", fencing.WithEvictionAllowed())
			if err != nil {
				t.Fatal(err)
			}
			if err := allowed.Check(ctx, "res", 5); err != nil {
				t.Fatalf("Check WithEvictionAllowed = %v", err)
			}
			if err := allowed.Check(ctx, "res", 4); !errors.Is(err, fencing.ErrStale) {
				t.Fatalf("Check(4) after 5 WithEvictionAllowed = %v; want ErrStale", err)
			}
			if err := rc.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
				t.Fatal(err)
			}
			if err := g.Check(ctx, "res", 6); err != nil {
				t.Fatalf("Check after the policy became noeviction = %v; want nil", err)
			}
		})
	}
}

// Private redis-server (real Redis), allkeys-lru: a guard whose policy
// read meets BUSY (a long script runs) returns an error, and reads the
// policy again at its next Check, which refuses the server. A review found
// BUSY taken for "cannot tell" and remembered as a pass for good, after
// which the guard accepted stale tokens.
func TestRedisGuardBusyIsNoPassRealRedis(t *testing.T) {
	srv := redisproc.StartServer(t, redisproc.ServerOptions{Extra: []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru", "--busy-reply-threshold", "100"}})
	ctx := context.Background()
	rc, busy, admin := srv.Client(), srv.Client(), srv.Client()
	g, err := fencing.NewRedisGuard(rc, "busy")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- busy.Eval(ctx, "while true do end", nil).Err() }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.HasPrefix(fmt.Sprint(admin.Ping(ctx).Err()), "BUSY") {
		if time.Now().After(deadline) {
			t.Fatal("the server never answered BUSY while a script loops")
		}
		time.Sleep(10 * time.Millisecond)
	}
	err = g.Check(ctx, "res", 5)
	if err == nil || errors.Is(err, fencing.ErrStale) || errors.Is(err, fencing.ErrEvictable) {
		t.Errorf("Check while the server is BUSY = %v; want the server's error", err)
	}
	if err := admin.ScriptKill(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	<-done
	if err := g.Check(ctx, "res", 5); !errors.Is(err, fencing.ErrEvictable) {
		t.Fatalf("Check once the script ended, allkeys-lru = %v; want ErrEvictable: a BUSY reply is no pass", err)
	}
}
