package lanes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Defaults of a Session.
const (
	DefaultTTL            = 10 * time.Second // lease TTL
	DefaultReleaseTimeout = 5 * time.Second  // bound on a release step
)

// The pieces a Session sends its steps in: small enough that one script
// holds a Redis server for a few milliseconds (DESIGN.md invariant 14).
const (
	enqueuePiece = 100 // requests per Enqueue step
	beatPiece    = 200 // ids per Heartbeat step
	releasePiece = 250 // ids per Release or Settle step
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
	entries  map[string]*entry        // waiters and holders kept alive
	hinted   map[string]bool          // waiters a hint named since the last beat
	settling map[string]chan struct{} // ids a background settle has not finished with: closed when done
	releases map[string]*releasing    // releases begun and not answered yet, by id
	// byAncestor holds the releases of releases by each of their entries'
	// ancestors: a lender's release finds its borrowers' there
	byAncestor map[string]map[*releasing]struct{}
	stamps     uint64 // entries made so far; the last one's stamp
	// settles ends a release timeout after Close began: the background
	// settles begun before stop then, so that Close waits for them no
	// longer (the entries expire within their TTL, and nothing can
	// enqueue their ids here any more)
	settles    context.Context
	endSettles context.CancelFunc
	closeBy    time.Time // when Close began, plus the release timeout
	pollAll    bool      // a hint asked about every entry
	epoch      string    // the backend state's epoch, as last seen
	lastErr    error     // the last heartbeat's error; nil after a success
	inflight   time.Time // when the heartbeat now in flight was sent; zero when none
	// refusedSince is when the backend began refusing every connection
	// (UnixNano), 0 while it does not (noteStep)
	refusedSince atomic.Int64
	closed       bool

	enq *batcher[Request, Status]          // Enqueue steps of concurrent callers, merged
	rel *batcher[releaseItem, releasedOne] // Release steps of concurrent leases, merged

	kick chan struct{} // wakes the loop for hinted entries
	stop chan struct{}
	done chan struct{}
	// released is closed when Close's release steps are over; closeErrs
	// then holds, for each id they did not find held (or could not
	// release), what its Lease.Release reports
	released  chan struct{}
	closeErrs map[string]error
	// unsettled holds the errors of background settles (settleLater)
	// that gave up: their entries stay until their deadlines; Close
	// returns them
	unsettled []error
	bg        sync.WaitGroup // best-effort releases of lost leases
	tel       telemetry
}

// entry is one request this Session keeps alive.
type entry struct {
	id       string
	deadline time.Time   // local: last renewal sent + TTL - margin
	timer    *time.Timer // fires at deadline
	pollWake *time.Timer // fires when a rate that holds it back could have room, or a holder's lease before it runs out
	pollAt   time.Time   // when pollWake is due (pollAfter); zero when stopped or fired
	ready    chan struct{}
	lease    *Lease        // set once granted
	err      error         // set when it ended without a grant
	finished bool          // no longer kept alive by this Session
	pending  bool          // its Enqueue step has not answered yet: heartbeats skip it
	mark     chan struct{} // set by untrack while pending: its id's settling mark, until unpend or the settle
	early    *Hint         // a grant hint that came while pending, for apply to take
	earlyIn  string        // the backend state's epoch the Session knew when early came
	seq      uint64        // its sequence number in the backend, once known
	epoch    string        // the backend state's epoch it was enqueued in
	// ancestors are the entry ids it may borrow from: its request's
	// lineage and, for each of those this Session knows, that entry's
	// ancestors.
	ancestors []string
	// stamp orders the Session's entries that take a lane as their steps
	// were sent (Session.stamp): a borrower's is greater than its
	// lenders' (a lender holds before its borrower's step is sent).
	// Releases put newer entries first and wait only for newer ones, so
	// no two releases wait for each other.
	stamp  uint64
	ctx    context.Context
	queued time.Time  // when its Enqueue step was first sent
	span   trace.Span // its wait
}

// Option configures NewSession.
type Option func(*Session) error

