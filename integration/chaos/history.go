package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Phase is what an event says about its operation.
type Phase string

// The phases of an operation. An operation is invoked once and then ends
// Ok, Fail (it certainly did not take effect, or ended with an error the
// caller can act on) or Info (uncertain: an ambiguous reply, the effect may
// or may not have landed). Point events (a crash, a loss noticed) are Ok.
const (
	Invoke Phase = "invoke"
	Ok     Phase = "ok"
	Fail   Phase = "fail"
	Info   Phase = "info"
)

// The operations a history records.
const (
	OpStart   = "start"   // a process began (Ok)
	OpExit    = "exit"    // a process ended cleanly (Ok)
	OpAcquire = "acquire" // one lane request, from Enqueue to the end of Wait
	OpEnqueue = "enqueue" // one Session.Enqueue step of an acquire (retries are new steps)
	OpRelease = "release" // Lease.Release
	OpGone    = "gone"    // a confirming Backend.Release after a release that failed: the entry is gone from then on
	OpCheck   = "check"   // the fencing guard's Check on entering the critical section
	OpRead    = "read"    // the protected resource read (Value)
	OpWrite   = "write"   // the protected resource written (Value is the new value)
	OpFence   = "fence"   // a RedisGuard check on a separate server
	OpValid   = "valid"   // the holder asked Lease.Err whether its lease still holds: Ok yes, Fail no
	OpLost    = "lost"    // the holder noticed its lease was lost
	OpProbe   = "probe"   // a heartbeat sent for an entry after its release (State says what the backend had)
	OpCrash   = "crash"   // the process is about to SIGKILL itself (Err names the crash point)
	OpKill    = "kill"    // harness: a process was sent SIGKILL
	OpPause   = "pause"   // harness: a process was sent SIGSTOP
	OpResume  = "resume"  // harness: a process was sent SIGCONT
	OpFault   = "fault"   // harness: a fault began (invoke) or ended (ok); Err describes it
)

// The error classes of a failed or uncertain operation.
const (
	ClassCancel      = "cancel"      // the caller gave up on purpose (a short wait)
	ClassTimeout     = "timeout"     // a wait ran to its (generous) bound: a liveness failure
	ClassLost        = "lost"        // lanes.ErrLeaseLost
	ClassNotHolder   = "notholder"   // lanes.ErrNotHolder
	ClassUnavailable = "unavailable" // lanes.ErrUnavailable: the step's outcome is unknown
	ClassStale       = "stale"       // the fencing guard refused the token
	ClassCycle       = "cycle"       // lanes.ErrLockCycle: a nested request refused as closing a wait-for cycle
	ClassOther       = "other"
)

// Event is one line of a history file.
type Event struct {
	Time   int64             `json:"t"`             // wall clock, Unix ns
	Proc   string            `json:"p"`             // process incarnation, e.g. "r3.1", or "harness"
	Client int               `json:"c"`             // goroutine of the process
	Op     string            `json:"op"`            // Op* constant
	Phase  Phase             `json:"ph"`            // Invoke, Ok, Fail or Info
	ID     string            `json:"id,omitempty"`  // entry id
	NS     string            `json:"ns,omitempty"`  // namespace
	Keys   []string          `json:"k,omitempty"`   // lane keys (acquire), or the one key of a resource op
	Limits []int             `json:"l,omitempty"`   // limits, per key
	Lin    []string          `json:"lin,omitempty"` // lineage of an acquire: the entry ids it is nested under, outermost first
	Tokens map[string]uint64 `json:"tok,omitempty"` // fencing tokens, per key
	State  string            `json:"st,omitempty"`  // held, waiting or gone
	Value  int64             `json:"v,omitempty"`   // resource value read or written
	Class  string            `json:"cl,omitempty"`  // Class* constant of a Fail or Info
	Err    string            `json:"err,omitempty"` // error text, or what a fault or crash was
}

// Recorder appends events to one history file, one JSON object per line and
// one write(2) per event, so the lines a process wrote survive its SIGKILL.
// It is safe for concurrent use.
type Recorder struct {
	mu   sync.Mutex
	f    *os.File
	proc string
	err  error
}

// NewRecorder creates (or appends to) the history file path for process proc.
func NewRecorder(path, proc string) (*Recorder, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Recorder{f: f, proc: proc}, nil
}

