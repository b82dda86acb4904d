package sched

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// DefaultMaxConcurrentTools bounds the turn lane when a Runner leaves
// MaxConcurrentTools at 0.
const DefaultMaxConcurrentTools = 10

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("sched: invalid configuration")

// Concurrency is a tool's limit, as RFD 129 defines it: every execution of
// every tool naming the same key counts against one limit. The forms:
//
//	Concurrency{}                          unbounded (TOML: unset or 0)
//	Concurrency{Limit: 4}                  the tool's own name as key, 4 at once (TOML: 4)
//	Concurrency{Key: "rfd"}                key rfd, 1 at once (TOML: { key = "rfd" })
//	Concurrency{Key: "github", Limit: 4}   key github, 4 at once (TOML: { key, limit })
//	Concurrency{Key: "x", Unbounded: true} names key x but limits nothing (TOML: { key = "x", limit = 0 });
//	                                       Validate still checks that it agrees with the other tools naming x
type Concurrency struct {
	Key       string // the concurrency key; empty means the tool's own name
	Limit     int    // executions at once; 0 with a Key means 1, 0 without one unbounded
	Unbounded bool   // limits nothing, whatever Key says
}

// key returns the concurrency key of tool name and its limit, or "" and 0
// when unbounded.
func (c Concurrency) key(name string) (string, int) {
	switch {
	case c.Unbounded, c.Key == "" && c.Limit == 0:
		return "", 0
	case c.Key == "":
		return name, c.Limit
	case c.Limit == 0:
		return c.Key, 1
	default:
		return c.Key, c.Limit
	}
}

// OnError says what a fanned-out call does when one of its operations fails.
type OnError int

const (
	// Continue starts the later operations anyway (the default).
	Continue OnError = iota
	// Stop starts no further operation of the call after one failed
	// (DESIGN.md section 5, rule 9). It needs a concurrency limit of at
	// least 1: unbounded operations all start at once.
	Stop
)

// FanOut makes a tool's calls fan out: arguments that are a JSON array run as
// one operation per element, each its own entry in written order.
type FanOut struct {
	OnError OnError
}

// Policy says what a tool failure does to its batch (DESIGN.md section 5,
// rule 8).
type Policy int

const (
	// Surface reports the failure against its call and lets the siblings go
	// on (the default).
	Surface Policy = iota
	// FailRun ends the batch: queued calls end never dispatched, in-flight
	// calls are cancelled.
	FailRun
)

func (p Policy) String() string {
	if p == FailRun {
		return "fail_run"
	}
	return "surface"
}

// MarshalText writes "surface" or "fail_run".
func (p Policy) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText reads "surface" or "fail_run"; anything else is an error
// wrapping ErrConfig.
func (p *Policy) UnmarshalText(b []byte) error {
	switch string(b) {
	case "surface", "":
		*p = Surface
	case "fail_run":
		*p = FailRun
	default:
		return fmt.Errorf("%w: on_tool_error must be \"surface\" or \"fail_run\", not %q", ErrConfig, b)
	}
	return nil
}

// SafeFunc reports whether a call with these arguments may run beside the
// other calls of its phase. An error means unsafe. For a tool that fans
// out, args is the call's whole argument array.
type SafeFunc func(args json.RawMessage) (bool, error)

// Always returns a SafeFunc that answers safe for every call.
func Always(safe bool) SafeFunc {
	return func(json.RawMessage) (bool, error) { return safe, nil }
}

// LockKeysFunc names what a call changes: lock keys (each a lane of limit 1)
// computed from its arguments, such as FileKey of the path it writes. ctx
// carries the call's CallInfo (run id, call id, tool, tenant, operation).
// An error fails the call with "could not tell what the call changes"
// (code CodeLockKeys); a panic is such an error.
type LockKeysFunc func(ctx context.Context, args json.RawMessage) ([]string, error)

// Body runs one execution of a tool: a call, or one operation of a
// fanned-out call. Its context ends when the tool's timeout passes, when the
// batch is cancelled or fails, or when a lane is lost; the body should
// return soon after, as its lanes stay held until it does.
type Body func(ctx context.Context, inv Invocation) (string, error)

