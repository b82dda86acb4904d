package redislane_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/scripts/lua"
)

// TestLeanStepsOnBusyKeyRealRedis: on a key that never goes idle, the
// lean steps take every hand-off and every enqueue behind a holder, though
// the namespace's first step took the general path. Before, the general
// path wrote its records with cjson, in an order the lean steps do not
// read: a release of the holder it made went general, that release wrote
// the next holder's record with cjson, the next enqueue behind that holder
// read it and went general too, and so on for as long as the key stayed
// busy (1.1 million instructions per grant instead of 0.6, by luacost
// -fcall "one key, two owners in turn"). Now the general path writes a
// plain entry's record in the lean form (plain_json in lib.lua).
//
// Each step's count of the commands Redis ran inside it (INFO
// commandstats, on a private redis-server: RealRedis) is compared with the
// same step in a namespace whose records the lean steps wrote (a warm
// namespace, as in lean_test.go): the general path runs more commands for
// both (its full check, its scan), so an equal count is the lean path.
func TestLeanStepsOnBusyKeyRealRedis(t *testing.T) {
	c := fuzzClient(t)
	ctx := context.Background()
	step := countedSteps(t, c)
	enqueue := func(ns, owner, id string) ([]any, int64) {
		return step(ns, "enqueue", "600000", owner, "host", "7", `[{"id":"`+id+`","k":[["k",1]]}]`)
	}
	// release releases id and checks that it granted next alone.
	release := func(ns, owner, id, next string) int64 {
		t.Helper()
		r, n := step(ns, "release", owner, "0", id)
		if g, _ := r[2].([]any); len(g) != 1 || g[0] != next {
			t.Fatalf("release of %s granted %v; want %s", id, r[2], next)
		}
		return n
	}
	for _, ns := range []string{"busy-warm", "busy"} {
		t.Cleanup(func() { c.Del(context.Background(), nsKeys(ns)...) })
	}

	// The reference: records the lean steps wrote.
	step("busy-warm", "enqueue", "600000", "o0", "host", "7", `[{"id":"warm","k":[["warm",1]]}]`)
	enqueue("busy-warm", "o0", "h")
	_, wantEnq := enqueue("busy-warm", "o1", "w")
	wantRel := release("busy-warm", "o0", "h", "w")

	// The busy key: its first step makes the state (the general path),
	// and its records are in the lean form from the start.
	r, _ := enqueue("busy", "o0", "t0")
	rec, err := c.HGet(ctx, nsKeys("busy")[0], "t0").Result()
	if err != nil {
		t.Fatal(err)
	}
	st := r[1].([]any)[0].([]any)
	var e int64
	if _, err := fmt.Sscanf(rec[strings.Index(rec, `"e":`):], `"e":%d`, &e); err != nil {
		t.Fatalf("record %s: %v", rec, err)
	}
	want := fmt.Sprintf(`{"o":"o0","h":"host","p":7,"k":[["k",1]],"s":"h","q":0,"e":%d,"g":%d,"x":{"k":"%s"}}`, e, e, st[2].([]any)[1])
	if rec != want {
		t.Errorf("the general path's record\n %s\nwant the lean form\n %s", rec, want)
	}
	enqueue("busy", "o1", "t1")
	for i := range 6 {
		owner := fmt.Sprintf("o%d", i%2)
		if n := release("busy", owner, fmt.Sprintf("t%d", i), fmt.Sprintf("t%d", i+1)); n != wantRel {
			t.Errorf("hand-off %d ran %d commands; the lean hand-off runs %d", i, n, wantRel)
		}
		if _, n := enqueue("busy", owner, fmt.Sprintf("t%d", i+2)); n != wantEnq {
			t.Errorf("enqueue %d behind the holder ran %d commands; the lean enqueue runs %d", i, n, wantEnq)
		}
	}
}

