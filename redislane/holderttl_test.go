package redislane_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// TestHolderTTLLooksAtMost1000HoldersRealRedis (real Redis): a waiting
// status's holder TTL (lanes.Status.HolderTTL) looks at the holders of a
// key of up to 1,000 of them (PURGE_ALL in lib.lua), on the lean step of
// its enqueue and on the general path of a heartbeat alike; a key of more
// gives none, so no step reads more than 1,000 deadlines for it (its
// waiters learn of a dead holder at their heartbeats). The conformance
// suite's HolderTTL checks the values.
func TestHolderTTLLooksAtMost1000HoldersRealRedis(t *testing.T) {
	for _, n := range []int{1000, 1001} {
		t.Run(fmt.Sprint(n, " holders"), func(t *testing.T) {
			b := newBackend(t, realClient(t))
			ctx := context.Background()
			o := lanes.Owner{ID: "holders", Host: "h", PID: 1}
			lane := []lanes.Lane{{Key: "k", Limit: n}}
			for from := 0; from < n; from += 500 {
				var reqs []lanes.Request
				for i := from; i < min(from+500, n); i++ {
					reqs = append(reqs, lanes.Request{ID: fmt.Sprint("h", i), Lanes: lane})
				}
				sts, err := b.Enqueue(ctx, o, time.Minute, reqs)
				if err != nil {
					t.Fatal(err)
				}
				for _, st := range sts {
					if st.State != lanes.Held {
						t.Fatalf("holder %s is %v; want held", st.ID, st.State)
					}
				}
			}
			w := lanes.Owner{ID: "waiter", Host: "h", PID: 2}
			enq, err := b.Enqueue(ctx, w, time.Hour, []lanes.Request{{ID: "w", Lanes: lane}})
			if err != nil {
				t.Fatal(err)
			}
			hb, err := b.Heartbeat(ctx, w.ID, time.Hour, []string{"w"})
			if err != nil {
				t.Fatal(err)
			}
			for step, st := range map[string]lanes.Status{"Enqueue": enq[0], "Heartbeat": hb[0]} {
				if st.State != lanes.Waiting {
					t.Fatalf("%s: w is %v; want waiting", step, st.State)
				}
				if n <= 1000 && (st.HolderTTL <= 0 || st.HolderTTL > time.Minute) {
					t.Errorf("%s: w behind %d holders of a minute has HolderTTL %v; want in (0, 1m]", step, n, st.HolderTTL)
				}
				if n > 1000 && st.HolderTTL != 0 {
					t.Errorf("%s: w behind %d holders has HolderTTL %v; want 0 (none looked at)", step, n, st.HolderTTL)
				}
			}
		})
	}
}
