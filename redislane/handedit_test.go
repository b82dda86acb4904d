package redislane_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

// handEdited is a namespace on the real Redis server whose keys a test
// edits by hand between steps, with owners o1, o2... on key k of limit 1.
type handEdited struct {
	t *testing.T
	c *redis.Client
	b *redislane.Backend
	p string // the prefix of the namespace's keys
}

func newHandEdited(t *testing.T) *handEdited {
	c := realClient(t)
	b := newBackend(t, c)
	return &handEdited{t: t, c: c, b: b, p: "lanes:{" + b.Namespace() + "}:"}
}

func owner(id string) lanes.Owner { return lanes.Owner{ID: id, Host: "h", PID: 1} }

// anyState asks enqueue for no state in particular.
const anyState lanes.State = -1

// enqueue enqueues id of owner o on k (limit 1) with ttl and wants state
// want; an error of the step is returned for the caller to judge when
// want is anyState.
func (h *handEdited) enqueue(o, id string, ttl time.Duration, want lanes.State) error {
	h.t.Helper()
	sts, err := h.b.Enqueue(context.Background(), owner(o), ttl, []lanes.Request{{ID: id, Lanes: []lanes.Lane{{Key: "k", Limit: 1}}}})
	if err == nil {
		err = sts[0].Err
	}
	if want != anyState && (err != nil || sts[0].State != want) {
		h.t.Fatalf("Enqueue(%s) = %+v, %v; want %v", id, sts, err, want)
	}
	return err
}

func (h *handEdited) release(o, id string) []string {
	h.t.Helper()
	r, err := h.b.Release(context.Background(), o, []string{id})
	if err != nil {
		h.t.Fatalf("Release(%s) = %v", id, err)
	}
	return r.Granted
}

func (h *handEdited) state(o, id string) lanes.State {
	h.t.Helper()
	sts, err := h.b.Heartbeat(context.Background(), o, time.Minute, []string{id})
	if err != nil {
		h.t.Fatalf("Heartbeat(%s) = %v", id, err)
	}
	return sts[0].State
}

// holders returns the holders of k as Inspect shows them.
func (h *handEdited) holders() []string {
	h.t.Helper()
	snap, err := h.b.Inspect(context.Background(), []string{"k"})
	if err != nil {
		h.t.Fatal(err)
	}
	var ids []string
	for _, k := range snap.Keys {
		for _, x := range k.Holders {
			ids = append(ids, x.ID)
		}
	}
	return ids
}

func (h *handEdited) ghost() {
	h.t.Helper()
	if err := h.c.ZAdd(context.Background(), h.p+"queue", redis.Z{Member: "k\x000000000000000000\x00ghost"}).Err(); err != nil {
		h.t.Fatal(err)
	}
}

// expire waits until the server's clock passes the deadline of k's holder.
func (h *handEdited) expire() {
	h.t.Helper()
	snap, err := h.b.Inspect(context.Background(), []string{"k"})
	if err != nil || len(snap.Keys) != 1 || len(snap.Keys[0].Holders) != 1 {
		h.t.Fatalf("Inspect(k) = %+v, %v; want one holder", snap, err)
	}
	deadline := snap.Keys[0].Holders[0].Expires
	for give := time.Now().Add(10 * time.Second); ; {
		now, err := h.c.Time(context.Background()).Result()
		if err != nil {
			h.t.Fatal(err)
		}
		if now.After(deadline) {
			return
		}
		if time.Now().After(give) {
			h.t.Fatalf("the server's clock %v did not pass the holder's deadline %v", now, deadline)
		}
		time.Sleep(deadline.Sub(now) + time.Millisecond)
	}
}

func (h *handEdited) wantHolders(when string, want ...string) {
	h.t.Helper()
	if got := h.holders(); strings.Join(got, " ") != strings.Join(want, " ") {
		h.t.Errorf("%s, holders of k = %q; want %q", when, got, want)
	}
}