// Invocation is what a Body gets about its execution.
type Invocation struct {
	RunID     string
	CallID    string
	Tool      string
	Args      json.RawMessage // the call's arguments, or this operation's
	Operation int             // index of the operation in a fanned-out call, else 0
	Tenant    string
	Entry     string            // the lanes entry id
	Tokens    map[string]uint64 // fencing token per lane key held (tenant:, tool:, concurrency:, lock:)

	// Lost is closed when the execution's lease is lost (lanes.Lease.Lost).
	// Its lanes may be granted to another holder a margin later (Margin),
	// so whatever the body started must be stopped by then: a body whose
	// ctx already ended for another reason (its timeout) and that is still
	// stopping learns it here. Nil when the lease can never be lost.
	Lost <-chan struct{}
	// OnLost registers a function to run if the lease is lost, before its
	// slots are given back (lanes.Lease.OnLost); the returned function
	// unregisters it. Nil when the lease can never be lost.
	OnLost func(func()) func() bool
	// Deadline returns the lease's local deadline (lanes.Lease.Deadline):
	// when Lost closes unless a heartbeat renews the lease first. It moves
	// with each renewal; the zero time means none. A body that stops its
	// work gracefully starts doing so once the deadline is less than Margin
	// away. Nil, like the zero time, means no deadline.
	Deadline func() time.Time
	// Margin is how long before the backend could expire the lease its
	// local deadline lies: a tenth of the Session's TTL.
	Margin time.Duration
}

// Tool declares one tool of a Config.
//
// Whether a call is a barrier (a phase of its own: everything before it
// has ended when it starts, nothing starts beside it) follows DESIGN.md
// section 5: Safe decides when set (false written out keeps a barrier);
// else ReadOnlyHint true means not a barrier; else a tool that declares
// what it conflicts on (a concurrency key or limit, or LockKeys) is ordered
// by its keys only, not a barrier: calls on other keys and keyless calls
// run beside it; else, a tool that declares nothing is a barrier unless the
// Runner says Unmarked: UnmarkedParallel.
type Tool struct {
	Concurrency Concurrency
	// Rate, when set, bounds how many units the calls naming its key spend
	// per window, across processes (rate lanes; see Rate). Cost tells what
	// one call spends; nil means 1.
	Rate *Rate
	Cost CostFunc
	// Safe decides whether a call may share its phase with the calls around
	// it; an error from it means unsafe. Nil leaves it to the rule above.
	Safe SafeFunc
	// ReadOnlyHint is the MCP annotation: with Safe nil, true means safe.
	ReadOnlyHint bool
	LockKeys     LockKeysFunc
	// Idempotent tools are reported "safe to call again" when cancelled in
	// flight; others "indeterminate".
	Idempotent bool
	// Timeout bounds one execution, counted from when its body starts, never
	// the wait before; 0 means none.
	Timeout time.Duration
	FanOut  *FanOut
	// Disabled tools are validated (their limits count) but not run.
	Disabled bool
	Run      Body
}

// declaresKeys reports whether t says what it conflicts on: a concurrency
// key or limit (Unbounded with a key counts: it names the key), or lock
// keys. `concurrency = 0`, the way a later layer lifts a limit, declares
// nothing.
func (t Tool) declaresKeys() bool {
	return t.Concurrency.Key != "" || t.Concurrency.Limit > 0 || t.LockKeys != nil || t.Rate != nil
}

// Unmarked says what the calls of a tool that declares nothing (no Safe,
// no ReadOnlyHint, no concurrency key or lock keys) do: DESIGN.md section
// 5. TOML: [runner] unmarked = "barrier" | "parallel".
type Unmarked int

const (
	// UnmarkedBarrier makes such a call a barrier: a phase of its own (the
	// default; Cogitator's rule).
	UnmarkedBarrier Unmarked = iota
	// UnmarkedParallel lets such calls run together with the calls around
	// them (the Python runner's rule, whose parallel_safe defaults to true).
	UnmarkedParallel
)

func (u Unmarked) String() string {
	if u == UnmarkedParallel {
		return "parallel"
	}
	return "barrier"
}

// MarshalText writes "barrier" or "parallel".
func (u Unmarked) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

