package redislane_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

// A split Release whose ids include another owner's waiter (left in place,
// Was Gone) that an earlier piece's release granted: the entry is granted
// and still there, so Granted must list it, as the whole run and the
// memory backend do. Runs on miniredis and on the real Redis server.
func TestSplitReleaseGrantedKeepsOtherOwnersWaiter(t *testing.T) {
	splitServers(t, func(t *testing.T, client func(t *testing.T) *redis.Client) {
		ctx := context.Background()
		a := lanes.Owner{ID: "a", Host: "h", PID: 1}
		o := lanes.Owner{ID: "o", Host: "h", PID: 2}
		k := []lanes.Lane{{Key: "k", Limit: 1}}
		run := func(b lanes.Backend) lanes.Released {
			if _, err := b.Enqueue(ctx, a, time.Minute, []lanes.Request{{ID: "h1", Lanes: k}}); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Enqueue(ctx, o, time.Minute, []lanes.Request{{ID: "x", Lanes: k}}); err != nil {
				t.Fatal(err)
			}
			r, err := b.Release(ctx, a.ID, []string{"h1", "x"})
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		mem := run(lanes.NewMemory())
		whole := run(newBackend(t, client(t)))
		sb := newBackend(t, client(t))
		redislane.SetPieces(sb, 200, 1)
		split := run(sb)
		if !reflect.DeepEqual(whole.Granted, []string{"x"}) || !reflect.DeepEqual(mem.Granted, []string{"x"}) {
			t.Fatalf("whole Granted %v, memory Granted %v; want [x]", whole.Granted, mem.Granted)
		}
		if !reflect.DeepEqual(split.Granted, whole.Granted) {
			t.Errorf("split Release Granted = %v, the whole run's %v (x, another owner's waiter granted by the step, is dropped because its id is in the step)", split.Granted, whole.Granted)
		}
	})
}
