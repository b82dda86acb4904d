package redislane_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A break-it review of protocol 3's one-request and one-id lean paths
// (lib.lua lean_one, lean_release) on states edited by hand, on a private
// redis-server (RealRedis). It found five kinds where a lean hand-off (the
// new one, lean_freed, and protocol 2's alike) and the general path
// differed, two of them the general path's own faults:
//   - a queue member whose sequence number has another width than
//     qmember's 16 digits (17 digits, or none of the padding): the general
//     path counted it ahead of its own entry and left the key with no
//     holder and its waiter never granted; the lean hand-off granted and
//     removed it. Now the general scan mends such a member (its entry's
//     own, or a leftover) and the lean steps leave it to the general path;
//   - numbers of more than 14 digits in the head waiter's record (pid,
//     enqueued, seq: edited by hand), which cjson writes in another form,
//     and control bytes in its strings, which plain_json leaves to cjson:
//     the lean parse copied their bytes; now it reads no such record;
//   - a waiter's pid of 1 and 400 zeros, which cjson reads as inf and
//     cannot write back: the general path's hand-off failed at its store,
//     after its removals were written (Redis does not undo them), and
//     stranded the waiter. Now a store writes such a number 0; and a
//     waiter whose record does not decode no longer holds its place
//     until its deadline.
// Each case runs the real library and one without lean steps from one
// state and compares (runScenario, leanfuzz_test.go); the cases that held
// are kept beside them.

// reseq replaces the queue member of id on key in namespace ns by one
// whose sequence number is seq (digits as given), by hand.
func reseq(c *redis.Client, ns, key, id, seq string) {
	ctx := context.Background()
	k := nsKeys(ns)
	ms, _ := c.ZRangeByLex(ctx, k[2], &redis.ZRangeBy{Min: "[" + key + "\x00", Max: "(" + key + "\x01"}).Result()
	for _, m := range ms {
		if strings.HasSuffix(m, "\x00"+id) {
			c.ZRem(ctx, k[2], m)
			c.ZAdd(ctx, k[2], redis.Z{Score: 0, Member: key + "\x00" + seq + "\x00" + id})
		}
	}
}

// recField returns the value of field in id's record as written.
func recField(c *redis.Client, ns, id, field string) string {
	rec, _ := c.HGet(context.Background(), nsKeys(ns)[0], id).Result()
	i := strings.Index(rec, `"`+field+`":`)
	if i < 0 {
		return ""
	}
	rest := rec[i+len(field)+3:]
	return rest[:strings.IndexAny(rest, ",}")]
}

