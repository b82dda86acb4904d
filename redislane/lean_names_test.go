package redislane_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestLeanOddNamesRealRedis runs, on a real Redis server of its own, the
// lean library and the general path (fuzzLibs) side by side through holders,
// waiters, a cancelled middle waiter, hand-offs, heartbeats and an id
// reused, on keys, ids and owners with the bytes the lean parse and the
// record's head look for (`]`, `],"s":"`, quotes, backslashes, pattern
// characters, a line separator, 256- and 512-byte names): every reply, hint
// and stored byte must agree (runScenario). From a break-it review of
// protocol 3's lean paths, which found them agreeing.
func TestLeanOddNamesRealRedis(t *testing.T) {
	c := fuzzClient(t)
	lean, gen := fuzzLibs(t, c)
	js := func(id, key string, limit int) string {
		b, err := json.Marshal([]map[string]any{{"id": id, "k": []any{[]any{key, limit}}}})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	enq, rel := enqOp, relOp
	hb := func(owner string, ids ...string) fop { return hbOp(owner, "60000", ids...) }
	keys := []string{"]", `],"s":"`, "a]b", "%d+.*", "日本", "a\u2028b", "x/y", "k k", "[", "{", "}", ",", ":", strings.Repeat("k", 512)}
	ids := []string{`a"s":"b`, `]`, `w\q`, "%", strings.Repeat("i", 256), "a,b", "{}", `"`}
	scen := map[string][]fop{}
	for i, k := range keys {
		for _, limit := range []int{1, 2} {
			name := k
			if len(name) > 20 {
				name = name[:20]
			}
			scen[name+"/"+string(rune('a'+i))+string(rune('0'+limit))] = []fop{
				enq("o1", js("h1", k, limit)), enq("o1", js("h2", k, limit)), enq("o2", js("w1", k, limit)), enq("o2", js("w2", k, limit)),
				enq("o2", js("w3", k, limit)), rel("o2", "w2"), rel("o1", "h1"), hb("o2", "w1", "w3"), rel("o1", "h2"), rel("o2", "w1"), rel("o2", "w3"),
				enq("o1", js("h1", k, limit)), rel("o1", "h1"),
			}
		}
	}
	for i, id := range ids {
		for _, k := range []string{"S", "]"} {
			scen["id "+string(rune('a'+i))+" on "+k] = []fop{
				enq("o1", js("h", k, 1)), enq("o2", js(id, k, 1)), enq("o2", js("z", k, 1)), rel("o1", "h"), hb("o2", id, "z"), rel("o2", id), hb("o2", "z"), rel("o2", "z"),
				enq("o1", js(id, k, 1)), enq("o2", js("y", k, 1)), rel("o1", id), rel("o2", "y"),
			}
		}
	}
	for _, owner := range []string{`o"q`, `o\b`, "o]", "%o"} {
		scen["owner "+owner] = []fop{
			enq(owner, js("h", "S", 1)), enq("o2", js("w", "S", 1)), rel(owner, "h"), enq(owner, js("v", "S", 1)), rel("o2", "w"), rel(owner, "v"),
		}
	}
	for name, ops := range scen {
		t.Run(name, func(t *testing.T) { runScenario(t, c, lean, gen, ops, nil) })
	}
}

// TestLeanNestingScenariosRealRedis is TestLeanOddNamesRealRedis's
// comparison (a real Redis server of its own) on the steps around the lean
// paths that nesting, settles, forced releases and expiry bring: a child
// borrowing from a lean-granted parent whose release has a waiter behind
// it, a nested waiter on another key, a heartbeat that shortens a holder's
// TTL until it lapses (the lean steps defer to the reap), an id reused by
// another owner on another key, a settled id enqueued again, an operator's
// release by force before the owner's, and a waiter on two keys ahead of
// one on one through sole-holder hand-offs.
func TestLeanNestingScenariosRealRedis(t *testing.T) {
	c := fuzzClient(t)
	lean, gen := fuzzLibs(t, c)
	enq, hb, rel := enqOp, hbOp, relOp
	// The lapse: a TTL of 300 ms, then 500 ms with no step (the clock the
	// scripts read is Redis's TIME, the same for both libraries).
	lapse := fop{desc: "sleep", sleep: 500 * time.Millisecond}
	scen := map[string][]fop{
		"borrow, then the lender's release": {
			enq("o1", `[{"id":"p","k":[["S",1]]}]`), enq("o1", `[{"id":"c","k":[["S",1]],"l":["p"]}]`),
			enq("o2", `[{"id":"w","k":[["S",1]]}]`), rel("o1", "p"), hb("o1", "60000", "c"), rel("o1", "c"), hb("o2", "60000", "w"), rel("o2", "w"),
		},
		"a child waits on another key, the parent released": {
			enq("o1", `[{"id":"p","k":[["S",1]]}]`), enq("o2", `[{"id":"w","k":[["S",1]]}]`),
			enq("o1", `[{"id":"c","k":[["T",1]],"l":["p"]}]`), enq("o2", `[{"id":"x","k":[["T",1]]}]`),
			rel("o1", "p"), rel("o1", "c"), rel("o2", "x"), rel("o2", "w"),
		},
		"a heartbeat shortens the TTL, then lean steps": {
			enq("o1", `[{"id":"p","k":[["S",1]]}]`), enq("o2", `[{"id":"w","k":[["S",1]]}]`),
			hb("o1", "300", "p"), lapse, enq("o2", `[{"id":"y","k":[["S",1]]}]`), rel("o1", "p"), rel("o2", "w"), rel("o2", "y"),
		},
		"an id reused after a lean release, on another key": {
			enq("o1", `[{"id":"p","k":[["S",1]]}]`), rel("o1", "p"), enq("o1", `[{"id":"p","k":[["T",2]]}]`),
			enq("o2", `[{"id":"p","k":[["T",2]]}]`), enq("o2", `[{"id":"q","k":[["T",2]]}]`), enq("o2", `[{"id":"r","k":[["T",2]]}]`), rel("o1", "p"), rel("o2", "r"), rel("o2", "q"),
		},
		"a settled id enqueued again": {
			enq("o1", `[{"id":"p","k":[["S",1]]}]`), {desc: "settle", script: "release", args: []any{"o1", "2000", "p"}},
			enq("o1", `[{"id":"p","k":[["S",1]]}]`), enq("o1", `[{"id":"q","k":[["S",1]]}]`), rel("o1", "q"),
		},
		"a release by force, then the owner's": {
			enq("o1", `[{"id":"p","k":[["S",1]]}]`), enq("o2", `[{"id":"w","k":[["S",1]]}]`),
			{desc: "force", script: "release", args: []any{"", "5000", "p"}}, rel("o1", "p"), enq("o1", `[{"id":"p","k":[["S",1]]}]`), rel("o2", "w"), rel("o1", "p"),
		},
		"a waiter on two keys, then sole-holder hand-offs": {
			enq("o1", `[{"id":"a","k":[["S",1]]}]`), enq("o1", `[{"id":"b","k":[["T",1]]}]`),
			enq("o2", `[{"id":"w","k":[["S",1],["T",1]]}]`), enq("o2", `[{"id":"x","k":[["S",1]]}]`),
			rel("o1", "a"), rel("o1", "b"), rel("o2", "w"), rel("o2", "x"),
		},
	}
	for name, ops := range scen {
		t.Run(name, func(t *testing.T) { runScenario(t, c, lean, gen, ops, nil) })
	}
}
