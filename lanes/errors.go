package lanes

import (
	"errors"
	"fmt"
)

// The errors of lanes. Every error a Session or Backend returns wraps at most
// a few of these; test them with errors.Is, never by message.
var (
	// ErrInvalid is wrapped by every rejection of malformed input: an empty
	// key, a negative limit, an unprintable entry id, a bad option value.
	ErrInvalid = errors.New("lanes: invalid")

	// ErrCanceled is returned by a wait whose context was cancelled. The error
	// also wraps context.Canceled. The entry has left every queue.
	ErrCanceled = errors.New("lanes: wait cancelled")

	// ErrWaitTimeout is returned by a wait whose context deadline passed before
	// the grant. The error also wraps context.DeadlineExceeded. The entry has
	// left every queue.
	ErrWaitTimeout = errors.New("lanes: wait timed out")

	// ErrLeaseLost reports an entry the backend no longer keeps although its
	// owner never released it: a lease not renewed within its TTL, or released
	// by force, or a waiter evicted from its queue. Once lost, an entry is
	// never taken back.
	ErrLeaseLost = errors.New("lanes: lease lost")

	// ErrNotHolder is returned when releasing an entry the backend does not
	// hold (it expired, or someone released it by force).
	ErrNotHolder = errors.New("lanes: not the holder")

	// ErrLimitMismatch is wrapped by a *LimitMismatchError: a request named a
	// limit for a key that differs from the one recorded while the key has
	// holders or waiters (DESIGN.md invariant 9).
	ErrLimitMismatch = errors.New("lanes: limit mismatch")

	// ErrLockCycle reports a request that would close a wait-for cycle
	// through nested calls (DESIGN.md invariant 11).
	ErrLockCycle = errors.New("lanes: lock cycle")

	// ErrUnavailable reports a backend that could not be reached or did not
	// answer in time. What the call changed, if anything, is unknown; entry
	// ids make a retry safe.
	ErrUnavailable = errors.New("lanes: backend unavailable")

	// ErrClosed is returned by a Session, Ticket or Lease used after
	// Session.Close.
	ErrClosed = errors.New("lanes: session closed")
)

// LimitMismatchError names the key whose limit a request disagreed with, and
// both limits. errors.Is(err, ErrLimitMismatch) reports true for it.
type LimitMismatchError struct {
	Key       string
	Recorded  int // the limit the key's holders and waiters were enqueued with
	Requested int // the limit the rejected request named
}

func (e *LimitMismatchError) Error() string {
	return fmt.Sprintf("lanes: limit mismatch on key %q: it is held or awaited with limit %d, the request names %d",
		e.Key, e.Recorded, e.Requested)
}

// Is reports whether target is ErrLimitMismatch.
func (e *LimitMismatchError) Is(target error) bool { return target == ErrLimitMismatch }
