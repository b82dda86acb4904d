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
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Bounds on what a Request may name, and on one step. They keep one entry
// small in a shared backend and make a malformed request fail before it
// reaches one. The Redis scripts enforce the same bounds (lib.lua; a test
// compares the two), since they are the protocol other languages speak.
const (
	MaxKeyLen   = 512     // bytes in a lane key
	MaxIDLen    = 256     // bytes in an entry or owner id
	MaxLanes    = 64      // lanes in one request
	MaxLimit    = 1 << 30 // holders one lane may allow
	MaxLineage  = 64      // ancestors in one request's lineage
	MaxFieldLen = 256     // bytes in CallID, Tool, Tenant or an owner's host

	// MaxStepRequests and MaxStepLanes bound one Enqueue step, so that no
	// step keeps a shared backend (a Redis server runs one script at a
	// time) busy for long. Heartbeat and Release steps take at most
	// MaxStepRequests ids. A Session sends its own steps in smaller pieces.
	MaxStepRequests = 1000
	MaxStepLanes    = 4096

	// MaxTTL bounds a lease TTL: a backend that lost part of its state
	// waits at most this long before it grants again.
	MaxTTL = time.Hour

	// MaxCycleVisits bounds the entries one lock-cycle search looks into
	// (DESIGN.md invariants 11 and 14): a cycle that only a longer search
	// would find is not refused, and its waits end by their own timeouts.
	MaxCycleVisits = 200

	// MaxBorrowers bounds the nested entries that borrow keys from one
	// holder (DESIGN.md invariants 10 and 14): when the holder lets go,
	// one step ends or requeues them all. A request that would borrow from
	// a holder that lends to this many already is refused alone with an
	// *InvalidError.
	MaxBorrowers = 500
)

// RevokedTombstone is how long a backend remembers an owner's release of a
// revoked entry (Released.Revoked): a later try of the same release, whose
// first reply was lost, is told Revoked too (the Session's retries of a
// release end within its release timeout, DefaultReleaseTimeout unless
// set). An enqueue of the id forgets it.
const RevokedTombstone = time.Minute

// ValidateStep reports whether reqs can be one Enqueue step: at most
// MaxStepRequests requests with distinct ids naming at most MaxStepLanes
// lanes in all. Its error is an *InvalidError.
func ValidateStep(reqs []Request) error {
	if len(reqs) > MaxStepRequests {
		return invalid("step", "%d requests in one step, more than %d", len(reqs), MaxStepRequests)
	}
	n := 0
	ids := make(map[string]bool, len(reqs))
	for _, r := range reqs {
		n += len(r.Lanes)
		if ids[r.ID] {
			return invalid("id", "entry id %s appears twice in one step", r.ID)
		}
		ids[r.ID] = true
	}
	if n > MaxStepLanes {
		return invalid("step", "%d lanes in one step, more than %d", n, MaxStepLanes)
	}
	return nil
}

// ValidateTTL reports whether d can be a lease TTL: a whole number of
// milliseconds from 1ms to MaxTTL. Its error is an *InvalidError.
func ValidateTTL(d time.Duration) error {
	if d < time.Millisecond || d > MaxTTL || d%time.Millisecond != 0 {
		return invalid("ttl", "TTL %v must be a whole number of milliseconds from 1ms to %v", d, MaxTTL)
	}
	return nil
}

// Lane is one key a Request takes and the limit its holders share.
//
// Limit 0 means unbounded: the lane is not taken, no token is issued for it,
// and it never waits (DESIGN.md invariant 1), unless it carries a Rate.
//
// A lane with a Rate is also bounded in time: its grants spend at most
// Rate.Limit units per window of Rate.Per, Cost units each (see Rate). A
// lane with a Rate and Limit 0 is bounded by the rate alone: it is sent to
// the backend with limit MaxLimit, so it is queued, held and tokened as any
// lane. Every request naming a key must name the same Rate for it while the
// key has holders or waiters (DESIGN.md invariant 9): the Rate they carry,
// none when they carry none. On an idle key another Rate may be named, and
// the units the key's log holds within its window count against it.
type Lane struct {
	Key   string // 1 to MaxKeyLen bytes of UTF-8, no control characters
	Limit int    // 0 to MaxLimit
	Rate  Rate   // zero: none
	Cost  int    // units a grant spends on Rate: 0 (meaning 1) to Rate.Limit; 0 without a Rate
}