// Record stamps e with the time and the process and appends it.
func (r *Recorder) Record(e Event) Event {
	e.Time = time.Now().UnixNano()
	e.Proc = r.proc
	b, err := json.Marshal(e)
	if err != nil {
		panic(err) // every field marshals
	}
	b = append(b, '\n')
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil && r.f != nil {
		_, r.err = r.f.Write(b)
	}
	return e
}

// Close closes the file and returns the first write error, if any.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return r.err
	}
	err := r.f.Close()
	r.f = nil
	if r.err != nil {
		return r.err
	}
	return err
}

// ReadHistory reads every *.jsonl file of dir and merges their events in
// time order. A last line cut short by a SIGKILL is ignored.
func ReadHistory(dir string) ([]Event, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	var all []Event
	for _, name := range files {
		evs, err := readFile(name)
		if err != nil {
			return nil, err
		}
		all = append(all, evs...)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Time < all[j].Time })
	return all, nil
}

func readFile(name string) ([]Event, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue // a line torn by a kill
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// Never is the return time of an operation whose end is unknown: porcupine
// may place it anywhere after its invocation.
const Never = int64(math.MaxInt64 / 2)

// Outcome is how a lane request ended.
type Outcome string

// The outcomes of an Attempt.
const (
	Granted Outcome = "granted" // Wait returned a Lease
	Ended   Outcome = "ended"   // Enqueue or Wait failed; Class says why
	Open    Outcome = "open"    // never ended: its process crashed, or it was lost
)

// Release is how the lease of a granted Attempt ended.
type Release string

// The ends of a lease.
const (
	Released  Release = "released"  // Lease.Release confirmed the backend held it until then
	Dropped   Release = "dropped"   // lost, or released without confirmation: it ended by GoneAt
	Abandoned Release = "abandoned" // its process died holding it (or mid-release)
)

// Attempt is one lane request, assembled from its events.
type Attempt struct {
	ID     string
	Proc   string
	Client int
	NS     string
	Keys   []string
	Limits []int
	// Lineage is the request's lineage (Request.Lineage): the entries it
	// is nested under, outermost first.
	Lineage []string
	// Borrowed maps each key the attempt took by re-entry to the entry id
	// of its lender: the nearest ancestor granted that key in its own
	// right with the same token (tokens of grants in their own right never
	// repeat, so an equal token is a re-entry). Empty for grants in their
	// own right.
	Borrowed map[string]string

	Invoke     int64 // acquire invoked
	FirstEnq   int64 // first Enqueue step invoked
	EnqOK      int64 // an Enqueue step returned the entry: its place was fixed by then; 0 if none did
	EnqSteps   int   // Enqueue steps sent (retries included)
	EnqReady   bool  // the first Enqueue step that answered found it granted at once
	Outcome    Outcome
	Class      string // of an Ended attempt
	Err        string
	Return     int64             // acquire returned (Granted or Ended)
	Tokens     map[string]uint64 // of a Granted attempt
	Release    Release           // of a Granted attempt
	RelInvoke  int64             // Lease.Release invoked; 0 if never
	RelReturn  int64             // Lease.Release returned
	RelClass   string            // class of a failed or uncertain release
	GoneAt     int64             // a confirming release returned: the entry was gone by then; Never if unknown
	Lost       int64             // the holder noticed the loss (first time); 0 if never
	Valid      [][2]int64        // invoke and return of each Lease.Err that said the lease still held
	Probe      string            // state a heartbeat probe after the release saw
	ProcExited bool              // its process ended cleanly
}

// Limit returns the attempt's limit for key, 0 if it does not name key.
func (a *Attempt) Limit(key string) int {
	if i := slices.Index(a.Keys, key); i >= 0 && i < len(a.Limits) {
		return a.Limits[i]
	}
	return 0
}

// ResourceOp is one access to the protected resource.
type ResourceOp struct {
	Proc     string
	Client   int
	ID       string // entry id of the lease
	Resource string // ns/key
	Op       string // OpCheck, OpRead, OpWrite or OpFence
	Invoke   int64
	Return   int64 // Never if its process died first
	Phase    Phase // Ok, Fail, Info, or Invoke if it never returned
	Class    string
	Token    uint64
	Value    int64
}

// History is a run's events and what they add up to.
type History struct {
	Events    []Event
	Attempts  []*Attempt
	Resources []ResourceOp
	// Procs maps every process to how it ended: "exit" (clean), "crash"
	// (it killed itself at a crash point), "kill" (the harness killed it),
	// or "" (it vanished: no clean exit and no one killed it).
	Procs map[string]string
	// Crashes are the crash and kill events, in time order.
	Crashes []Event
	// Faults are the harness's fault events, in time order.
	Faults []Event
	// End is the time of the last event.
	End int64
	// ByID maps an entry id to its attempt (ids name one request across
	// every process: they carry the incarnation's name).
	ByID map[string]*Attempt
}

// Resource names the resource of key in namespace ns.
func Resource(ns, key string) string { return ns + "/" + key }

// Build assembles a merged event list into a History.
func Build(events []Event) *History {
	h := &History{Events: events, Procs: map[string]string{}, ByID: map[string]*Attempt{}}
	type ck struct {
		proc   string
		client int
	}
	byID := map[string]*Attempt{}
	openRes := map[ck]*ResourceOp{}
	for _, e := range events {
		h.End = max(h.End, e.Time)
		switch e.Op {
		case OpStart:
			if _, ok := h.Procs[e.Proc]; !ok {
				h.Procs[e.Proc] = ""
			}
			continue
		case OpExit:
			h.Procs[e.Proc] = "exit"
			continue
		case OpCrash:
			if h.Procs[e.Proc] != "exit" {
				h.Procs[e.Proc] = "crash"
			}
			h.Crashes = append(h.Crashes, e)
			continue
		case OpKill:
			if target := e.ID; h.Procs[target] != "exit" && h.Procs[target] != "crash" {
				h.Procs[target] = "kill"
			}
			h.Crashes = append(h.Crashes, e)
			continue
		case OpFault, OpPause, OpResume:
			h.Faults = append(h.Faults, e)
			continue
		}
		key := e.Proc + "\x00" + e.ID
		a := byID[key]
		switch e.Op {
		case OpAcquire:
			if e.Phase == Invoke {
				a = &Attempt{ID: e.ID, Proc: e.Proc, Client: e.Client, NS: e.NS, Keys: e.Keys, Limits: e.Limits,
					Lineage: e.Lin, Invoke: e.Time, Outcome: Open, GoneAt: Never}
				byID[key] = a
				if h.ByID[e.ID] == nil {
					h.ByID[e.ID] = a
				}
				h.Attempts = append(h.Attempts, a)
				continue
			}
			if a == nil {
				continue
			}
			a.Return = e.Time
			if e.Phase == Ok {
				a.Outcome, a.Tokens = Granted, e.Tokens
			} else {
				a.Outcome, a.Class, a.Err = Ended, e.Class, e.Err
			}
		case OpEnqueue:
			if a == nil {
				continue
			}
			if e.Phase == Invoke {
				a.EnqSteps++
				if a.FirstEnq == 0 {
					a.FirstEnq = e.Time
				}
			} else if e.Phase == Ok && a.EnqOK == 0 {
				a.EnqOK, a.EnqReady = e.Time, e.State == "ready"
			}
		case OpRelease:
			if a == nil {
				continue
			}
			if e.Phase == Invoke {
				a.RelInvoke = e.Time
				continue
			}
			a.RelReturn = e.Time
			if e.Phase == Ok {
				a.Release, a.GoneAt = Released, e.Time
			} else {
				a.Release, a.RelClass = Dropped, e.Class
			}
		case OpGone:
			if a != nil && e.Phase == Ok && a.GoneAt == Never {
				a.GoneAt = e.Time
			}
		case OpValid:
			if a == nil {
				continue
			}
			if e.Phase == Invoke {
				a.Valid = append(a.Valid, [2]int64{e.Time, 0})
			} else if n := len(a.Valid); n > 0 && a.Valid[n-1][1] == 0 {
				if e.Phase == Ok {
					a.Valid[n-1][1] = e.Time
				} else {
					a.Valid = a.Valid[:n-1]
				}
			}
		case OpLost:
			if a != nil && a.Lost == 0 {
				a.Lost = e.Time
			}
		case OpProbe:
			if a != nil {
				a.Probe = e.State
			}
		case OpCheck, OpRead, OpWrite, OpFence:
			c := ck{e.Proc, e.Client}
			res := ""
			if len(e.Keys) > 0 {
				res = Resource(e.NS, e.Keys[0])
			}
			if e.Phase == Invoke {
				r := &ResourceOp{Proc: e.Proc, Client: e.Client, ID: e.ID, Resource: res, Op: e.Op,
					Invoke: e.Time, Return: Never, Phase: Invoke, Value: e.Value}
				for _, t := range e.Tokens {
					r.Token = t
				}
				openRes[c] = r
				continue
			}
			r := openRes[c]
			if r == nil || r.Op != e.Op || r.Resource != res {
				continue
			}
			delete(openRes, c)
			r.Return, r.Phase, r.Class = e.Time, e.Phase, e.Class
			if e.Phase == Ok {
				r.Value = e.Value
			}
			h.Resources = append(h.Resources, *r)
		}
	}
	for _, r := range openRes {
		h.Resources = append(h.Resources, *r)
	}
	sort.SliceStable(h.Resources, func(i, j int) bool { return h.Resources[i].Invoke < h.Resources[j].Invoke })
	for _, a := range h.Attempts {
		a.ProcExited = h.Procs[a.Proc] == "exit"
		if a.Outcome == Granted && a.Release == "" {
			a.Release = Abandoned
		}
		if a.Outcome == Granted && a.Release == Released && a.GoneAt == Never {
			a.GoneAt = a.RelReturn
		}
		if n := len(a.Valid); n > 0 && a.Valid[n-1][1] == 0 {
			a.Valid = a.Valid[:n-1] // never answered: its process died
		}
	}
	for _, a := range h.Attempts {
		h.findLenders(a)
	}
	return h
}

// findLenders fills a.Borrowed: for each key of a granted attempt with a
// lineage, the nearest ancestor (the last in the lineage) that was granted
// the key in its own right with the very token a got.
func (h *History) findLenders(a *Attempt) {
	if a.Outcome != Granted || len(a.Lineage) == 0 || a.Borrowed != nil {
		return
	}
	a.Borrowed = map[string]string{}
	for _, k := range a.Keys {
		for i := len(a.Lineage) - 1; i >= 0; i-- {
			l := h.ByID[a.Lineage[i]]
			if l == nil || l == a || l.Outcome != Granted || l.NS != a.NS {
				continue
			}
			h.findLenders(l)
			if l.Borrowed[k] == "" && l.Tokens[k] != 0 && l.Tokens[k] == a.Tokens[k] {
				a.Borrowed[k] = l.ID
				break
			}
		}
	}
}

// Lender returns the attempt a borrowed key from, or nil when a holds key
// in its own right.
func (h *History) Lender(a *Attempt, key string) *Attempt {
	if id := a.Borrowed[key]; id != "" {
		return h.ByID[id]
	}
	return nil
}

// Load reads and builds the history of dir.
func Load(dir string) (*History, error) {
	evs, err := ReadHistory(dir)
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		return nil, fmt.Errorf("chaos: no history in %s", dir)
	}
	return Build(evs), nil
}

// Granted returns the granted attempts, in the order their grants returned.
func (h *History) Granted() []*Attempt {
	var out []*Attempt
	for _, a := range h.Attempts {
		if a.Outcome == Granted {
			out = append(out, a)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Return < out[j].Return })
	return out
}

// Count returns how many attempts ended with each outcome or class:
// "granted", "cancel", "lost", ..., "open".
func (h *History) Count() map[string]int {
	n := map[string]int{}
	for _, a := range h.Attempts {
		switch a.Outcome {
		case Granted:
			n["granted"]++
		case Ended:
			n[a.Class]++
		default:
			n["open"]++
		}
	}
	return n
}

// String summarizes the history in one line.
func (h *History) String() string {
	c := h.Count()
	var parts []string
	for k, v := range c {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(parts)
	return fmt.Sprintf("%d events, %d processes, %d requests (%s), %d crashes", len(h.Events), len(h.Procs), len(h.Attempts), strings.Join(parts, " "), len(h.Crashes))
}
