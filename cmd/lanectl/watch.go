package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lanes-dev/lanes/lanes"
)

// watchOptions are the flags and arguments of `lanectl watch`.
type watchOptions struct {
	global   *globalOptions
	open     opener
	keys     []string
	interval time.Duration
	expiring time.Duration
	old      time.Duration
	metrics  metricsOptions
}

// minWatchInterval bounds how often watch runs inspect.lua.
const minWatchInterval = 10 * time.Millisecond

func newWatchCommand(o *watchOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "watch [KEY...] [--interval D] [--expiring D] [--old D] [--json]",
		Short: "Follow holders and waiters live, until interrupted",
		Long: `watch shows what status shows (every key that has holders or waiters, or the
keys named) and keeps it up to date, looking every --interval, until SIGINT
or SIGTERM; then it exits 0.

On a terminal it redraws the table in place, leases with less than
--expiring left and waiters that have waited --old or longer in bold red.
Otherwise it prints a new table each time holders, waiters, positions or
tokens change (the moving times alone are no change), tables separated by a
blank line. With --json it prints one line per change: the JSON of
"lanectl status --json" plus "time", the Redis clock.

With --metrics-addr ADDR, watch also serves the namespace's metrics to
Prometheus at http://ADDR/metrics: holders, waiters and the longest wait per
class of key (tenant, tool, concurrency, file, lock, run, other), per key
only for the keys --metrics-key names (or $LANES_METRICS_KEYS), and the
counts of expired leases and evicted waiters; every series carries
lanes_namespace. When OTEL_METRICS_EXPORTER names an exporter, they go
there too.

If Redis cannot be reached at the start, watch exits 69 (77 if it refuses
the credentials). If it is lost later, watch says so (with --json, one
{"error": ...} line per outage) and keeps trying.`,
		Args: func(cmd *cobra.Command, args []string) error {
			for _, k := range args {
				if err := lanes.ValidateKey(k); err != nil {
					return usageErrorf("bad key: %v", err)
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case o.interval < minWatchInterval:
				return usageErrorf("--interval %v is under %v", o.interval, minWatchInterval)
			case o.expiring < 0:
				return usageErrorf("--expiring %v is negative", o.expiring)
			case o.old < 0:
				return usageErrorf("--old %v is negative", o.old)
			}
			o.keys = args
			return o.run(cmd)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.interval, "interval", 500*time.Millisecond, "how often to look")
	f.DurationVar(&o.expiring, "expiring", 2*time.Second, "highlight leases with less than this left")
	f.DurationVar(&o.old, "old", 30*time.Second, "highlight waiters that have waited this long or longer")
	f.StringVar(&o.metrics.addr, "metrics-addr", "", "serve the namespace's metrics to Prometheus at http://ADDR/metrics (e.g. :9464)")
	f.StringArrayVar(&o.metrics.keys, "metrics-key", nil, "report this key by name in the metrics, not only its class; a trailing * matches a prefix (default $"+metricsKeysEnv+", comma-separated)")
	return cmd
}

// watchFrame is what one look at Redis found: a view, or the error line
// that says why there is none.
type watchFrame struct {
	view statusView
	at   time.Time // the Redis clock; the local one for an error
	err  string    // one line, redacted; empty when view is good
}

// watchDisplay shows the frames of watch, each in its own way.
type watchDisplay interface {
	show(watchFrame) error
	close() error
}

func (o *watchOptions) run(cmd *cobra.Command) error {
	ctx := cmd.Context()
	b, closeBackend, err := o.open(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // interrupted while connecting: nothing to show
		}
		return err
	}
	defer closeBackend()
	stopMetrics, err := o.serveMetrics(ctx, b, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer stopMetrics()

	out := cmd.OutOrStdout()
	var d watchDisplay
	switch {
	case o.global.json:
		d = &jsonWatch{w: out}
	case o.global.tty(out):
		d = &termWatch{w: out, o: o, size: func() (int, int, bool) { return terminalSize(out) }}
	default:
		d = &plainWatch{w: out, ns: o.global.namespace}
	}
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	for first := true; ctx.Err() == nil; first = false {
		f, err := o.look(ctx, b)
		if ctx.Err() != nil {
			break
		}
		if err != nil && first {
			return err // as status would: 69, or 77 for a refusal
		}
		if err := d.show(f); err != nil {
			return err
		}
		if readerGone(out) {
			break // nobody reads any more: done, as after SIGPIPE
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	return d.close()
}

// look takes one snapshot. On an error it returns the frame that says it,
// and the error.
func (o *watchOptions) look(ctx context.Context, b lanes.Backend) (watchFrame, error) {
	ictx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	snap, err := o.global.snapshot(ictx, b, o.keys)
	if err != nil {
		return watchFrame{at: time.Now(), err: errorLine(err, o.global.redisURL)}, err
	}
	v := newStatusView(snap)
	v.noteIdle(o.keys)
	return watchFrame{view: v, at: snap.Time}, nil
}

// watchSignature is what a change is made of: keys, limits, and each
// holder's and waiter's entry, owner, call, token or position, whether a
// holder's lease ended, whether grants are frozen, how many entries shown
// are overdue. The times that move on every look are left out.
func watchSignature(v statusView) string {
	var b strings.Builder
	fmt.Fprintf(&b, "frozen %v reset %v overdue %d\n", v.FrozenMS > 0, v.Reset, v.Overdue)
	for _, k := range v.Keys {
		fmt.Fprintf(&b, "k %q %d\n", k.Key, k.Limit)
		for _, h := range k.Holders {
			fmt.Fprintf(&b, "h %q %d %q %d %q %q %q %v\n", h.Entry, h.Token, h.Host, h.PID, h.Tool, h.CallID, h.Tenant, h.Ended)
		}
		for _, w := range k.Waiters {
			fmt.Fprintf(&b, "w %q %d %q %d %q %q %q\n", w.Entry, w.Position, w.Host, w.PID, w.Tool, w.CallID, w.Tenant)
		}
	}
	return b.String()
}

// changes tracks what a display printed last, to print only changes: a
// new view after an outage counts as one.
type changes struct {
	started bool
	outage  bool
	last    string
}

// view reports whether v is worth printing, and notes it as printed.
func (c *changes) view(v statusView) bool {
	sig := watchSignature(v)
	if c.started && !c.outage && sig == c.last {
		return false
	}
	c.started, c.outage, c.last = true, false, sig
	return true
}

// failure reports whether an error starts an outage, and notes it.
func (c *changes) failure() bool {
	if c.outage {
		return false
	}
	c.started, c.outage = true, true
	return true
}

// plainWatch prints a new table on each change, for a log or a pipe.
type plainWatch struct {
	w  io.Writer
	ns string
	changes
}

// plainTime stamps each table of plainWatch.
const plainTime = "2006-01-02T15:04:05.000Z07:00"

func (p *plainWatch) show(f watchFrame) error {
	var buf bytes.Buffer
	if p.started {
		buf.WriteByte('\n')
	}
	if f.err != "" {
		if !p.failure() {
			return nil
		}
		fmt.Fprintf(&buf, "%s  %s (retrying)\n", f.at.Local().Format(plainTime), f.err)
	} else {
		if !p.view(f.view) {
			return nil
		}
		fmt.Fprintf(&buf, "%s  namespace %s  %s\n", f.at.Local().Format(plainTime), f.view.Namespace, counts(f.view))
		_ = writeLines(&buf, resetLines(f.view.Reset, f.view.FrozenMS)...) // a bytes.Buffer does not fail
		if len(f.view.Keys) > 0 {
			if err := writeStatusTable(&buf, f.view); err != nil {
				return err
			}
			_ = writeLines(&buf, f.view.idleLine, overdueLine(f.view.Overdue)) // a bytes.Buffer does not fail
		}
	}
	_, err := p.w.Write(buf.Bytes())
	return err
}

func (p *plainWatch) close() error { return nil }

// counts says how many keys v has, and how many entries hold or wait: an
// entry on several keys counts once.
func counts(v statusView) string {
	holders, waiters := map[string]bool{}, map[string]bool{}
	for _, k := range v.Keys {
		for _, h := range k.Holders {
			holders[h.Entry] = true
		}
		for _, w := range k.Waiters {
			waiters[w.Entry] = true
		}
	}
	if len(v.Keys) == 0 {
		return "no holders or waiters"
	}
	return fmt.Sprintf("%s, %s, %s", plural(len(v.Keys), "key"), plural(len(holders), "holder"), plural(len(waiters), "waiter"))
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// jsonWatch prints one JSON line per change: the status view plus "time",
// or {"time", "error"} once per outage.
type jsonWatch struct {
	w io.Writer
	changes
}

// watchJSON is one line of `watch --json`: the JSON of `status --json`
// with the Redis clock's time.
type watchJSON struct {
	Time string `json:"time"`
	statusView
}

// watchErrorJSON is the line `watch --json` prints when an outage starts.
type watchErrorJSON struct {
	Time  string `json:"time"`
	Error string `json:"error"`
}

func (j *jsonWatch) show(f watchFrame) error {
	var line any
	if f.err != "" {
		if !j.failure() {
			return nil
		}
		line = watchErrorJSON{Time: jsonTime(f.at), Error: strings.TrimPrefix(f.err, "lanectl: ")}
	} else {
		if !j.view(f.view) {
			return nil
		}
		line = watchJSON{Time: jsonTime(f.at), statusView: f.view}
	}
	b, err := json.Marshal(line)
	if err != nil {
		return err
	}
	_, err = j.w.Write(append(b, '\n'))
	return err
}

func (j *jsonWatch) close() error { return nil }

func jsonTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// The ANSI sequences of termWatch.
const (
	ansiHome       = "\x1b[H"
	ansiClear      = "\x1b[2J"
	ansiClearLine  = "\x1b[K" // to the end of the line
	ansiClearBelow = "\x1b[J"
	ansiHideCursor = "\x1b[?25l"
	ansiShowCursor = "\x1b[?25h"
	ansiHot        = "\x1b[1;31m" // bold red
	ansiReset      = "\x1b[0m"
)

// termWatch redraws one screen in place on every look: home, each line
// over the old one, then what is left below cleared; no blank screen in
// between, so no flicker.
type termWatch struct {
	w    io.Writer
	o    *watchOptions
	size func() (width, height int, ok bool)

	drawn    bool
	last     *watchFrame // the last good frame, shown under an error
	outSince time.Time   // when the current outage began
}

// screenLine is one line of a screen, and whether it is highlighted.
type screenLine struct {
	text string
	hot  bool
}

func (t *termWatch) show(f watchFrame) error {
	if f.err == "" {
		t.last, t.outSince = &f, time.Time{}
	} else if t.outSince.IsZero() {
		t.outSince = f.at
	}
	lines := t.screen(f)
	width, height, sized := t.size()
	if sized && len(lines) > height-1 {
		n := len(lines) - (height - 2)
		lines = append(lines[:max(height-2, 0)], screenLine{text: fmt.Sprintf("… %d more lines (make the terminal taller, or name the keys to watch)", n)})
	}
	var b strings.Builder
	if !t.drawn {
		b.WriteString(ansiHideCursor + ansiHome + ansiClear)
		t.drawn = true
	} else {
		b.WriteString(ansiHome)
	}
	for _, l := range lines {
		text := l.text
		if sized {
			text = clip(text, width)
		}
		if l.hot {
			text = ansiHot + text + ansiReset
		}
		b.WriteString(text + ansiClearLine + "\n")
	}
	b.WriteString(ansiClearBelow)
	_, err := io.WriteString(t.w, b.String())
	return err
}

// screen returns the lines of one screen: a title, the error if any, and
// the table of the last good frame, holders and waiters past the limits
// highlighted.
func (t *termWatch) screen(f watchFrame) []screenLine {
	o := t.o
	title := fmt.Sprintf("lanectl watch  namespace %s  %s  every %v  %s",
		o.global.namespace, redactURL(o.global.redisURL), o.interval, f.at.Local().Format("15:04:05"))
	lines := []screenLine{{text: title}}
	if f.err != "" {
		lines = append(lines, screenLine{text: fmt.Sprintf("%s (retrying since %s)", f.err, t.outSince.Local().Format("15:04:05")), hot: true})
	}
	if t.last == nil {
		return lines
	}
	v := t.last.view
	summary := counts(v)
	if f.err != "" {
		summary = "as last seen at " + t.last.at.Local().Format("15:04:05") + ": " + summary
	}
	lines = append(lines, screenLine{text: summary})
	for _, l := range resetLines(v.Reset, v.FrozenMS) {
		lines = append(lines, screenLine{text: l, hot: true})
	}
	lines = append(lines, screenLine{})
	if len(v.Keys) == 0 {
		return lines
	}
	var buf bytes.Buffer
	_ = writeStatusTable(&buf, v) // a bytes.Buffer does not fail
	rows := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	lines = append(lines, screenLine{text: rows[0]})
	i := 1
	for _, k := range v.Keys {
		for _, h := range k.Holders {
			lines = append(lines, screenLine{text: rows[i], hot: time.Duration(h.LeaseLeftMS)*time.Millisecond < o.expiring})
			i++
		}
		for _, w := range k.Waiters {
			lines = append(lines, screenLine{text: rows[i], hot: time.Duration(w.WaitingMS)*time.Millisecond >= o.old})
			i++
		}
	}
	for _, l := range []string{v.idleLine, overdueLine(v.Overdue)} {
		if l != "" {
			lines = append(lines, screenLine{text: l})
		}
	}
	lines = append(lines, screenLine{}, screenLine{text: fmt.Sprintf("bold red: lease left under %v, or waiting %v or longer", o.expiring, o.old)})
	return lines
}

// close shows the cursor again, under the last screen.
func (t *termWatch) close() error {
	if !t.drawn {
		return nil
	}
	_, err := io.WriteString(t.w, ansiShowCursor)
	return err
}

// clip cuts s to at most width runes.
func clip(s string, width int) string {
	if width <= 0 {
		return ""
	}
	n := 0
	for i := range s {
		if n == width {
			return s[:i]
		}
		n++
	}
	return s
}
