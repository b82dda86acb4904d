package lanes

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Ticket is one enqueued request of a Session: wait on it for the Lease, or
// cancel it. A Ticket is safe for concurrent use.
type Ticket struct {
	s         *Session
	e         *entry
	positions map[string]int
}

// ID returns the entry id.
func (t *Ticket) ID() string { return t.e.id }

// Positions returns the entry's place in each key's queue when it was
// enqueued, counted from 1; nil when it was granted at once.
func (t *Ticket) Positions() map[string]int { return maps.Clone(t.positions) }

// Ready is closed once Wait would return without blocking: the entry was
// granted, or ended without a grant.
func (t *Ticket) Ready() <-chan struct{} { return t.e.ready }

// Wait blocks until the entry holds every lane it named, or ctx ends, or the
// entry is lost. ctx bounds the wait only, never the lease.
//
// On success it returns the Lease; calling Wait again returns the same one.
// A grant whose lease ended before Wait first returned it (the Session was
// closed, or the Ticket cancelled) is not handed out: Wait returns
// ErrClosed, or an error wrapping ErrCanceled.
// When ctx ends first, the entry leaves every queue before Wait returns, and
// a grant that raced the cancellation is given back (DESIGN.md invariant 7);
// the error wraps ErrCanceled or ErrWaitTimeout, ctx's error, and when the
// backend was unreachable, ErrUnavailable. Other errors: ErrLeaseLost (the
// backend evicted the waiting entry), ErrUnavailable (no heartbeat reached
// the backend within the TTL), ErrClosed.
func (t *Ticket) Wait(ctx context.Context) (*Lease, error) {
	e := t.e
	select {
	case <-e.ready:
		return t.result()
	default:
	}
	select {
	case <-e.ready:
		return t.result()
	case <-ctx.Done():
		err := t.s.waitError(ctx)
		t.abandon(ctx, err)
		return nil, err
	}
}

// result is what Wait returns once the entry is ready: a lease is checked
// against its local deadline first, so a process stopped past it does not
// take a grant that may have ended meanwhile.
//
// A lease that ended before Wait first returned it (its Session closed, or
// the Ticket was cancelled) is not handed out: Wait fails with ErrClosed
// or ErrCanceled, as it does for an entry that ended while waiting. Once
// handed out, later calls return the same Lease, unless it was lost.
func (t *Ticket) result() (*Lease, error) {
	l := t.e.lease
	if l == nil {
		return nil, t.e.err
	}
	err := l.Err()
	switch {
	case err == nil || l.handed.Load() && !errors.Is(err, ErrLeaseLost):
		l.handed.Store(true)
		return l, nil
	case errors.Is(err, ErrLeaseLost), errors.Is(err, ErrClosed):
		return nil, err
	}
	return nil, fmt.Errorf("%w: %w", ErrCanceled, err) // released by Cancel
}

// Cancel takes the entry out of every queue, or gives back its grant if it
// was granted (a Lease that Wait returned ends as released). It returns the
// release step's error, wrapping ErrUnavailable when the backend could not be
// reached; the entry then expires within the TTL, and its id is settled:
// refused (ErrIDRetired) for twice the TTL (see Session.Acquire).
func (t *Ticket) Cancel(ctx context.Context) error {
	return t.abandon(ctx, fmt.Errorf("%w: %w", ErrCanceled, context.Canceled))
}

// abandon ends the wait with err and removes the entry from the backend.
func (t *Ticket) abandon(ctx context.Context, err error) error {
	s, e := t.s, t.e
	s.mu.Lock()
	if e.lease != nil {
		s.mu.Unlock()
		return e.lease.Release(ctx)
	}
	if e.finished {
		s.mu.Unlock()
		return nil
	}
	pending := e.pending
	s.untrack(e)
	s.endWait(e, err)
	if pending {
		s.mu.Unlock()
		return nil // its Enqueue step settles it
	}
	r := s.beginRelease(e)
	s.mu.Unlock()
	_, rerr := s.release(ctx, r, nil)
	return rerr
}

