package redislane

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/scripts/lua"
)

// loadLibrary loads the Functions library (lua.Library) where the
// namespace's keys live, key being one of them: on a Redis Cluster, the
// master that owns their slot, whatever node a keyless FUNCTION LOAD would
// reach; elsewhere the server the client talks to (through Sentinel, the
// master of the moment: after a failover, the new one). A library already
// there counts as loaded.
func (b *Backend) loadLibrary(ctx context.Context, key string) error {
	var c redis.Cmdable = b.c
	if cc, ok := b.c.(*redis.ClusterClient); ok {
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return err
		}
		c = m
	}
	_, code := lua.Library()
	err := c.FunctionLoad(ctx, code).Err()
	if err != nil && strings.Contains(err.Error(), "already exists") {
		return nil
	}
	return err
}

// loadPasses reports whether a failed FUNCTION LOAD may work at a later
// step: the connection was lost or timed out, or the server could not take
// it just then (READONLY from a master just demoted, LOADING, MASTERDOWN,
// a cluster slot on the move or down, BUSY, OOM). Any other refusal (no
// FUNCTION command, an ACL without it, code the server rejects) lasts, and
// the Backend runs its scripts by EVALSHA from then on.
func loadPasses(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return true
	}
	switch code, _, _ := strings.Cut(re.Error(), " "); code {
	case "READONLY", "LOADING", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "MOVED", "ASK", "BUSY", "OOM", "NOREPLICAS":
		return true
	}
	return false
}
