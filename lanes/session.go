package lanes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Defaults of a Session.
const (
	DefaultTTL            = 10 * time.Second // lease TTL
	DefaultReleaseTimeout = 5 * time.Second  // bound on a release step
)

// Session is one process's part in the lanes of a Backend: it enqueues
// requests as one Owner, keeps every entry it owns alive with one batched
// heartbeat, turns grants into Leases and tells a Lease's holder when it is
// lost. Its heartbeat also polls, so a grant whose hint was lost is still
// seen within one heartbeat interval.
//
// A Session is safe for concurrent use. It owns a goroutine until Close.
type Session struct {
	b              Backend
	owner          Owner
	ttl            time.Duration
	interval       time.Duration
	margin         time.Duration
	releaseTimeout time.Duration
	unsubscribe    func()

	mu       sync.Mutex
	entries  map[string]*entry // waiters and holders kept alive
	hinted   map[string]bool   // waiters a hint named since the last beat
	lastErr  error             // the last heartbeat's error; nil after a success
	inflight time.Time         // when the heartbeat now in flight was sent; zero when none
	closed   bool

	kick chan struct{} // wakes the loop for hinted entries
	stop chan struct{}
	done chan struct{}
	bg   sync.WaitGroup // best-effort releases of lost leases
	tel  telemetry
}

// entry is one request this Session keeps alive.
type entry struct {
	id       string
	deadline time.Time   // local: last renewal sent + TTL - margin
	timer    *time.Timer // fires at deadline
	ready    chan struct{}
	lease    *Lease // set once granted
	err      error  // set when it ended without a grant
	finished bool   // no longer kept alive by this Session
	pending  bool   // its Enqueue step has not answered yet: heartbeats skip it
	seq      uint64 // its sequence number in the backend, once known
	ctx      context.Context
	queued   time.Time  // when its Enqueue step was sent
	span     trace.Span // its wait
}

// Option configures NewSession.
type Option func(*Session) error

// WithTTL sets the lease TTL: how long the backend keeps an entry (a holder's
// slots, a waiter's place) after the last heartbeat that reached it. Default
// DefaultTTL. The heartbeat interval defaults to a third of it.
func WithTTL(d time.Duration) Option {
	return func(s *Session) error {
		if d < 3*time.Millisecond {
			return fmt.Errorf("%w: TTL %v is shorter than 3ms", ErrInvalid, d)
		}
		s.ttl = d
		return nil
	}
}

// WithHeartbeat sets how often the Session renews its entries and polls for
// grants. It must be positive and at most a third of the TTL; default TTL/3.
func WithHeartbeat(d time.Duration) Option {
	return func(s *Session) error {
		if d <= 0 {
			return fmt.Errorf("%w: heartbeat interval %v must be positive", ErrInvalid, d)
		}
		s.interval = d
		return nil
	}
}

// WithOwner sets the host and process id recorded with every entry; the
// defaults are os.Hostname and os.Getpid. The owner id stays the Session's own.
func WithOwner(host string, pid int) Option {
	return func(s *Session) error {
		s.owner.Host, s.owner.PID = host, pid
		return nil
	}
}

// WithReleaseTimeout bounds each release step, which runs on a context
// detached from the caller's cancellation. Default DefaultReleaseTimeout.
func WithReleaseTimeout(d time.Duration) Option {
	return func(s *Session) error {
		if d <= 0 {
			return fmt.Errorf("%w: release timeout %v must be positive", ErrInvalid, d)
		}
		s.releaseTimeout = d
		return nil
	}
}

