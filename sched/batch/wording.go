package batch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/lanes-dev/lanes/sched"
)

// Wording is what a reply (Response.Reply) tells the model of a call that
// did not end ok, or ended ok without an output to give: one template per
// case, keyed in TOML by the name in its comment (the [reply] table of a
// tools file). A template may hold the placeholders {tool} (the tool's
// name), {error} (why, as the outcome says it), {code} (the outcome's
// Code, such as TOOL_TIMEOUT) and {output} (what the call wrote before it
// ended). When a call that did not end ok wrote something and its template
// has no {output}, the output follows the text after a blank line. Braces
// around anything else are kept as written.
type Wording struct {
	Error           string // error: the call failed, or could not run
	TimedOut        string // timed_out: it ran past its timeout and was stopped
	NeverDispatched string // never_dispatched: not run (the batch stopped first, or a call batch cannot run)
	SafeToRetry     string // safe_to_retry: cut off in flight; the tool is idempotent
	Indeterminate   string // indeterminate: cut off in flight; its effect may have landed
	Interrupted     string // interrupted: the batch paused before it finished
	NoOutput        string // no_output: ok, with nothing written (Anthropic refuses an empty result)
	OutputNotStored string // output_not_stored: ok in an earlier run; its output was too large to keep
}

// DefaultWording returns the wording a reply uses unless the runner gives
// its own; the README's table shows it.
func DefaultWording() Wording {
	return Wording{
		Error:           "The call failed: {error}",
		TimedOut:        "The call ran past its time limit and was stopped: {error}. It may have taken effect in part: check before calling it again.",
		NeverDispatched: "Not run: {error}. Nothing was done; you may call it again.",
		SafeToRetry:     "Cut off before it finished: {error}. The tool is idempotent: it is safe to call it again.",
		Indeterminate:   "Cut off before it finished: {error}. It may have taken effect: check before calling it again.",
		Interrupted:     "Paused: {error}. Do not call it again until the run resumes.",
		NoOutput:        "The call succeeded and wrote no output.",
		OutputNotStored: "The call succeeded in an earlier attempt, but its output was too large to keep and is lost. Call it again only if repeating it is safe.",
	}
}

// wordingKeys names each template of a Wording by its TOML key, in the
// order the README's table lists them.
var wordingKeys = []struct {
	key   string
	field func(*Wording) *string
}{
	{"error", func(w *Wording) *string { return &w.Error }},
	{"timed_out", func(w *Wording) *string { return &w.TimedOut }},
	{"never_dispatched", func(w *Wording) *string { return &w.NeverDispatched }},
	{"safe_to_retry", func(w *Wording) *string { return &w.SafeToRetry }},
	{"indeterminate", func(w *Wording) *string { return &w.Indeterminate }},
	{"interrupted", func(w *Wording) *string { return &w.Interrupted }},
	{"no_output", func(w *Wording) *string { return &w.NoOutput }},
	{"output_not_stored", func(w *Wording) *string { return &w.OutputNotStored }},
}

// placeholder matches what a template may mean as a placeholder.
var placeholder = regexp.MustCompile(`\{[A-Za-z_][A-Za-z0-9_]*\}`)

// Validate reports the first template that is empty (Anthropic refuses an
// empty tool result) or names a placeholder other than {tool}, {error},
// {code} and {output}, by its TOML key.
func (w Wording) Validate() error {
	for _, k := range wordingKeys {
		if err := checkTemplate(*k.field(&w)); err != nil {
			return fmt.Errorf("reply.%s: %v", k.key, err)
		}
	}
	return nil
}

func checkTemplate(s string) error {
	if strings.TrimSpace(s) == "" {
		return fmt.Errorf("is empty; the model needs a text (leave the key out for the default)")
	}
	for _, p := range placeholder.FindAllString(s, -1) {
		switch p {
		case "{tool}", "{error}", "{code}", "{output}":
		default:
			return fmt.Errorf("unknown placeholder %s (known: {tool}, {error}, {code}, {output})", p)
		}
	}
	return nil
}

