package redislane_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/lanes"
)

// The lean steps of lib.lua (issue 12) take the common enqueue and release
// without the general machinery. These tests pin where they stop: each
// builds a state a lean step must not decide alone, and checks the answer
// the general path gives. Miniredis and real Redis.

// warm makes the namespace's state and notes the TTL of a minute: the
// first step's work, which the general path does. Every test below warms
// first, so that its steps are the lean ones (the records they read are in
// the lean form).
func warm(t *testing.T, b lanes.Backend, o lanes.Owner) {
	t.Helper()
	ctx := context.Background()
	if _, err := b.Enqueue(ctx, o, time.Minute, []lanes.Request{{ID: "warm", Lanes: lane("warm")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Release(ctx, o.ID, []string{"warm"}); err != nil {
		t.Fatal(err)
	}
}

// A plain enqueue and its release are taken by the lean steps: the record
// is written in the form plain_rec reads (as the general path writes a
// plain entry's: TestLeanStepsOnBusyKeyRealRedis), and still reads as the
// JSON the protocol names.
func TestLeanRecordForm(t *testing.T) {
	bothServers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		b := newBackend(t, c)
		o := lanes.Owner{ID: "lean-owner", Host: "vm/1 é", PID: 8141}
		warm(t, b, o)
		req := lanes.Request{ID: "e1", CallID: "call-1", Tool: "lanectl lock", Lanes: []lanes.Lane{{Key: "k/1", Limit: 2}, {Key: "k 2", Limit: 1}}}
		st, err := b.Enqueue(ctx, o, time.Minute, []lanes.Request{req})
		if err != nil || st[0].State != lanes.Held {
			t.Fatalf("Enqueue = %+v, %v", st, err)
		}
		raw, err := c.HGet(ctx, b.Keys()[0], "e1").Result()
		if err != nil {
			t.Fatal(err)
		}
		var rec struct {
			G int64             `json:"g"`
			X map[string]string `json:"x"`
		}
		if err := json.Unmarshal([]byte(raw), &rec); err != nil {
			t.Fatalf("record %q: %v", raw, err)
		}
		want := fmt.Sprintf(`{"o":"lean-owner","h":"vm/1 é","p":8141,"c":"call-1","t":"lanectl lock","k":[["k/1",2],["k 2",1]],"s":"h","q":0,"e":%d,"g":%d,"x":{"k/1":"%d","k 2":"%d"}}`,
			rec.G, rec.G, st[0].Tokens["k/1"], st[0].Tokens["k 2"])
		if raw != want {
			t.Errorf("record\n %s\nwant (the lean form)\n %s", raw, want)
		}
		rel, err := b.Release(ctx, o.ID, []string{"e1"})
		if err != nil || rel.Was[0] != lanes.Held {
			t.Fatalf("Release = %+v, %v", rel, err)
		}
		if n, _ := c.HLen(ctx, b.Keys()[0]).Result(); n != 1 { // the marker
			t.Errorf("entries hold %d fields after the release; want the marker alone", n)
		}
	})
}

// Strings that JSON escapes (a quote, a backslash) are never concatenated
// into a record: such a step goes to the general path, and the record
// reads back the same.
func TestLeanEscapedStringsGoGeneral(t *testing.T) {
	bothServers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		b := newBackend(t, c)
		o := lanes.Owner{ID: `own"er\1`, Host: `h"\`, PID: 1}
		key := `k"\x`
		st, err := b.Enqueue(ctx, o, time.Minute, []lanes.Request{{ID: `e"1\`, Tool: `t"\`, Lanes: lane(key)}})
		if err != nil || st[0].State != lanes.Held {
			t.Fatalf("Enqueue = %+v, %v", st, err)
		}
		snap, err := b.Inspect(ctx, []string{key})
		if err != nil || len(snap.Keys) != 1 || len(snap.Keys[0].Holders) != 1 {
			t.Fatalf("Inspect = %+v, %v", snap, err)
		}
		h := snap.Keys[0].Holders[0]
		if h.ID != `e"1\` || h.Owner.ID != o.ID || h.Owner.Host != o.Host || h.Tool != `t"\` {
			t.Errorf("holder %+v; want the strings as given", h.Entry)
		}
		// A waiter behind it, released by a hand-off of the general path.
		if _, err := b.Enqueue(ctx, o, time.Minute, []lanes.Request{{ID: "w", Lanes: lane(key)}}); err != nil {
			t.Fatal(err)
		}
		rel, err := b.Release(ctx, o.ID, []string{`e"1\`})
		if err != nil || len(rel.Granted) != 1 || rel.Granted[0] != "w" {
			t.Fatalf("Release = %+v, %v; want w granted", rel, err)
		}
	})
}

// A queue member whose entry has no deadline (state damaged by hand) is
// not alive: the release that frees its key removes it (the general
// path's scan) and grants the live waiter behind it, never the member.
func TestLeanDeadWaiterNotGranted(t *testing.T) {
	bothServers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		b := newBackend(t, c)
		o := lanes.Owner{ID: "o", Host: "h", PID: 1}
		warm(t, b, o)
		for _, id := range []string{"h", "dead", "live"} {
			if _, err := b.Enqueue(ctx, o, time.Minute, []lanes.Request{{ID: id, Lanes: lane("K")}}); err != nil {
				t.Fatal(err)
			}
		}
		c.ZRem(ctx, b.Keys()[3], "dead") // its deadline gone
		rel, err := b.Release(ctx, o.ID, []string{"h"})
		if err != nil {
			t.Fatal(err)
		}
		if len(rel.Granted) != 1 || rel.Granted[0] != "live" {
			t.Errorf("Release(h) granted %q; want [live], the one waiter alive", rel.Granted)
		}
		snap, err := b.Inspect(ctx, []string{"K"})
		if err != nil || len(snap.Keys) != 1 {
			t.Fatalf("Inspect = %+v, %v", snap, err)
		}
		if ks := snap.Keys[0]; len(ks.Holders) != 1 || ks.Holders[0].ID != "live" || len(ks.Waiters) != 0 {
			t.Errorf("K holders %v, waiters %v; want live holding, nobody waiting", ks.Holders, ks.Waiters)
		}
	})
}

// A holder without a deadline counts no more (a purge removes it): an
// enqueue on its full key is granted, not queued behind it.
func TestLeanHolderWithoutDeadlinePurged(t *testing.T) {
	bothServers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		b := newBackend(t, c)
		o := lanes.Owner{ID: "o", Host: "h", PID: 1}
		warm(t, b, o)
		if _, err := b.Enqueue(ctx, o, time.Minute, []lanes.Request{{ID: "h", Lanes: lane("K")}}); err != nil {
			t.Fatal(err)
		}
		c.ZRem(ctx, b.Keys()[3], "h")
		st, err := b.Enqueue(ctx, o, time.Minute, []lanes.Request{{ID: "x", Lanes: lane("K")}})
		if err != nil || st[0].State != lanes.Held {
			t.Errorf("Enqueue(x) on a key whose holder has no deadline = %+v, %v; want held", st, err)
		}
	})
}

// A hand-off on a key of limit 3 with three holders and four waiters, two
// of them on a second key too: each release frees one slot; the first
// waiter in arrival order takes it, whatever its kind (a waiter of two
// keys is the general path's), and no waiter passes one before it.
func TestLeanHandoffOrder(t *testing.T) {
	bothServers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		b := newBackend(t, c)
		o := lanes.Owner{ID: "o", Host: "h", PID: 1}
		warm(t, b, o)
		k3 := []lanes.Lane{{Key: "S", Limit: 3}}
		two := []lanes.Lane{{Key: "S", Limit: 3}, {Key: "T", Limit: 1}}
		for _, r := range []lanes.Request{{ID: "h1", Lanes: k3}, {ID: "h2", Lanes: k3}, {ID: "h3", Lanes: k3},
			{ID: "w1", Lanes: k3}, {ID: "w2", Lanes: two}, {ID: "w3", Lanes: k3}, {ID: "w4", Lanes: two}} {
			if _, err := b.Enqueue(ctx, o, time.Minute, []lanes.Request{r}); err != nil {
				t.Fatal(err)
			}
		}
		for i, want := range []string{"w1", "w2", "w3"} {
			rel, err := b.Release(ctx, o.ID, []string{fmt.Sprintf("h%d", i+1)})
			if err != nil {
				t.Fatal(err)
			}
			if len(rel.Granted) != 1 || rel.Granted[0] != want {
				t.Fatalf("release %d granted %q; want [%s]", i+1, rel.Granted, want)
			}
		}
		// w4 waits for S (full: w1 w2 w3) and for T (held by w2).
		rel, err := b.Release(ctx, o.ID, []string{"w1"})
		if err != nil || len(rel.Granted) != 0 {
			t.Fatalf("Release(w1) = %+v, %v; want no grant (w4 waits for T too)", rel, err)
		}
		rel, err = b.Release(ctx, o.ID, []string{"w2"})
		if err != nil || len(rel.Granted) != 1 || rel.Granted[0] != "w4" {
			t.Fatalf("Release(w2) = %+v, %v; want w4 granted", rel, err)
		}
	})
}

// A lean enqueue that queues checks the markers of queue, nested and meta
// as the general path does: one that vanished resets the state at once
// (a new epoch, and the new waiter frozen behind the lost holder's
// lease). A hand-off finds a queue that lost its members and leaves the
// step to the general path, which resets too.
func TestLeanStepsFindVanishedState(t *testing.T) {
	bothServers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		for _, k := range []int{2, 4, 5} { // queue, nested, meta
			b := newBackend(t, c)
			o := lanes.Owner{ID: "o", Host: "h", PID: 1}
			warm(t, b, o)
			st, err := b.Enqueue(ctx, o, time.Minute, []lanes.Request{{ID: "a", Lanes: lane("K")}})
			if err != nil || st[0].State != lanes.Held {
				t.Fatalf("Enqueue(a) = %+v, %v", st, err)
			}
			epoch := st[0].Epoch
			c.Del(ctx, b.Keys()[k])
			st, err = b.Enqueue(ctx, o, time.Minute, []lanes.Request{{ID: "b", Lanes: lane("K")}})
			if err != nil {
				t.Fatal(err)
			}
			if st[0].Epoch == epoch {
				t.Errorf("%s deleted: Enqueue(b) answered in the old epoch; want the state reset", b.Keys()[k])
			}
		}
		b := newBackend(t, c)
		o := lanes.Owner{ID: "o", Host: "h", PID: 1}
		warm(t, b, o)
		st, err := b.Enqueue(ctx, o, time.Minute, []lanes.Request{{ID: "a", Lanes: lane("K")}, {ID: "w", Lanes: lane("K")}})
		if err != nil || st[0].State != lanes.Held || st[1].State != lanes.Waiting {
			t.Fatalf("Enqueue(a, w) = %+v, %v", st, err)
		}
		c.Del(ctx, b.Keys()[2])
		rel, err := b.Release(ctx, o.ID, []string{"a"})
		if err != nil {
			t.Fatal(err)
		}
		if rel.Epoch == st[0].Epoch || len(rel.Granted) != 0 {
			t.Errorf("queue deleted: Release(a) = %+v in epoch %s; want the state reset and nobody granted", rel, st[0].Epoch)
		}
	})
}