// UnmarshalText reads "barrier" or "parallel"; anything else is an error
// wrapping ErrConfig.
func (u *Unmarked) UnmarshalText(b []byte) error {
	switch string(b) {
	case "barrier", "":
		*u = UnmarkedBarrier
	case "parallel":
		*u = UnmarkedParallel
	default:
		return fmt.Errorf("%w: unmarked must be \"barrier\" or \"parallel\", not %q", ErrConfig, b)
	}
	return nil
}

// Runner holds the settings of the runner: the turn, tool and tenant lanes,
// whether calls run in parallel, the failure policy, what tools that
// declare nothing do, and how long a run's outcomes are kept. Its JSON form
// (in a Checkpoint) uses the TOML names.
type Runner struct {
	// MaxConcurrentTools bounds the turn lane: executions of one batch at
	// once. 0 means DefaultMaxConcurrentTools.
	MaxConcurrentTools int `json:"max_concurrent_tools,omitempty"`
	// PerTool bounds each named tool across every run sharing the lanes.
	PerTool map[string]int `json:"per_tool,omitempty"`
	// PerTenant bounds one tenant across all its runs; 0 is unbounded.
	PerTenant int `json:"per_tenant,omitempty"`
	// Sequential runs one call at a time, in order, safe or not: TOML's
	// parallel_tool_calls = false. By default consecutive safe calls run
	// together (rule 3).
	Sequential  bool   `json:"sequential,omitempty"`
	OnToolError Policy `json:"on_tool_error"`
	// Unmarked says whether the calls of a tool that declares nothing
	// about itself are barriers (the default) or run with the others.
	Unmarked Unmarked `json:"unmarked"`
	// Retention is how long the outcomes of a run are kept by run id and
	// call id, so that a run restarted with the same id does not run a
	// finished call again (rule 7): 0 means DefaultRetention; at most
	// lanes.MaxRetention. In JSON, nanoseconds.
	Retention time.Duration `json:"retention,omitempty"`
}

// DefaultRetention is how long a run's outcomes are kept when
// Runner.Retention is 0.
const DefaultRetention = 24 * time.Hour

func (r Runner) retention() time.Duration {
	if r.Retention <= 0 {
		return DefaultRetention
	}
	return r.Retention
}

// DefaultRunner is the Runner a TOML configuration starts from, the same
// as the zero Runner: parallel calls, a turn lane of
// DefaultMaxConcurrentTools, failures surfaced.
func DefaultRunner() Runner {
	return Runner{MaxConcurrentTools: DefaultMaxConcurrentTools}
}

func (r Runner) turn() int {
	if r.MaxConcurrentTools <= 0 {
		return DefaultMaxConcurrentTools
	}
	return r.MaxConcurrentTools
}

// NarrowedTo returns r narrowed by o, as an agent narrows its runner: the
// smaller of each limit (where 0 means unbounded for PerTool and PerTenant),
// sequential if either is, and FailRun if either asks for it; Unmarked and
// Retention stay r's. It never widens r.
//
// A run narrowed this way takes its narrower PerTenant and PerTool limits
// as lanes of its own, beside the shared ones, which keep r's limits
// (DESIGN.md section 5): narrowing bounds that run alone and never changes
// the limit recorded on a shared lane.
func (r Runner) NarrowedTo(o Runner) Runner {
	out := Runner{
		MaxConcurrentTools: min(r.turn(), o.turn()),
		PerTenant:          minBound(r.PerTenant, o.PerTenant),
		Sequential:         r.Sequential || o.Sequential,
		OnToolError:        max(r.OnToolError, o.OnToolError),
		Unmarked:           r.Unmarked,
		Retention:          r.Retention,
	}
	if len(r.PerTool)+len(o.PerTool) > 0 {
		out.PerTool = map[string]int{}
		for k, v := range r.PerTool {
			out.PerTool[k] = v
		}
		for k, v := range o.PerTool {
			out.PerTool[k] = minBound(out.PerTool[k], v)
		}
	}
	return out
}

// minBound is the smaller of two limits where 0 means unbounded.
func minBound(a, b int) int {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	default:
		return min(a, b)
	}
}

// Config is the runner's settings and its tools, by the name the model calls
// them.
type Config struct {
	Runner Runner
	Tools  map[string]Tool
}

