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
//     command, one per pipeline).
//   - sent: commands the client sent per pair, each command of a pipeline
//     counted: the commands Redis runs at the top level for it (EVALSHA,
//     FCALL, SET, ...).
//   - srv: commands the server executed per pair, summed over every
//     cmdstat line of INFO commandstats. Redis 7 counts a script's
//     redis.call()s there too, so a script costs 1 + its inner commands.
//   - inner: srv - sent, the commands run inside scripts and functions.
//   - script: microseconds Redis spent in scripts per pair (the usec of
//     EVALSHA, EVAL and FCALL in commandstats, inner commands included).
//   - stime: microseconds Redis spent in the commands the client sent
//     (script or not) per pair.
//   - cpu: the server's used_cpu_user + used_cpu_sys per pair, in µs:
//     script execution and network I/O alike.
//
// INFO is server-wide: other clients of a shared server inflate srv, inner,
// script and cpu (use -spawn for a private server).
func measureCommands(ctx context.Context, e *env, ks []*kind, res *results) error {
	for _, k := range ks {
		if !k.redis {
			continue
		}
		if err := commands(ctx, e, k, res); err != nil {
			return fmt.Errorf("%s: %w", k.id, err)
		}
	}
	return nil
}

func commands(ctx context.Context, e *env, k *kind, res *results) error {
	var rt atomic.Int64
	log := newCmdLog()
	c, err := k.open(ctx, proc{e: e, kind: k.id, scope: "cmds", rt: &rt, log: log})
	if err != nil {
		return err
	}
	defer c.Close()
	pair := func() error {
		rel, err := c.Acquire(ctx, "k")
		if err != nil {
			return err
		}
		return rel()
	}
	for range 20 { // scripts loaded, connection open
		if err := pair(); err != nil {
			return err
		}
	}
	before, err := readCounters(ctx, e.srv.admin)
	if err != nil {
		return err
	}
	rt0, sent0 := rt.Load(), log.snapshot()
	for range commandOps {
		if err := pair(); err != nil {
			return err
		}
	}
	rts, sent1 := rt.Load()-rt0, log.snapshot()
	after, err := readCounters(ctx, e.srv.admin)
	if err != nil {
		return err
	}
	calls, cpu := after.sub(before)
	usec := after.usecSub(before)
	var total, sent, script, stime int64
	for _, v := range calls {
		total += v
	}
	for name, v := range sent1 {
		sent += v - sent0[name]
		if v > sent0[name] {
			stime += usec[name]
		}
	}
	for name, v := range usec {
		if isScriptCommand(name) {
			script += v
		}
	}
	ops := float64(commandOps)
	res.set(k.id, "rt", float64(rts)/ops)
	res.set(k.id, "sent", float64(sent)/ops)
	res.set(k.id, "srv", float64(total)/ops)
	res.set(k.id, "inner", float64(total-sent)/ops)
	res.set(k.id, "script", float64(script)/ops)
	res.set(k.id, "stime", float64(stime)/ops)
	res.set(k.id, "cpu", cpu*1e6/ops)
	res.note("commands %s per acquire+release: %s", k.id, breakdown(calls, commandOps))
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
