package sched

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// Code names why an Outcome is not OK, in a word that stays the same from
// release to release (`lanectl batch --json` prints it as "code"). The
// names follow the seeds' (TOOL_LOCK_CYCLE, TOOL_INDETERMINATE...).
type Code string

// The codes of an Outcome, by status.
const (
	// Failed: the call could not run.
	CodeBadCallID     Code = "TOOL_BAD_CALL_ID"      // empty, too long, repeated, or with a #
	CodeUnknownTool   Code = "TOOL_UNKNOWN"          // no tool of that name
	CodeDisabled      Code = "TOOL_DISABLED"         // the tool is declared but disabled
	CodeBadArguments  Code = "TOOL_BAD_ARGUMENTS"    // not JSON, too deep, or not an object
	CodeRewriteFailed Code = "TOOL_REWRITE_FAILED"   // Options.Rewrite returned an error
	CodeDeclined      Code = "TOOL_DECLINED"         // Options.Approve declined it
	CodeLockKeys      Code = "TOOL_LOCK_KEYS"        // could not tell what the call changes
	CodeCost          Code = "TOOL_COST"             // could not tell what the call costs of its rate (rate lanes)
	CodeLockCycle     Code = "TOOL_LOCK_CYCLE"       // it would close a wait-for cycle (lanes.ErrLockCycle)
	CodeLimitMismatch Code = "TOOL_LIMIT_MISMATCH"   // a lane is held with another limit (lanes.ErrLimitMismatch)
	CodeUnavailable   Code = "TOOL_UNAVAILABLE"      // the lanes could not be reached (lanes.ErrUnavailable)
	CodeLanes         Code = "TOOL_LANES_ERROR"      // the lanes refused it otherwise (an id conflict, a closed session...)
	CodeWaitTimeout   Code = "TOOL_WAIT_TIMEOUT"     // it waited for its lanes past Options.Wait, and never ran
	CodeRunConflict   Code = "TOOL_RUN_CONFLICT"     // the run's records hold this call id for another tool or other arguments
	CodeToolError     Code = "TOOL_ERROR"            // Failed: the tool ran and failed (or panicked)
	CodeTimeout       Code = "TOOL_TIMEOUT"          // TimedOut: it ran past its timeout
	CodeNeverStarted  Code = "TOOL_NEVER_DISPATCHED" // NeverDispatched: the batch stopped before it started
	CodeSafeToRetry   Code = "TOOL_SAFE_TO_RETRY"    // SafeToRetry: cut off in flight; the tool is idempotent
	CodeIndeterminate Code = "TOOL_INDETERMINATE"    // Indeterminate: cut off in flight; its effect may have landed
	CodeInterrupted   Code = "TOOL_INTERRUPTED"      // Interrupted: it asked a question, or the batch paused before it
	// CodeOutputNotStored marks an outcome read from the run's records
	// whose output was too large to keep there (lanes.MaxRecordLen): its
	// Status is what the call ended with, its Output is empty.
	CodeOutputNotStored Code = "TOOL_OUTPUT_NOT_STORED"
)

// errLockKeys marks the error of a LockKeysFunc.
var errLockKeys = errors.New("could not tell what the call changes")

// codeOf returns the code of a call that failed before it started, from
// the error that stopped it.
func codeOf(err error) Code {
	switch {
	case errors.Is(err, errLockKeys):
		return CodeLockKeys
	case errors.Is(err, errCost):
		return CodeCost
	case errors.Is(err, lanes.ErrLockCycle):
		return CodeLockCycle
	case errors.Is(err, lanes.ErrLimitMismatch):
		return CodeLimitMismatch
	case errors.Is(err, lanes.ErrUnavailable):
		return CodeUnavailable
	case errors.Is(err, errWaitTimeout):
		return CodeWaitTimeout
	default:
		return CodeLanes
	}
}

// outcomeJSON is the JSON form of an Outcome.
type outcomeJSON struct {
	CallID     string            `json:"call_id"`
	Tool       string            `json:"tool"`
	Status     Status            `json:"status"`
	Code       Code              `json:"code,omitempty"`
	Output     string            `json:"output,omitempty"`
	Error      *string           `json:"error,omitempty"`
	QueuedNS   int64             `json:"queued_ns,omitempty"`
	RanNS      int64             `json:"ran_ns,omitempty"`
	Tokens     map[string]uint64 `json:"tokens,omitempty"`
	Operations []Outcome         `json:"operations,omitempty"`
	Stored     bool              `json:"stored,omitempty"`
}

// MarshalJSON writes o as {"call_id", "tool", "status", "code", "output",
// "error", "queued_ns", "ran_ns", "tokens", "operations", "stored"}, Err as
// its message. Output that is not valid UTF-8 is written with U+FFFD in
// place of the bad bytes, as encoding/json does.
func (o Outcome) MarshalJSON() ([]byte, error) {
	v := outcomeJSON{
		CallID: o.CallID, Tool: o.Tool, Status: o.Status, Code: o.Code, Output: o.Output,
		QueuedNS: int64(o.Queued), RanNS: int64(o.Ran), Tokens: o.Tokens, Operations: o.Operations, Stored: o.Stored,
	}
	if o.Err != nil {
		msg := o.Err.Error()
		v.Error = &msg
	}
	return json.Marshal(v)
}

// UnmarshalJSON reads what MarshalJSON wrote. Err, when there was one, is
// an error with the same message (its chain is not kept).
func (o *Outcome) UnmarshalJSON(b []byte) error {
	var v outcomeJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*o = Outcome{
		CallID: v.CallID, Tool: v.Tool, Status: v.Status, Code: v.Code, Output: v.Output,
		Queued: time.Duration(v.QueuedNS), Ran: time.Duration(v.RanNS), Tokens: v.Tokens, Operations: v.Operations, Stored: v.Stored,
	}
	if v.Error != nil {
		o.Err = errors.New(*v.Error)
	}
	return nil
}

// callJSON is the JSON form of a Call.
type callJSON struct {
	ID       string          `json:"id"`
	Tool     string          `json:"tool"`
	Args     json.RawMessage `json:"args,omitempty"`
	ArgsText *string         `json:"args_text,omitempty"`
}

// MarshalJSON writes c as {"id", "tool", "args"}; arguments that are not
// valid JSON (the model's text, which fails the call) go as the string
// "args_text" instead, so that every Call can be written.
func (c Call) MarshalJSON() ([]byte, error) {
	v := callJSON{ID: c.ID, Tool: c.Tool}
	if json.Valid(c.Args) {
		v.Args = c.Args
	} else {
		text := string(c.Args)
		v.ArgsText = &text
	}
	return json.Marshal(v)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (c *Call) UnmarshalJSON(b []byte) error {
	var v callJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*c = Call{ID: v.ID, Tool: v.Tool, Args: v.Args}
	if v.ArgsText != nil {
		if v.Args != nil {
			return fmt.Errorf("call %s has both args and args_text", v.ID)
		}
		c.Args = json.RawMessage(*v.ArgsText)
	}
	return nil
}