func TestLeanReviewScenariosRealRedis(t *testing.T) {
	c := fuzzClient(t)
	lean, gen := fuzzLibs(t, c)
	ctx := context.Background()
	enq, rel := enqOp, relOp
	hb := func(o string, ids ...string) fop { return hbOp(o, "60000", ids...) }
	raw := func(desc string, f func(ns string)) fop { return fop{desc: desc, raw: f} }
	// h holds S (limit 1), w0 of another owner waits; with(edit, then...)
	hw := []fop{enq("o1", `[{"id":"h","k":[["S",1]]}]`), enq("o2", `[{"id":"w0","k":[["S",1]]}]`)}
	with := func(ops ...fop) []fop { return append(append([]fop{}, hw...), ops...) }
	// limit 2, held by h and h2, w0 waiting (lean_freed's hand-off)
	hw2 := []fop{enq("o1", `[{"id":"h","k":[["S",2]]}]`), enq("o1", `[{"id":"h2","k":[["S",2]]}]`), enq("o2", `[{"id":"w0","k":[["S",2]]}]`)}
	with2 := func(ops ...fop) []fop { return append(append([]fop{}, hw2...), ops...) }
	seq17 := raw("w0's member with a 17-digit seq", func(ns string) {
		q := recField(c, ns, "w0", "q")
		reseq(c, ns, "S", "w0", strings.Repeat("0", 17-len(q))+q)
	})
	unpadded := raw("w0's member with its seq unpadded", func(ns string) { reseq(c, ns, "S", "w0", recField(c, ns, "w0", "q")) })
	noSeq := raw("w0's member without a seq", func(ns string) { reseq(c, ns, "S", "w0", "x") })
	marker := func(ns string, i int, v string) {
		m, _ := c.HGet(ctx, nsKeys(ns)[1], "\x00").Result()
		p := strings.Split(m, " ")
		p[i] = v
		c.HSet(ctx, nsKeys(ns)[1], "\x00", strings.Join(p, " "))
	}
	future := func() string { return strconv.FormatInt(time.Now().UnixMilli()+60000, 10) }
	scen := map[string][]fop{
		// the kinds found
		"member seq 17 digits":                   with(seq17, rel("o1", "h"), hb("o2", "w0"), enq("o1", `[{"id":"x","k":[["S",1]]}]`), hb("o1", "x")),
		"member seq 17 digits, limit 2":          with2(seq17, rel("o1", "h"), hb("o2", "w0")),
		"member seq unpadded":                    with(unpadded, rel("o1", "h"), rel("o2", "w0"), enq("o1", `[{"id":"x","k":[["S",1]]}]`)),
		"member seq unpadded, limit 2":           with2(unpadded, rel("o1", "h"), hb("o2", "w0")),
		"member without a seq":                   with(noSeq, rel("o1", "h"), hb("o2", "w0"), enq("o1", `[{"id":"x","k":[["S",1]]}]`), hb("o1", "x")),
		"member of another seq than its entry's": with(raw("w0's member with seq 5", func(ns string) { reseq(c, ns, "S", "w0", "5") }), rel("o1", "h"), hb("o2", "w0")),
		"waiter pid 2^53+1":                      with(raw("w0 pid 9007199254740993", func(ns string) { editRecord(c, ns, "w0", `"p":7`, `"p":9007199254740993`) }), rel("o1", "h")),
		"waiter pid of 15 digits":                with(raw("w0 pid 123456789012345", func(ns string) { editRecord(c, ns, "w0", `"p":7`, `"p":123456789012345`) }), rel("o1", "h")),
		"waiter pid 1e400":                       with(raw("w0 pid 1 and 400 zeros", func(ns string) { editRecord(c, ns, "w0", `"p":7`, `"p":1`+strings.Repeat("0", 400)) }), rel("o1", "h"), hb("o2", "w0")),
		"waiter pid 1e400, limit 2":              with2(raw("w0 pid 1 and 400 zeros", func(ns string) { editRecord(c, ns, "w0", `"p":7`, `"p":1`+strings.Repeat("0", 400)) }), rel("o1", "h")),
		"waiter e 2^53+1":                        with(raw("w0 e 9007199254740993", func(ns string) { editRecord(c, ns, "w0", `"e":`+recField(c, ns, "w0", "e"), `"e":9007199254740993`) }), rel("o1", "h")),
		"waiter q of 15 digits": with(raw("w0 q 123456789012345", func(ns string) {
			editRecord(c, ns, "w0", `"q":`+recField(c, ns, "w0", "q"), `"q":123456789012345`)
			reseq(c, ns, "S", "w0", "0123456789012345")
		}), rel("o1", "h")),
		"waiter host with a tab":           with(raw("w0 host a<TAB>b", func(ns string) { editRecord(c, ns, "w0", `"h":"h"`, "\"h\":\"a\tb\"") }), rel("o1", "h")),
		"waiter tool with a DEL":           with(raw("w0 tool a<DEL>", func(ns string) { editRecord(c, ns, "w0", `"k":`, "\"t\":\"a\x7f\",\"k\":") }), rel("o1", "h")),
		"holder pid of 15 digits, release": {enq("o1", `[{"id":"h","k":[["S",1]]}]`), raw("h pid 123456789012345", func(ns string) { editRecord(c, ns, "h", `"p":7`, `"p":123456789012345`) }), rel("o1", "h")},
		// held before the fixes
		"frozen, sole holder, no waiter": {enq("o1", `[{"id":"h","k":[["S",1]]}]`), raw("frozen", func(ns string) { marker(ns, 2, future()) }), rel("o1", "h")},
		"frozen, hand-off":               with(raw("frozen", func(ns string) { marker(ns, 2, future()) }), rel("o1", "h")),
		"frozen, enqueue on a busy key":  {enq("o1", `[{"id":"h","k":[["S",2]]}]`), raw("frozen", func(ns string) { marker(ns, 2, future()) }), enq("o2", `[{"id":"x","k":[["S",2]]}]`)},
		"waiter of owner \"\"":           with(raw("w0 owner empty", func(ns string) { editRecord(c, ns, "w0", `"o":"o2"`, `"o":""`) }), rel("o1", "h")),
		"key record deleted, hand-off":   with(raw("HDEL lanes S", func(ns string) { c.HDel(ctx, nsKeys(ns)[1], "S") }), rel("o1", "h"), enq("o1", `[{"id":"x","k":[["S",1]]}]`)),
		"forced tombstone of a live holder": with(raw("f tombstone of h", func(ns string) {
			c.ZAdd(ctx, nsKeys(ns)[6], redis.Z{Score: float64(time.Now().UnixMilli() + 60000), Member: "f\x00h"})
			marker(ns, 4, future())
		}), rel("o1", "h"), enq("o1", `[{"id":"x","k":[["S",1]]}]`)),
		"nested members of the released holder": with(raw("nested h/w0", func(ns string) {
			c.ZAdd(ctx, nsKeys(ns)[4], redis.Z{Member: "h\x00w0"}, redis.Z{Member: " h\x00w0"})
		}), rel("o1", "h")),
		"head waiter named holder of another key": with(enq("o2", `[{"id":"t","k":[["T",1]]}]`), raw("T held by w0", func(ns string) { setField(c, ns, "T", 4, "w0") }), rel("o1", "h")),
		"first holder in cjson's order, enqueue behind": {enq("o1", `[{"id":"h","k":[["S",2]]}]`),
			raw("h in cjson's order", func(ns string) { editRecord(c, ns, "h", `{"o":"o1","h":"h","p":7,`, `{"h":"h","p":7,"o":"o1",`) }),
			enq("o2", `[{"id":"x","k":[["S",2]]}]`), enq("o2", `[{"id":"y","k":[["S",2]]}]`)},
		"second holder with a rate lane, enqueue behind": {enq("o1", `[{"id":"h","k":[["S",3]]}]`), enq("o1", `[{"id":"h2","k":[["S",3]]}]`),
			raw("h2 with a rate", func(ns string) { editRecord(c, ns, "h2", `["S",3]`, `["S",3,5,1000,1]`) }),
			enq("o2", `[{"id":"x","k":[["S",3]]}]`)},
		"first holder without a deadline, room left": {enq("o1", `[{"id":"h","k":[["S",3]]}]`),
			raw("ZREM deadline h", func(ns string) { c.ZRem(ctx, nsKeys(ns)[3], "h") }), enq("o2", `[{"id":"x","k":[["S",3]]}]`)},
		"releasing holder without a deadline, hand-off": with(raw("ZREM deadline h", func(ns string) { c.ZRem(ctx, nsKeys(ns)[3], "h") }), rel("o1", "h")),
		"key record of limit 2, lane of 1, hand-off":    with(raw("S limit 2", func(ns string) { setField(c, ns, "S", 1, "2") }), rel("o1", "h")),
		"waiter's lane of limit 2, hand-off":            with(raw("w0 limit 2", func(ns string) { editRecord(c, ns, "w0", `["S",1]`, `["S",2]`) }), rel("o1", "h")),
		"two members for the head waiter": with(raw("a second member of w0", func(ns string) {
			c.ZAdd(ctx, nsKeys(ns)[2], redis.Z{Member: "S\x00" + "0000000000000099" + "\x00w0"})
			setField(c, ns, "S", 3, "2")
		}), rel("o1", "h"), rel("o2", "w0")),
		"seq at MAX_SEQ, enqueue on a busy key with room": {enq("o1", `[{"id":"h","k":[["S",2]]}]`), raw("meta seq MAX_SEQ", func(ns string) { c.HSet(ctx, nsKeys(ns)[5], "seq", "99999999999999") }),
			enq("o2", `[{"id":"x","k":[["S",2]]}]`), enq("o2", `[{"id":"y","k":[["S",2]]}]`)},
		"maxttl below the ttl, enqueue on a busy key": {enq("o1", `[{"id":"h","k":[["S",2]]}]`), raw("maxttl 1000", func(ns string) { marker(ns, 3, "1000") }), enq("o2", `[{"id":"x","k":[["S",2]]}]`)},
		"a waiter id of odd bytes":                    {enq("o1", `[{"id":"h","k":[["S",1]]}]`), enq("o2", `[{"id":"w/<&>'!~","k":[["S",1]]}]`), rel("o1", "h")},
		"a head waiter id with a quote":               {enq("o1", `[{"id":"h","k":[["S",1]]}]`), enq("o2", `[{"id":"w\"q","k":[["S",1]]}]`), rel("o1", "h")},
		"a holder released twice":                     {enq("o1", `[{"id":"h","k":[["S",1]]}]`), rel("o1", "h"), rel("o1", "h")},
		"a release by another owner":                  with(rel("o2", "h"), rel("o1", "h")),
		"a stale key record naming holders":           {enq("o1", `[{"id":"h","k":[["S",1]]}]`), raw("S of another epoch", func(ns string) { setField(c, ns, "S", 0, "x") }), enq("o2", `[{"id":"x","k":[["S",1]]}]`), rel("o1", "h")},
		"a holder with a queue member of its own": with(raw("a member of h on S", func(ns string) {
			c.ZAdd(ctx, nsKeys(ns)[2], redis.Z{Member: "S\x00" + "0000000000000000" + "\x00h"})
		}), rel("o1", "h")),
	}
	for name, ops := range scen {
		t.Run(name, func(t *testing.T) { runScenario(t, c, lean, gen, ops, nil) })
	}
}