// TestLeanEnqueueWhileTombstonesLiveRealRedis: a tombstone in the
// namespace sends to the general path only the enqueues of its own id.
// Before, every enqueue of the namespace went general while any tombstone
// lived: for an hour after an operator's release by force (its
// tombstones last lanes.MaxTTL), for twice the TTL after a settle. Now the
// lean enqueue asks tombs about its ids (one ZMSCORE) and goes on when
// none has one; an id settled is still refused ("t") and an id released
// by force is enqueued, its tombstone cleared, by the general path. On a
// private redis-server (RealRedis); commands counted as in
// TestLeanStepsOnBusyKeyRealRedis.
func TestLeanEnqueueWhileTombstonesLiveRealRedis(t *testing.T) {
	c := fuzzClient(t)
	ctx := context.Background()
	step := countedSteps(t, c)
	// state is what an enqueue of id on its own key answered.
	enqueue := func(ns, id string) (string, int64) {
		r, n := step(ns, "enqueue", "600000", "o1", "host", "7", `[{"id":"`+id+`","k":[["k-`+id+`",1]]}]`)
		return r[1].([]any)[0].([]any)[1].(string), n
	}
	for _, ns := range []string{"tomb-none", "tomb"} {
		t.Cleanup(func() { c.Del(context.Background(), nsKeys(ns)...) })
		enqueue(ns, "warm") // the state, and the TTL noted
	}
	_, want := enqueue("tomb-none", "a")

	// In "tomb": one id released by force (its tombstone lasts an hour),
	// one settled by its owner.
	enqueue("tomb", "forced")
	step("tomb", "release", "", "3600000", "forced")
	enqueue("tomb", "settled")
	step("tomb", "release", "o1", "600000", "settled")

	if st, n := enqueue("tomb", "a"); st != "h" || n != want+1 {
		t.Errorf("enqueue of a new id while tombstones live: %q in %d commands; want h in %d (the lean step and one ZMSCORE of tombs)", st, n, want+1)
	}
	if st, _ := enqueue("tomb", "settled"); st != "t" {
		t.Errorf("enqueue of the settled id: %q; want t (refused while its tombstone lives)", st)
	}
	if st, _ := enqueue("tomb", "forced"); st != "h" {
		t.Errorf("enqueue of the id released by force: %q; want h", st)
	}
	if err := c.ZScore(ctx, nsKeys("tomb")[6], "f\x00forced").Err(); err == nil {
		t.Errorf("the tombstone of the id released by force outlived its new entry")
	}
}

// countedSteps loads the library on c, a private redis-server, and
// returns a function that runs one of its scripts on the namespace ns and
// returns its reply and the count of the commands Redis ran inside it
// (INFO commandstats, but for the FCALL, INFO and the client's own
// commands).
func countedSteps(t *testing.T, c *redis.Client) func(ns, script string, args ...any) ([]any, int64) {
	name, code := lua.Library()
	if err := c.FunctionLoad(context.Background(), code).Err(); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	f := &fz{t: t, c: c}
	inner := func() int64 {
		return commandStat(t, c, "calls=", func(name string) bool {
			return name != "info" && name != "fcall" && name != "hello" && name != "client"
		})
	}
	return func(ns, script string, args ...any) ([]any, int64) {
		t.Helper()
		n0 := inner()
		v, err := f.call(name, ns, script, args)
		if err != nil {
			t.Fatalf("%s %v: %v", script, args, err)
		}
		r, ok := v.([]any)
		if !ok {
			t.Fatalf("%s %v = %v", script, args, v)
		}
		return nestedReply(t, script, r, len(args)-2), inner() - n0
	}
}

// nestedReply is the flat reply r of script (protocol 4) in the nested
// form of protocol 2, which these tests read: {epoch, {{id, state,
// {values}, seq(, wait)}, ...}, more} for enqueue and heartbeat (without
// the holder TTLs: TestHolderTTLRealRedis reads those), {epoch, {state per
// id}, {granted ids}} for release (ids: how many it named).
func nestedReply(t testing.TB, script string, r []any, ids int) []any {
	t.Helper()
	if script == "release" {
		if len(r) < 1+ids {
			t.Fatalf("release answered %v for %d ids", r, ids)
		}
		return []any{r[0], r[1 : 1+ids], r[1+ids:]}
	}
	var list []any
	for at := 2; at < len(r); {
		n, _ := r[at+5].(int64)
		st := []any{r[at], r[at+1], r[at+6 : at+6+int(n)], r[at+2]}
		if w, _ := r[at+3].(int64); w > 0 {
			st = append(st, w)
		}
		list = append(list, st)
		at += 6 + int(n)
	}
	return []any{r[0], list, r[1]}
}

