package redislane_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

func doctor(t *testing.T, b *redislane.Backend, repair bool) *redislane.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := b.Doctor(ctx, repair)
	if err != nil {
		t.Fatalf("Doctor(%v) = %v", repair, err)
	}
	return r
}

func mentions(list []string, s string) bool {
	return slices.ContainsFunc(list, func(x string) bool { return strings.Contains(x, s) })
}

// Doctor finds each kind of inconsistency between a namespace's keys and,
// with repair, fixes it: stray members are removed, an entry its index
// lost resets the namespace, a missing key too, protocol 1's leftovers go.
func TestDoctor(t *testing.T) {
	bothServers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		b := newBackend(t, c)
		k := b.Keys()
		o := lanes.Owner{ID: "doc-owner", Host: "h", PID: 1}
		if _, err := b.Enqueue(ctx, o, time.Minute, []lanes.Request{{ID: "A", Lanes: lane("K")}, {ID: "W", Lanes: lane("K")}}); err != nil {
			t.Fatal(err)
		}
		if r := doctor(t, b, false); !r.OK() {
			t.Fatalf("Doctor() of a sound namespace = %+v; want nothing wrong", r)
		}
		// Stray members: no such entry, or an entry that does not account
		// for them; a key record whose count of waiters is off.
		c.ZAdd(ctx, k[2], redis.Z{Member: "K\x000000000000000098\x00ghost"})
		c.ZAdd(ctx, k[2], redis.Z{Member: "J\x000000000000000099\x00A"})
		c.ZAdd(ctx, k[3], redis.Z{Score: 1e15, Member: "ghost"})
		c.ZAdd(ctx, k[4], redis.Z{Member: " A\x00ghost"})
		r := doctor(t, b, false)
		for _, want := range []string{"K|0000000000000098|ghost", "J|0000000000000099|A", "of ghost", " A|ghost", `key "K": counts 1 waiters, its queue has 2`} {
			if !mentions(r.Problems, want) {
				t.Errorf("Doctor() problems %q; want one naming %s", r.Problems, want)
			}
		}
		// The stray queue member made K's count look off; removing it mends that.
		if r := doctor(t, b, true); len(r.Repairs) != 4 {
			t.Fatalf("Doctor(repair) repairs %q; want 4", r.Repairs)
		}
		if r := doctor(t, b, false); !r.OK() {
			t.Fatalf("after the repair: %+v; want nothing wrong", r)
		}
		// An entry its index lost (A, out of K's holders): the namespace is reset.
		rec, _ := c.HGet(ctx, k[1], "K").Result()
		c.HSet(ctx, k[1], "K", strings.TrimSuffix(rec, " A"))
		r = doctor(t, b, true)
		if !mentions(r.Problems, "entry A: holds key \"K\"") || !mentions(r.Repairs, "reset") {
			t.Fatalf("Doctor(repair) after A left K's holders = %+v; want the problem and a reset", r)
		}
		if st, err := b.Heartbeat(ctx, o.ID, time.Minute, []string{"A", "W"}); err != nil || st[0].State != lanes.Gone || st[1].State != lanes.Gone {
			t.Fatalf("after the reset: %+v, %v; want A and W gone", st, err)
		}
		// A missing key, and protocol 1's leftovers.
		base := strings.TrimSuffix(k[0], "entries")
		c.Set(ctx, base+"seq", "7", 0)
		t.Cleanup(func() { c.Del(context.Background(), base+"seq") })
		if _, err := b.Enqueue(ctx, o, time.Minute, []lanes.Request{{ID: "B", Lanes: lane("K")}}); err != nil {
			t.Fatal(err)
		}
		c.Del(ctx, k[4])
		marker, _ := c.HGet(ctx, k[1], "\x00").Result()
		r = doctor(t, b, false)
		if !slices.Contains(r.Missing, k[4]) || !slices.Contains(r.Legacy, base+"seq") {
			t.Fatalf("Doctor() = %+v; want %s missing and %sseq left over", r, k[4], base)
		}
		// A check changes nothing: the marker (the epoch) and B's record stay
		// until the next step or a repair resets the namespace.
		if m, _ := c.HGet(ctx, k[1], "\x00").Result(); m != marker {
			t.Errorf("after Doctor(check): the marker of lanes %q; want it unchanged, %q", m, marker)
		}
		if n, _ := c.HExists(ctx, k[0], "B").Result(); !n {
			t.Errorf("after Doctor(check): B's record is gone; want the check to change nothing")
		}
		doctor(t, b, true)
		if r := doctor(t, b, false); !r.OK() {
			t.Fatalf("after the repair: %+v; want nothing wrong", r)
		}
	})
}

