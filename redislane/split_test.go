package redislane_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

// splitServers runs f on miniredis and, when one answers, on the real
// Redis server.
func splitServers(t *testing.T, f func(t *testing.T, client func(t *testing.T) *redis.Client)) {
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		f(t, func(t *testing.T) *redis.Client {
			c := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { c.Close() })
			return c
		})
	})
	t.Run("real", func(t *testing.T) {
		realClient(t) // skips when no server answers
		f(t, func(t *testing.T) *redis.Client { return realClient(t) })
	})
}

// comparable drops what differs between two namespaces: the epoch, the
// holder TTLs' values (whether one is set stays), and the fencing tokens'
// values (they follow the backend's clock), of which it keeps each key's
// order: token n is the n-th smallest of its key.
func comparable(sts []lanes.Status) []lanes.Status {
	byKey := map[string][]uint64{}
	for _, st := range sts {
		for k, tok := range st.Tokens {
			byKey[k] = append(byKey[k], tok)
		}
	}
	for _, toks := range byKey {
		slices.Sort(toks)
	}
	out := make([]lanes.Status, len(sts))
	for i, st := range sts {
		st.Epoch = ""
		st.HolderTTL = min(st.HolderTTL, time.Nanosecond)
		if st.Tokens != nil {
			ranks := make(map[string]uint64, len(st.Tokens))
			for k, tok := range st.Tokens {
				ranks[k] = uint64(slices.Index(byKey[k], tok)) + 1
			}
			st.Tokens = ranks
		}
		if st.Err != nil {
			st.Err = fmt.Errorf("%T %v", st.Err, st.Err)
		}
		out[i] = st
	}
	return out
}

