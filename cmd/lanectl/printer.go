package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/lanes-dev/lanes/lanes"
)

// printer writes what a command reports, as a table for people or as JSON
// for scripts (--json), to one io.Writer.
type printer interface {
	Status(statusView) error
	Keys(keysView) error
	Release(releaseView) error
}

func newPrinter(w io.Writer, asJSON bool) printer {
	if asJSON {
		return jsonPrinter{w}
	}
	return tablePrinter{w}
}

// jsonPrinter writes each view as one indented JSON document.
type jsonPrinter struct{ w io.Writer }

func (p jsonPrinter) Status(v statusView) error   { return p.write(v) }
func (p jsonPrinter) Keys(v keysView) error       { return p.write(v) }
func (p jsonPrinter) Release(v releaseView) error { return p.write(v) }

func (p jsonPrinter) write(v any) error {
	enc := json.NewEncoder(p.w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // keys, ids and commands keep their <, > and &
	return enc.Encode(v)
}

// tablePrinter writes aligned tables with human durations.
type tablePrinter struct{ w io.Writer }

func (p tablePrinter) Status(v statusView) error {
	if _, err := fmt.Fprintf(p.w, "namespace %s on %s\n", v.Namespace, v.Server); err != nil {
		return err
	}
	if err := writeLines(p.w, resetLines(v.Reset, v.FrozenMS)...); err != nil {
		return err
	}
	if len(v.Keys) == 0 {
		line := "no holders or waiters"
		if v.noLanesLine != "" {
			line = v.noLanesLine
		}
		_, err := fmt.Fprintln(p.w, line)
		return err
	}
	if err := writeStatusTable(p.w, v); err != nil {
		return err
	}
	return writeLines(p.w, v.idleLine, overdueLine(v.Overdue))
}

// writeLines writes each line that is not "".
func writeLines(w io.Writer, lines ...string) error {
	for _, l := range lines {
		if l == "" {
			continue
		}
		if _, err := fmt.Fprintln(w, l); err != nil {
			return err
		}
	}
	return nil
}

// statusColumns says which of the optional columns a status table shows:
// COMMAND when an entry was made by `lanectl lock`, TOOL and CALL ID when
// another entry was.
func statusColumns(v statusView) (command, call bool) {
	for _, k := range v.Keys {
		for _, h := range k.Holders {
			command, call = command || h.Tool == lockTool, call || h.Tool != lockTool
		}
		for _, w := range k.Waiters {
			command, call = command || w.Tool == lockTool, call || w.Tool != lockTool
		}
	}
	return command, call
}

// writeStatusTable writes v as an aligned table: a header line, then for
// each key its holders and then its waiters, one line each. An entry of
// `lanectl lock` shows its command in a COMMAND column in place of a tool
// and a call id; each of those columns is there only when a row fills it.
func writeStatusTable(out io.Writer, v statusView) error {
	command, call := statusColumns(v)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	row := func(cells ...string) {
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	// what returns the optional cells of one entry.
	what := func(tool, callID, cmd string) []string {
		var cells []string
		if command {
			cells = append(cells, cell(cmd))
		}
		if call {
			if tool == lockTool {
				tool, callID = "", ""
			}
			cells = append(cells, cell(tool), cell(callID))
		}
		return cells
	}
	entries := 0
	for _, k := range v.Keys {
		entries += len(k.Holders) + len(k.Waiters)
	}
	if entries == 0 { // only rate keys whose windows still count units
		if _, err := fmt.Fprintln(out, "no holders or waiters"); err != nil {
			return err
		}
		return writeRateTable(out, v)
	}
	header := []string{"KEY", "LIMIT", "STATE", "ENTRY", "TOKEN", "POS", "OWNER"}
	if command {
		header = append(header, "COMMAND")
	}
	if call {
		header = append(header, "TOOL", "CALL ID")
	}
	row(append(header, "TENANT", "FOR", "LEASE LEFT")...)
	for _, k := range v.Keys {
		key, limit := ident(k.Key), strconv.Itoa(k.Limit)
		if k.Rate != nil && k.Limit == lanes.MaxLimit {
			limit = "-" // bounded by its rate alone
		}
		for _, h := range k.Holders {
			state := "held"
			if h.Ended {
				state = "ended"
			}
			cells := []string{key, limit, state, ident(h.Entry), strconv.FormatUint(h.Token, 10), "-", owner(h.Host, h.PID)}
			cells = append(cells, what(h.Tool, h.CallID, h.Command)...)
			row(append(cells, cell(h.Tenant), ms(h.HeldMS), ms(h.LeaseLeftMS))...)
		}
		for _, w := range k.Waiters {
			cells := []string{key, limit, "waiting", ident(w.Entry), "-", strconv.Itoa(w.Position), owner(w.Host, w.PID)}
			cells = append(cells, what(w.Tool, w.CallID, w.Command)...)
			row(append(cells, cell(w.Tenant), ms(w.WaitingMS), "-")...)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeRateTable(out, v)
}

// writeRateTable writes, after a blank line, one line per rate key: its
// rate, the units spent in the window, when the next units leave it
// ("now" while some are free and nobody waits), and how many wait. Nothing when no key has
// a rate.
func writeRateTable(out io.Writer, v statusView) error {
	var tw *tabwriter.Writer
	for _, k := range v.Keys {
		if k.Rate == nil {
			continue
		}
		if tw == nil {
			fmt.Fprintln(out)
			tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "RATE KEY\tRATE\tSPENT\tNEXT FREE IN\tWAITERS")
		}
		// "now" only while units are free and nobody waits: a waiter
		// whose cost is more than the free units waits for the oldest
		// units to leave.
		next := "now"
		if (k.Rate.Spent >= k.Rate.Limit || len(k.Waiters) > 0) && k.Rate.NextFreeMS > 0 {
			next = ms(k.Rate.NextFreeMS)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\t%d\n", ident(k.Key), k.Rate.Rate, k.Rate.Spent, k.Rate.Limit, next, len(k.Waiters))
	}
	if tw == nil {
		return nil
	}
	return tw.Flush()
}

func (p tablePrinter) Keys(v keysView) error {
	if _, err := fmt.Fprintf(p.w, "namespace %s on %s\n", v.Namespace, v.Server); err != nil {
		return err
	}
	if err := writeLines(p.w, resetLines(v.Reset, v.FrozenMS)...); err != nil {
		return err
	}
	if len(v.Keys) == 0 {
		line := "no holders or waiters"
		if v.noLanesLine != "" {
			line = v.noLanesLine
		}
		_, err := fmt.Fprintln(p.w, line)
		return err
	}
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tLIMIT\tHOLDERS\tWAITERS")
	for _, k := range v.Keys {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", ident(k.Key), k.Limit, k.Holders, k.Waiters)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeLines(p.w, overdueLine(v.Overdue))
}

func (p tablePrinter) Release(v releaseView) error {
	for _, r := range v.Released {
		var err error
		keys := strings.Join(r.Keys, ", ")
		switch {
		case r.Was == "held" && r.Kept:
			who := ""
			if len(r.Borrowers) > 0 {
				who = " (" + strings.Join(r.Borrowers, ", ") + ")"
			}
			_, err = fmt.Fprintf(p.w, "ended %s (holder of %s): it keeps its slot until the leases borrowed from it end%s; they were told to stop\n", r.Entry, keys, who)
		case r.Was == "held" && r.Revoked:
			_, err = fmt.Fprintf(p.w, "released %s (holder of %s whose lease was revoked when the lease it borrowed from ended; it was told to stop and may still be finishing)\n", r.Entry, keys)
		case r.Was == "held" && r.Ended:
			_, err = fmt.Fprintf(p.w, "released %s (holder of %s whose lease had ended, kept for leases borrowed from it; they were told to stop and may still be finishing)\n", r.Entry, keys)
		case r.Was == "held" && keys != "":
			_, err = fmt.Fprintf(p.w, "released %s (holder of %s)\n", r.Entry, keys)
		case r.Was == "held":
			_, err = fmt.Fprintf(p.w, "released %s\n", r.Entry)
		case r.Was == "waiting" && keys != "":
			_, err = fmt.Fprintf(p.w, "removed waiter %s (queued on %s)\n", r.Entry, keys)
		case r.Was == "waiting":
			_, err = fmt.Fprintf(p.w, "removed waiter %s\n", r.Entry)
		default:
			// Not found: said once, on stderr, with the exit status.
		}
		if err == nil && len(r.withNested) > 0 {
			_, err = fmt.Fprintf(p.w, "released with %s: %s (nested under it)\n", r.Entry, strings.Join(r.withNested, ", "))
		}
		if err == nil && len(r.withLenders) > 0 {
			_, err = fmt.Fprintf(p.w, "released with %s: %s (the entry it was nested under, kept for it)\n", r.Entry, strings.Join(r.withLenders, ", "))
		}
		if err != nil {
			return err
		}
	}
	for _, g := range v.Next {
		if _, err := fmt.Fprintf(p.w, "granted next: %s\n", g); err != nil {
			return err
		}
	}
	return nil
}

// maxCell bounds a table cell, so one long call id keeps the table readable.
const maxCell = 40

// cell makes s fit one table cell: no tabs or line breaks, at most maxCell
// runes, "-" when empty.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return clean(s, maxCell)
}

// ident makes a lane key or an entry id fit a table cell without cutting
// it: a user copies it into other commands (release, lock --id), and two
// long keys that differ at the end must not print alike. Keys and ids hold
// no control characters; what clean replaces is for a damaged record.
func ident(s string) string {
	if s == "" {
		return "-"
	}
	return clean(s, lanes.MaxKeyLen)
}

// clean is s on one line, safe for a terminal (every space, control and
// format character a space: U+202E would reverse the line), cut to at
// most max runes with "…".
func clean(s string, max int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return ' '
		}
		return r
	}, s)
	if r := []rune(s); len(r) > max {
		s = string(r[:max-1]) + "…"
	}
	return s
}

func owner(host string, pid int) string {
	if host == "" {
		host = "?"
	}
	return host + ":" + strconv.Itoa(pid)
}

func ms(n int64) string { return humanDuration(time.Duration(n) * time.Millisecond) }

// humanDuration writes d for people: 350ms, 1.2s, 3m4s, 2h5m.
func humanDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(float64(d.Truncate(100*time.Millisecond))/float64(time.Second), 'f', -1, 64) + "s"
	case d < time.Hour:
		d = d.Truncate(time.Second)
		return fmt.Sprintf("%dm%ds", d/time.Minute, (d%time.Minute)/time.Second)
	default:
		d = d.Truncate(time.Minute)
		return fmt.Sprintf("%dh%dm", d/time.Hour, (d%time.Hour)/time.Minute)
	}
}

// resetLines are the lines status, keys and watch print after their first
// when the look itself reset the namespace (Snapshot.Reset) and while a
// reset holds grants back (frozenMS above 0): none otherwise.
func resetLines(reset bool, frozenMS int64) []string {
	var lines []string
	if reset {
		lines = append(lines, "reset now: this read found part of the namespace's state lost and reset it, ending every lease and waiter it had (lanectl doctor tells more)")
	}
	if frozenMS > 0 {
		lines = append(lines, fmt.Sprintf("no grants for %s: the namespace's state was lost and reset; leases granted before may still run", ms(frozenMS)))
	}
	return lines
}