// A namespace that holds protocol 1's keys alone (no marker, no meta):
// the scripts refuse it (LANES_VERSION data:1, whose message sends the
// operator to doctor --repair), and Doctor reports its keys as Legacy
// instead of failing on them; its repair deletes them, its entries,
// queue and deadlines among them, once no entry of protocol 1 is alive,
// and the namespace then works. A README trial found Doctor failing with
// the scripts' LANES_VERSION before it looked at protocol 1's keys, so
// that only deleting deadlines by hand let the repair through.
func TestDoctorProtocol1Alone(t *testing.T) {
	bothServers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		b := newBackend(t, c)
		k := b.Keys()
		base := strings.TrimSuffix(k[0], "entries")
		t.Cleanup(func() {
			c.Del(context.Background(), base+"holds", base+"limits", base+"tokens", base+"seq")
		})
		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		// protocol 1's layout: entries, queue, holds, limits, deadlines,
		// tokens, seq; one entry E holding K, alive for a minute
		c.HSet(ctx, k[0], "E", `{"o":"old","s":"h","k":[["K",1]]}`)
		c.ZAdd(ctx, base+"holds", redis.Z{Member: "K\x00E"})
		c.HSet(ctx, base+"limits", "K", "1")
		c.ZAdd(ctx, k[3], redis.Z{Score: float64(now.Add(time.Minute).UnixMilli()), Member: "E"})
		c.HSet(ctx, base+"tokens", "K", "7")
		c.Set(ctx, base+"seq", "3", 0)
		o := lanes.Owner{ID: "p1-owner", Host: "h", PID: 1}
		if _, err := b.Enqueue(ctx, o, time.Minute, []lanes.Request{{ID: "N", Lanes: lane("K")}}); !errors.Is(err, redislane.ErrProtocol) {
			t.Fatalf("Enqueue on protocol 1's keys = %v; want ErrProtocol", err)
		}
		r := doctor(t, b, false)
		for _, want := range []string{k[0], k[3], base + "holds", base + "tokens", base + "seq"} {
			if !slices.Contains(r.Legacy, want) {
				t.Errorf("Doctor() Legacy = %q; want %s among them", r.Legacy, want)
			}
		}
		if r.OK() || len(r.Missing) != 0 {
			t.Errorf("Doctor() = %+v; want protocol 1's keys reported, nothing missing", r)
		}
		// E alive: the repair deletes nothing
		r = doctor(t, b, true)
		if !mentions(r.Problems, "entries of protocol 1 are still alive") || len(r.Repairs) != 0 {
			t.Fatalf("Doctor(repair) with E alive = %+v; want the problem and no repair", r)
		}
		if n, _ := c.Exists(ctx, k[0], k[3], base+"tokens").Result(); n != 3 {
			t.Fatalf("after Doctor(repair) with E alive, %d of entries, deadlines, tokens exist; want 3", n)
		}
		// E expired: the repair deletes every key of protocol 1
		c.ZAdd(ctx, k[3], redis.Z{Score: float64(now.Add(-time.Minute).UnixMilli()), Member: "E"})
		r = doctor(t, b, true)
		if !mentions(r.Repairs, "deleted protocol 1's keys") {
			t.Fatalf("Doctor(repair) with E expired = %+v; want protocol 1's keys deleted", r)
		}
		if n, _ := c.Exists(ctx, k[0], k[2], k[3], base+"holds", base+"limits", base+"tokens", base+"seq").Result(); n != 0 {
			t.Errorf("after the repair %d keys of protocol 1 remain; want none", n)
		}
		if st, err := b.Enqueue(ctx, o, time.Minute, []lanes.Request{{ID: "N", Lanes: lane("K")}}); err != nil || st[0].State != lanes.Held {
			t.Fatalf("Enqueue after the repair = %+v, %v; want N held", st, err)
		}
		if r := doctor(t, b, false); !r.OK() {
			t.Errorf("Doctor() after the repair and an enqueue = %+v; want nothing wrong", r)
		}
	})
}

