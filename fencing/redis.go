package fencing

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/internal/evict"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/scripts/lua"
)

// fenceScript compares and records a token in one atomic step; see the
// header of scripts/lua/fence.lua for its KEYS, ARGV and replies.
var fenceScript = redis.NewScript(lua.Source("fence.lua"))

// Reply prefixes of fence.lua's domain errors.
const (
	replyStale   = "LANES_STALE "
	replyCorrupt = "LANES_CORRUPT "
)

// MaxNamespaceLen is the longest namespace NewRedisGuard accepts, in bytes:
// lanes.MaxNamespaceLen, since a guard shares its namespace with the lanes.
const MaxNamespaceLen = lanes.MaxNamespaceLen

// RedisGuard is a Guard kept in Redis, for resources written by many
// processes or machines. All resources of one namespace live in one hash,
// "lanes:fence:{<namespace>}" (see Key), whose fields are resource names and
// whose values are the highest tokens seen, as decimal text. The hash tag
// keeps the key in the slot of the namespace's lanes, so Redis Cluster
// works. The hash is never expired: a resource's record must outlive every
// lease on it. So it needs a server whose maxmemory-policy never evicts it
// (noeviction, the default, or a volatile-* policy): under allkeys-* the
// hash may be evicted, the highest tokens with it, and a stale token is
// then accepted (a break-it review saw token 1000 refused after 2000, then
// accepted once the hash was evicted). So until the policy has passed
// once, Check reads it first (INFO, one more round trip; every primary of
// a cluster) and refuses an allkeys-* one with ErrEvictable, as
// redislane.Backend refuses it for the lanes (redislane.ErrEvictable),
// unless the guard was made WithEvictionAllowed. A server that does not
// say (INFO refused, as under an ACL or on a managed service) passes.
//
// A RedisGuard is safe for concurrent use. Every Check is one script run
// (EVALSHA, falling back to EVAL when the script is not cached).
type RedisGuard struct {
	c       redis.Scripter
	key     string
	evictOK bool        // WithEvictionAllowed
	policed atomic.Bool // the server's maxmemory-policy passed
}

// RedisGuardOption configures a RedisGuard (NewRedisGuard).
type RedisGuardOption func(*RedisGuard)

// WithEvictionAllowed lets a RedisGuard run on a server whose
// maxmemory-policy may evict its hash (allkeys-*). What that risks: once
// Redis evicts the hash, every resource's highest token is forgotten and
// the next Check accepts any token, a stale one too.
func WithEvictionAllowed() RedisGuardOption {
	return func(g *RedisGuard) { g.evictOK = true }
}

var _ Guard = (*RedisGuard)(nil)

// NewRedisGuard returns a RedisGuard that runs its script through c (a
// *redis.Client, *redis.ClusterClient, *redis.Ring or any other
// redis.Scripter) in namespace: 1 to MaxNamespaceLen printable ASCII bytes,
// without spaces or braces. A nil client or a bad namespace returns an error
// wrapping ErrInvalid. NewRedisGuard makes no network call.
func NewRedisGuard(c redis.Scripter, namespace string, opts ...RedisGuardOption) (*RedisGuard, error) {
	if c == nil {
		return nil, fmt.Errorf("%w redis guard: nil client", ErrInvalid)
	}
	if err := validateNamespace(namespace); err != nil {
		return nil, err
	}
	g := &RedisGuard{c: c, key: "lanes:fence:{" + namespace + "}"}
	for _, o := range opts {
		o(g)
	}
	return g, nil
}

// validateNamespace checks a namespace by the rule of package lanes
// (lanes.ValidateNamespace): one rule for every package that names one.
func validateNamespace(ns string) error {
	if err := lanes.ValidateNamespace(ns); err != nil {
		return fmt.Errorf("%w %w", ErrInvalid, err)
	}
	return nil
}

// Key returns the Redis key of the hash holding this guard's records, e.g.
// "lanes:fence:{prod}".
func (g *RedisGuard) Key() string { return g.key }

// Check implements Guard in one Redis script run: it refuses t with a
// *StaleError if it is lower than the highest token recorded for resource,
// and otherwise records it. It blocks for one round trip, bounded by ctx
// (two until the server's maxmemory-policy has passed once: see
// RedisGuard). On a server that may evict the guard's hash it returns an
// error wrapping ErrEvictable and records nothing.
// A Redis or connection failure is returned wrapped, naming the resource and
// the key; it is never ErrStale, and the token may or may not have been
// recorded (retrying with the same token is safe: equal is accepted).
func (g *RedisGuard) Check(ctx context.Context, resource string, t Token) error {
	if err := validate(resource, t); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !g.evictOK && !g.policed.Load() {
		p, err := evict.Evicting(ctx, g.c)
		switch {
		case err != nil:
			return fmt.Errorf("fencing: check token %d for %q in redis key %s: read the server's maxmemory-policy: %w", t, resource, g.key, err)
		case p != "":
			return fmt.Errorf("%w: maxmemory-policy is %s, which may evict redis key %s and the highest tokens with it, then accept a stale token; "+
				"set noeviction (or a volatile-* policy), or pass fencing.WithEvictionAllowed knowing what it risks", ErrEvictable, p, g.key)
		}
		g.policed.Store(true)
	}
	err := fenceScript.Run(ctx, g.c, []string{g.key}, resource, t.String()).Err()
	if err == nil {
		return nil
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		if h, ok := strings.CutPrefix(msg, replyStale); ok {
			if high, perr := ParseToken(h); perr == nil {
				return &StaleError{Resource: resource, Token: t, Highest: high}
			}
		}
		if v, ok := strings.CutPrefix(msg, replyCorrupt); ok {
			return fmt.Errorf("fencing: redis key %s field %q holds %q, not a token; refusing token %d", g.key, resource, v, t)
		}
	}
	return fmt.Errorf("fencing: check token %d for %q in redis key %s: %w", t, resource, g.key, err)
}
