package redislane_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

func TestTmpLeave(t *testing.T) {
	ctx := context.Background()
	c := realClient(t)
	b := newBackend(t, c)
	lane := []lanes.Lane{{Key: "c", Limit: 1}}
	if _, err := b.Enqueue(ctx, lanes.Owner{ID: "holder", Host: "h", PID: 1}, time.Minute, []lanes.Request{{ID: "h", Lanes: lane}}); err != nil {
		t.Fatal(err)
	}
	var reqs []lanes.Request
	var ids []string
	for i := range 300 {
		reqs = append(reqs, lanes.Request{ID: fmt.Sprintf("w%d", i), Lanes: lane})
		ids = append(ids, fmt.Sprintf("w%d", i))
	}
	if _, err := b.Enqueue(ctx, lanes.Owner{ID: "o1", Host: "h", PID: 1}, time.Minute, reqs); err != nil {
		t.Fatal(err)
	}
	c.Do(ctx, "CLIENT", "SETNAME", "marker-before-release")
	r, err := b.Release(ctx, "o1", ids[:3])
	t.Logf("%+v %v", r, err)
}
