package redislane_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

// bothServers runs f against miniredis and against the real Redis server.
func bothServers(t *testing.T, f func(t *testing.T, c redis.UniversalClient)) {
	t.Run("Miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { c.Close() })
		f(t, c)
	})
	t.Run("RealRedis", func(t *testing.T) { f(t, realClient(t)) })
}

func lane(key string) []lanes.Lane { return []lanes.Lane{{Key: key, Limit: 1}} }

// Sequence numbers past the bound (issue 19: Lua doubles gave equal
// numbers to different waiters, and the lane stalled) start again from 1
// when no entry waits, and are refused while entries wait.
func TestSequenceBound(t *testing.T) {
	bothServers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		b := newBackend(t, c)
		o := lanes.Owner{ID: "seq-owner", Host: "h", PID: 1}
		meta := b.Keys()[5]
		if _, err := b.Enqueue(ctx, o, time.Minute, []lanes.Request{{ID: "h", Lanes: lane("K")}}); err != nil {
			t.Fatal(err)
		}
		c.HSet(ctx, meta, "seq", "99999999999999")
		st, err := b.Enqueue(ctx, o, time.Minute, []lanes.Request{{ID: "w1", Lanes: lane("K")}})
		if err != nil || st[0].State != lanes.Waiting || st[0].Seq != 1 {
			t.Fatalf("Enqueue past the bound with no waiter = %+v, %v; want waiting with seq 1", st, err)
		}
		c.HSet(ctx, meta, "seq", "99999999999999")
		_, err = b.Enqueue(ctx, o, time.Minute, []lanes.Request{{ID: "w2", Lanes: lane("K")}})
		if !errors.Is(err, lanes.ErrUnavailable) {
			t.Fatalf("Enqueue past the bound while w1 waits = %v; want refused", err)
		}
		snap, err := b.Inspect(ctx, []string{"K"})
		if err != nil || len(snap.Keys) != 1 || len(snap.Keys[0].Waiters) != 1 {
			t.Fatalf("after the refusal: %+v, %v; want only w1 waiting", snap, err)
		}
		if _, err := b.Release(ctx, "", []string{"h", "w1"}); err != nil {
			t.Fatal(err)
		}
	})
}

// Inspect reads a long queue in pages (issue 19: one script over 20,000
// waiters held Redis for 130ms) and returns it whole, in order.
func TestInspectPaged(t *testing.T) {
	bothServers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		b := newBackend(t, c)
		o := lanes.Owner{ID: "page-owner", Host: "h", PID: 1}
		var ids []string
		for i := range 1201 {
			ids = append(ids, fmt.Sprintf("e%04d", i))
		}
		for i := 0; i < len(ids); i += 250 {
			var reqs []lanes.Request
			for _, id := range ids[i:min(i+250, len(ids))] {
				reqs = append(reqs, lanes.Request{ID: id, Lanes: []lanes.Lane{{Key: "K", Limit: 1}, {Key: "L" + id[len(id)-1:], Limit: 1000}}})
			}
			if _, err := b.Enqueue(ctx, o, time.Minute, reqs); err != nil {
				t.Fatal(err)
			}
		}
		snap, err := b.Inspect(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Keys) != 11 {
			t.Fatalf("Inspect() keys = %d; want 11", len(snap.Keys))
		}
		k := snap.Keys[0]
		if k.Key != "K" || len(k.Holders) != 1 || k.Holders[0].ID != "e0000" || len(k.Waiters) != 1200 {
			t.Fatalf("K: holders %d waiters %d; want e0000 and 1200 waiters", len(k.Holders), len(k.Waiters))
		}
		for i, w := range k.Waiters {
			if w.ID != ids[i+1] || w.Position != i+1 {
				t.Fatalf("waiter %d = %s at %d; want %s at %d", i, w.ID, w.Position, ids[i+1], i+1)
			}
		}
		for i := 0; i < len(ids); i += 1000 {
			if _, err := b.Release(ctx, "", ids[i:min(i+1000, len(ids))]); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A script of another protocol version, or a namespace made by one, is
// refused with ErrProtocol.
func TestProtocolVersionChecked(t *testing.T) {
	bothServers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		b := newBackend(t, c)
		if _, err := b.Enqueue(ctx, lanes.Owner{ID: "o", PID: 1}, time.Minute, []lanes.Request{{ID: "a", Lanes: lane("K")}}); err != nil {
			t.Fatal(err)
		}
		marker, _ := c.HGet(ctx, b.Keys()[1], "\x00").Result()
		c.HSet(ctx, b.Keys()[1], "\x00", "3"+marker[1:])
		_, err := b.Heartbeat(ctx, "o", time.Minute, []string{"a"})
		if !errors.Is(err, redislane.ErrProtocol) {
			t.Fatalf("Heartbeat on a namespace of protocol 3 = %v; want ErrProtocol", err)
		}
		c.HSet(ctx, b.Keys()[1], "\x00", marker)
		if _, err := b.Release(ctx, "", []string{"a"}); err != nil {
			t.Fatal(err)
		}
	})
}