// WithTTL sets the lease TTL: how long the backend keeps an entry (a holder's
// slots, a waiter's place) after the last heartbeat that reached it; 3ms to
// MaxTTL, in whole milliseconds. Default DefaultTTL. The heartbeat interval
// defaults to a third of it.
func WithTTL(d time.Duration) Option {
	return func(s *Session) error {
		if d < 3*time.Millisecond {
			return invalid("ttl", "TTL %v is shorter than 3ms", d)
		}
		if err := ValidateTTL(d); err != nil {
			return err
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
			return invalid("heartbeat", "heartbeat interval %v must be positive", d)
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
		return ValidateOwner(s.owner)
	}
}

// WithReleaseTimeout bounds each release step, which runs on a context
// detached from the caller's cancellation. Default DefaultReleaseTimeout.
func WithReleaseTimeout(d time.Duration) Option {
	return func(s *Session) error {
		if d <= 0 {
			return invalid("release timeout", "release timeout %v must be positive", d)
		}
		s.releaseTimeout = d
		return nil
	}
}

// NewSession starts a Session on b. ctx bounds the setup only: the
// backend's check (Checker) and the grant-hint subscription. It fails with
// an *InvalidError for a bad option, the Checker's error (a Redis server
// that may evict the lanes' keys), or the backend's error (ErrUnavailable)
// when it cannot subscribe.
func NewSession(ctx context.Context, b Backend, opts ...Option) (*Session, error) {
	host, _ := os.Hostname()
	if len(host) > MaxFieldLen {
		host = host[:MaxFieldLen]
	}
	s := &Session{
		b:              b,
		owner:          Owner{ID: NewID(), Host: host, PID: os.Getpid()},
		ttl:            DefaultTTL,
		releaseTimeout: DefaultReleaseTimeout,
		entries:        map[string]*entry{},
		hinted:         map[string]bool{},
		settling:       map[string]chan struct{}{},
		releases:       map[string]*releasing{},
		byAncestor:     map[string]map[*releasing]struct{}{},
		kick:           make(chan struct{}, 1),
		stop:           make(chan struct{}),
		done:           make(chan struct{}),
		released:       make(chan struct{}),
		tel:            newTelemetry(b),
	}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	s.tel.instruments()
	s.batchers()
	if s.interval == 0 {
		s.interval = s.ttl / 3
	}
	if s.interval > s.ttl/3 {
		return nil, invalid("heartbeat", "heartbeat interval %v is more than a third of the TTL %v", s.interval, s.ttl)
	}
	// The local deadline of a lease ends this much before the backend's could:
	// room for the renewal's trip and for clocks that run at different rates.
	s.margin = s.ttl / 10
	if c, ok := b.(Checker); ok {
		if err := c.Check(ctx); err != nil {
			return nil, err
		}
	}
	unsub, err := b.Subscribe(ctx, s.owner.ID, s.hint)
	if err != nil {
		return nil, err
	}
	s.unsubscribe = unsub
	s.settles, s.endSettles = context.WithCancel(context.Background())
	go s.loop()
	return s, nil
}

// Owner returns the owner recorded with this Session's entries.
func (s *Session) Owner() Owner { return s.owner }

// TTL returns the lease TTL.
func (s *Session) TTL() time.Duration { return s.ttl }

// Margin returns how long before the backend could expire a lease its
// local deadline lies (a tenth of the TTL): the time a holder has, between
// Lease.Deadline and the earliest instant another holder can be granted
// the slots, to stop its work.
func (s *Session) Margin() time.Duration { return s.margin }

// Done is closed once Close has finished.
func (s *Session) Done() <-chan struct{} { return s.done }

// Acquire enqueues req and waits until it holds every lane it names. ctx
// bounds the wait only, never the lease.
//
// On success it returns the Lease, which holds the lanes until Release or
// until it is lost. On failure it holds nothing and has left every queue; the
// error wraps ErrCanceled or ErrWaitTimeout (and ctx's error) when ctx ended,
// an *InvalidError for a malformed request, a *LimitMismatchError, an
// *IDConflictError, a *LockCycleError, ErrUnavailable when the backend cannot
// be reached, ErrLeaseLost when the backend evicted the waiting entry, or
// ErrClosed; or ErrIDRetired (which wraps ErrCanceled) when req.ID is an id
// this Session settled: an earlier entry of that id whose step, or whose
// release, got no answer (so that no step still on its way can remove the
// new entry). The id is refused for twice the TTL; a new id, or the same
// one after that, is taken. A wait that ended while the backend could not
// be reached leaves its id so.
func (s *Session) Acquire(ctx context.Context, req Request) (*Lease, error) {
	ts, err := s.Enqueue(ctx, req)
	if err != nil {
		return nil, err
	}
	return ts[0].Wait(ctx)
}

// Enqueue places every request in its lanes' queues, in the order given
// (DESIGN.md invariant 4), and returns one Ticket per request to wait on. A
// request with an empty ID gets a random one. Up to 100 requests go in one
// atomic step; more are sent as several steps, in order. ctx bounds the
// steps only. A request the backend refused alone (*IDConflictError,
// *LockCycleError, ErrNotHolder) gets a Ticket whose Wait returns that
// error.
//
// When a step's reply is lost, Enqueue sends the same step again (the ids
// make it safe) until ctx ends or a TTL has passed. If it still fails, or
// ctx ends first, it settles what it sent: it releases those ids and leaves
// tombstones, so that a copy of the step still in flight cannot create
// entries that nobody keeps alive; when ctx ended, before it returns, so
// that a request given up on has left every queue, as in Ticket.Wait
// (unless the backend does not answer: then it returns once a try of the
// settle failed, or after the release timeout, and the settle goes on).
// An Enqueue of such an id meanwhile waits for that settle, and is then
// refused (ErrIDRetired) while the tombstone lives. On error nothing is kept alive and the error wraps
// ErrInvalid, ErrLimitMismatch, ErrUnavailable, ErrCanceled or
// ErrWaitTimeout (ctx ended), or ErrClosed.
func (s *Session) Enqueue(ctx context.Context, reqs ...Request) ([]*Ticket, error) {
	tickets, send, err := s.prepare(ctx, reqs)
	if err != nil || len(send) == 0 {
		return tickets, err
	}
	if err := s.awaitSettles(ctx, tickets, send); err != nil {
		return nil, s.abort(ctx, tickets, nil, err)
	}
	if err := s.allFinished(tickets); err != nil {
		// Their local deadline passed, or the Session closed, while they
		// waited: a step sent now would make entries nobody keeps alive.
		return nil, s.abort(ctx, tickets, nil, err)
	}
	sent := tickets[0].e.queued
	step := s.tel.stepContext(ctx, tickets) // the step's span is a child of a wait
	var inBackend []string                  // ids that may be in the backend
	for piece := range slices.Chunk(send, enqueuePiece) {
		sts, err := s.send(step, piece, sent)
		var inv *InvalidError
		if err == nil || !(errors.As(err, &inv) || errors.Is(err, ErrLimitMismatch)) {
			// Only a step refused whole surely changed nothing.
			for _, r := range piece {
				inBackend = append(inBackend, r.ID)
			}
		}
		if err != nil {
			return nil, s.abort(ctx, tickets, inBackend, err)
		}
		s.apply(tickets, sts, sent)
	}
	return tickets, nil
}

// prepare validates reqs, names the unnamed, and starts keeping an entry
// alive for each request that takes a lane. It returns the tickets and the
// requests to send, with their lanes of limit 0 left out.
func (s *Session) prepare(ctx context.Context, reqs []Request) ([]*Ticket, []Request, error) {
	var send []Request
	for i := range reqs {
		if reqs[i].ID == "" {
			reqs[i].ID = NewID()
		}
		if err := reqs[i].Validate(); err != nil {
			return nil, nil, err
		}
		if r := reqs[i]; len(r.Lanes) > 0 {
			if r.Lanes = r.taken(); len(r.Lanes) > 0 {
				send = append(send, r)
			}
		}
	}
	if err := ValidateStep(reqs); err != nil {
		return nil, nil, err
	}

	values := context.WithoutCancel(ctx) // a lease keeps ctx's values, never its deadline
	sent := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, ErrClosed
	}
	for _, r := range reqs {
		if s.entries[r.ID] != nil {
			return nil, nil, invalid("id", "entry %s is already live in this session", r.ID)
		}
	}
	tickets := make([]*Ticket, len(reqs))
	sendAt := 0 // send holds, in order, the requests that take a lane
	step := map[string]*entry{}
	for i, r := range reqs {
		e := &entry{id: r.ID, ready: make(chan struct{}), ctx: values, queued: sent, ancestors: s.ancestors(r.Lineage, step)}
		step[r.ID] = e
		tickets[i] = &Ticket{s: s, e: e}
		if sendAt == len(send) || send[sendAt].ID != r.ID {
			// Nothing to take: granted at once, and no backend entry.
			e.finished = true
			e.lease = newLease(s, e, nil, values)
			close(e.ready)
			continue
		}
		sendAt++
		e.pending = true
		e.span = s.tel.startWait(ctx, r)
		s.track(e, sent)
	}
	return tickets, send, nil
}

