package redislane_test

import (
	"context"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// Review of the lean steps (lean-review): where a lean step's outcome
// differs from the general path's on the same state. The general path's
// answer is what these tests want; each fails while the lean hand-off of
// ba9c7be skips the markers of nested and meta.

// leanHandoffAfterLoss: h holds K (limit 1; with limit 2, h and h2 hold
// it), w (another owner) waits for it; the state key lost is deleted; h's
// owner releases h. The general
// path (release.lua with lean_release skipped) runs confirm, finds the
// marker missing, resets: reply in a new epoch, h "g", nobody granted,
// {"reset"} on the namespace's channel, grants frozen until w's deadline.
// The lean hand-off answers h "h" in the old epoch, grants w (token and
// hint), and leaves the state without the key's marker. Limit 1 is the
// lean release's own hand-off of a sole holder, limit 2 lean_freed's
// (lib.lua).
func leanHandoffAfterLoss(t *testing.T, lost, limit int) {
	c := realClient(t)
	ctx := context.Background()
	b := newBackend(t, c)
	o1 := lanes.Owner{ID: "o1", Host: "h", PID: 1}
	o2 := lanes.Owner{ID: "o2", Host: "h", PID: 2}
	warm(t, b, o1)
	k := []lanes.Lane{{Key: "K", Limit: limit}}
	holders := []lanes.Request{{ID: "h", Lanes: k}}
	if limit == 2 {
		holders = append(holders, lanes.Request{ID: "h2", Lanes: k})
	}
	st, err := b.Enqueue(ctx, o1, time.Minute, holders)
	if err != nil || st[0].State != lanes.Held || st[len(st)-1].State != lanes.Held {
		t.Fatalf("Enqueue(h) = %+v, %v", st, err)
	}
	epoch := st[0].Epoch
	if st, err = b.Enqueue(ctx, o2, time.Minute, []lanes.Request{{ID: "w", Lanes: k}}); err != nil || st[0].State != lanes.Waiting {
		t.Fatalf("Enqueue(w) = %+v, %v", st, err)
	}
	c.Del(ctx, b.Keys()[lost])
	rel, err := b.Release(ctx, o1.ID, []string{"h"})
	if err != nil {
		t.Fatal(err)
	}
	if rel.Epoch == epoch || len(rel.Granted) != 0 {
		t.Errorf("%s deleted: Release(h) = %+v (epoch before %s); want what the general path answers: the state reset (a new epoch), h gone, nobody granted",
			b.Keys()[lost], rel, epoch)
	}
	if n, _ := c.Exists(ctx, b.Keys()[lost]).Result(); n == 0 {
		t.Errorf("%s still missing after the release: the general path would have made it again (reset)", b.Keys()[lost])
	}
}

func TestLeanHandoffAfterNestedLostResetsRealRedis(t *testing.T) { leanHandoffAfterLoss(t, 4, 1) }
func TestLeanHandoffAfterMetaLostResetsRealRedis(t *testing.T)   { leanHandoffAfterLoss(t, 5, 1) }
func TestLeanHandoffAfterQueueLostResetsRealRedis(t *testing.T)  { leanHandoffAfterLoss(t, 2, 1) }

func TestLeanHandoffAfterNestedLostOfLimit2ResetsRealRedis(t *testing.T) {
	leanHandoffAfterLoss(t, 4, 2)
}
func TestLeanHandoffAfterMetaLostOfLimit2ResetsRealRedis(t *testing.T) { leanHandoffAfterLoss(t, 5, 2) }