// The cases a review of protocol 2 found (each on miniredis and real Redis):
// a heartbeat's longer TTL counts in the freeze after a reset; a state lost
// whole while its tokens stayed is frozen too; protocol 1's keys are
// refused, not reset; an enqueue does not renew an entry past its
// deadline; a limit sent as a string is refused before any change.
func TestProtocolReviewCases(t *testing.T) {
	bothServers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		o := lanes.Owner{ID: "rev-owner", Host: "h", PID: 1}
		keys := func(b *redislane.Backend) []string { return b.Keys() }

		t.Run("HeartbeatTTLCountsInTheFreeze", func(t *testing.T) {
			b := newBackend(t, c)
			if _, err := b.Enqueue(ctx, o, time.Second, []lanes.Request{{ID: "A", Lanes: lane("K")}}); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Heartbeat(ctx, o.ID, time.Hour, []string{"A"}); err != nil {
				t.Fatal(err)
			}
			c.Del(ctx, keys(b)[3]) // the deadlines are lost: maxttl decides
			snap, err := b.Inspect(ctx, nil)
			if err != nil || snap.Frozen.Before(snap.Time.Add(59*time.Minute)) {
				t.Fatalf("after held vanished: %+v, %v; want frozen for the hour the heartbeat gave", snap, err)
			}
		})
		// A break-it review: lanes and meta evicted together (both copies
		// of a running freeze, and maxttl) froze a namespace for MAX_TTL
		// (an hour) while deadlines held its one lease's deadline. A
		// granted entry proves no freeze ran: the freeze is that lease's.
		// Without one, nothing proves it: maxttl decides, else an hour.
		t.Run("LanesAndMetaLostFreezeUntilTheLastLease", func(t *testing.T) {
			for _, held := range []bool{true, false} {
				b := newBackend(t, c)
				if _, err := b.Enqueue(ctx, o, 2*time.Second, []lanes.Request{{ID: "A", Lanes: lane("K")}}); err != nil {
					t.Fatal(err)
				}
				if !held { // an idle namespace: no entry left
					b.Release(ctx, o.ID, []string{"A"})
				}
				c.Del(ctx, keys(b)[1], keys(b)[5])
				snap, err := b.Inspect(ctx, nil)
				if err != nil || snap.Stats.Resets != 1 {
					t.Fatalf("held %v: Inspect after lanes and meta vanished = %+v, %v; want one reset", held, snap, err)
				}
				if left := snap.Frozen.Sub(snap.Time); held && (left <= 0 || left > 2*time.Second) {
					t.Errorf("a lease of 2s held: frozen for %v after the reset; want until that lease's deadline, in (0, 2s]", left)
				} else if !held && left < 59*time.Minute {
					t.Errorf("no entry granted: frozen for %v after the reset; want MAX_TTL (an hour)", left)
				}
			}
		})
		t.Run("StateLostButItsTokensIsFrozen", func(t *testing.T) {
			b := newBackend(t, c)
			if _, err := b.Enqueue(ctx, o, 5*time.Second, []lanes.Request{{ID: "A", Lanes: lane("K")}}); err != nil {
				t.Fatal(err)
			}
			k := keys(b) // every state key but lanes, which keeps the fencing tokens
			c.Del(ctx, k[0], k[2], k[3], k[4], k[5])
			st, err := b.Enqueue(ctx, o, 5*time.Second, []lanes.Request{{ID: "B", Lanes: lane("K")}})
			if err != nil || st[0].State != lanes.Waiting {
				t.Fatalf("Enqueue(K) after the state vanished whole = %+v, %v; want waiting: A may still hold K", st, err)
			}
			snap, _ := b.Inspect(ctx, nil)
			if snap.Stats.Resets != 1 || snap.Frozen.IsZero() {
				t.Fatalf("snapshot %+v; want one reset and a freeze", snap)
			}
			b.Release(ctx, "", []string{"B"})
		})
		t.Run("Protocol1KeysRefused", func(t *testing.T) {
			b := newBackend(t, c)
			c.HSet(ctx, keys(b)[0], "old", `{"o":"x"}`) // protocol 1's entries hash: no marker
			c.ZAdd(ctx, keys(b)[2], redis.Z{Member: "K\x000000000000000001\x00old"})
			_, err := b.Enqueue(ctx, o, time.Minute, []lanes.Request{{ID: "A", Lanes: lane("K")}})
			if !errors.Is(err, redislane.ErrProtocol) || !strings.Contains(err.Error(), "protocol 1's keys") || !strings.Contains(err.Error(), "lanectl doctor --repair") {
				t.Fatalf("Enqueue on protocol 1's keys = %v; want ErrProtocol naming protocol 1's keys and the repair", err)
			}
			// a keyspace of a later version: said so
			c.Del(ctx, keys(b)[0], keys(b)[2])
			if _, err := b.Enqueue(ctx, o, time.Minute, []lanes.Request{{ID: "A", Lanes: lane("K")}}); err != nil {
				t.Fatal(err)
			}
			m, _ := c.HGet(ctx, keys(b)[1], "\x00").Result()
			c.HSet(ctx, keys(b)[1], "\x00", "9"+m[1:])
			_, err = b.Enqueue(ctx, o, time.Minute, []lanes.Request{{ID: "B", Lanes: lane("K")}})
			if !errors.Is(err, redislane.ErrProtocol) || !strings.Contains(err.Error(), "keyspace version 9") {
				t.Fatalf("Enqueue on a state of keyspace 9 = %v; want ErrProtocol naming keyspace version 9", err)
			}
			c.Del(ctx, keys(b)...)
		})
		t.Run("EnqueueDoesNotRenewAnExpiredEntry", func(t *testing.T) {
			b := newBackend(t, c)
			if _, err := b.Enqueue(ctx, o, 50*time.Millisecond, []lanes.Request{{ID: "A", Lanes: lane("K")}}); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Enqueue(ctx, lanes.Owner{ID: "other", PID: 2}, time.Minute, []lanes.Request{{ID: "W", Lanes: lane("K")}}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond) // past A's deadline
			st, err := b.Enqueue(ctx, o, time.Minute, []lanes.Request{{ID: "A", Lanes: lane("K")}})
			if err != nil || st[0].State != lanes.Waiting || st[0].Positions["K"] != 1 {
				t.Fatalf("a retry of A past its deadline = %+v, %v; want a new entry, waiting behind W (granted when A expired)", st, err)
			}
			b.Release(ctx, "", []string{"A", "W"})
		})
	})
}
