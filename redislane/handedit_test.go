package redislane_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

// Regressions (break-it review of 2026-12-04, finding 2): two states
// edited by hand that a step turned into two holders of a key of limit 1.
// On the real Redis server.
func TestHandEditedStateGrantsNoSecondHolderRealRedis(t *testing.T) {
	ctx := context.Background()
	lane := []lanes.Lane{{Key: "k", Limit: 1}}
	o1, o2, o3 := lanes.Owner{ID: "o1", Host: "h", PID: 1}, lanes.Owner{ID: "o2", Host: "h", PID: 2}, lanes.Owner{ID: "o3", Host: "h", PID: 3}
	enqueue := func(t *testing.T, b interface {
		Enqueue(context.Context, lanes.Owner, time.Duration, []lanes.Request) ([]lanes.Status, error)
	}, o lanes.Owner, id string, want lanes.State) {
		t.Helper()
		sts, err := b.Enqueue(ctx, o, time.Minute, []lanes.Request{{ID: id, Lanes: lane}})
		if err != nil || sts[0].State != want {
			t.Fatalf("Enqueue(%s) = %+v, %v; want %v", id, sts, err, want)
		}
	}
	holders := func(t *testing.T, b *redislane.Backend) []string {
		t.Helper()
		snap, err := b.Inspect(ctx, []string{"k"})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, k := range snap.Keys {
			for _, h := range k.Holders {
				ids = append(ids, h.ID)
			}
		}
		return ids
	}

	// A queue member no entry accounts for, counted by no record: the
	// release's scan removed it and counted one waiter less, then granted
	// W and counted one less again, writing a count of -1, which the next
	// step read as an idle key and granted N beside W.
	t.Run("leftover queue member", func(t *testing.T) {
		c := realClient(t)
		b := newBackend(t, c)
		p := "lanes:{" + b.Namespace() + "}:"
		enqueue(t, b, o1, "H", lanes.Held)
		enqueue(t, b, o2, "W", lanes.Waiting)
		if err := c.ZAdd(ctx, p+"queue", redis.Z{Member: "k\x000000000000000000\x00ghost"}).Err(); err != nil {
			t.Fatal(err)
		}
		r, err := b.Release(ctx, o1.ID, []string{"H"})
		if err != nil || len(r.Granted) != 1 || r.Granted[0] != "W" {
			t.Fatalf("Release(H) = %+v, %v; want W granted", r, err)
		}
		enqueue(t, b, o3, "N", lanes.Waiting)
		if got := holders(t, b); len(got) != 1 || got[0] != "W" {
			t.Errorf("holders of k = %q; want W alone", got)
		}
		sts, err := b.Heartbeat(ctx, o3.ID, time.Minute, []string{"N"})
		if err != nil || sts[0].State != lanes.Waiting {
			t.Errorf("Heartbeat(N) = %+v, %v; want waiting behind W", sts, err)
		}
	})

	// A seq in meta that is no number failed the general enqueue after
	// its reap had granted W (no record written, no hint), and every
	// general enqueue after it.
	t.Run("seq not a number", func(t *testing.T) {
		c := realClient(t)
		b := newBackend(t, c)
		p := "lanes:{" + b.Namespace() + "}:"
		sts, err := b.Enqueue(ctx, o1, time.Second, []lanes.Request{{ID: "H", Lanes: lane}})
		if err != nil || sts[0].State != lanes.Held {
			t.Fatalf("Enqueue(H) = %+v, %v; want held", sts, err)
		}
		enqueue(t, b, o2, "W", lanes.Waiting)
		if err := c.HSet(ctx, p+"meta", "seq", "abc").Err(); err != nil {
			t.Fatal(err)
		}
		// H's lease of 1s runs out (by the server's clock); the next
		// enqueue reaps it and grants W.
		snap, err := b.Inspect(ctx, []string{"k"})
		if err != nil || len(snap.Keys) != 1 || len(snap.Keys[0].Holders) != 1 {
			t.Fatalf("Inspect(k) = %+v, %v; want H holding", snap, err)
		}
		expires := snap.Keys[0].Holders[0].Expires
		for give := time.Now().Add(10 * time.Second); ; {
			now, err := c.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if now.After(expires) {
				break
			}
			if time.Now().After(give) {
				t.Fatalf("the server's clock %v did not pass H's deadline %v", now, expires)
			}
			time.Sleep(expires.Sub(now) + time.Millisecond)
		}
		enqueue(t, b, o3, "N", lanes.Waiting)
		if got := holders(t, b); len(got) != 1 || got[0] != "W" {
			t.Errorf("holders of k = %q; want W alone", got)
		}
		// The reap granted W before the step took a number: the queue held
		// none, and N took 1.
		if seq, err := c.HGet(ctx, p+"meta", "seq").Result(); err != nil || seq != "1" {
			t.Errorf("meta seq = %q, %v; want 1 (N's, read again from a queue that W had left)", seq, err)
		}
		if _, err := b.Release(ctx, o2.ID, []string{"W"}); err != nil {
			t.Fatal(err)
		}
		if got := holders(t, b); len(got) != 1 || got[0] != "N" {
			t.Errorf("after W's release, holders of k = %q; want N", got)
		}
	})
}