// stamp gives the entries of reqs, a step about to be sent, new stamps in
// the step's order (steps go one at a time): a borrower in the step or a
// later one is newer than a lender in an earlier place, whatever order
// their Enqueue calls were made in.
func (s *Session) stamp(reqs []Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range reqs {
		if e := s.entries[r.ID]; e != nil && e.pending {
			s.stamps++
			e.stamp = s.stamps
		}
	}
}

// ancestors is lineage with, for each of its ids that names a live entry
// of this Session or of step (earlier entries of the same step), that
// entry's ancestors: the chain a→m→c is known whole even when c's lineage
// names only m. An ancestor that lives in another Session counts by its
// name alone. s.mu is held.
func (s *Session) ancestors(lineage []string, step map[string]*entry) []string {
	if len(lineage) == 0 {
		return nil
	}
	seen := make(map[string]bool, len(lineage))
	var out []string
	add := func(ids []string) {
		for _, a := range ids {
			if !seen[a] { // a lineage may name an id twice
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	add(lineage)
	for _, id := range lineage {
		if e := cmp.Or(step[id], s.entries[id]); e != nil {
			add(e.ancestors)
		}
	}
	return out
}

// newerFirst orders entries of one Release step by their stamps, newest
// first: borrowers before their lenders. A lender released first would
// revoke its borrower within the step, and the borrower's lease would read
// as lost.
func newerFirst(a, b uint64) int { return cmp.Compare(b, a) }

// releasedOne is what a Release step says of one id.
type releasedOne struct {
	was     State
	forced  bool
	revoked bool   // it had ended revoked (Released.Revoked)
	epoch   string // the backend state's epoch the step saw
}

// outcome is what the release answered r says of the lease of entry id,
// whose local deadline was deadline and which was granted in epoch: nil
// when it was held until the release, else why not (DESIGN.md invariant
// 6). An answer Gone is an earlier try of the same release when the epoch
// is the one the lease was granted in and its local deadline has not
// passed: a try this Session sent, or one the Redis client sent again on
// its own after a lost reply, which the Session cannot see. So a forced
// release whose tombstone vanished (the tombs key is not part of the
// state) reads as released: a known limit (docs/RELIABILITY.md).
func (r releasedOne) outcome(id string, deadline time.Time, epoch string) error {
	switch {
	case r.forced:
		return entryError(ErrNotHolder, "entry %s %s before its holder released it", id, forcedWords)
	case r.revoked:
		return entryError(ErrLeaseLost, "entry %s was revoked before the release: the lease it borrowed a key from had ended (DESIGN.md invariant 10)", id)
	case r.was == Gone && !time.Now().Before(deadline):
		return entryError(ErrLeaseLost, "entry %s: its local deadline passed before the release", id)
	case r.was == Gone && epoch != "" && r.epoch != epoch:
		return entryError(ErrLeaseLost, "entry %s: the backend's state was reset or lost (epoch %s, now %q) before the release", id, epoch, r.epoch)
	}
	return nil
}

// releasedAt is what r says of its i-th of n ids.
func releasedAt(r Released, i, n int) releasedOne {
	return releasedOne{was: r.Was[i], forced: len(r.Forced) == n && r.Forced[i],
		revoked: len(r.Revoked) == n && r.Revoked[i], epoch: r.Epoch}
}

// releasing is a release of entry e begun (its entry no longer kept alive)
// and not answered yet; done closes once it is, or once it gave up. after
// holds the done channels of its borrowers' releases begun before it.
type releasing struct {
	e     *entry
	done  chan struct{}
	after []chan struct{}
}

// beginRelease records that e's release begins, from the moment e stops
// being kept alive until its step answered (endRelease): its lenders'
// releases and Close wait for it (borrowersOf), and an Enqueue of its id
// waits for it (awaitSettles). s.mu is held.
func (s *Session) beginRelease(e *entry) *releasing {
	r := &releasing{e: e, done: make(chan struct{}), after: s.borrowersOf(e.id, e.stamp, nil)}
	s.releases[e.id] = r
	for _, a := range e.ancestors {
		rs := s.byAncestor[a]
		if rs == nil {
			rs = map[*releasing]struct{}{}
			s.byAncestor[a] = rs
		}
		rs[r] = struct{}{}
	}
	return r
}

// endRelease records that r's release answered or gave up.
func (s *Session) endRelease(r *releasing) {
	s.mu.Lock()
	if s.releases[r.e.id] == r {
		delete(s.releases, r.e.id)
	}
	for _, a := range r.e.ancestors {
		if rs := s.byAncestor[a]; rs != nil {
			if delete(rs, r); len(rs) == 0 {
				delete(s.byAncestor, a)
			}
		}
	}
	s.mu.Unlock()
	close(r.done)
}

// borrowersOf appends to wait the done channels of the releases begun of
// entries newer than stamp that have id among their ancestors (its
// borrowers, and theirs). A lender's release waits for them: sent first,
// it would revoke them, and their releases, begun before it, would report
// their leases lost. s.mu is held.
func (s *Session) borrowersOf(id string, stamp uint64, wait []chan struct{}) []chan struct{} {
	for r := range s.byAncestor[id] {
		if r.e.stamp > stamp {
			wait = append(wait, r.done)
		}
	}
	return wait
}

// awaitAll returns once every channel of wait is closed, or with ctx's
// error.
func awaitAll(ctx context.Context, wait []chan struct{}) error {
	for _, done := range wait {
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// releaseItem is one entry of a Release step: its id and its stamp.
type releaseItem struct {
	id    string
	stamp uint64
}

// releaseTimedOut is err, the error of the release steps by (who sent
// them) tried until the release timeout, made an ErrUnavailable when it is
// the context's error alone: a step still queued behind others, or in
// flight with no answer, when the timeout passed.
func releaseTimedOut(err error, by string) error {
	if err == nil || errors.Is(err, ErrUnavailable) {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w: %s: the release step had no answer within the release timeout: %w", ErrUnavailable, by, err)
	}
	return err
}

// errStepShape is a step answered with the wrong number of results.
var errStepShape = fmt.Errorf("%w: the backend answered a step with the wrong number of results", ErrUnavailable)

// batchers sets up the merging of concurrent callers' steps (batch.go).
func (s *Session) batchers() {
	s.enq = &batcher[Request, Status]{
		max: enqueuePiece,
		run: func(ctx context.Context, reqs []Request) ([]Status, error) {
			s.stamp(reqs)
			return s.b.Enqueue(ctx, s.owner, s.ttl, reqs)
		},
		split: func(err error) bool { return errors.Is(err, ErrLimitMismatch) || errors.Is(err, ErrInvalid) },
	}
	s.rel = &batcher[releaseItem, releasedOne]{
		max: releasePiece,
		run: func(ctx context.Context, items []releaseItem) ([]releasedOne, error) {
			order := make([]int, len(items))
			for i := range order {
				order[i] = i
			}
			slices.SortStableFunc(order, func(a, b int) int { return newerFirst(items[a].stamp, items[b].stamp) })
			ids := make([]string, len(items))
			for i, j := range order {
				ids[i] = items[j].id
			}
			r, err := s.b.Release(ctx, s.owner.ID, ids)
			if err != nil {
				return nil, err
			}
			if len(r.Was) != len(ids) {
				return nil, errStepShape
			}
			out := make([]releasedOne, len(ids))
			for i, j := range order {
				out[j] = releasedAt(r, i, len(ids))
			}
			return out, nil
		},
		// No split: the ids are the Session's own, valid when tracked, so
		// a step refused whole is refused for every caller alike; sending
		// it again caller by caller would release lenders before their
		// borrowers.
	}
}

// send runs one Enqueue step, merged with the steps other callers send
// meanwhile (batch.go). A step whose outcome is unknown (the backend could
// not be reached, or its reply was lost) is sent again with the same ids,
// with a growing pause, until ctx ends or a TTL after the first send.
func (s *Session) send(ctx context.Context, reqs []Request, first time.Time) ([]Status, error) {
	for pause := time.Millisecond; ; pause = min(2*pause, s.interval) {
		sts, _, err := s.enq.do(ctx, reqs)
		if err == nil && len(sts) != len(reqs) {
			err = fmt.Errorf("%w: backend answered %d statuses for %d requests", ErrUnavailable, len(sts), len(reqs))
		}
		if err == nil || !errors.Is(err, ErrUnavailable) || ctx.Err() != nil || time.Since(first)+pause > s.ttl-s.margin {
			return sts, err
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return nil, err
		}
	}
}

// apply brings the tickets of one step up to the statuses it returned.
func (s *Session) apply(tickets []*Ticket, sts []Status, sent time.Time) {
	s.mu.Lock()
	find := ticketFinder(tickets)
	kick, abandoned := false, []string(nil)
	for _, st := range sts {
		t := find(st.ID)
		if t == nil {
			continue
		}
		e := t.e
		if e.finished && st.Err == nil && st.State != Gone {
			// Its wait ended while the step was in flight (the Session
			// closed, or its local deadline passed): nobody keeps it alive.
			abandoned = append(abandoned, e.id)
			continue
		}
		if e.finished {
			s.unpend(e) // the step left nothing of it in the backend
		}
		e.pending, e.seq, e.epoch = false, st.Seq, st.Epoch
		t.positions = st.Positions
		if len(st.Positions) > 0 && e.span.IsRecording() {
			far := 0
			for _, p := range st.Positions {
				far = max(far, p)
			}
			e.span.SetAttributes(AttrPosition.Int(far))
		}
		s.applyStatus(e, st, sent, false)
		s.takeEarly(e, st)
		kick = s.pollAgain(e, st) || kick || s.hinted[st.ID]
	}
	s.noteEpoch(sts)
	s.mu.Unlock()
	if len(abandoned) > 0 {
		s.settleLater(abandoned)
	}
	if kick { // a hint came before this step's answer
		s.wake()
	}
}

// ticketFinder returns a function that finds the ticket of an id among
// tickets: by a map when they are many, else by a scan (no map to build
// for the usual step of one request).
func ticketFinder(tickets []*Ticket) func(id string) *Ticket {
	if len(tickets) > 8 {
		byID := make(map[string]*Ticket, len(tickets))
		for _, t := range tickets {
			byID[t.e.id] = t
		}
		return func(id string) *Ticket { return byID[id] }
	}
	return func(id string) *Ticket {
		for _, t := range tickets {
			if t.e.id == id {
				return t
			}
		}
		return nil
	}
}

// abort ends the waits (and any lease) of tickets after a failed step,
// settles the ids that may be in the backend, and returns the error
// Enqueue reports.
func (s *Session) abort(ctx context.Context, tickets []*Ticket, inBackend []string, err error) error {
	if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("%w; the enqueue step failed: %w", s.waitError(ctx), err)
	} else if ctx.Err() != nil {
		err = s.waitError(ctx)
	}
	s.mu.Lock()
	for _, t := range tickets {
		if e := t.e; !e.finished {
			s.untrack(e)
			if e.lease != nil {
				e.lease.end(err)
			} else {
				s.endWait(e, err)
			}
		}
	}
	sent := make(map[string]bool, len(inBackend))
	for _, id := range inBackend {
		sent[id] = true
	}
	for _, t := range tickets {
		if !sent[t.e.id] {
			s.unpend(t.e) // never reached the backend, or refused whole
		}
	}
	s.mu.Unlock()
	if len(inBackend) > 0 {
		settled := s.settleLater(inBackend)
		if ctx.Err() != nil {
			// The caller gave up: as a Wait that ctx ended, its entries
			// leave every queue before it returns, unless the backend
			// does not answer: then it returns after the first failed try
			// of the settle (a backend that is down answers at once), or
			// the release timeout.
			t := time.NewTimer(s.releaseTimeout)
			defer t.Stop()
			select {
			case <-settled:
			case <-t.C:
			}
		}
	}
	return err
}

// unpend ends the mark untrack left for e while its Enqueue step was in
// flight, when that step left nothing of it to settle. Only e's own mark:
// one of another entry of the same id (a settle still running) stays.
// s.mu is held.
func (s *Session) unpend(e *entry) {
	if e.mark != nil && s.settling[e.id] == e.mark {
		close(e.mark)
		delete(s.settling, e.id)
	}
	e.mark = nil
}

// allFinished returns an error when this Session keeps none of the
// entries of tickets alive any more: ErrClosed after Close, else the error
// their wait ended with (their local deadline passed). nil otherwise.
func (s *Session) allFinished(tickets []*Ticket) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range tickets {
		if !t.e.finished {
			return nil
		}
	}
	if s.closed {
		return ErrClosed
	}
	for _, t := range tickets {
		if t.e.err != nil {
			return t.e.err
		}
	}
	return fmt.Errorf("%w: the entries ended while their step waited for a settle of their ids", ErrUnavailable)
}

// awaitSettles waits until no background settle of this Session is busy
// with an id of reqs, so that a request is not sent between a failed
// step's ids and their settle: the settle would then remove the entry it
// made, or renewed, behind its back. After the settle the backend refuses
// those ids (ErrIDRetired) while their tombstones live. The marks of
// tickets' own entries (made when they ended while waiting) are not waited
// for, and the wait ends once every entry of tickets ended (allFinished
// then says why). It waits as well for a release of one of the ids that
// has not answered yet (beginRelease): sent meanwhile, the request would
// find the entry about to be removed and take it for its own. It returns
// ctx's error if ctx ends first.
func (s *Session) awaitSettles(ctx context.Context, tickets []*Ticket, reqs []Request) error {
	for {
		var busy chan struct{}
		s.mu.Lock()
		if len(s.settling) == 0 && len(s.releases) == 0 { // the usual case
			s.mu.Unlock()
			return nil
		}
		own := func(c chan struct{}) bool {
			for _, t := range tickets {
				if t.e.mark == c {
					return true
				}
			}
			return false
		}
		done := true
		for _, t := range tickets {
			done = done && t.e.finished
		}
		for i := 0; !done && i < len(reqs); i++ {
			if c := s.settling[reqs[i].ID]; c != nil && !own(c) {
				busy = c
				break
			}
			if r := s.releases[reqs[i].ID]; r != nil {
				busy = r.done // a release of the same id, not answered yet
				break
			}
		}
		s.mu.Unlock()
		if busy == nil {
			return nil
		}
		select {
		case <-busy:
		case <-ctx.Done():
			return s.waitError(ctx)
		}
	}
}

// settleLater settles ids in the background: it releases them and leaves
// tombstones for twice the TTL, trying again while the backend cannot be
// reached, for up to twice the TTL (the entries expire within one). Until
// it is done, an Enqueue of one of the ids waits for it (awaitSettles).
// The channel it returns closes once the settle is done, or once a try of
// it failed: the backend did not answer, and tries go on in the background.
func (s *Session) settleLater(ids []string) <-chan struct{} {
	tried := make(chan struct{})
	var once sync.Once
	signal := func() { once.Do(func() { close(tried) }) }
	done := make([]chan struct{}, len(ids))
	s.mu.Lock()
	for i, id := range ids {
		if done[i] = s.settling[id]; done[i] == nil { // else marked by untrack
			done[i] = make(chan struct{})
			s.settling[id] = done[i]
		}
	}
	s.mu.Unlock()
	settle := func() {
		defer signal()
		defer s.clearMarks(ids, done)
		lifetime := min(max(2*s.ttl, time.Second), MaxTTL)
		s.mu.Lock()
		early := !s.closed
		s.mu.Unlock()
		parent, budget := s.settles, 2*s.ttl+s.releaseTimeout
		if !early { // run by the caller (background): the release timeout, no more
			parent, budget = context.Background(), s.releaseTimeout
		}
		ctx, cancel := context.WithTimeout(parent, budget)
		defer cancel()
		for piece := range slices.Chunk(ids, releasePiece) {
			err := s.retryRelease(ctx, func(ctx context.Context) error {
				// Each try gets a release timeout, and one begun before
				// Close ends by s.closeBy: a client ends a command at its
				// context's deadline, not always at its cancellation.
				by := time.Now().Add(s.releaseTimeout)
				s.mu.Lock()
				if early && !s.closeBy.IsZero() && s.closeBy.Before(by) {
					by = s.closeBy
				}
				s.mu.Unlock()
				ctx, cancel := context.WithDeadline(ctx, by)
				defer cancel()
				_, err := s.b.Settle(ctx, s.owner.ID, lifetime, piece)
				if err != nil {
					signal()
				}
				return err
			})
			if err != nil {
				s.mu.Lock()
				s.unsettled = append(s.unsettled, fmt.Errorf("releasing %d entries in the background: %w", len(piece), err))
				s.mu.Unlock()
			}
		}
	}
	s.background(settle)
	return tried
}

// clearMarks ends the settling marks of ids that are still marks[i] (nil:
// none of its own), waking the Enqueue calls that wait for them.
func (s *Session) clearMarks(ids []string, marks []chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, id := range ids {
		if marks[i] != nil && s.settling[id] == marks[i] {
			delete(s.settling, id)
			close(marks[i])
		}
	}
}

// settleUnanswered settles ids in the background (settleLater) when err,
// a release's, says it got no answer and the Session is not closed, and
// reports whether it did. The entries may be there still, or be removed
// later by a step that arrives late: settled, their ids wait
// (awaitSettles) and are then refused while their tombstones live, so an
// Enqueue of one never takes such an entry for its own. After Close
// nothing can enqueue them here, and the entries expire within their TTL.
func (s *Session) settleUnanswered(ids []string, err error) bool {
	if err == nil || !errors.Is(err, ErrUnavailable) {
		return false
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return false
	}
	s.settleLater(ids)
	return true
}

// background runs f on a goroutine that Close waits for; once Close has
// begun, it runs f at once instead.
func (s *Session) background(f func()) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		f()
		return
	}
	s.bg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.bg.Done()
		f()
	}()
}

