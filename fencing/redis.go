package fencing

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

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
// accepted once the hash was evicted). NewRedisGuard does not check the
// policy; redislane.New does, for the lanes (redislane.ErrEvictable).
//
// A RedisGuard is safe for concurrent use. Every Check is one script run
// (EVALSHA, falling back to EVAL when the script is not cached).
type RedisGuard struct {
	c   redis.Scripter
	key string
}

var _ Guard = (*RedisGuard)(nil)

// NewRedisGuard returns a RedisGuard that runs its script through c (a
// *redis.Client, *redis.ClusterClient, *redis.Ring or any other
// redis.Scripter) in namespace: 1 to MaxNamespaceLen printable ASCII bytes,
// without spaces or braces. A nil client or a bad namespace returns an error
// wrapping ErrInvalid. NewRedisGuard makes no network call.
func NewRedisGuard(c redis.Scripter, namespace string) (*RedisGuard, error) {
	if c == nil {
		return nil, fmt.Errorf("%w redis guard: nil client", ErrInvalid)
	}
	if err := validateNamespace(namespace); err != nil {
		return nil, err
	}
	return &RedisGuard{c: c, key: "lanes:fence:{" + namespace + "}"}, nil
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
// and otherwise records it. It blocks for one round trip, bounded by ctx.
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
