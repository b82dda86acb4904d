// Package evict tells whether a Redis server may evict keys that carry no
// TTL: the lanes' records and the fencing guard's hash carry none, and
// lose their guarantees when evicted one at a time.
package evict

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// infoer is a client that runs INFO on one server.
type infoer interface {
	Info(ctx context.Context, section ...string) *redis.StringCmd
}

// Evicting returns a maxmemory-policy that may evict keys without
// a TTL (allkeys-lru, allkeys-lfu, allkeys-random) found among the servers behind
// c: every primary of a *redis.ClusterClient, every shard of a *redis.Ring,
// else the one server of a client with an Info method. It returns "" when
// none has such a policy, and also when it cannot tell: a server that
// refuses INFO with a Redis error (an ACL's NOPERM, a managed service's
// unknown command), a reply without the field (miniredis), a client
// without an Info method. A Redis error that says the server is busy for
// now (BUSY, LOADING, TRYAGAIN, MASTERDOWN, CLUSTERDOWN) is returned, as is
// any other error (the network, ctx), as go-redis gave it: a caller that
// remembers a pass must not remember one it did not see. It makes one INFO
// round trip per server.
func Evicting(ctx context.Context, c any) (string, error) {
	var (
		mu    sync.Mutex // ForEachMaster and ForEachShard run one goroutine per server
		found string
	)
	one := func(ctx context.Context, c infoer) error {
		p, err := policy(ctx, c)
		if err == nil && p != "" {
			mu.Lock()
			found = p
			mu.Unlock()
		}
		return err
	}
	var err error
	switch c := c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return one(ctx, c) })
	case *redis.Ring:
		err = c.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return one(ctx, c) })
	case infoer:
		err = one(ctx, c)
	}
	return found, err
}

// policy returns c's maxmemory-policy when it is an allkeys-* one.
func policy(ctx context.Context, c infoer) (string, error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		var re redis.Error
		if errors.As(err, &re) && !transient(re.Error()) {
			return "", nil // INFO refused: cannot tell
		}
		return "", err
	}
	for line := range strings.Lines(info) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "maxmemory_policy:"); ok && strings.HasPrefix(p, "allkeys-") {
			return p, nil
		}
	}
	return "", nil
}

// transient reports whether a Redis error reply says the server cannot
// answer for now, rather than that it refuses INFO.
func transient(msg string) bool {
	for _, p := range []string{"BUSY", "LOADING", "TRYAGAIN", "MASTERDOWN", "CLUSTERDOWN"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