// retry runs step until it succeeds, fails with an error that is not
// ErrUnavailable, or ctx ends, pausing between tries up to most.
func retry(ctx context.Context, most time.Duration, step func(context.Context) error) error {
	return retryWhile(ctx, most, step, nil)
}

// retryWhile runs step as retry does, and also stops once more(err) is
// false for the error of a try (more nil: never).
func retryWhile(ctx context.Context, most time.Duration, step func(context.Context) error, more func(error) bool) error {
	for pause := time.Millisecond; ; pause = min(2*pause, most) {
		err := step(ctx)
		if err == nil || !errors.Is(err, ErrUnavailable) || (more != nil && !more(err)) {
			return err
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return err
		}
	}
}

// refusedGrace is how long the Session's release and settle steps go on
// trying once every step it sent was refused a connection (ECONNREFUSED:
// nothing listens at the backend's address): three quarters of the
// release timeout (1.5s by default). Then each gives up at its next
// refused try, and the lease expires at its deadline, as a Consul session
// or an etcd lease does when its holder's unlock cannot reach the server;
// Close's settle, after a release that gave up so, gives up at once. A
// Redis restarted within it (with persistence: a review saw a restart of
// 1s leave a lease held for its TTL when the grace was 250ms) gets the
// release; a blip of another kind (a reset connection, a timeout, BUSY,
// LOADING) is retried for the whole release timeout.
func (s *Session) refusedGrace() time.Duration { return s.releaseTimeout * 3 / 4 }

