package sched

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lanes-dev/lanes/lanes"
)

// A run's records (DESIGN.md section 5, rule 7) keep, by run id and call
// id (CALL, or CALL#N for an operation), where each execution stands: the
// Session records "started" once the execution holds its lanes and before
// its body runs, and the outcome in the same atomic step as the release of
// its lanes (lanes.Lease.ReleaseRecording). A run started again with the
// same id reads them first: a settled execution's outcome is returned
// without running it, one that started and never settled was in flight
// when its process stopped and is reported SafeToRetry (an idempotent
// tool) or Indeterminate, never run again; one without a record runs.

// The states of a record.
const (
	recStarted     = "started"     // granted, its body about to run
	recInterrupted = "interrupted" // its body asked a question: Resume runs it again
	recDone        = "done"        // settled: Outcome holds what it came to
)

// record is the JSON value of one execution's record.
type record struct {
	State   string   `json:"state"`
	Tool    string   `json:"tool"`
	Args    string   `json:"args"` // argsDigest of the call's arguments as the model wrote them
	Outcome *Outcome `json:"outcome,omitempty"`
	// Dropped is the size of an output too large to keep in the record.
	Dropped int `json:"dropped,omitempty"`
}

// argsDigest names arguments by their SHA-256, taken over their compact
// form when they are JSON, so that a run restarted from the same response
// is recognised whatever the spacing.
func argsDigest(args json.RawMessage) string {
	buf := []byte(args)
	if bytes.ContainsAny(buf, " \t\r\n") { // else compact already, or not JSON
		if compact, err := compactJSON(args); err == nil {
			buf = compact
		}
	}
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:16])
}

