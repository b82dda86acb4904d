package redislane_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

// (Found by a review.) The state of TestDifferentialKnownReusedLenderIDNotRaised after an
// operator removed the kept lender e1 while its borrower e2 stays kept for
// borrowers of its own: e2's record still names e1 as its lender, with no
// nested link (99adea8 reads that as "no lender"). The scripts made this
// state themselves; doctor should not call it a problem.
func TestDoctorOnRemovedKeptLender(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { c.Close() })
		doctorOnRemovedKeptLender(t, newBackend(t, c))
	})
	t.Run("RealRedis", func(t *testing.T) { doctorOnRemovedKeptLender(t, newBackend(t, realClient(t))) })
}

func doctorOnRemovedKeptLender(t *testing.T, b *redislane.Backend) {
	ctx := context.Background()
	o1 := lanes.Owner{ID: "o1", Host: "h", PID: 1}
	enq := func(ttl time.Duration, id string, lineage []string, keys ...string) {
		t.Helper()
		var ls []lanes.Lane
		for _, k := range keys {
			ls = append(ls, lanes.Lane{Key: k, Limit: 1})
		}
		st, err := b.Enqueue(ctx, o1, ttl, []lanes.Request{{ID: id, Lanes: ls, Lineage: lineage}})
		if err != nil || st[0].Err != nil {
			t.Fatalf("enqueue %s: %v %+v", id, err, st)
		}
	}
	enq(time.Second, "e1", nil, "k1")
	enq(time.Second, "e2", []string{"e1"}, "k1", "k2")
	enq(time.Second, "e3", []string{"e1", "e2"}, "k2", "k3")
	enq(5*time.Second, "e4", []string{"e1", "e2", "e3"}, "k3")
	if _, err := b.Release(ctx, "o1", []string{"e1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Release(ctx, "", []string{"e1"}); err != nil {
		t.Fatal(err)
	}
	snap, _ := b.Inspect(ctx, nil)
	r := doctor(t, b, false)
	if !r.OK() {
		t.Errorf("doctor after an operator's release of a kept lender: problems %q; state %+v", r.Problems, snap)
	}
	rr := doctor(t, b, true)
	st, err := b.Heartbeat(ctx, "o1", 5*time.Second, []string{"e4"})
	if err != nil || st[0].State != lanes.Held {
		t.Errorf("after doctor --repair (repairs %q), e4, held by its owner, is %+v, %v", rr.Repairs, st, err)
	}
}
