// Package fencing lets a protected resource refuse a holder that lost its
// lease.
//
// A lock service cannot stop a holder from acting late: after a GC pause, a
// frozen VM or a slow network, the holder's lease may have expired and the
// key been granted to someone else, yet its pending write still arrives.
// Checking the lease first does not help, since the pause can fall between
// the check and the write. Only the resource sees writes in their real
// order, so it must decide: every grant carries a fencing token that grows
// with each grant of the key, the resource remembers the highest token it
// has seen, and it refuses any write that presents a lower one.
//
// A Guard keeps that memory: MemoryGuard in one process, RedisGuard in Redis
// for resources shared by many processes, FileGuard beside files on disk.
package fencing

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Errors returned by this package. Test them with errors.Is.
var (
	// ErrInvalid is returned for an argument that cannot be used: an empty,
	// over-long or NUL-carrying resource, a bad namespace, a path outside a
	// FileGuard's directory. Nothing is recorded.
	ErrInvalid = errors.New("fencing: invalid")

	// ErrInvalidToken is returned for a token that is not one: 0 (which
	// means "no token") or a string that is not a decimal number from 1 to
	// 18446744073709551615. errors.Is(ErrInvalidToken, ErrInvalid) holds.
	ErrInvalidToken = fmt.Errorf("%w token", ErrInvalid)

	// ErrStale is returned when the token presented is lower than the
	// highest one already seen for the resource: its holder lost the lease
	// to a newer one. The error is a *StaleError with the details.
	ErrStale = errors.New("fencing: stale token")

	// ErrEvictable is returned by a RedisGuard's Check on a server whose
	// maxmemory-policy may evict the guard's hash (allkeys-lru,
	// allkeys-lfu, allkeys-random), unless the guard was made
	// WithEvictionAllowed. Nothing is recorded.
	ErrEvictable = errors.New("fencing: Redis may evict the guard's records")
)

// MaxResourceLen is the longest resource name a Guard accepts, in bytes.
const MaxResourceLen = 512

// Token is a fencing token: issued with every grant of a key, starting at 1
// and strictly increasing per key. 0 means "no token" and is never valid in a
// Check. Tokens travel as decimal text (String, ParseToken), e.g. in the
// LANES_TOKEN environment variable, because not every consumer holds a
// uint64 exactly (Lua and JavaScript numbers are doubles).
type Token uint64

// String returns t in decimal, e.g. "17".
func (t Token) String() string { return strconv.FormatUint(uint64(t), 10) }

// ParseToken parses a token in the canonical decimal form String returns:
// digits only, no sign, no leading zero, from 1 to 18446744073709551615.
// Any other input (including "", "0", "-1", "+1", "07", " 7" and overflow)
// returns an error wrapping ErrInvalidToken that quotes the input.
func ParseToken(s string) (Token, error) {
	const want = "want a decimal number from 1 to 18446744073709551615"
	switch {
	case s == "":
		return 0, fmt.Errorf("%w: empty string: %s", ErrInvalidToken, want)
	case s == "0":
		return 0, fmt.Errorf(`%w "0": 0 means no token; %s`, ErrInvalidToken, want)
	case s[0] == '0':
		return 0, fmt.Errorf("%w %.40q: leading zero; %s", ErrInvalidToken, s, want)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%w %.40q: %s", ErrInvalidToken, s, want)
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil { // only ErrRange is left: s is all digits
		return 0, fmt.Errorf("%w %.40q: too large; %s", ErrInvalidToken, s, want)
	}
	return Token(n), nil
}

// StaleError is the error of a Check or a write refused because its token is
// lower than the highest already seen for the resource.
// errors.Is(err, ErrStale) holds for it; use errors.As for the fields.
type StaleError struct {
	Resource string // the resource the holder tried to use
	Token    Token  // the token it presented
	Highest  Token  // the highest token seen for the resource, > Token
}

// Error names the resource, the token presented and the highest seen.
func (e *StaleError) Error() string {
	return fmt.Sprintf("fencing: stale token %d for %q: highest seen is %d (the holder lost its lease)",
		e.Token, e.Resource, e.Highest)
}

// Is reports whether target is ErrStale.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// Guard remembers, per resource, the highest fencing token seen.
//
// Check compares and records only: it does not make the guarded write itself
// atomic. A resource must run Check and the write it guards as one step (for
// example under the lock that already serializes its writes), or a newer
// holder's write can land between an older holder's Check and its write.
// FileGuard.WriteFile is that one step for files.
type Guard interface {
	// Check refuses t if it is lower than the highest token recorded for
	// resource, with a *StaleError (errors.Is(err, ErrStale)); otherwise
	// it records t as the highest and returns nil. A token equal to the
	// highest is accepted, so one holder may write several times. The
	// compare and the record are one atomic step.
	//
	// resource must be non-empty, at most MaxResourceLen bytes, without
	// NUL (else ErrInvalid); t must be at least 1 (else ErrInvalidToken).
	// When ctx is already done, Check returns ctx.Err() and records
	// nothing. Implementations are safe for concurrent use.
	Check(ctx context.Context, resource string, t Token) error
}

// validate checks the arguments every Guard takes.
func validate(resource string, t Token) error {
	switch {
	case resource == "":
		return fmt.Errorf("%w resource: empty", ErrInvalid)
	case len(resource) > MaxResourceLen:
		return fmt.Errorf("%w resource %.40q...: %d bytes, longer than %d", ErrInvalid, resource, len(resource), MaxResourceLen)
	case strings.IndexByte(resource, 0) >= 0:
		return fmt.Errorf("%w resource %.40q: contains NUL", ErrInvalid, resource)
	case t == 0:
		return fmt.Errorf("%w 0 for %q: 0 means no token; tokens start at 1", ErrInvalidToken, resource)
	}
	return nil
}