// A step split in pieces answers what the same step in one run answers:
// statuses (states, tokens, positions, sequence numbers, refusals) of
// Enqueue, Heartbeat and Release, in order.
func TestSplitStepMatchesUnsplit(t *testing.T) {
	splitServers(t, func(t *testing.T, client func(t *testing.T) *redis.Client) {
		ctx := context.Background()
		whole, split := newBackend(t, client(t)), newBackend(t, client(t))
		redislane.SetPieces(split, 7, 5)
		o := lanes.Owner{ID: "o1", Host: "h", PID: 1}
		other := lanes.Owner{ID: "o2", Host: "h", PID: 2}
		keys := []lanes.Lane{{Key: "a", Limit: 1}, {Key: "b", Limit: 2}, {Key: "c", Limit: 3}, {Key: "d", Limit: 5}}
		var reqs []lanes.Request
		for i := range 40 {
			r := lanes.Request{ID: fmt.Sprintf("r%02d", i), Lanes: []lanes.Lane{keys[i%4]}}
			if i%3 == 0 {
				r.Lanes = append(r.Lanes, keys[(i+1)%4])
			}
			reqs = append(reqs, r)
		}
		reqs[17] = lanes.Request{ID: "taken", Lanes: []lanes.Lane{{Key: "b", Limit: 2}}}    // another owner holds it
		reqs[23] = lanes.Request{ID: "conflict", Lanes: []lanes.Lane{{Key: "c", Limit: 3}}} // exists with other lanes
		var got [2][]lanes.Status
		for i, b := range []*redislane.Backend{whole, split} {
			if _, err := b.Enqueue(ctx, other, time.Minute, []lanes.Request{{ID: "taken", Lanes: []lanes.Lane{{Key: "b", Limit: 2}}}}); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Enqueue(ctx, o, time.Minute, []lanes.Request{{ID: "conflict", Lanes: []lanes.Lane{{Key: "a", Limit: 1}}}}); err != nil {
				t.Fatal(err)
			}
			sts, err := b.Enqueue(ctx, o, time.Minute, reqs)
			if err != nil {
				t.Fatal(err)
			}
			got[i] = comparable(sts)
		}
		if !reflect.DeepEqual(got[0], got[1]) {
			t.Fatalf("split Enqueue answered\n%+v\nthe whole step\n%+v", got[1], got[0])
		}
		var states, held int
		for _, st := range got[0] {
			if st.State == lanes.Held {
				held++
			}
			if st.Err != nil {
				states++
			}
		}
		if held == 0 || held == len(reqs) || states != 2 {
			t.Fatalf("the step has %d held and %d refused of %d: want some held, some waiting, 2 refused", held, states, len(reqs))
		}

		ids := make([]string, len(reqs))
		for i, r := range reqs {
			ids[i] = r.ID
		}
		var beats [2][]lanes.Status
		var rels [2]lanes.Released
		for i, b := range []*redislane.Backend{whole, split} {
			sts, err := b.Heartbeat(ctx, o.ID, time.Minute, ids)
			if err != nil {
				t.Fatal(err)
			}
			beats[i] = comparable(sts)
			if rels[i], err = b.Release(ctx, o.ID, ids); err != nil {
				t.Fatal(err)
			}
			rels[i].Epoch = ""
		}
		if !reflect.DeepEqual(beats[0], beats[1]) {
			t.Fatalf("split Heartbeat answered\n%+v\nthe whole step\n%+v", beats[1], beats[0])
		}
		// A piece may grant a waiter of the step that a later piece removes:
		// reported held, left out of Granted. The rest is the same.
		for i, was := range rels[1].Was {
			if was == lanes.Held && rels[0].Was[i] == lanes.Waiting {
				rels[1].Was[i] = lanes.Waiting
			}
		}
		if !reflect.DeepEqual(rels[0], rels[1]) {
			t.Fatalf("split Release answered\n%+v\nthe whole step\n%+v", rels[1], rels[0])
		}
		for i, b := range []*redislane.Backend{whole, split} {
			snap, err := b.Inspect(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(snap.Keys) != 1 || len(snap.Keys[0].Holders) != 1 || snap.Keys[0].Holders[0].ID != "taken" || len(snap.Keys[0].Waiters) != 0 {
				t.Fatalf("backend %d after the release: %+v, want only the other owner's entry", i, snap.Keys)
			}
		}
	})
}

// The requests of a split step keep their order on a key across pieces.
func TestSplitStepFIFO(t *testing.T) {
	splitServers(t, func(t *testing.T, client func(t *testing.T) *redis.Client) {
		ctx := context.Background()
		b := newBackend(t, client(t))
		redislane.SetPieces(b, 3, 3)
		lane := []lanes.Lane{{Key: "q", Limit: 1}}
		if _, err := b.Enqueue(ctx, lanes.Owner{ID: "holder", Host: "h", PID: 1}, time.Minute, []lanes.Request{{ID: "h", Lanes: lane}}); err != nil {
			t.Fatal(err)
		}
		var reqs []lanes.Request
		for i := range 20 {
			reqs = append(reqs, lanes.Request{ID: fmt.Sprintf("w%02d", i), Lanes: lane})
		}
		o := lanes.Owner{ID: "o", Host: "h", PID: 2}
		sts, err := b.Enqueue(ctx, o, time.Minute, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, st := range sts {
			if st.State != lanes.Waiting || st.Positions["q"] != i+1 {
				t.Fatalf("request %d: %+v, want waiting at position %d", i, st, i+1)
			}
		}
		snap, err := b.Inspect(ctx, []string{"q"})
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Keys) != 1 || len(snap.Keys[0].Waiters) != len(reqs) {
			t.Fatalf("Inspect = %+v, want %d waiters on q", snap, len(reqs))
		}
		for i, w := range snap.Keys[0].Waiters {
			if w.ID != reqs[i].ID {
				t.Fatalf("waiter %d is %s, want %s", i, w.ID, reqs[i].ID)
			}
		}
		// Grants follow the same order, one release at a time.
		prev := "h"
		for _, r := range reqs {
			by := o.ID
			if prev == "h" {
				by = "holder"
			}
			rel, err := b.Release(ctx, by, []string{prev})
			if err != nil {
				t.Fatal(err)
			}
			if len(rel.Granted) != 1 || rel.Granted[0] != r.ID {
				t.Fatalf("releasing %s granted %v, want %s", prev, rel.Granted, r.ID)
			}
			prev = r.ID
		}
	})
}

// A refusal of a later piece, after earlier pieces took effect, is no
// refusal of the step: Backend.Enqueue answers the earlier statuses and a
// *PartialError that is neither ErrLimitMismatch nor ErrInvalid, and a
// Session that gets it settles every id of the step, so that no entry is
// left that nobody keeps alive.
func TestSplitStepRefusalSettled(t *testing.T) {
	splitServers(t, func(t *testing.T, client func(t *testing.T) *redis.Client) {
		ctx := context.Background()
		b := newBackend(t, client(t))
		redislane.SetPieces(b, 2, 2)
		// Another owner holds b with limit 1: naming it with limit 2 is refused.
		if _, err := b.Enqueue(ctx, lanes.Owner{ID: "other", Host: "h", PID: 1}, time.Minute,
			[]lanes.Request{{ID: "held", Lanes: []lanes.Lane{{Key: "b", Limit: 1}}}}); err != nil {
			t.Fatal(err)
		}
		step := func(p string) []lanes.Request {
			return []lanes.Request{
				{ID: p + "1", Lanes: []lanes.Lane{{Key: "a", Limit: 1}}},
				{ID: p + "2", Lanes: []lanes.Lane{{Key: "c", Limit: 1}}},
				{ID: p + "3", Lanes: []lanes.Lane{{Key: "b", Limit: 2}}},
				{ID: p + "4", Lanes: []lanes.Lane{{Key: "d", Limit: 1}}},
			}
		}
		checkErr := func(err error) {
			t.Helper()
			var pe *redislane.PartialError
			var lm *lanes.LimitMismatchError
			if !errors.As(err, &pe) || pe.Done != 2 || pe.Of != 4 || !errors.As(pe.Err, &lm) {
				t.Fatalf("err = %v, want a *PartialError after 2 of 4 requests, of a *LimitMismatchError", err)
			}
			if errors.Is(err, lanes.ErrLimitMismatch) || errors.Is(err, lanes.ErrInvalid) || errors.Is(err, lanes.ErrUnavailable) {
				t.Fatalf("err = %v passes for a refusal or an unknown outcome", err)
			}
		}

		sts, err := b.Enqueue(ctx, lanes.Owner{ID: "direct", Host: "h", PID: 2}, time.Minute, step("x"))
		checkErr(err)
		if len(sts) != 2 || sts[0].State != lanes.Held || sts[1].State != lanes.Held {
			t.Fatalf("statuses = %+v, want the first piece's two, held", sts)
		}
		if _, err := b.Release(ctx, "direct", []string{"x1", "x2"}); err != nil {
			t.Fatal(err)
		}

		s, err := lanes.NewSession(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		_, err = s.Enqueue(ctx, step("s")...)
		checkErr(err)
		// The Session settles s1 and s2 in the background: wait for it.
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			snap, err := b.Inspect(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var left []string
			for _, k := range snap.Keys {
				for _, h := range k.Holders {
					if h.ID != "held" {
						left = append(left, h.ID)
					}
				}
				for _, w := range k.Waiters {
					left = append(left, w.ID)
				}
			}
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("entries %v remain after the Session gave up on the step", left)
			}
		}
		// Settled, not just released: a late copy of the step cannot bring them back.
		sts, err = b.Enqueue(ctx, s.Owner(), time.Minute, step("s")[:2])
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range sts {
			if !errors.Is(st.Err, lanes.ErrIDRetired) {
				t.Fatalf("a copy of the step after the Session settled it: %+v, want ErrIDRetired", st)
			}
		}
	})
}

// (Found by a break-it review.) A release that names an id twice in two
// pieces released it twice: the second run removed the lender the first
// had kept for its borrower (not named), and granted the borrower's key to
// a waiter while the borrower still held it. It is released once, its
// later place gone, as in one run and as the memory backend does; the
// states agree with the memory backend's. On miniredis and real Redis.
func TestSplitReleaseNamesAnIDTwice(t *testing.T) {
	splitServers(t, func(t *testing.T, client func(t *testing.T) *redis.Client) {
		ctx := context.Background()
		b := newBackend(t, client(t))
		redislane.SetPieces(b, 200, 2)
		for _, be := range []lanes.Backend{b, lanes.NewMemory()} {
			o, w := lanes.Owner{ID: "o", Host: "h", PID: 1}, lanes.Owner{ID: "w", Host: "h", PID: 2}
			steps := []struct {
				owner lanes.Owner
				req   lanes.Request
			}{
				{o, lanes.Request{ID: "O", Lanes: []lanes.Lane{{Key: "a", Limit: 1}}}},
				{o, lanes.Request{ID: "I", Lineage: []string{"O"}, Lanes: []lanes.Lane{{Key: "a", Limit: 1}, {Key: "b", Limit: 1}}}},
				{w, lanes.Request{ID: "Wa", Lanes: []lanes.Lane{{Key: "a", Limit: 1}}}},
				{w, lanes.Request{ID: "Wb", Lanes: []lanes.Lane{{Key: "b", Limit: 1}}}},
			}
			for _, st := range steps {
				if _, err := be.Enqueue(ctx, st.owner, time.Minute, []lanes.Request{st.req}); err != nil {
					t.Fatal(err)
				}
			}
			r, err := be.Release(ctx, "", []string{"O", "x", "O"}) // pieces [O x] [O] on Redis
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Was) != 3 || r.Was[0] != lanes.Held || r.Was[1] != lanes.Gone || r.Was[2] != lanes.Gone || len(r.Granted) != 0 {
				t.Errorf("%T: Release(O, x, O) = %+v; want Was [held gone gone], nothing granted (I keeps b, O is kept for it)", be, r)
			}
			snap, err := be.Inspect(ctx, []string{"b"})
			if err != nil {
				t.Fatal(err)
			}
			if len(snap.Keys) != 1 || len(snap.Keys[0].Holders) != 1 || snap.Keys[0].Holders[0].ID != "I" {
				t.Errorf("%T: b after the release: %+v; want I its one holder", be, snap.Keys)
			}
		}
	})
}