// Validate checks c and names the tools involved in each problem: one limit
// per concurrency key across every declared tool, enabled or not (RFD 129);
// fan_out.on_error = "stop" only with a limit of at least 1; no negative
// limit or timeout; a body for every enabled tool. The error wraps ErrConfig
// and lists every problem on one line, separated by semicolons.
func (c Config) Validate() error {
	var problems []string
	add := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }

	names := make([]string, 0, len(c.Tools))
	for n := range c.Tools {
		names = append(names, n)
	}
	sort.Strings(names)

	claims := map[string][]claim[int]{}
	rates := map[string][]claim[lanes.Rate]{}
	for _, n := range names {
		t := c.Tools[n]
		if n == "*" {
			add(`tool "*": a default for every tool is not supported; whether a tool's calls conflict depends on what it does (RFD 129), so declare each tool`)
			continue
		}
		if err := lanes.ValidateEntryID(n); err != nil || len(n) > lanes.MaxFieldLen {
			add("tool name %.60q must be 1 to %d printable bytes without spaces", n, lanes.MaxFieldLen)
			continue
		}
		switch {
		case t.Concurrency.Limit < 0:
			add("tool %s: concurrency limit %d is negative", n, t.Concurrency.Limit)
		case t.Concurrency.Limit > lanes.MaxLimit:
			add("tool %s: concurrency limit %d is above %d", n, t.Concurrency.Limit, lanes.MaxLimit)
		}
		if k, limit := t.Concurrency.key(n); k != "" {
			if err := lanes.ValidateKey("concurrency:" + k); err != nil {
				add("tool %s: concurrency key %q: %v", n, k, err)
			}
			claims[k] = append(claims[k], claim[int]{n, limit})
		} else if t.Concurrency.Key != "" {
			// {key = "x", limit = 0}: accepted, limits nothing, and still
			// must agree with the other tools naming x.
			claims[t.Concurrency.Key] = append(claims[t.Concurrency.Key], claim[int]{n, 0})
		}
		claims, rates = t.rateClaims(n, claims, rates, add)
		if t.Timeout < 0 {
			add("tool %s: timeout %v is negative", n, t.Timeout)
		}
		if _, limit := t.Concurrency.key(n); t.FanOut != nil && t.FanOut.OnError == Stop && limit < 1 {
			add("tool %s: fan_out.on_error = \"stop\" needs a concurrency limit of at least 1 (unbounded operations all start at once)", n)
		}
		if !t.Disabled && t.Run == nil {
			add("tool %s: no command or body to run", n)
		}
	}
	agree(claims, "concurrency key %q has different limits: %s", limitWords, add)
	agree(rates, "key %q has different rates: %s", rateWords, add)
	r := c.Runner
	if r.Retention < 0 || r.Retention > lanes.MaxRetention || (r.Retention > 0 && r.Retention < time.Millisecond) {
		add("runner: retention %v is out of range 1ms..%v (0: %v)", r.Retention, lanes.MaxRetention, DefaultRetention)
	}
	if r.Unmarked != UnmarkedBarrier && r.Unmarked != UnmarkedParallel {
		add("runner: unmarked %d is neither barrier nor parallel", int(r.Unmarked))
	}
	if r.MaxConcurrentTools < 0 {
		add("runner: max_concurrent_tools %d is negative", r.MaxConcurrentTools)
	}
	if r.PerTenant < 0 || r.PerTenant > lanes.MaxLimit {
		add("runner: per_tenant %d is out of range 0..%d", r.PerTenant, lanes.MaxLimit)
	}
	if r.MaxConcurrentTools > lanes.MaxLimit {
		add("runner: max_concurrent_tools %d is above %d", r.MaxConcurrentTools, lanes.MaxLimit)
	}
	tools := make([]string, 0, len(r.PerTool))
	for n := range r.PerTool {
		tools = append(tools, n)
	}
	sort.Strings(tools)
	for _, n := range tools {
		if r.PerTool[n] < 0 || r.PerTool[n] > lanes.MaxLimit {
			add("runner: per_tool.%s = %d is out of range 0..%d", n, r.PerTool[n], lanes.MaxLimit)
		}
		if _, ok := c.Tools[n]; !ok {
			add("runner: per_tool names %s, which is not a declared tool", n)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrConfig, strings.Join(problems, "; "))
	}
	return nil
}