// Request asks for every lane it names at once.
type Request struct {
	// ID is the entry id: it names this one request. Enqueueing an ID that
	// exists with the same lanes and lineage returns that entry's state and
	// keeps its place; with other lanes or another lineage it is refused
	// with an *IDConflictError (DESIGN.md invariant 8). Empty means the
	// Session picks a random one. 1 to MaxIDLen bytes of printable ASCII
	// without spaces.
	ID string

	// Lanes are the keys to hold, each with its limit. A key may appear once.
	Lanes []Lane

	// Lineage is the chain of entry ids that started this call, outermost
	// first: a tool that runs a sub-agent passes its own entry id down.
	// A Session takes it from here only, not from the context
	// (WithLineage is read by sched); nil for a call no other started.
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

// Validate reports whether r can be enqueued: a valid id, at most MaxLanes
// lanes with valid keys named once each, limits from 0 to MaxLimit and
// valid rates and costs (a cost above its rate's limit could never be
// granted, and is refused here), a
// lineage of at most MaxLineage valid ids without r's own, and CallID, Tool
// and Tenant of at most MaxFieldLen bytes of UTF-8 without control
// characters. Its error is an *InvalidError naming the field at fault.
func (r Request) Validate() error {
	if err := ValidateEntryID(r.ID); err != nil {
		return err
	}
	if len(r.Lanes) > MaxLanes {
		return invalid("lanes", "entry %s names %d lanes, more than %d", r.ID, len(r.Lanes), MaxLanes)
	}
	seen := make(map[string]bool, len(r.Lanes))
	for _, l := range r.Lanes {
		if err := ValidateKey(l.Key); err != nil {
			return err
		}
		if l.Limit < 0 || l.Limit > MaxLimit {
			return invalid("limit", "key %q: limit %d is out of range 0..%d", l.Key, l.Limit, MaxLimit)
		}
		if err := l.validateRate(); err != nil {
			return err
		}
		if seen[l.Key] {
			return invalid("key", "entry %s names key %q twice", r.ID, l.Key)
		}
		seen[l.Key] = true
	}
	if len(r.Lineage) > MaxLineage {
		return invalid("lineage", "entry %s has a lineage of %d, more than %d", r.ID, len(r.Lineage), MaxLineage)
	}
	for _, a := range r.Lineage {
		if err := validateID("lineage", "lineage entry id", a); err != nil {
			return err
		}
		if a == r.ID {
			return invalid("lineage", "entry %s names itself in its lineage", r.ID)
		}
	}
	for _, f := range [...]struct{ name, v string }{{"call id", r.CallID}, {"tool", r.Tool}, {"tenant", r.Tenant}} {
		if err := ValidateField(f.name, f.v); err != nil {
			return err
		}
	}
	return nil
}

// taken returns the lanes of r that are taken: those with a limit above 0
// or a rate (a rate alone takes limit MaxLimit), each with its cost set.
func (r Request) taken() []Lane {
	out := make([]Lane, 0, len(r.Lanes))
	for _, l := range r.Lanes {
		if !l.Rate.IsZero() {
			if l.Limit == 0 {
				l.Limit = MaxLimit
			}
			l.Cost = l.cost()
		}
		if l.Limit > 0 {
			out = append(out, l)
		}
	}
	return out
}

// ValidateKey reports whether key can name a lane: 1 to MaxKeyLen bytes of
// UTF-8 without control characters. Its error is an *InvalidError.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return invalid("key", "empty key")
	case len(key) > MaxKeyLen:
		return invalid("key", "key %.40q... is %d bytes, more than %d", key, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return invalid("key", "key %q is not valid UTF-8", key)
	case strings.ContainsFunc(key, unicode.IsControl):
		return invalid("key", "key %q contains a control character", key)
	}
	return nil
}

// ValidateField reports whether v can be a descriptive field (a call id,
// tool, tenant or host) named name: at most MaxFieldLen bytes of UTF-8
// without control characters. Its error is an *InvalidError.
func ValidateField(name, v string) error {
	if len(v) > MaxFieldLen || !utf8.ValidString(v) || strings.ContainsFunc(v, unicode.IsControl) {
		return invalid(name, "%s %.40q must be at most %d bytes of UTF-8 without control characters", name, v, MaxFieldLen)
	}
	return nil
}

// ValidateEntryID reports whether id can be an entry or owner id: 1 to
// MaxIDLen bytes of printable ASCII without spaces. Its error is an
// *InvalidError.
func ValidateEntryID(id string) error { return validateID("id", "entry id", id) }

func validateID(field, what, id string) error {
	switch {
	case id == "":
		return invalid(field, "empty %s", what)
	case len(id) > MaxIDLen:
		return invalid(field, "%s %.40q... is %d bytes, more than %d", what, id, len(id), MaxIDLen)
	case !printableASCII(id, ""):
		return invalid(field, "%s %q must be printable ASCII without spaces", what, id)
	}
	return nil
}

// printableASCII reports whether s holds only bytes from '!' to '~', none
// of them in except.
func printableASCII(s, except string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b <= ' ' || b > '~' || strings.IndexByte(except, b) >= 0 {
			return false
		}
	}
	return true
}

// ValidateNamespace reports whether ns can name a namespace: 1 to 128 bytes
// of printable ASCII without spaces or braces (a backend may put it in a
// Redis Cluster hash tag). Its error is an *InvalidError.
func ValidateNamespace(ns string) error {
	if ns == "" || len(ns) > MaxNamespaceLen || !printableASCII(ns, "{}") {
		return invalid("namespace", "namespace %.40q must be 1 to %d bytes of printable ASCII without spaces or braces", ns, MaxNamespaceLen)
	}
	return nil
}

// MaxNamespaceLen bounds a namespace, in bytes.
const MaxNamespaceLen = 128

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