// Lease is a grant of every lane a request named. It stays held until
// Release, or until it is lost: no heartbeat renewed it within its TTL, or
// the backend no longer has it. The holder is told of a loss before the
// backend could grant the slots to anyone else (DESIGN.md invariant 6): Lost
// closes and Context is cancelled with a cause wrapping ErrLeaseLost.
//
// A Lease is safe for concurrent use.
type Lease struct {
	s      *Session
	e      *entry
	tokens map[string]uint64
	ctx    context.Context
	cancel context.CancelCauseFunc
	lost   chan struct{}
	span   trace.Span // its hold; nil for a lease that took no lane
	since  time.Time

	handed atomic.Bool // Wait returned it (Ticket.result)

	mu     sync.Mutex
	err    error // why it ended; nil while held
	onLost map[int]func()
	next   int
	once   sync.Once
	rerr   error
}

func newLease(s *Session, e *entry, tokens map[string]uint64, values context.Context) *Lease {
	ctx, cancel := context.WithCancelCause(values)
	return &Lease{s: s, e: e, tokens: tokens, ctx: ctx, cancel: cancel, lost: make(chan struct{}), since: time.Now()}
}

// ID returns the entry id.
func (l *Lease) ID() string { return l.e.id }

// Token returns the fencing token granted for key, or 0 when the lease does
// not hold key (or holds it unbounded, limit 0). Tokens start at 1 and
// strictly increase per key (DESIGN.md invariant 5).
func (l *Lease) Token(key string) uint64 { return l.tokens[key] }

// Tokens returns a copy of every key's fencing token.
func (l *Lease) Tokens() map[string]uint64 { return maps.Clone(l.tokens) }

// Deadline returns the lease's local deadline: when Lost closes unless a
// heartbeat renews it first. It lies a margin (a tenth of the TTL) before
// the earliest moment the backend could expire the lease and grant its
// slots to another holder, so a holder that stops its work at Deadline, or
// at the latest when Lost closes, is done before anyone else starts. It
// keeps its last value once the lease ends.
func (l *Lease) Deadline() time.Time {
	if l.s == nil || l.e.timer == nil {
		return time.Time{} // a lease that took no lane never expires
	}
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.e.deadline
}

// Margin returns how long before the backend could expire the lease its
// local deadline (Deadline) lies: the Session's Margin, a tenth of the TTL.
func (l *Lease) Margin() time.Duration {
	if l.s == nil {
		return 0
	}
	return l.s.margin
}

// OnLost arranges for f to run once if the lease is lost, before the
// Session gives the lost lease's slots back to the backend (which may then
// grant them at once): the place to stop, for good, what runs under the
// lease (lanectl kills its command there). f runs on a goroutine of its
// own; if the lease is lost already, at once. The returned function
// unregisters f; it reports whether f was still to run.
//
// An Enqueue of the lost lease's id waits until every f has returned and
// the slots were given back (else it would find the lost entry and take it
// for its own): one made from f itself waits until its context ends.
func (l *Lease) OnLost(f func()) (cancel func() bool) {
	l.mu.Lock()
	if l.err != nil {
		lost := errors.Is(l.err, ErrLeaseLost)
		l.mu.Unlock()
		if lost {
			f()
		}
		return func() bool { return false }
	}
	if l.onLost == nil {
		l.onLost = map[int]func(){}
	}
	id := l.next
	l.next++
	l.onLost[id] = f
	l.mu.Unlock()
	return func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		_, ok := l.onLost[id]
		delete(l.onLost, id)
		return ok
	}
}