// TestLeanReleaseOfWaitersRealRedis: an owner's release of waiters of its
// own, on a key whose holder fills its limit, takes the lean path
// (lean_leave in lib.lua): Session.Close of many waiters and a cancelled
// wait cost no cjson and no general machinery. By the commands Redis ran
// inside the step (INFO commandstats, on a private redis-server:
// RealRedis): the lean path's twelve, where the general path reads the
// key's record alone (HGET) and meta's marker with HEXISTS. Where a
// waiter behind may take the room, the general path decides (and grants).
func TestLeanReleaseOfWaitersRealRedis(t *testing.T) {
	c := fuzzClient(t)
	ctx := context.Background()
	step := countedSteps(t, c)
	ns := "leave"
	t.Cleanup(func() { c.Del(context.Background(), nsKeys(ns)...) })
	enqueue := func(owner, js string) {
		step(ns, "enqueue", "600000", owner, "host", "7", js)
	}
	enqueue("o0", `[{"id":"warm","k":[["warm",1]]}]`) // the state, and the TTL noted
	enqueue("o0", `[{"id":"h","k":[["k",1]]},{"id":"i","k":[["r",2]]}]`)
	enqueue("o1", `[{"id":"w0","k":[["k",1]]},{"id":"w1","k":[["k",1]]},{"id":"w2","k":[["k",1]]},{"id":"w3","k":[["k",1]]}]`)

	before := commandStats(t, c, "calls=")
	r, _ := step(ns, "release", "o1", "0", "w1", "w3")
	got := commandStats(t, c, "calls=")
	for name, n := range before {
		got[name] -= n
	}
	// (zrangebylex: the head of k, whose holder fills its limit: the
	// waiter next once these leave is told to look again when one of
	// them was before it; w0 stays the head, so no more)
	want := map[string]int64{"time": 1, "hmget": 3, "zrangebyscore": 1, "zscore": 2, "zmscore": 1, "zrem": 2, "hdel": 1, "hset": 1, "zrangebylex": 1}
	for name, n := range got {
		if name == "fcall" || name == "info" || name == "hello" || name == "client" {
			continue
		}
		if n != want[name] {
			t.Errorf("release of two waiters ran %s %d times; the lean path runs %v", name, n, want)
		}
	}
	if was, _ := r[1].([]any); fmt.Sprint(was) != "[w w]" || fmt.Sprint(r[2]) != "[]" {
		t.Errorf("release of two waiters answered %v; want [w w] and nobody granted", r)
	}
	line, _ := c.HGet(ctx, nsKeys(ns)[1], "k").Result()
	if f := strings.Fields(line); len(f) != 5 || f[3] != "2" || f[4] != "h" {
		t.Errorf("record of k after the release: %q; want 2 waiters, held by h", line)
	}
	queue, _ := c.ZRangeByLex(ctx, nsKeys(ns)[2], &redis.ZRangeBy{Min: "[k\x00", Max: "(k\x01"}).Result()
	if len(queue) != 2 || !strings.HasSuffix(queue[0], "\x00w0") || !strings.HasSuffix(queue[1], "\x00w2") {
		t.Errorf("queue of k after the release: %q; want w0, w2", queue)
	}

	// A waiter on a key with room, whose leaving lets the one behind in:
	// the general path's (it grants v).
	enqueue("o1", `[{"id":"x","k":[["k",1],["r",2]]}]`)
	enqueue("o0", `[{"id":"v","k":[["r",2]]}]`)
	before = commandStats(t, c, "calls=")
	r, _ = step(ns, "release", "o1", "0", "x")
	got = commandStats(t, c, "calls=")
	if fmt.Sprint(r[2]) != "[v]" {
		t.Errorf("release of x answered %v; want v granted", r)
	}
	if got["hexists"] == before["hexists"] {
		t.Errorf("release of x that grants v: no HEXISTS of meta's marker; want the general path")
	}
	// The general path takes what the lean attempt read of entries: one
	// HMGET of entries, and one of lanes by each path.
	if n := got["hmget"] - before["hmget"]; n != 3 {
		t.Errorf("release of x ran HMGET %d times; want 3 (entries once, the lean attempt's read taken by the general path; lanes by each)", n)
	}
}
