package redislane_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// A third reviewer's cases: hand-edited key records (extra spaces, a
// limit that disagrees with the lanes') before lean steps, each compared
// with the general path (runScenario). Real Redis (private server).
func TestLeanDamageRecordsRealRedis(t *testing.T) {
	c := fuzzClient(t)
	lean, gen := fuzzLibs(t, c)
	ctx := context.Background()
	enq := func(o, id string, keys ...string) fop {
		var ks []string
		for _, k := range keys {
			lim := "1"
			if i := strings.IndexByte(k, ':'); i >= 0 {
				k, lim = k[:i], k[i+1:]
			}
			ks = append(ks, fmt.Sprintf(`["%s",%s]`, k, lim))
		}
		js := fmt.Sprintf(`[{"id":"%s","k":[%s]}]`, id, strings.Join(ks, ","))
		return fop{desc: "enq " + js, script: "enqueue", args: []any{"60000", o, "h", "7", js}}
	}
	rel := relOp
	edit := func(key string, f func(string) string) fop {
		return fop{desc: "edit record of " + key, raw: func(ns string) {
			v, _ := c.HGet(ctx, nsKeys(ns)[1], key).Result()
			c.HSet(ctx, nsKeys(ns)[1], key, f(v))
		}}
	}
	// field i (0 epoch, 1 limit, 2 token, 3 waiters) of a record set to v
	field := func(key string, i int, v string) fop {
		return edit(key, func(r string) string {
			p := strings.SplitN(r, " ", 5)
			p[i] = v
			return strings.Join(p, " ")
		})
	}
	add := func(key, holder string) fop { return edit(key, func(r string) string { return r + " " + holder }) }
	scen := map[string][]fop{
		// holder ids repeated across keys
		"h of S also named on T, T has a waiter, release h": {enq("o1", "h", "S"), enq("o1", "t", "T"), enq("o2", "w", "T"), add("T", "h"), rel("o1", "h"), rel("o1", "t")},
		"h of S also named on T, release t (hand-off on T)": {enq("o1", "h", "S"), enq("o1", "t", "T"), enq("o2", "w", "T"), add("T", "h"), rel("o1", "t")},
		"h on S and T, T names h twice, waiter on T":        {enq("o1", "h", "S", "T"), enq("o2", "w", "T"), add("T", "h"), rel("o1", "h")},
		"h named twice, no waiter, then enqueue":            {enq("o1", "h", "S"), add("S", "h"), rel("o1", "h"), enq("o2", "w", "S")},
		"two holders released together, one named twice":    {enq("o1", "h", "U:2"), enq("o1", "h2", "U:2"), enq("o2", "w", "U:2"), add("U", "h2"), rel("o1", "h", "h2")},
		// extra spaces
		"two spaces before the holder, waiter":  {enq("o1", "h", "S"), enq("o2", "w", "S"), edit("S", func(r string) string { return strings.Replace(r, " h", "  h", 1) }), rel("o1", "h")},
		"two spaces before the holder, no wait": {enq("o1", "h", "S"), edit("S", func(r string) string { return strings.Replace(r, " h", "  h", 1) }), rel("o1", "h"), enq("o2", "w", "S")},
		"trailing space after the holder":       {enq("o1", "h", "S"), enq("o2", "w", "S"), edit("S", func(r string) string { return r + " " }), rel("o1", "h")},
		"trailing space, no waiter, enqueue":    {enq("o1", "h", "S"), edit("S", func(r string) string { return r + " " }), rel("o1", "h"), enq("o2", "w", "S")},
		"two spaces between fields":             {enq("o1", "h", "S"), enq("o2", "w", "S"), edit("S", func(r string) string { return strings.Replace(r, " ", "  ", 1) }), rel("o1", "h")},
		"tab before the holder":                 {enq("o1", "h", "S"), enq("o2", "w", "S"), edit("S", func(r string) string { return strings.Replace(r, " h", "\th", 1) }), rel("o1", "h")},
		// a waiter count that disagrees
		"waiter count 0, waiter queued":        {enq("o1", "h", "S"), enq("o2", "w", "S"), field("S", 3, "0"), rel("o1", "h")},
		"waiter count 0, two waiters, enqueue": {enq("o1", "h", "S"), enq("o2", "w", "S"), enq("o2", "w2", "S"), field("S", 3, "0"), enq("o2", "w3", "S"), rel("o1", "h")},
		"waiter count 5, one waiter":           {enq("o1", "h", "S"), enq("o2", "w", "S"), field("S", 3, "5"), rel("o1", "h")},
		"limit 2 in record, lanes name 1":      {enq("o1", "h", "S"), enq("o2", "w", "S"), field("S", 1, "2"), rel("o1", "h")},
		// a record of another epoch
		"record of another epoch, holder":     {enq("o1", "h", "S"), field("S", 0, "999"), rel("o1", "h")},
		"record of another epoch, waiter":     {enq("o1", "h", "S"), enq("o2", "w", "S"), field("S", 0, "999"), rel("o1", "h")},
		"record of another epoch, enqueue":    {enq("o1", "h", "S"), field("S", 0, "999"), enq("o2", "w", "S")},
		"record of another epoch on T of two": {enq("o1", "h", "S", "T"), enq("o2", "w", "T"), field("T", 0, "999"), rel("o1", "h")},
		"record epoch 0 with holders":         {enq("o1", "h", "S"), enq("o2", "w", "S"), field("S", 0, "0"), rel("o1", "h")},
	}
	for name, ops := range scen {
		t.Run(name, func(t *testing.T) { runScenario(t, c, lean, gen, ops, nil) })
	}
}