// releasePause is the longest pause between two tries of a release or
// settle step.
const releasePause = 100 * time.Millisecond

// noteStep records what a step to the backend answered, for
// moreThanRefused: a refused connection starts the refusals' time, when
// none was running; anything else ends it.
func (s *Session) noteStep(err error) {
	if err != nil && errors.Is(err, syscall.ECONNREFUSED) {
		s.refusedSince.CompareAndSwap(0, time.Now().UnixNano())
		return
	}
	s.refusedSince.Store(0)
}

// moreThanRefused reports whether a release or settle step that failed
// (its error noted: noteStep) is worth another try: not when every step of
// the Session was refused a connection for refusedGrace or more.
func (s *Session) moreThanRefused(error) bool {
	since := s.refusedSince.Load()
	return since == 0 || time.Since(time.Unix(0, since)) < s.refusedGrace()
}

// retryRelease runs a release or settle step as retry does, pausing at
// most releasePause between tries (a Redis back from a restart gets the
// release soon after), giving up once the backend has refused connections
// for refusedGrace (moreThanRefused): the release of a lease to a Redis
// that is gone ends then, and the lease expires at its deadline.
func (s *Session) retryRelease(ctx context.Context, step func(context.Context) error) error {
	return retryWhile(ctx, min(s.interval, releasePause), func(ctx context.Context) error {
		err := step(ctx)
		s.noteStep(err)
		return err
	}, s.moreThanRefused)
}