// runOnLost runs the functions OnLost registered, once.
func (l *Lease) runOnLost() {
	l.mu.Lock()
	fs := l.onLost
	l.onLost = nil
	l.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// Lost is closed when the lease is lost. It stays open after Release.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Context returns a context that carries the values of the context the lease
// was acquired with and is cancelled when the lease ends: with a cause
// wrapping ErrLeaseLost when lost, context.Canceled when released.
func (l *Lease) Context() context.Context { return l.ctx }

// Err returns nil while the lease is held, an error wrapping ErrLeaseLost
// once it is lost, or context.Canceled after Release. It checks the local
// deadline itself, so it reports a loss even before the timer that closes
// Lost has run (after the process was stopped, say).
func (l *Lease) Err() error {
	if l.s != nil && l.e.timer != nil {
		l.s.mu.Lock()
		l.s.expireLocked(l.e) // lost, and why, as the timer would say
		l.s.mu.Unlock()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Release gives the lanes back and grants the next waiters. It runs on a
// context detached from ctx's cancellation (ctx's values are kept), bounded
// by the Session's release timeout, so a cancelled caller still releases.
//
// It returns nil when the lease was held until the release: the backend
// removed it, or no longer had it while its local deadline had not passed
// (an earlier try of this release, whose reply was lost, removed it). It
// returns an error wrapping ErrLeaseLost if the lease had been lost (it
// expired, the backend's state was reset, or, for a borrower, it was
// revoked when the lease it borrowed from ended);
// ErrNotHolder if an operator had released it by force; ErrUnavailable if
// the backend could not be reached within the release timeout, or, once
// the backend has refused every connection for three quarters of the
// release timeout (nothing listens: Redis is down), at its next refused
// try (the lease
// then expires within its TTL, and the Session settles its id in the
// background: an Enqueue of the id waits for that, then is refused with
// ErrIDRetired while the id's tombstone lives, so that a release step
// still on its way cannot remove the new entry). After the Session's
// Close, which ended the lease and released it, it waits for Close's
// release steps and returns
// their answer for it: nil, an error wrapping ErrUnavailable, or the
// ErrNotHolder or ErrLeaseLost of a lease lost before the Close. Later
// calls return the first result.
func (l *Lease) Release(ctx context.Context) error {
	l.once.Do(func() { l.rerr = l.release(ctx, nil) })
	return l.rerr
}

// release ends the lease and removes its entry from the backend with step
// (a Record step), or with a Release step merged with other callers' when
// step is nil.
func (l *Lease) release(ctx context.Context, step func(context.Context, []string) (Released, error)) error {
	s, e := l.s, l.e
	s.mu.Lock()
	if err := l.errLocked(); err != nil {
		s.mu.Unlock()
		if step != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.releaseTimeout)
			_ = s.retryRelease(rctx, func(ctx context.Context) error {
				_, err := step(ctx, nil) // only its record
				return err
			})
			cancel()
		}
		if errors.Is(err, ErrLeaseLost) {
			return err
		}
		if errors.Is(err, ErrClosed) {
			// ended by its Session's Close, which releases it: its answer
			<-s.released
			s.mu.Lock()
			cerr := s.closeErrs[e.id]
			s.mu.Unlock()
			if cerr != nil {
				return cerr
			}
		}
		return nil // released: by its Session's Close, or a Cancel
	}
	inBackend := !e.finished
	deadline, epoch := e.deadline, e.epoch
	s.untrack(e)
	var r *releasing
	if inBackend {
		r = s.beginRelease(e)
	}
	s.mu.Unlock()
	defer l.end(context.Canceled)
	if !inBackend {
		if step == nil {
			return nil // it took no lane
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.releaseTimeout)
		defer cancel()
		return releaseTimedOut(s.retryRelease(rctx, func(ctx context.Context) error {
			_, err := step(ctx, nil) // it took no lane: only a record, if step makes one
			return err
		}), "entry "+e.id)
	}
	rel, err := s.release(ctx, r, step)
	if err != nil {
		return err
	}
	return rel.outcome(e.id, deadline, epoch)
}

func (l *Lease) errLocked() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// markLost ends the lease as lost.
func (l *Lease) markLost(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	l.err = cause
	l.cancel(cause) // before Lost closes: whoever sees Lost finds the context done, with its cause
	close(l.lost)
	if l.span != nil {
		endSpan(l.span, "lost", cause)
		l.s.tel.count(l.s.tel.lost)
		l.s.tel.record(l.s.tel.holdDur, seconds(time.Since(l.since)), outcomeLost)
	}
}

// end ends the lease without a loss.
func (l *Lease) end(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	l.err = cause
	l.onLost = nil
	l.cancel(cause)
	if l.span != nil {
		outcome := "released"
		if errors.Is(cause, ErrClosed) {
			outcome = "closed"
		}
		endSpan(l.span, outcome, nil)
		l.s.tel.record(l.s.tel.holdDur, seconds(time.Since(l.since)), outcomeReleased)
	}
}