// The general path alone (the library without lean steps, on a private
// redis-server: RealRedis) on the two states that failed it: the step
// answers, every write it made stands together, and the key passes on.
func TestGeneralPathOnEditedWaiterRealRedis(t *testing.T) {
	c := fuzzClient(t)
	_, gen := fuzzLibs(t, c)
	ctx := context.Background()
	f := &fz{t: t, c: c}
	for name, tc := range map[string]struct {
		edit func(ns string)
		// who grants w0: the release of h (its member, mended, sorts after
		// the one it had: the same scan reads it; or its pid, infinite,
		// is stored as 0), its heartbeat (its member sorts before: the
		// next scan), or nobody (its record does not decode, or it lost
		// its member)
		by string
	}{
		"pid 1e400":            {func(ns string) { editRecord(c, ns, "w0", `"p":7`, `"p":1`+strings.Repeat("0", 400)) }, "release"},
		"record not JSON":      {func(ns string) { c.HSet(ctx, nsKeys(ns)[0], "w0", `{"o":"o2",`) }, ""},
		"member seq 17 digits": {func(ns string) { reseq(c, ns, "S", "w0", "0"+strings.Repeat("0", 15)+recField(c, ns, "w0", "q")) }, "release"},
		"member seq unpadded":  {func(ns string) { reseq(c, ns, "S", "w0", recField(c, ns, "w0", "q")) }, "heartbeat"},
		"member without a seq": {func(ns string) { reseq(c, ns, "S", "w0", "x") }, ""},
	} {
		t.Run(name, func(t *testing.T) {
			ns := "gen-edited-" + strings.ReplaceAll(name, " ", "-")
			t.Cleanup(func() { c.Del(context.Background(), nsKeys(ns)...) })
			call := func(script string, args ...any) []any {
				t.Helper()
				v, err := f.call(gen, ns, script, args)
				if err != nil {
					t.Fatalf("%s %v: %v", script, args, err)
				}
				return v.([]any)
			}
			call("enqueue", "60000", "o1", "h", "7", `[{"id":"h","k":[["S",1]]}]`)
			call("enqueue", "60000", "o2", "h", "7", `[{"id":"w0","k":[["S",1]]}]`)
			tc.edit(ns)
			r := call("release", "o1", "0", "h")
			if line, _ := c.HGet(ctx, nsKeys(ns)[1], "S").Result(); strings.Contains(line, " h") {
				t.Fatalf("after the release S's record is %q: it names h still (the step failed half-way)", line)
			}
			if granted := len(r) == 3 && r[2] == "w0"; granted != (tc.by == "release") {
				t.Fatalf("the release of h answered %v; want w0 granted by it: %v", r, tc.by == "release")
			}
			if hb := call("heartbeat", "60000", "o2", "w0"); (hb[3] == "h") != (tc.by != "") {
				t.Fatalf("w0's heartbeat after the release answered %v; want it held: %v", hb, tc.by != "")
			}
			// a later request is not stranded behind what is left of w0:
			// granted at once or by its heartbeat, once w0 is released or
			// found gone
			call("release", "o2", "0", "w0")
			call("enqueue", "60000", "o1", "h", "7", `[{"id":"x","k":[["S",1]]}]`)
			if r = call("heartbeat", "60000", "o1", "x"); r[3] != "h" {
				t.Fatalf("x after w0's end: %v; want it held (the key wedged)", r)
			}
		})
	}
}
