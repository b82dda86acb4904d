package lanestest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// DESIGN.md section 5, rule 7: a call's outcome is recorded by run and call
// id in the same step as its lanes' release, so that the next waiter's grant
// and the record are never seen apart; a lost lease's outcome is recorded
// all the same; records are read back by run, and end with their retention.
func testRunRecords(t *testing.T, inst Instance) {
	if _, ok := inst.Backend.(lanes.RunStore); !ok {
		t.Skip("SKIP: the backend keeps no run records")
	}
	ctx := ctxT(t)
	s := session(t, inst.Backend)
	run := "run-" + lanes.NewID()
	l := acquire(t, s, req("c1", "K", 1))
	w := enqueue(t, session(t, inst.Backend), req("w", "K", 1))[0]
	if err := l.ReleaseRecording(ctx, run, "call_1", []byte(`{"status":"ok"}`), time.Hour); err != nil {
		t.Fatalf("ReleaseRecording() = %v", err)
	}
	lw := wait(t, w) // the release happened
	recs, err := s.Records(ctx, run)
	if err != nil || string(recs["call_1"]) != `{"status":"ok"}` {
		t.Fatalf("Records() = %q, %v; want call_1's outcome", recs, err)
	}
	if err := s.Record(ctx, run, "call_2", []byte("started"), time.Hour); err != nil {
		t.Fatal(err)
	}
	// A lease whose entry is gone (released by force) still records.
	if _, err := inst.Backend.Release(ctx, "", []string{"w"}); err != nil {
		t.Fatal(err)
	}
	err = lw.ReleaseRecording(ctx, run, "call_3", []byte("lost"), time.Hour)
	if err != nil && !errors.Is(err, lanes.ErrLeaseLost) && !errors.Is(err, lanes.ErrNotHolder) {
		t.Fatalf("ReleaseRecording() of a lease released by force = %v", err)
	}
	recs, err = s.Records(ctx, run)
	if err != nil || len(recs) != 3 || string(recs["call_2"]) != "started" || string(recs["call_3"]) != "lost" {
		t.Fatalf("Records() = %q, %v; want three calls", recs, err)
	}
	if recs, _ := s.Records(ctx, "another-"+run); len(recs) != 0 {
		t.Fatalf("Records(another run) = %q; want none", recs)
	}
	var inv *lanes.InvalidError
	if err := s.Record(ctx, "a run", "c", nil, time.Hour); !errors.As(err, &inv) || inv.Field != "run" {
		t.Fatalf("Record(run with a space) = %v; want an *InvalidError on run", err)
	}
	if err := s.Record(ctx, run, "c", nil, 0); !errors.As(err, &inv) || inv.Field != "retention" {
		t.Fatalf("Record(retention 0) = %v; want an *InvalidError on retention", err)
	}
	// Retention: the records go once it passed since the last one.
	short := "short-" + run
	if err := s.Record(ctx, short, "c", []byte("x"), 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if inst.Advance != nil {
		inst.Advance(time.Second)
	}
	eventually(t, "the records past their retention gone", func() bool {
		recs, err := s.Records(context.Background(), short)
		return err == nil && len(recs) == 0
	})
}