// Text returns what the model receives for o: the output of a call that
// ended ok, or the template of its case filled in, and whether it tells of
// an error (every status but ok). A fanned-out call that did not end ok
// also lists its operations' statuses. An empty Status reads as
// never_dispatched.
func (w Wording) Text(o sched.Outcome) (text string, isError bool) {
	switch {
	case o.Status == sched.OK && o.Code == sched.CodeOutputNotStored:
		return fill(w.OutputNotStored, o), false
	case o.Status == sched.OK && o.Output == "":
		return fill(w.NoOutput, o), false
	case o.Status == sched.OK:
		return o.Output, false
	}
	var tpl string
	switch o.Status {
	case sched.TimedOut:
		tpl = w.TimedOut
	case sched.NeverDispatched, "":
		tpl = w.NeverDispatched
	case sched.SafeToRetry:
		tpl = w.SafeToRetry
	case sched.Indeterminate:
		tpl = w.Indeterminate
	case sched.Interrupted:
		tpl = w.Interrupted
	default:
		tpl = w.Error
	}
	text = fill(tpl, o)
	if len(o.Operations) > 0 {
		text += "\n\nOperations, in written order:"
		for i, op := range o.Operations {
			text += fmt.Sprintf("\n#%d %s", i, statusOf(op))
			if op.Status != sched.OK {
				text += ": " + why(op)
			}
		}
	}
	if o.Output != "" && !strings.Contains(tpl, "{output}") {
		text += "\n\n" + o.Output
	}
	return text, true
}

// fill puts o's fields in place of tpl's placeholders, in one pass: what
// it puts in is not read again.
func fill(tpl string, o sched.Outcome) string {
	return strings.NewReplacer("{tool}", o.Tool, "{error}", why(o), "{code}", string(o.Code), "{output}", o.Output).Replace(tpl)
}

// why is the reason an outcome gives, "not run" when it gives none.
func why(o sched.Outcome) string {
	if o.Err != nil {
		if msg := strings.TrimSpace(o.Err.Error()); msg != "" {
			return msg
		}
	}
	if o.Status == sched.OK {
		return ""
	}
	return "not run"
}

func statusOf(o sched.Outcome) sched.Status {
	if o.Status == "" {
		return sched.NeverDispatched
	}
	return o.Status
}

// reply decodes the [reply] table of a tools file over the defaults.
func (p *parser) reply(v toml.Primitive) Wording {
	w := DefaultWording()
	k := toml.Key{"reply"}
	var texts map[string]toml.Primitive
	if !p.table(k, v, &texts) {
		return w
	}
	for _, wk := range wordingKeys {
		f := at(k, wk.key)
		pv, ok := texts[wk.key]
		if !ok {
			continue
		}
		s, ok := p.string(f, pv)
		if !ok {
			continue
		}
		if err := checkTemplate(s); err != nil {
			p.fail(f, "%v", err)
			continue
		}
		*wk.field(&w) = s
	}
	return w
}

// replyKeys are the keys of [reply], spelled exactly.
func replyKeys() []string {
	out := make([]string, len(wordingKeys))
	for i, k := range wordingKeys {
		out[i] = k.key
	}
	return out
}

// ParseWording returns the wording of the [reply] table of a tools file
// (see the package documentation), each key it leaves out at its default
// (DefaultWording). Its error is one line naming the key, as
// ParseConfig's; ParseConfig checks the same table.
func ParseWording(data []byte) (Wording, error) {
	var f struct {
		Reply toml.Primitive `toml:"reply"`
	}
	md, err := toml.Decode(string(data), &f)
	if err != nil {
		return Wording{}, &ConfigError{Problems: []string{oneLine(err.Error())}, err: err}
	}
	p := &parser{md: md}
	w := DefaultWording()
	if p.has(toml.Key{"reply"}) {
		w = p.reply(f.Reply)
	}
	if len(p.problems) > 0 {
		return Wording{}, &ConfigError{Problems: p.problems}
	}
	return w, nil
}

// LoadWording reads the [reply] table of the tools file at path, as
// ParseWording. Its error is one line that starts with path.
func LoadWording(path string) (Wording, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return Wording{}, fmt.Errorf("cannot read %s: %w", path, err)
	}
	w, err := ParseWording(data)
	if ce, ok := err.(*ConfigError); ok {
		ce.File = path
	}
	return w, err
}