// Close ends the Session: waiters fail with ErrClosed, leases end, every
// entry is released in steps bounded by the release timeout, and the
// heartbeat goroutine exits. It returns the release steps' error, if any,
// and that of each background release of a lease whose own Release failed
// (ErrUnavailable) that gave up too: those entries stay in the backend
// until their deadlines (a break-it review saw lanectl batch say nothing of
// them). Close is idempotent.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.done
		return nil
	}
	s.closed = true
	// What Close releases, and what each Release called later is told.
	type held struct {
		id       string
		deadline time.Time
		epoch    string
		stamp    uint64
	}
	var kept []held
	// The releases begun before Close of borrowers of its entries go
	// first; the borrowers among them go first in Close's steps.
	var borrowers []chan struct{}
	for _, e := range s.entries {
		if !e.pending { // an entry still in its Enqueue step is settled by it
			kept = append(kept, held{e.id, e.deadline, e.epoch, e.stamp})
			borrowers = s.borrowersOf(e.id, e.stamp, borrowers)
		}
		s.untrack(e)
		if e.lease != nil {
			e.lease.end(ErrClosed)
		} else {
			s.endWait(e, ErrClosed)
		}
	}
	// The background settles begun before Close get the release timeout
	// from now, no more: Close waits for them no longer.
	s.closeBy = time.Now().Add(s.releaseTimeout)
	s.mu.Unlock()
	cut := time.AfterFunc(s.releaseTimeout, s.endSettles)
	defer cut.Stop()
	close(s.stop)
	<-s.done
	var errs []error
	slices.SortFunc(kept, func(a, b held) int { return newerFirst(a.stamp, b.stamp) })
	ctx, cancel := context.WithTimeout(context.Background(), s.releaseTimeout)
	defer cancel()
	closeErrs := map[string]error{}
	waited := awaitAll(ctx, borrowers)
	for piece := range slices.Chunk(kept, releasePiece) {
		items := make([]releaseItem, len(piece))
		for i, h := range piece {
			items[i] = releaseItem{h.id, h.stamp}
		}
		var rs []releasedOne
		err := waited
		if err == nil {
			err = s.retryRelease(ctx, func(ctx context.Context) error {
				var err error
				rs, _, err = s.rel.do(ctx, items)
				return err
			})
		}
		if err != nil {
			err = releaseTimedOut(err, "the Session's Close")
			errs = append(errs, err)
			for _, h := range piece {
				closeErrs[h.id] = fmt.Errorf("entry %s: the Session's Close could not release it (it expires within its TTL): %w", h.id, err)
			}
			continue
		}
		for i, h := range piece {
			if err := rs[i].outcome(h.id, h.deadline, h.epoch); err != nil {
				closeErrs[h.id] = err // a Release called later gets it; nil when absent
			}
		}
	}
	s.mu.Lock()
	s.closeErrs = closeErrs
	s.mu.Unlock()
	close(s.released)
	s.unsubscribe()
	s.bg.Wait()
	s.endSettles()
	s.mu.Lock()
	errs = append(errs, s.unsettled...)
	s.mu.Unlock()
	return errors.Join(errs...)
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
