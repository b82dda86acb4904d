package ui

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/internal/redistest"
	"github.com/lanes-dev/lanes/lanes"
)

// BenchmarkLookRealRedis measures one look of the UI at a namespace of the
// real Redis server (a namespace of its own, its keys deleted at the end):
// the Inspect step, the history and the view, for keys each with one
// holder and one waiter. It is what bounds --interval from below, and what
// one watched namespace costs Redis every interval.
func BenchmarkLookRealRedis(b *testing.B) {
	for _, keys := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			be := redistest.Backend(b, redistest.Client(b), "ui-bench-")
			ctx := context.Background()
			sess, err := lanes.NewSession(ctx, be, lanes.WithTTL(time.Minute))
			if err != nil {
				b.Fatal(err)
			}
			defer sess.Close()
			for start := 0; start < 2*keys; start += lanes.MaxStepRequests {
				var reqs []lanes.Request
				for i := start; i < min(start+lanes.MaxStepRequests, 2*keys); i++ {
					reqs = append(reqs, lanes.Request{Tool: "bench", Lanes: []lanes.Lane{{Key: fmt.Sprintf("tool:k%d", i%keys), Limit: 1}}})
				}
				if _, err := sess.Enqueue(ctx, reqs...); err != nil {
					b.Fatal(err)
				}
			}
			s, err := New(Config{Sources: []Source{{Namespace: be.Namespace(), Lanes: be}}})
			if err != nil {
				b.Fatal(err)
			}
			w := s.watchers[0]
			w.lookOnce(ctx)
			if v := w.view(time.Now()); !v.OK || len(v.Keys) != keys {
				b.Fatalf("look saw %d keys (ok %v, %s); want %d", len(v.Keys), v.OK, v.Error, keys)
			}
			b.ResetTimer()
			for b.Loop() {
				w.lookOnce(ctx)
			}
		})
	}
}
