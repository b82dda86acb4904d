package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
)

// commandOps is how many uncontended acquire+release pairs the commands
// columns average over.
const commandOps = 500

// measureCommands counts, over commandOps uncontended acquire+release
// pairs of one process:
//
//   - rt: round trips the client sent per pair (a go-redis hook: one per
//     command, one per pipeline). These are the top-level commands the
//     server sees: EVALSHA, SET, ...
//   - srv: commands the server executed per pair, summed over every
//     cmdstat line of INFO commandstats. Redis 7 counts a script's
//     redis.call()s there too, so a script costs 1 + its inner commands.
//   - cpu: the server's used_cpu_user + used_cpu_sys per pair, in µs:
//     script execution and network I/O alike.
//
// INFO is server-wide: other clients of a shared server inflate srv and cpu
// (use -spawn for a private server).
func measureCommands(ctx context.Context, e *env, ks []*kind, res *results) error {
	for _, k := range ks {
		if !k.redis {
			continue
		}
		var rt atomic.Int64
		c, err := openOne(ctx, e, k, "cmds", 0, &rt)
		if err != nil {
			return err
		}
		pair := func() error {
			rel, err := c.Acquire(ctx, "k")
			if err != nil {
				return err
			}
			return rel()
		}
		for range 20 { // scripts loaded, connection open
			if err := pair(); err != nil {
				c.Close()
				return fmt.Errorf("%s: %w", k.id, err)
			}
		}
		before, err := readCounters(ctx, e.srv.admin)
		if err != nil {
			c.Close()
			return err
		}
		rt0 := rt.Load()
		for range commandOps {
			if err := pair(); err != nil {
				c.Close()
				return fmt.Errorf("%s: %w", k.id, err)
			}
		}
		rts := rt.Load() - rt0
		after, err := readCounters(ctx, e.srv.admin)
		c.Close()
		if err != nil {
			return err
		}
		calls, cpu := after.sub(before)
		var total int64
		for _, v := range calls {
			total += v
		}
		res.set(k.id, "rt", float64(rts)/commandOps)
		res.set(k.id, "srv", float64(total)/commandOps)
		res.set(k.id, "cpu", cpu*1e6/commandOps)
		res.note("commands %s per acquire+release: %s", k.id, breakdown(calls, commandOps))
	}
	return nil
}

// breakdown lists commands per operation, most frequent first.
func breakdown(calls map[string]int64, ops int) string {
	names := slices.Collect(maps.Keys(calls))
	slices.SortFunc(names, func(a, b string) int {
		if calls[a] != calls[b] {
			return int(calls[b] - calls[a])
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.2f", strings.ToUpper(n), float64(calls[n])/float64(ops)))
	}
	return strings.Join(parts, ", ")
}