// Reap clears a backlog of expired entries at once, in bounded steps.
func TestReap(t *testing.T) {
	bothServers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		b := newBackend(t, c)
		o := lanes.Owner{ID: "reap-owner", Host: "h", PID: 1}
		var reqs []lanes.Request
		for i := range 250 {
			reqs = append(reqs, lanes.Request{ID: "e" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Lanes: lane("K")})
		}
		// 250 requests run as two pieces (EnqueuePiece): a TTL shorter than
		// the first piece's run (miniredis under -race on a loaded
		// machine: over a second was seen) would let the second piece reap
		// the first's entries before Reap does.
		const ttl = 3 * time.Second
		if _, err := b.Enqueue(ctx, o, ttl, reqs); err != nil {
			t.Fatal(err)
		}
		time.Sleep(ttl + 100*time.Millisecond) // past every deadline
		n, err := b.Reap(ctx)
		if err != nil || n != 250 {
			t.Fatalf("Reap() = %d, %v; want 250", n, err)
		}
		snap, err := b.Inspect(ctx, nil)
		if err != nil || len(snap.Keys) != 0 || snap.Stats.ExpiredHolders != 1 || snap.Stats.EvictedWaiters != 249 {
			t.Fatalf("after Reap: %+v, %v; want nothing left, 1 expired holder and 249 evicted waiters", snap, err)
		}
	})
}

// Doctor skips the fields of lanes that are no lane key: the pad "\x02",
// a rate record ("\x01key"), any field that starts with a control byte,
// and the empty field (a key is 1 byte at least), which once made the
// script fail (string.byte of "" is nil), in check and repair mode alike;
// it changes none of them.
func TestDoctorSkipsFieldsThatAreNoKeys(t *testing.T) {
	bothServers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		b := newBackend(t, c)
		k := b.Keys()
		o := lanes.Owner{ID: "doc-owner", Host: "h", PID: 1}
		if _, err := b.Enqueue(ctx, o, time.Minute, []lanes.Request{{ID: "A", Lanes: lane("K")}}); err != nil {
			t.Fatal(err)
		}
		marker, err := c.HGet(ctx, k[1], "\x00").Result()
		if err != nil {
			t.Fatal(err)
		}
		epoch := strings.Fields(marker)[1]
		odd := map[string]string{"": epoch + " 1 1 0 X", "\x03x": epoch + " 1 1 2 Y"}
		for f, v := range odd {
			c.HSet(ctx, k[1], f, v)
		}
		before, err := c.HGetAll(ctx, k[1]).Result()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := before["\x02"]; !ok {
			t.Fatalf("lanes = %q; want its pad \\x02", before)
		}
		for _, repair := range []bool{false, true} {
			if r := doctor(t, b, repair); !r.OK() || len(r.Repairs) != 0 || r.Epoch != epoch {
				t.Fatalf("Doctor(%v) with the fields %q in lanes = %+v; want nothing wrong, no repair, epoch %s", repair, slices.Sorted(maps.Keys(odd)), r, epoch)
			}
		}
		if after, err := c.HGetAll(ctx, k[1]).Result(); err != nil || !maps.Equal(after, before) {
			t.Fatalf("lanes after Doctor = %q, %v; want it unchanged, %q", after, err, before)
		}
	})
}

// Inspect of every key reads the fields of lanes that name no valid key
// (written by hand; doctor.lua leaves them alone) as no key, instead of
// passing them to inspect.lua, which refused the whole page (lanectl
// keys, status, watch and ui failed with "invalid key").
func TestInspectSkipsFieldsThatAreNoKeys(t *testing.T) {
	bothServers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		b := newBackend(t, c)
		k := b.Keys()
		o := lanes.Owner{ID: "doc-owner", Host: "h", PID: 1}
		if _, err := b.Enqueue(ctx, o, time.Minute, []lanes.Request{{ID: "A", Lanes: lane("K")}}); err != nil {
			t.Fatal(err)
		}
		marker, err := c.HGet(ctx, k[1], "\x00").Result()
		if err != nil {
			t.Fatal(err)
		}
		epoch := strings.Fields(marker)[1]
		for _, f := range []string{"", "\x03x", "bad\x7fkey", "\xff", "\x01", "\x01\x03y"} {
			c.HSet(ctx, k[1], f, epoch+" 1 1 1 Y")
		}
		snap, err := b.Inspect(ctx, nil)
		if err != nil || len(snap.Keys) != 1 || snap.Keys[0].Key != "K" {
			t.Fatalf("Inspect(nil) = %+v, %v; want K alone", snap, err)
		}
	})
}