// NewSession starts a Session on b. ctx bounds the setup (the grant-hint
// subscription) only. It fails with an error wrapping ErrInvalid for a bad
// option, or the backend's error (ErrUnavailable) when it cannot subscribe.
func NewSession(ctx context.Context, b Backend, opts ...Option) (*Session, error) {
	host, _ := os.Hostname()
	s := &Session{
		b:              b,
		owner:          Owner{ID: NewID(), Host: host, PID: os.Getpid()},
		ttl:            DefaultTTL,
		releaseTimeout: DefaultReleaseTimeout,
		entries:        map[string]*entry{},
		hinted:         map[string]bool{},
		kick:           make(chan struct{}, 1),
		stop:           make(chan struct{}),
		done:           make(chan struct{}),
		tel:            newTelemetry(),
	}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	s.tel.instruments()
	if s.interval == 0 {
		s.interval = s.ttl / 3
	}
	if s.interval > s.ttl/3 {
		return nil, fmt.Errorf("%w: heartbeat interval %v is more than a third of the TTL %v", ErrInvalid, s.interval, s.ttl)
	}
	// The local deadline of a lease ends this much before the backend's could:
	// room for the renewal's trip and for clocks that run at different rates.
	s.margin = s.ttl / 10
	unsub, err := b.Subscribe(ctx, s.owner.ID, s.hint)
	if err != nil {
		return nil, err
	}
	s.unsubscribe = unsub
	go s.loop()
	return s, nil
}

// Owner returns the owner recorded with this Session's entries.
func (s *Session) Owner() Owner { return s.owner }

// TTL returns the lease TTL.
func (s *Session) TTL() time.Duration { return s.ttl }

// Done is closed once Close has finished.
func (s *Session) Done() <-chan struct{} { return s.done }

// Acquire enqueues req and waits until it holds every lane it names. ctx
// bounds the wait only, never the lease.
//
// On success it returns the Lease, which holds the lanes until Release or
// until it is lost. On failure it holds nothing and has left every queue; the
// error wraps ErrCanceled or ErrWaitTimeout (and ctx's error) when ctx ended,
// ErrInvalid for a malformed request, a *LimitMismatchError, ErrUnavailable
// when the backend cannot be reached, ErrLeaseLost when the backend evicted
// the waiting entry, or ErrClosed.
func (s *Session) Acquire(ctx context.Context, req Request) (*Lease, error) {
	ts, err := s.Enqueue(ctx, req)
	if err != nil {
		return nil, err
	}
	return ts[0].Wait(ctx)
}

