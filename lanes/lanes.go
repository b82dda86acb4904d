// Package lanes keeps calls that touch the same state apart and in order, in
// one process or across many.
//
// A lane is a bounded resource named by a key: at most Limit holders at once.
// A Request names every lane it needs; it takes its place in the FIFO queue of
// each one in a single atomic step and is granted all of them together, or
// none. A grant is a Lease: it carries one fencing token per key, is kept
// alive by the Session's heartbeats, and reports through Lost when it ends
// without being released.
//
// The Backend holds the shared state. NewMemory gives one for a single
// process; package redislane gives one shared through Redis. Both keep the
// invariants of DESIGN.md section 3, and package lanestest checks them.
package lanes

import (
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds on what a Request may name. They keep one entry small in a shared
// backend and make a malformed request fail before it reaches one.
const (
	MaxKeyLen   = 512     // bytes in a lane key
	MaxIDLen    = 256     // bytes in an entry id
	MaxLanes    = 64      // lanes in one request
	MaxLimit    = 1 << 30 // holders one lane may allow
	MaxLineage  = 64      // ancestors in one request's lineage
	MaxFieldLen = 256     // bytes in CallID, Tool or Tenant

	// MaxStepRequests and MaxStepLanes bound one Enqueue step, so that no
	// step keeps a shared backend (a Redis server runs one script at a
	// time) busy for long. Heartbeat and Release steps take at most
	// MaxStepRequests ids; a Session splits its own into several.
	MaxStepRequests = 1000
	MaxStepLanes    = 4096
)

// ValidateStep reports whether reqs can be one Enqueue step: at most
// MaxStepRequests requests naming at most MaxStepLanes lanes in all. Its
// error wraps ErrInvalid.
func ValidateStep(reqs []Request) error {
	if len(reqs) > MaxStepRequests {
		return fmt.Errorf("%w: %d requests in one step, more than %d", ErrInvalid, len(reqs), MaxStepRequests)
	}
	n := 0
	for _, r := range reqs {
		n += len(r.Lanes)
	}
	if n > MaxStepLanes {
		return fmt.Errorf("%w: %d lanes in one step, more than %d", ErrInvalid, n, MaxStepLanes)
	}
	return nil
}

// Lane is one key a Request takes and the limit its holders share.
//
// Limit 0 means unbounded: the lane is not taken, no token is issued for it,
// and it never waits (DESIGN.md invariant 1).
type Lane struct {
	Key   string // 1 to MaxKeyLen bytes of UTF-8, no control characters
	Limit int    // 0 to MaxLimit
}

// Request asks for every lane it names at once.
type Request struct {
	// ID is the entry id. Enqueueing an ID that already exists returns that
	// entry's state and keeps its place (DESIGN.md invariant 8). Empty means
	// the Session picks a random one. Printable, no spaces, 1 to MaxIDLen bytes.
	ID string

	// Lanes are the keys to hold, each with its limit. A key may appear once.
	Lanes []Lane

	// Lineage is the chain of entry ids that started this call, outermost
	// first: a tool that runs a sub-agent passes its own entry id down.
	Lineage []string

	// CallID, Tool and Tenant describe the call for people reading
	// `lanectl status`; the backend stores them and does not interpret them.
	CallID string
	Tool   string
	Tenant string
}

// Owner is the process that enqueued an entry: the Session that keeps it
// alive, and where it runs.
type Owner struct {
	ID   string // the Session's id; grant hints for its entries go to it
	Host string
	PID  int
}

// Validate reports whether r can be enqueued. Its error wraps ErrInvalid and
// names the field at fault.
func (r Request) Validate() error {
	if err := validateID("entry id", r.ID); err != nil {
		return err
	}
	if len(r.Lanes) > MaxLanes {
		return fmt.Errorf("%w: entry %s names %d lanes, more than %d", ErrInvalid, r.ID, len(r.Lanes), MaxLanes)
	}
	seen := make(map[string]bool, len(r.Lanes))
	for _, l := range r.Lanes {
		if err := ValidateKey(l.Key); err != nil {
			return err
		}
		if l.Limit < 0 || l.Limit > MaxLimit {
			return fmt.Errorf("%w: key %q: limit %d is out of range 0..%d", ErrInvalid, l.Key, l.Limit, MaxLimit)
		}
		if seen[l.Key] {
			return fmt.Errorf("%w: entry %s names key %q twice", ErrInvalid, r.ID, l.Key)
		}
		seen[l.Key] = true
	}
	if len(r.Lineage) > MaxLineage {
		return fmt.Errorf("%w: entry %s has a lineage of %d, more than %d", ErrInvalid, r.ID, len(r.Lineage), MaxLineage)
	}
	for _, a := range r.Lineage {
		if err := validateID("lineage entry id", a); err != nil {
			return err
		}
	}
	for name, v := range map[string]string{"call id": r.CallID, "tool": r.Tool, "tenant": r.Tenant} {
		if len(v) > MaxFieldLen || !utf8.ValidString(v) || strings.ContainsFunc(v, unicode.IsControl) {
			return fmt.Errorf("%w: entry %s: %s must be at most %d bytes of printable UTF-8", ErrInvalid, r.ID, name, MaxFieldLen)
		}
	}
	return nil
}

// taken returns the lanes of r that are taken: those with a limit above 0.
func (r Request) taken() []Lane {
	out := make([]Lane, 0, len(r.Lanes))
	for _, l := range r.Lanes {
		if l.Limit > 0 {
			out = append(out, l)
		}
	}
	return out
}

// ValidateKey reports whether key can name a lane. Its error wraps ErrInvalid.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalid)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key %.40q... is %d bytes, more than %d", ErrInvalid, key, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: key %q is not valid UTF-8", ErrInvalid, key)
	case strings.ContainsFunc(key, unicode.IsControl):
		return fmt.Errorf("%w: key %q contains a control character", ErrInvalid, key)
	}
	return nil
}

