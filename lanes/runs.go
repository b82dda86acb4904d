package lanes

import (
	"context"
	"maps"
	"time"
)

// RunStore is a Backend that keeps what the calls of runs came to, so that
// a run restarted with the same run id does not run a finished call again
// (DESIGN.md section 5, rule 7). Both built-in backends are RunStores; the
// Redis backend keeps a run's records in one hash beside the namespace's
// lanes.
type RunStore interface {
	// Record stores value for call of run and, in the same atomic step,
	// releases owner's entries ids (none: it releases nothing), as Release
	// does: a call's outcome and the hand-off of its lanes are never seen
	// apart. The run's records are kept for retention (1ms to
	// MaxRetention) after its last one. run is an id (ValidateEntryID),
	// call a non-empty field (ValidateField), value at most MaxRecordLen
	// bytes; otherwise the error is an *InvalidError.
	Record(ctx context.Context, owner string, ids []string, run, call string, value []byte, retention time.Duration) (Released, error)

	// Records returns every call's value recorded for run and not past its
	// retention; an empty map when there is none.
	Records(ctx context.Context, run string) (map[string][]byte, error)
}

// Bounds of a RunStore's records.
const (
	MaxRecordLen = 1 << 20             // bytes in one call's value
	MaxRetention = 30 * 24 * time.Hour // how long a run's records may be kept
)

// ValidateRecord reports whether run, call, value and retention can make a
// record. Its error is an *InvalidError.
func ValidateRecord(run, call string, value []byte, retention time.Duration) error {
	if err := validateID("run", "run id", run); err != nil {
		return err
	}
	if call == "" {
		return invalid("call id", "empty call id")
	}
	if err := ValidateField("call id", call); err != nil {
		return err
	}
	if len(value) > MaxRecordLen {
		return invalid("value", "a record of %d bytes, more than %d", len(value), MaxRecordLen)
	}
	if retention < time.Millisecond || retention > MaxRetention {
		return invalid("retention", "retention %v must be from 1ms to %v", retention, MaxRetention)
	}
	return nil
}

// runStore returns the Session's backend as a RunStore.
func (s *Session) runStore() (RunStore, error) {
	rs, ok := s.b.(RunStore)
	if !ok {
		return nil, invalid("backend", "the backend %T keeps no run records", s.b)
	}
	return rs, nil
}

// Record stores value for call of run (see RunStore.Record), without
// releasing anything. Its error is an *InvalidError, or wraps
// ErrUnavailable when the backend cannot be reached.
func (s *Session) Record(ctx context.Context, run, call string, value []byte, retention time.Duration) error {
	rs, err := s.runStore()
	if err != nil {
		return err
	}
	if err := ValidateRecord(run, call, value, retention); err != nil {
		return err
	}
	return retry(ctx, s.interval, func(ctx context.Context) error {
		_, err := rs.Record(ctx, s.owner.ID, nil, run, call, value, retention)
		return err
	})
}

// Records returns what the calls of run came to, as recorded (see
// RunStore.Records).
func (s *Session) Records(ctx context.Context, run string) (map[string][]byte, error) {
	rs, err := s.runStore()
	if err != nil {
		return nil, err
	}
	if err := validateID("run", "run id", run); err != nil {
		return nil, err
	}
	return rs.Records(ctx, run)
}

// ReleaseRecording releases the lease, as Release does, and stores value
// for call of run in the same atomic step (see RunStore.Record). It returns
// what Release would, or an *InvalidError for a bad record. A lease that
// was lost, or that took no lane, records without releasing anything.
func (l *Lease) ReleaseRecording(ctx context.Context, run, call string, value []byte, retention time.Duration) error {
	s := l.s
	rs, err := s.runStore()
	if err != nil {
		return err
	}
	if err := ValidateRecord(run, call, value, retention); err != nil {
		return err
	}
	l.once.Do(func() {
		l.rerr = l.release(ctx, func(ctx context.Context, ids []string) (Released, error) {
			return rs.Record(ctx, s.owner.ID, ids, run, call, value, retention)
		})
	})
	return l.rerr
}

// Record implements RunStore.
func (m *Memory) Record(ctx context.Context, owner string, ids []string, run, call string, value []byte, retention time.Duration) (Released, error) {
	if err := ValidateRecord(run, call, value, retention); err != nil {
		return Released{}, err
	}
	if owner == "" {
		return Released{}, invalid("owner", "a record needs its owner's id")
	}
	rel, err := m.release(ctx, owner, 0, ids)
	if err != nil {
		return rel, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for id, r := range m.runs { // runs past their retention go, read again or not
		if !r.expires.After(now) {
			delete(m.runs, id)
		}
	}
	r := m.runs[run]
	if r == nil {
		r = &memRun{calls: map[string][]byte{}}
		m.runs[run] = r
	}
	r.calls[call] = append([]byte(nil), value...)
	r.expires = now.Add(retention)
	return rel, nil
}

// Records implements RunStore.
func (m *Memory) Records(ctx context.Context, run string) (map[string][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.runs[run]
	if r == nil || !r.expires.After(m.now()) {
		delete(m.runs, run)
		return map[string][]byte{}, nil
	}
	return maps.Clone(r.calls), nil
}

// memRun is one run's records in a Memory backend.
type memRun struct {
	calls   map[string][]byte
	expires time.Time
}

var _ RunStore = (*Memory)(nil)