// Enqueue places every request in its lanes' queues in one atomic step, in
// the order given (DESIGN.md invariant 4), and returns one Ticket per request
// to wait on. A request with an empty ID gets a random one. ctx bounds the
// step only.
//
// On error nothing is kept alive: a step that reached the backend before the
// error leaves entries that expire within the TTL, or that a retry with the
// same ids takes over. The error wraps ErrInvalid, ErrLimitMismatch,
// ErrUnavailable or ErrClosed.
func (s *Session) Enqueue(ctx context.Context, reqs ...Request) ([]*Ticket, error) {
	ids := map[string]bool{}
	var send []Request
	for i := range reqs {
		if reqs[i].ID == "" {
			reqs[i].ID = NewID()
		}
		if err := reqs[i].Validate(); err != nil {
			return nil, err
		}
		if ids[reqs[i].ID] {
			return nil, fmt.Errorf("%w: entry id %s appears twice in one step", ErrInvalid, reqs[i].ID)
		}
		ids[reqs[i].ID] = true
		if r := reqs[i]; len(r.taken()) > 0 {
			r.Lanes = r.taken()
			send = append(send, r)
		}
	}
	if err := ValidateStep(send); err != nil {
		return nil, err
	}

	values := context.WithoutCancel(ctx) // a lease keeps ctx's values, never its deadline
	sent := time.Now()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	tickets := make([]*Ticket, len(reqs))
	for i, r := range reqs {
		if s.entries[r.ID] != nil {
			s.mu.Unlock()
			return nil, fmt.Errorf("%w: entry %s is already live in this session", ErrInvalid, r.ID)
		}
		e := &entry{id: r.ID, ready: make(chan struct{}), ctx: values}
		tickets[i] = &Ticket{s: s, e: e}
		if len(r.taken()) == 0 {
			// Nothing to take: granted at once, and no backend entry.
			e.finished = true
			e.lease = newLease(s, e, nil, values)
			close(e.ready)
		}
	}
	for i, t := range tickets {
		if !t.e.finished {
			t.e.pending = true
			t.e.queued = sent
			t.e.span = s.tel.startWait(ctx, reqs[i])
			s.track(t.e, sent)
		}
	}
	s.mu.Unlock()
	if len(send) == 0 {
		return tickets, nil
	}

	sts, err := s.b.Enqueue(ctx, s.owner, s.ttl, send)
	if err == nil && len(sts) != len(send) {
		err = fmt.Errorf("%w: backend answered %d statuses for %d requests", ErrUnavailable, len(sts), len(send))
	}
	s.mu.Lock()
	if err != nil {
		var sentIDs []string
		for _, t := range tickets {
			if !t.e.finished {
				s.untrack(t.e)
				endSpan(t.e.span, "error", err)
				sentIDs = append(sentIDs, t.e.id)
			}
		}
		s.mu.Unlock()
		if ctx.Err() == nil {
			return nil, err
		}
		// The caller gave up while the step was in flight: whatever it
		// enqueued leaves at once rather than at the end of its TTL.
		rctx, cancel := context.WithTimeout(values, s.releaseTimeout)
		_, _ = s.b.Release(rctx, s.owner.ID, sentIDs)
		cancel()
		return nil, s.waitError(ctx)
	}
	if s.closed {
		// Close ran while the step was in flight and may have released the
		// entries before the step created them: release them again.
		s.mu.Unlock()
		rctx, cancel := context.WithTimeout(values, s.releaseTimeout)
		_, _ = s.b.Release(rctx, s.owner.ID, idsOf(send))
		cancel()
		return nil, ErrClosed
	}
	defer s.mu.Unlock()
	byID := map[string]*Ticket{}
	for _, t := range tickets {
		byID[t.e.id] = t
	}
	kick := false
	for _, st := range sts {
		if t := byID[st.ID]; t != nil {
			t.e.pending = false
			t.e.seq = st.Seq
			t.positions = st.Positions
			if len(st.Positions) > 0 && t.e.span.IsRecording() {
				far := 0
				for _, p := range st.Positions {
					far = max(far, p)
				}
				t.e.span.SetAttributes(AttrPosition.Int(far))
			}
			s.apply(t.e, st, sent, false)
			kick = kick || s.hinted[st.ID]
		}
	}
	if kick { // a hint came before this step's answer
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	return tickets, nil
}

// track starts keeping e alive. s.mu is held.
func (s *Session) track(e *entry, sent time.Time) {
	e.deadline = sent.Add(s.ttl - s.margin)
	e.timer = time.AfterFunc(time.Until(e.deadline), func() { s.expire(e) })
	s.entries[e.id] = e
}

// untrack stops keeping e alive. s.mu is held.
func (s *Session) untrack(e *entry) {
	e.finished = true
	if e.timer != nil {
		e.timer.Stop()
	}
	delete(s.entries, e.id)
	delete(s.hinted, e.id)
}

// apply brings e up to the Status a step sent at sent returned. Entries only
// move forward, so a stale Status (Waiting after Held) changes nothing.
// s.mu is held.
func (s *Session) apply(e *entry, st Status, sent time.Time, polled bool) {
	if e.finished {
		return
	}
	if st.Err != nil {
		s.untrack(e)
		s.endWait(e, st.Err)
		return
	}
	switch st.State {
	case Held:
		if e.lease == nil {
			s.grant(e, st.Tokens, polled)
		}
		s.renew(e, sent)
	case Waiting:
		if e.lease == nil {
			s.renew(e, sent)
		}
	case Gone:
		if e.lease != nil {
			s.lose(e, fmt.Errorf("%w: entry %s is no longer held by the backend (expired, or released by force)", ErrLeaseLost, e.id))
		} else {
			s.fail(e, fmt.Errorf("%w: entry %s was evicted from its queues (expired, released by force, or taken over by another owner)", ErrLeaseLost, e.id))
		}
	}
}

// renew moves e's local deadline to TTL minus margin after sent. s.mu is held.
func (s *Session) renew(e *entry, sent time.Time) {
	if d := sent.Add(s.ttl - s.margin); d.After(e.deadline) {
		e.deadline = d
		e.timer.Reset(time.Until(d))
	}
}

// expire runs when e's local deadline passes without a renewal.
func (s *Session) expire(e *entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.finished || time.Now().Before(e.deadline) {
		return
	}
	// Whose fault: a heartbeat that failed to reach the backend, or one
	// still unanswered while this timer fires on time, means the backend; a
	// timer that fires well after its time means this process was stopped
	// or starved.
	why := "no heartbeat reached the backend within the TTL"
	unreachable := false
	switch late := time.Since(e.deadline); {
	case s.lastErr != nil:
		why += "; last heartbeat: " + s.lastErr.Error()
		unreachable = errors.Is(s.lastErr, ErrUnavailable)
	case late > s.margin:
		why += fmt.Sprintf(" (this process did not run for %v: stopped or starved)", late.Round(time.Millisecond))
	case !s.inflight.IsZero():
		why += fmt.Sprintf("; the heartbeat sent %v ago has no answer", time.Since(s.inflight).Round(time.Millisecond))
		unreachable = true
	default:
		why += " (this process did not renew in time)"
	}
	switch {
	case e.lease != nil:
		s.lose(e, fmt.Errorf("%w: entry %s: %s", ErrLeaseLost, e.id, why))
	case unreachable:
		s.fail(e, fmt.Errorf("%w: entry %s lost its place: %s", ErrUnavailable, e.id, why))
	default:
		s.fail(e, fmt.Errorf("%w: entry %s lost its place: %s", ErrLeaseLost, e.id, why))
	}
}

// grant turns the waiting entry e into a lease. polled says the grant was
// found by a periodic heartbeat, not at enqueue or after a hint. s.mu is held.
func (s *Session) grant(e *entry, tokens map[string]uint64, polled bool) {
	endSpan(e.span, "granted", nil)
	s.tel.record(s.tel.waitDur, seconds(time.Since(e.queued)), outcomeGranted)
	s.tel.count(s.tel.grants)
	if polled {
		s.tel.count(s.tel.polls)
	}
	values, span := s.tel.startHold(e.ctx, e.id, tokens)
	e.lease = newLease(s, e, tokens, values)
	e.lease.span = span
	close(e.ready)
}

// endWait ends the wait of e without a grant, with err. s.mu is held.
func (s *Session) endWait(e *entry, err error) {
	e.err = err
	close(e.ready)
	if e.span == nil {
		return
	}
	outcome := "error"
	switch {
	case errors.Is(err, ErrCanceled):
		outcome = "cancelled"
	case errors.Is(err, ErrWaitTimeout):
		outcome = "timed_out"
	case errors.Is(err, ErrLeaseLost):
		outcome = "evicted"
		s.tel.count(s.tel.evict)
	case errors.Is(err, ErrClosed):
		outcome = "closed"
	}
	endSpan(e.span, outcome, err)
	s.tel.record(s.tel.waitDur, seconds(time.Since(e.queued)), outcomeFailed)
}

// lose ends e's lease as lost and gives its slots back in the background, so
// they pass on before the TTL when the backend is reachable. s.mu is held.
func (s *Session) lose(e *entry, cause error) {
	s.untrack(e)
	e.lease.markLost(cause)
	s.releaseLater(e.id)
}

// fail ends the wait of e with err. s.mu is held.
func (s *Session) fail(e *entry, err error) {
	s.untrack(e)
	s.endWait(e, err)
	s.releaseLater(e.id)
}

func (s *Session) releaseLater(ids ...string) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), s.releaseTimeout)
		defer cancel()
		_, _ = s.b.Release(ctx, s.owner.ID, ids) // best effort: the TTL ends them anyway
	}()
}