// ValidateEntryID reports whether id can be an entry id: 1 to MaxIDLen bytes
// of printable UTF-8 without spaces. Its error wraps ErrInvalid.
func ValidateEntryID(id string) error { return validateID("entry id", id) }

func validateID(what, id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty %s", ErrInvalid, what)
	case len(id) > MaxIDLen:
		return fmt.Errorf("%w: %s %.40q... is %d bytes, more than %d", ErrInvalid, what, id, len(id), MaxIDLen)
	case !utf8.ValidString(id) || strings.ContainsFunc(id, func(r rune) bool { return !unicode.IsGraphic(r) || unicode.IsSpace(r) }):
		return fmt.Errorf("%w: %s %q must be printable UTF-8 without spaces", ErrInvalid, what, id)
	}
	return nil
}

// ValidateNamespace reports whether ns can name a namespace: 1 to 128 bytes of
// printable UTF-8 without spaces or braces (a backend may put it in a Redis
// Cluster hash tag). Its error wraps ErrInvalid.
func ValidateNamespace(ns string) error {
	if ns == "" || len(ns) > 128 || !utf8.ValidString(ns) ||
		strings.ContainsFunc(ns, func(r rune) bool { return !unicode.IsGraphic(r) || unicode.IsSpace(r) || r == '{' || r == '}' }) {
		return fmt.Errorf("%w: namespace %q must be 1 to 128 bytes of printable UTF-8 without spaces or braces", ErrInvalid, ns)
	}
	return nil
}

// NewID returns a random id for an entry, an owner or a run: 20 characters
// from a-z and 2-7 (base32 of 96 random bits). Short, since an entry id is
// stored with each of its lanes, and never starting with "-", so a command
// line does not take it for a flag.
func NewID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return idEncoding.EncodeToString(b[:])
}

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)