// Regressions (break-it reviews of 2026-12-04): states edited by hand
// that a step turned into two holders of a key of limit 1, or into a
// waiter stranded for good. On the real Redis server.
func TestHandEditedStateGrantsNoSecondHolderRealRedis(t *testing.T) {
	// A queue member no entry accounts for, counted by no record: the
	// release's scan removed it and counted one waiter less, then granted
	// W and counted one less again, writing a count of -1, which the next
	// step read as an idle key and granted N beside W.
	t.Run("leftover queue member", func(t *testing.T) {
		h := newHandEdited(t)
		h.enqueue("o1", "H", time.Minute, lanes.Held)
		h.enqueue("o2", "W", time.Minute, lanes.Waiting)
		h.ghost()
		if got := h.release("o1", "H"); len(got) != 1 || got[0] != "W" {
			t.Fatalf("Release(H) granted %q; want W", got)
		}
		h.enqueue("o3", "N", time.Minute, lanes.Waiting)
		h.wantHolders("after N's enqueue", "W")
	})
	// The same, with the reap and the request in one step: the count was
	// -1 inside the step, and room() granted N beside W.
	t.Run("leftover queue member, reap and request in one step", func(t *testing.T) {
		h := newHandEdited(t)
		h.enqueue("o1", "H", time.Second, lanes.Held)
		h.enqueue("o2", "W", time.Minute, lanes.Waiting)
		h.ghost()
		h.expire()
		h.enqueue("o3", "N", time.Minute, lanes.Waiting)
		h.wantHolders("after N's enqueue", "W")
	})
	// A leftover ahead of two waiters left the count one short: the last
	// waiter was stranded (no scan looked at it) and newcomers overtook it.
	t.Run("leftover queue member ahead of two waiters", func(t *testing.T) {
		h := newHandEdited(t)
		h.enqueue("o1", "H", time.Minute, lanes.Held)
		h.enqueue("o2", "W1", time.Minute, lanes.Waiting)
		h.enqueue("o3", "W2", time.Minute, lanes.Waiting)
		h.ghost()
		h.release("o1", "H")
		h.wantHolders("after H's release", "W1")
		if got := h.release("o2", "W1"); len(got) != 1 || got[0] != "W2" {
			t.Errorf("Release(W1) granted %q; want W2", got)
		}
		h.enqueue("o4", "N", time.Minute, lanes.Waiting)
		h.wantHolders("after N's enqueue", "W2")
	})
	// A key record whose numbers or spacing were edited read as an idle key:
	// N was granted beside H.
	for _, tc := range []struct {
		name string
		edit func(f []string) string // f: epoch, limit, token, waiters, holder
	}{
		{"limit 1.0", func(f []string) string { return strings.Join([]string{f[0], "1.0", f[2], f[3], f[4]}, " ") }},
		{"limit -1", func(f []string) string { return strings.Join([]string{f[0], "-1", f[2], f[3], f[4]}, " ") }},
		{"token -5", func(f []string) string { return strings.Join([]string{f[0], f[1], "-5", f[3], f[4]}, " ") }},
		{"token abc", func(f []string) string { return strings.Join([]string{f[0], f[1], "abc", f[3], f[4]}, " ") }},
		{"waiters +0", func(f []string) string { return strings.Join([]string{f[0], f[1], f[2], "+0", f[4]}, " ") }},
		{"waiters -1", func(f []string) string { return strings.Join([]string{f[0], f[1], f[2], "-1", f[4]}, " ") }},
		{"two spaces before the count", func(f []string) string { return f[0] + " " + f[1] + " " + f[2] + "  " + f[3] + " " + f[4] }},
	} {
		t.Run("key record "+tc.name, func(t *testing.T) {
			h := newHandEdited(t)
			h.enqueue("o1", "H", time.Minute, lanes.Held)
			raw, err := h.c.HGet(context.Background(), h.p+"lanes", "k").Result()
			if err != nil {
				t.Fatal(err)
			}
			f := strings.Split(raw, " ")
			if len(f) != 5 {
				t.Fatalf("k's record %q; want epoch, limit, token, waiters and one holder", raw)
			}
			if err := h.c.HSet(context.Background(), h.p+"lanes", "k", tc.edit(f)).Err(); err != nil {
				t.Fatal(err)
			}
			// Refused (a limit that reads as 0 is not the request's) or
			// queued; never granted beside H.
			if err := h.enqueue("o2", "N", time.Minute, anyState); err != nil && !errors.Is(err, lanes.ErrLimitMismatch) {
				t.Fatalf("Enqueue(N) = %v; want it queued or refused for its limit", err)
			}
			h.wantHolders("after N's enqueue", "H")
			if h.state("o1", "H") != lanes.Held {
				t.Error("H lost k")
			}
		})
	}

	// A seq in meta that is no number failed the general enqueue after
	// its reap had granted W (no record written, no hint), and every
	// general enqueue after it; "inf" refused every enqueue while entries
	// waited.
	for _, seq := range []string{"abc", "inf", "1e400", "-5"} {
		t.Run("seq "+seq, func(t *testing.T) {
			h := newHandEdited(t)
			h.enqueue("o1", "H", time.Second, lanes.Held)
			h.enqueue("o2", "W", time.Minute, lanes.Waiting)
			if err := h.c.HSet(context.Background(), h.p+"meta", "seq", seq).Err(); err != nil {
				t.Fatal(err)
			}
			h.expire() // the next enqueue reaps H and grants W
			h.enqueue("o3", "N", time.Minute, lanes.Waiting)
			h.wantHolders("after N's enqueue", "W")
			// The reap granted W before the step took a number: the queue
			// held none, and N took 1.
			if got, err := h.c.HGet(context.Background(), h.p+"meta", "seq").Result(); err != nil || got != "1" {
				t.Errorf("meta seq = %q, %v; want 1 (N's, read again from a queue that W had left)", got, err)
			}
			if got := h.release("o2", "W"); len(got) != 1 || got[0] != "N" {
				t.Errorf("Release(W) granted %q; want N", got)
			}
		})
	}
}