func idsOf(reqs []Request) []string {
	ids := make([]string, len(reqs))
	for i, r := range reqs {
		ids[i] = r.ID
	}
	return ids
}

// release removes id from the backend on a context detached from ctx's
// cancellation, bounded by the release timeout.
func (s *Session) release(ctx context.Context, id string) (State, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.releaseTimeout)
	defer cancel()
	r, err := s.b.Release(ctx, s.owner.ID, []string{id})
	if err != nil {
		return Gone, err
	}
	if len(r.Was) != 1 {
		return Gone, fmt.Errorf("%w: backend answered %d states for 1 release", ErrUnavailable, len(r.Was))
	}
	return r.Was[0], nil
}

// hint is the Backend's hint about some entries. A grant of a waiting entry
// whose sequence number it knows is taken at once: the grant did not move
// the entry's deadline, so the local one stays right. Any other hint wakes
// the loop to poll those entries.
func (s *Session) hint(hints []Hint) {
	s.mu.Lock()
	n := 0
	for _, h := range hints {
		e := s.entries[h.ID]
		switch {
		case e == nil, h.Tokens != nil && e.lease != nil:
		case h.Tokens != nil && !e.pending && e.seq != 0 && e.seq == h.Seq:
			s.grant(e, h.Tokens, false)
			if !h.Granted.IsZero() {
				s.tel.record(s.tel.handoff, seconds(max(time.Since(h.Granted), 0)), outcomeGranted)
			}
		default:
			s.hinted[h.ID] = true
			n++
		}
	}
	s.mu.Unlock()
	if n > 0 {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// loop renews every entry each interval, and polls hinted ones at once.
func (s *Session) loop() {
	defer close(s.done)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.beat(false)
		case <-s.kick:
			s.beat(true)
		}
	}
}