func compactJSON(b []byte) ([]byte, error) {
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// digest is argsDigest of call i's arguments as given, worked out once.
func (r *run) digest(i int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.digests == nil {
		r.digests = make([]string, len(r.orig))
	}
	if r.digests[i] == "" {
		r.digests[i] = argsDigest(r.orig[i].Args)
	}
	return r.digests[i]
}

// loadRecords reads the run's records. A Session whose backend keeps none
// (not a lanes.RunStore) runs without them; a backend that cannot be
// reached fails the run, which would otherwise risk running a settled
// call again.
func (r *run) loadRecords(ctx context.Context) error {
	m, err := r.s.session.Records(ctx, r.o.RunID)
	var inv *lanes.InvalidError
	switch {
	case errors.As(err, &inv) && inv.Field == "backend":
		return nil
	case err != nil:
		return fmt.Errorf("sched: cannot read the records of run %s, so as not to run a settled call again: %w", r.o.RunID, err)
	}
	r.recording = true
	r.recs = make(map[string]record, len(m))
	for field, v := range m {
		var rec record
		if json.Unmarshal(v, &rec) != nil || rec.State == "" {
			rec = record{State: recStarted} // unreadable: as if in flight, never run again
		}
		r.recs[field] = rec
	}
	return nil
}

// recordField is the record field of call i's operation op.
func (r *run) recordField(i, op int) string {
	if r.state[i].fanned {
		return fmt.Sprintf("%s#%d", r.calls[i].ID, op)
	}
	return r.calls[i].ID
}

// fromRecord returns the outcome that call i's record field says the
// execution came to, or nil when it is to run: it has no record, or it
// asked a question and this run is its Resume.
func (r *run) fromRecord(i int, field string) *Outcome {
	r.mu.Lock()
	rec, ok := r.recs[field]
	r.mu.Unlock()
	if !ok {
		return nil
	}
	c, t := r.orig[i], r.s.cfg.Tools[r.orig[i].Tool]
	o := &Outcome{CallID: c.ID, Tool: c.Tool, Stored: true}
	switch {
	case rec.Tool != "" && (rec.Tool != c.Tool || rec.Args != r.digest(i)):
		o.Status, o.Code = Failed, CodeRunConflict
		o.Err = fmt.Errorf("run %s has a record of call %s for another tool or other arguments: not run; give this batch another run id", r.o.RunID, c.ID)
		o.Stored = false
	case rec.State == recDone && rec.Outcome != nil:
		*o = *rec.Outcome
		o.Stored = true
		if rec.Dropped > 0 {
			o.Code = CodeOutputNotStored
			o.Err = fmt.Errorf("%s (its output of %d bytes was too large to keep in the run's records)", o.Status, rec.Dropped)
		}
	case rec.State == recInterrupted && r.resumed != nil:
		return nil
	default:
		why := "it was in flight in another run of this run id, which stopped or still runs"
		if rec.State == recInterrupted {
			why = "it asked a question and the run was started again instead of resumed"
		}
		if t.Idempotent {
			o.Status, o.Code = SafeToRetry, CodeSafeToRetry
			o.Err = fmt.Errorf("%s: not run again", why)
		} else {
			o.Status, o.Code = Indeterminate, CodeIndeterminate
			o.Err = fmt.Errorf("%s: not run again", why)
		}
	}
	return o
}

// recordValue encodes a record of call i in state with outcome o (nil
// for none), within lanes.MaxRecordLen: an output too large is left out.
func (r *run) recordValue(i int, state string, o *Outcome) []byte {
	rec := record{State: state, Tool: r.orig[i].Tool, Args: r.digest(i)}
	if o != nil {
		oc := *o
		oc.Stored = false
		rec.Outcome = &oc
	}
	v, err := json.Marshal(rec)
	if err == nil && len(v) <= lanes.MaxRecordLen {
		return v
	}
	if o != nil {
		oc := *rec.Outcome
		rec.Dropped, oc.Output, oc.Operations = len(oc.Output), "", nil
		if msg := oc.Err; msg != nil && len(msg.Error()) > 4096 {
			oc.Err = errors.New(msg.Error()[:4096] + "…")
		}
		rec.Outcome = &oc
	}
	v, _ = json.Marshal(rec)
	return v
}

// recordStart records that call i's operation op is about to run.
func (r *run) recordStart(ctx context.Context, i, op int) error {
	if !r.recording {
		return nil
	}
	err := r.s.session.Record(ctx, r.o.RunID, r.recordField(i, op), r.recordValue(i, recStarted, nil), r.runner.retention())
	if err != nil {
		return fmt.Errorf("could not record that the call started, so it did not: %w", err)
	}
	return nil
}

// release gives back an execution's lanes and, when the run keeps
// records, stores its outcome o in the same atomic step.
func (r *run) release(lease *lanes.Lease, j job, o *Outcome) {
	ctx := context.Background()
	if !r.recording || o == nil {
		_ = lease.Release(ctx)
		return
	}
	state := recDone
	if o.Status == Interrupted {
		state = recInterrupted
	}
	field, value := r.recordField(j.call, j.op), r.recordValue(j.call, state, o)
	if lease.Err() != nil || len(lease.Tokens()) == 0 {
		// Lost, or it took no lane: nothing to hand off, only the record to
		// store, within a bound (ReleaseRecording would try again for as
		// long as the backend cannot be reached).
		_ = lease.Release(ctx)
		rctx, cancel := context.WithTimeout(ctx, lanes.DefaultReleaseTimeout)
		defer cancel()
		_ = r.s.session.Record(rctx, r.o.RunID, field, value, r.runner.retention())
		return
	}
	err := lease.ReleaseRecording(ctx, r.o.RunID, field, value, r.runner.retention())
	var inv *lanes.InvalidError
	if errors.As(err, &inv) {
		_ = lease.Release(ctx)
	}
}

// reread reads call i's record again, after its entry was found held by
// another owner (an earlier process of this run) and then granted to this
// one: that owner may have settled it meanwhile.
func (r *run) reread(ctx context.Context, j job) *Outcome {
	if !r.recording {
		return nil
	}
	m, err := r.s.session.Records(ctx, r.o.RunID)
	if err != nil {
		return &Outcome{CallID: r.calls[j.call].ID, Tool: r.calls[j.call].Tool, Status: Failed, Code: codeOf(err),
			Err: fmt.Errorf("could not read the run's records again, so it did not run: %w", err)}
	}
	field := r.recordField(j.call, j.op)
	v, ok := m[field]
	if !ok {
		return nil
	}
	var rec record
	if json.Unmarshal(v, &rec) != nil || rec.State == "" {
		rec = record{State: recStarted}
	}
	r.mu.Lock()
	r.recs[field] = rec
	r.mu.Unlock()
	return r.fromRecord(j.call, field)
}
