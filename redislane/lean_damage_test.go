package redislane_test

import (
	"context"
	"fmt"
	"testing"
)

// A reviewer's cases: more damage before lean steps than the fuzzer makes (markers
// alone, one queue member, a key record's counts), each compared with
// the general path. Real Redis (private server).
func TestLeanDamageScenariosRealRedis(t *testing.T) {
	c := fuzzClient(t)
	lean, gen := fuzzLibs(t, c)
	ctx := context.Background()
	enq := func(o, js string) fop {
		return fop{desc: "enq " + js, script: "enqueue", args: []any{"60000", o, "h", "7", js}}
	}
	rel := relOp
	raw := func(desc string, f func(ns string)) fop { return fop{desc: desc, raw: f} }
	hdel := func(k int, field string) fop {
		return raw(fmt.Sprintf("HDEL key%d %q", k, field), func(ns string) { c.HDel(ctx, nsKeys(ns)[k], field) })
	}
	zrem := func(k int, m string) fop {
		return raw(fmt.Sprintf("ZREM key%d %q", k, m), func(ns string) { c.ZRem(ctx, nsKeys(ns)[k], m) })
	}
	setRec := func(key string, edit func(string) string) fop {
		return raw("edit record of "+key, func(ns string) {
			v, _ := c.HGet(ctx, nsKeys(ns)[1], key).Result()
			c.HSet(ctx, nsKeys(ns)[1], key, edit(v))
		})
	}
	hold := enq("o1", `[{"id":"h","k":[["S",1]]}]`)
	wait := enq("o2", `[{"id":"w","k":[["S",1]]}]`)
	wait2 := enq("o2", `[{"id":"w2","k":[["S",1]]}]`)
	scen := map[string][]fop{
		"queue marker, handoff":     {hold, wait, zrem(2, "\x00"), rel("o1", "h")},
		"nested marker, handoff":    {hold, wait, zrem(4, "\x00"), rel("o1", "h")},
		"meta marker, handoff":      {hold, wait, hdel(5, "\x00"), rel("o1", "h")},
		"meta seq, handoff":         {hold, wait, hdel(5, "seq"), rel("o1", "h"), wait2},
		"lanes marker, handoff":     {hold, wait, hdel(1, "\x00"), rel("o1", "h")},
		"entries marker, handoff":   {hold, wait, hdel(0, "\x00"), rel("o1", "h")},
		"deadlines marker, handoff": {hold, wait, zrem(3, "\x00"), rel("o1", "h")},
		"tombs, handoff":            {hold, wait, raw("DEL tombs", func(ns string) { c.Del(ctx, nsKeys(ns)[6]) }), rel("o1", "h")},
		"queue marker, no waiter":   {hold, zrem(2, "\x00"), rel("o1", "h")},
		"meta marker, no waiter":    {hold, hdel(5, "\x00"), rel("o1", "h")},
		"queue marker, enqueue":     {hold, zrem(2, "\x00"), wait},
		"meta marker, enqueue":      {hold, hdel(5, "\x00"), wait},
		"meta marker, idle enqueue": {hdel(5, "\x00"), hold},
		"queue marker, idle enq":    {zrem(2, "\x00"), hold},
		"nested marker, idle enq":   {zrem(4, "\x00"), hold},
		"waiter's member lost":      {hold, wait, wait2, raw("ZREM queue member of w", func(ns string) { c.ZRem(ctx, nsKeys(ns)[2], "S\x001\x00w") }), rel("o1", "h")},
		"waiter count +1":           {hold, wait, setRec("S", func(v string) string { return v[:len(v)-5] + "2 " + v[len(v)-2:] }), rel("o1", "h")},
		"waiter's entry lost":       {hold, wait, hdel(0, "w"), rel("o1", "h")},
		"waiter's deadline lost":    {hold, wait, zrem(3, "w"), rel("o1", "h")},
		"holder listed twice":       {hold, wait, setRec("S", func(v string) string { return v + " h" }), rel("o1", "h")},
	}
	for name, ops := range scen {
		t.Run(name, func(t *testing.T) { runScenario(t, c, lean, gen, ops, nil) })
	}
}
