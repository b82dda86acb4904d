package redislane_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/lanes"
)

// A live (not ended) borrower whose lender record, link, or both were
// deleted by hand is still a problem.
func TestDoctorLiveBorrowerLenderGone(t *testing.T) {
	for _, cut := range []string{"link", "record", "both"} {
		t.Run(cut, func(t *testing.T) {
			m := miniredis.RunT(t)
			c := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { c.Close() })
			b := newBackend(t, c)
			ctx := context.Background()
			k := b.Keys()
			o := lanes.Owner{ID: "o1", Host: "h", PID: 1}
			for _, r := range []lanes.Request{
				{ID: "e1", Lanes: lane("k1")},
				{ID: "e2", Lanes: []lanes.Lane{{Key: "k1", Limit: 1}, {Key: "k2", Limit: 1}}, Lineage: []string{"e1"}},
			} {
				if st, err := b.Enqueue(ctx, o, time.Minute, []lanes.Request{r}); err != nil || st[0].Err != nil || st[0].State != lanes.Held {
					t.Fatalf("enqueue %s: %v %+v", r.ID, err, st)
				}
			}
			if r := doctor(t, b, false); !r.OK() {
				t.Fatalf("sound: %q", r.Problems)
			}
			if cut != "record" {
				c.ZRem(ctx, k[4], " e1\x00e2")
			}
			if cut != "link" {
				c.HDel(ctx, k[0], "e1")
			}
			if r := doctor(t, b, false); r.OK() {
				t.Errorf("after deleting e1's %s by hand, doctor finds nothing wrong", cut)
			} else {
				t.Logf("%s: %q", cut, r.Problems)
			}
		})
	}
}
