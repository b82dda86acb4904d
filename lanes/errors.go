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
	// Validation errors are *InvalidError values, which name the field.
	ErrInvalid = errors.New("lanes: invalid")

	// ErrCanceled is returned by a wait whose context was cancelled. The error
	// also wraps context.Canceled. The entry has left every queue.
	ErrCanceled = errors.New("lanes: wait cancelled")

	// ErrIDRetired is wrapped (with ErrCanceled) by the refusal of a request
	// whose entry id cannot be used now: a Session settled it after a lost
	// reply (its tombstone lives up to twice the TTL, so that a late copy
	// of the step cannot bring it back), or its entry ended (revoked, or
	// kept for revoked borrowers). Nothing was enqueued; the same request
	// under a new id, or later, is fine.
	ErrIDRetired = fmt.Errorf("%w: entry id retired", ErrCanceled)

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
	// hold (it expired, or someone released it by force), and for a
	// request whose id another owner holds.
	ErrNotHolder = errors.New("lanes: not the holder")

	// ErrIDConflict is wrapped by an *IDConflictError: an entry id that
	// exists with other lanes or another lineage than the request names
	// (DESIGN.md invariant 8). Nothing was enqueued for that request.
	ErrIDConflict = errors.New("lanes: entry id names another request")

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

// InvalidError is a rejection of malformed input. errors.Is(err, ErrInvalid)
// reports true for it.
type InvalidError struct {
	Field  string // what is at fault: "key", "limit", "id", "ttl", "namespace", "lineage", "step"...
	Detail string // the problem in one sentence, naming the value
}

func (e *InvalidError) Error() string { return "lanes: invalid " + e.Field + ": " + e.Detail }

// Is reports whether target is ErrInvalid.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// invalid returns an *InvalidError for field.
func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Detail: fmt.Sprintf(format, args...)}
}

// IDConflictError reports a request whose entry id exists with other lanes
// or another lineage: an entry id names one request, never two. errors.Is(err,
// ErrIDConflict) reports true for it.
type IDConflictError struct {
	ID string
}

func (e *IDConflictError) Error() string {
	return fmt.Sprintf("lanes: entry id %s names another request (other lanes or another lineage); an entry id names one request", e.ID)
}

// Is reports whether target is ErrIDConflict.
func (e *IDConflictError) Is(target error) bool { return target == ErrIDConflict }

// EntryError reports what happened to one entry when a sentinel with no
// type of its own says it (ErrLeaseLost, ErrNotHolder, ErrUnavailable):
// Err is that sentinel and Reason the rest, in words that name the entry.
// Its text is Err's, ": ", then Reason; errors.Is(err, Err) reports true.
type EntryError struct {
	Err    error  // the sentinel
	Reason string // "entry ID was released by force ...", "entry ID: its local deadline passed ..."
}

func (e *EntryError) Error() string { return e.Err.Error() + ": " + e.Reason }

// Unwrap returns the sentinel.
func (e *EntryError) Unwrap() error { return e.Err }

// entryError returns an *EntryError of sentinel, its Reason formatted.
func entryError(sentinel error, format string, args ...any) error {
	return &EntryError{Err: sentinel, Reason: fmt.Sprintf(format, args...)}
}

// LockCycleError reports a request that would close a wait-for cycle
// through nested calls (DESIGN.md invariant 11): it was not enqueued.
// errors.Is(err, ErrLockCycle) reports true for it.
type LockCycleError struct {
	Entries []string // the entries of the cycle, from the refused request on
	Keys    []string // the keys they wait for
	Path    string   // the cycle in words: "a waits for key k held by b; ..."
}

func (e *LockCycleError) Error() string { return "lanes: lock cycle: " + e.Path }

// Is reports whether target is ErrLockCycle.
func (e *LockCycleError) Is(target error) bool { return target == ErrLockCycle }