// beat runs one Heartbeat step for every entry, or for the hinted ones.
func (s *Session) beat(hintedOnly bool) {
	s.mu.Lock()
	var ids []string
	if hintedOnly {
		for id := range s.hinted {
			if e := s.entries[id]; e != nil && !e.pending {
				ids = append(ids, id)
			}
		}
	} else {
		for id, e := range s.entries {
			if !e.pending {
				ids = append(ids, id)
			}
		}
	}
	for id := range s.hinted {
		if e := s.entries[id]; e == nil || !e.pending {
			delete(s.hinted, id)
		}
	}
	s.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	slices.Sort(ids)

	for len(ids) > 0 {
		n := min(len(ids), MaxStepRequests)
		s.beatStep(ids[:n], hintedOnly)
		ids = ids[n:]
	}
}

// beatStep runs one Heartbeat step for ids, hinted ones or every one.
func (s *Session) beatStep(ids []string, hinted bool) {
	sent := time.Now()
	s.mu.Lock()
	s.inflight = sent
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.ttl-s.margin)
	sts, err := s.b.Heartbeat(ctx, s.owner.ID, s.ttl, ids)
	cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight = time.Time{}
	if err == nil && len(sts) != len(ids) {
		err = fmt.Errorf("%w: backend answered %d statuses for %d entries", ErrUnavailable, len(sts), len(ids))
	}
	s.lastErr = err
	if err != nil {
		s.tel.count(s.tel.beatFails)
		return // the entries' timers report what this costs
	}
	for _, st := range sts {
		if e := s.entries[st.ID]; e != nil {
			s.apply(e, st, sent, !hinted)
		}
	}
}

// Close ends the Session: waiters fail with ErrClosed, leases end, every
// entry is released in one step bounded by the release timeout, and the
// heartbeat goroutine exits. It returns the release step's error, if any.
// Close is idempotent.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.done
		return nil
	}
	s.closed = true
	var ids []string
	for _, e := range s.entries {
		ids = append(ids, e.id)
		s.untrack(e)
		if e.lease != nil {
			e.lease.end(ErrClosed)
		} else {
			s.endWait(e, ErrClosed)
		}
	}
	s.mu.Unlock()
	close(s.stop)
	<-s.done
	var errs []error
	slices.Sort(ids)
	for len(ids) > 0 {
		n := min(len(ids), MaxStepRequests)
		ctx, cancel := context.WithTimeout(context.Background(), s.releaseTimeout)
		_, err := s.b.Release(ctx, s.owner.ID, ids[:n])
		cancel()
		errs = append(errs, err)
		ids = ids[n:]
	}
	err := errors.Join(errs...)
	s.unsubscribe()
	s.bg.Wait()
	return err
}

// waitError is the error of a wait that ctx ended.
func (s *Session) waitError(ctx context.Context) error {
	s.mu.Lock()
	last := s.lastErr
	s.mu.Unlock()
	kind := ErrCanceled
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		kind = ErrWaitTimeout
	}
	if last != nil && errors.Is(last, ErrUnavailable) {
		return fmt.Errorf("%w: %w; the last heartbeat failed: %w", kind, ctx.Err(), last)
	}
	return fmt.Errorf("%w: %w", kind, ctx.Err())
}
