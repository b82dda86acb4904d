package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/creack/pty"

	"github.com/lanes-dev/lanes/lanes"
)

// inProcess is a lanectl run in this process, in the background, until
// its context is cancelled (as SIGINT cancels lanectl's).
type inProcess struct {
	stdout, stderr *syncBuffer
	cancel         context.CancelFunc
	done           chan int
}

// startInProcess runs lanectl with args in the background; t's end stops
// it if it still runs.
func startInProcess(t *testing.T, args ...string) *inProcess {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &inProcess{stdout: &syncBuffer{}, stderr: &syncBuffer{}, cancel: cancel, done: make(chan int, 1)}
	go func() { p.done <- run(ctx, nil, args, strings.NewReader(""), p.stdout, p.stderr, noEnv) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-p.done:
		case <-time.After(waitFor):
			t.Errorf("lanectl %q did not stop within %v of its context's end", args, waitFor)
		}
	})
	return p
}

// stop cancels p's context and returns its exit status.
func (p *inProcess) stop(t *testing.T) int {
	t.Helper()
	p.cancel()
	select {
	case code := <-p.done:
		p.done <- code // for the cleanup
		return code
	case <-time.After(waitFor):
		t.Fatalf("lanectl did not stop within %v of its context's end", waitFor)
		return -1
	}
}

// watchLine is one line of `watch --json`: the status view and its time.
type watchLine struct {
	Time string `json:"time"`
	statusView
}

// jsonLines returns the complete lines out has so far, parsed.
func jsonLines(t *testing.T, out string) []map[string]json.RawMessage {
	t.Helper()
	var lines []map[string]json.RawMessage
	for _, l := range strings.SplitAfter(out, "\n") {
		if !strings.HasSuffix(l, "\n") {
			break // still being written
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("watch --json printed %q, not a JSON line: %v", l, err)
		}
		lines = append(lines, m)
	}
	return lines
}

// views returns the status lines of a watch --json output, errors left out.
func views(t *testing.T, out string) []watchLine {
	t.Helper()
	var vs []watchLine
	for _, m := range jsonLines(t, out) {
		if _, ok := m["error"]; ok {
			continue
		}
		raw, _ := json.Marshal(m)
		var v watchLine
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	return vs
}

// holdersOf returns the entries that hold key in v, and those that wait
// for it, with their positions.
func holdersOf(v statusView, key string) (holders []string, waiters []string) {
	for _, k := range v.Keys {
		if k.Key != key {
			continue
		}
		for _, h := range k.Holders {
			holders = append(holders, h.Entry)
		}
		for _, w := range k.Waiters {
			waiters = append(waiters, w.Entry+"@"+strconv.Itoa(w.Position))
		}
	}
	return holders, waiters
}

// TestWatchJSON follows holders and waiters that come and go: one line per
// change, none for the times that move, each line the status JSON plus
// "time"; the end of the context ends watch with 0.
func TestWatchJSON(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		p := startInProcess(t, s.args("watch", "--json", "--interval", "20ms")...)
		last := func() watchLine {
			vs := views(t, p.stdout.String())
			if len(vs) == 0 {
				return watchLine{}
			}
			return vs[len(vs)-1]
		}
		eventually(t, "watch printed the empty namespace", func() bool { return len(views(t, p.stdout.String())) > 0 })
		if v := last(); v.Namespace != s.ns || len(v.Keys) != 0 || v.Time == "" {
			t.Fatalf("first line = %+v; want namespace %s, no keys, a time", v, s.ns)
		}

		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		sess := s.session(t)
		k1 := lanes.Lane{Key: "k1", Limit: 1}
		h1, err := sess.Acquire(ctx, lanes.Request{ID: "h1", Lanes: []lanes.Lane{k1}, Tool: "edit", CallID: "call-1", Tenant: "acme"})
		if err != nil {
			t.Fatalf("Acquire(h1) = %v", err)
		}
		eventually(t, "watch showed h1 holding k1", func() bool {
			hs, ws := holdersOf(last().statusView, "k1")
			return slices.Equal(hs, []string{"h1"}) && len(ws) == 0
		})
		v := last()
		if h := v.Keys[0].Holders[0]; h.Token != h1.Token("k1") || h.Host != "test-host" || h.PID != 4242 ||
			h.Tool != "edit" || h.CallID != "call-1" || h.Tenant != "acme" || h.LeaseLeftMS <= 0 {
			t.Errorf("holder = %+v; want h1 with token %d, test-host:4242, edit, call-1, acme, a lease left", h, h1.Token("k1"))
		}

		tickets, err := sess.Enqueue(ctx, lanes.Request{ID: "w1", Lanes: []lanes.Lane{k1}}, lanes.Request{ID: "w2", Lanes: []lanes.Lane{k1}})
		if err != nil {
			t.Fatalf("Enqueue(w1, w2) = %v", err)
		}
		eventually(t, "watch showed w1 and w2 waiting", func() bool {
			_, ws := holdersOf(last().statusView, "k1")
			return slices.Equal(ws, []string{"w1@1", "w2@2"})
		})
		if err := h1.Release(ctx); err != nil {
			t.Fatalf("Release(h1) = %v", err)
		}
		eventually(t, "watch showed w1 holding k1, w2 first in line", func() bool {
			hs, ws := holdersOf(last().statusView, "k1")
			return slices.Equal(hs, []string{"w1"}) && slices.Equal(ws, []string{"w2@1"})
		})
		for _, tk := range tickets {
			if err := tk.Cancel(ctx); err != nil {
				t.Fatalf("Cancel(%s) = %v", tk.ID(), err)
			}
		}
		eventually(t, "watch showed the namespace empty again", func() bool { return len(views(t, p.stdout.String())) > 1 && len(last().Keys) == 0 })

		if code := p.stop(t); code != 0 {
			t.Errorf("watch ended by its context = %d; want 0 (stderr %q)", code, p.stderr)
		}
		// Every line is a change: no two in a row show the same holders,
		// waiters, positions and tokens.
		vs := views(t, p.stdout.String())
		for i := 1; i < len(vs); i++ {
			if watchSignature(vs[i].statusView) == watchSignature(vs[i-1].statusView) {
				t.Errorf("lines %d and %d show the same state:\n%+v\n%+v", i, i+1, vs[i-1], vs[i])
			}
		}
		for _, m := range jsonLines(t, p.stdout.String()) {
			var fields []string
			for k := range m {
				fields = append(fields, k)
			}
			slices.Sort(fields)
			if !slices.Equal(fields, []string{"frozen_ms", "keys", "namespace", "reset", "time"}) {
				t.Errorf("line fields = %q; want frozen_ms, keys, namespace, reset, time", fields)
			}
			var ts string
			if err := json.Unmarshal(m["time"], &ts); err != nil {
				t.Errorf("time = %s: %v", m["time"], err)
			} else if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
				t.Errorf("time = %q: %v", ts, err)
			}
		}
		if p.stderr.String() != "" {
			t.Errorf("stderr = %q; want nothing", p.stderr)
		}
	})
}

// TestWatchJSONOutage: a server lost mid-run gives one {"error"} line per
// outage, without the password, and watch carries on once it is back.
func TestWatchJSONOutage(t *testing.T) {
	m := miniredis.RunT(t)
	const password = "s3cret-pw"
	m.RequireAuth(password)
	s := newServer(t, "miniredis", "redis://:"+password+"@"+m.Addr())
	p := startInProcess(t, s.args("watch", "--json", "--interval", "20ms")...)
	eventually(t, "watch printed its first line", func() bool { return len(jsonLines(t, p.stdout.String())) == 1 })

	m.Close()
	errorLines := func() int {
		n := 0
		for _, l := range jsonLines(t, p.stdout.String()) {
			if _, ok := l["error"]; ok {
				n++
			}
		}
		return n
	}
	eventually(t, "watch reported the outage", func() bool { return errorLines() == 1 })
	time.Sleep(20 * 20 * time.Millisecond) // twenty more looks at a dead server
	if n := errorLines(); n != 1 {
		t.Errorf("watch printed %d error lines for one outage; want 1", n)
	}
	if err := m.Restart(); err != nil {
		t.Fatalf("restarting miniredis: %v", err)
	}
	eventually(t, "watch printed the namespace again", func() bool { return len(jsonLines(t, p.stdout.String())) == 3 })
	if code := p.stop(t); code != 0 {
		t.Errorf("watch = %d; want 0", code)
	}
	out := p.stdout.String()
	lines := jsonLines(t, out)
	var msg string
	if err := json.Unmarshal(lines[1]["error"], &msg); err != nil || !strings.Contains(msg, "cannot reach Redis") || strings.HasPrefix(msg, "lanectl:") {
		t.Errorf(`error line = %s; want {"error": "cannot reach Redis ..."}`, lines[1]["error"])
	}
	if _, ok := lines[2]["keys"]; !ok {
		t.Errorf("line after the outage = %v; want the namespace's view", lines[2])
	}
	if strings.Contains(out+p.stderr.String(), password) {
		t.Errorf("watch printed the password: %s", out)
	}
}

// TestWatchPlain: without a terminal, a table per change, separated by a
// blank line, no escape sequences.
func TestWatchPlain(t *testing.T) {
	s := newMiniredis(t)
	populate(t, s)
	p := startInProcess(t, s.args("watch", "--interval", "20ms")...)
	eventually(t, "watch printed the table", func() bool { return strings.Contains(p.stdout.String(), "w3") })
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := s.b.Release(ctx, "", []string{"h1"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "watch printed a second table", func() bool { return strings.Count(p.stdout.String(), "\n\n") == 1 })
	time.Sleep(10 * 20 * time.Millisecond) // ten more looks: nothing changes
	if code := p.stop(t); code != 0 {
		t.Errorf("watch = %d; want 0", code)
	}
	out := p.stdout.String()
	tables := strings.Split(strings.TrimSuffix(out, "\n"), "\n\n")
	if len(tables) != 2 {
		t.Fatalf("watch printed %d tables; want 2, one per change:\n%s", len(tables), out)
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("watch without a terminal printed escape sequences: %q", out)
	}
	for i, want := range []string{"1      held     h1", "1      held     w1"} {
		lines := strings.Split(tables[i], "\n")
		if !strings.Contains(lines[0], "namespace "+s.ns) || !strings.HasPrefix(lines[1], "KEY") || !strings.Contains(tables[i], want) {
			t.Errorf("table %d:\n%s\nwant a time and namespace line, a header, and %q", i+1, tables[i], want)
		}
	}
}

// TestWatchUnreachable: Redis unreachable at the start is 69, refused
// credentials 77, each in one line without the password.
func TestWatchUnreachable(t *testing.T) {
	code, _, stderr := runInProcess(t, "--redis", "redis://:hunter2@127.0.0.1:1", "watch")
	if code != exitUnavailable {
		t.Errorf("watch on a closed port = %d; want %d", code, exitUnavailable)
	}
	assertOneLine(t, stderr)
	if strings.Contains(stderr, "hunter2") {
		t.Errorf("stderr = %q; it shows the password", stderr)
	}

	m := miniredis.RunT(t)
	m.RequireAuth("right")
	code, _, stderr = runInProcess(t, "--redis", "redis://:hunter2@"+m.Addr(), "watch", "--json")
	if code != exitNoPerm {
		t.Errorf("watch with a wrong password = %d (%s); want %d", code, stderr, exitNoPerm)
	}
	assertJSONError(t, stderr, "no_permission", exitNoPerm) // --json: the error as JSON
	if strings.Contains(stderr, "hunter2") {
		t.Errorf("stderr = %q; it shows the password", stderr)
	}
	for _, bad := range [][]string{{"--interval", "0s"}, {"--expiring", "-1s"}, {"--old", "-1s"}, {""}} {
		code, _, stderr := runInProcess(t, append([]string{"--redis", "redis://" + m.Addr(), "watch"}, bad...)...)
		if code != exitUsage {
			t.Errorf("watch %q = %d; want %d", bad, code, exitUsage)
		}
		assertOneLine(t, stderr)
	}
}

// ptyProc is the lanectl binary run on a pseudo-terminal: its standard
// input, output and error are the terminal.
type ptyProc struct {
	cmd    *exec.Cmd
	tty    *os.File // the terminal's master side
	out    *syncBuffer
	copied chan struct{}
	done   chan struct{}
}

// startPTY starts lanectl with args on a new 50x200 terminal; t's end
// kills it if it still runs.
func startPTY(t *testing.T, args ...string) *ptyProc {
	t.Helper()
	cmd := exec.Command(lanectlBin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LANES_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 50, Cols: 200})
	if err != nil {
		t.Skipf("SKIP: no pseudo-terminal: %v", err)
	}
	p := &ptyProc{cmd: cmd, tty: tty, out: &syncBuffer{}, copied: make(chan struct{}), done: make(chan struct{})}
	go func() {
		_, _ = io.Copy(p.out, tty) // until the child is gone (EIO)
		close(p.copied)
	}()
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		tty.Close()
		<-p.copied
	})
	return p
}

// wait waits for p to exit and for its output, and returns its status.
func (p *ptyProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(waitFor):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("lanectl %q did not exit within %v; output: %q", p.cmd.Args[1:], waitFor, p.out)
	}
	select {
	case <-p.copied:
	case <-time.After(waitFor):
		t.Fatalf("the terminal's output did not end")
	}
	return p.cmd.ProcessState.ExitCode()
}

// lastFrame returns the last whole screen watch drew on out: from a cursor
// home to the clearing of what is below.
func lastFrame(out string) string {
	end := strings.LastIndex(out, ansiClearBelow)
	if end < 0 {
		return ""
	}
	start := strings.LastIndex(out[:end], ansiHome)
	if start < 0 {
		return ""
	}
	return out[start:end]
}

// TestWatchTerminal drives watch in a pseudo-terminal: it redraws in place
// (home, clear to the end of each line, clear below), highlights expiring
// leases and old waiters in bold red, follows a hand-off, never shows the
// password, and exits 0 on SIGINT with the cursor shown again.
func TestWatchTerminal(t *testing.T) {
	m := miniredis.RunT(t)
	const password = "s3cret-pw"
	m.RequireAuth(password)
	s := newServer(t, "miniredis", "redis://:"+password+"@"+m.Addr())
	populate(t, s)
	// Every lease expires within an hour, every waiter has waited 0s or more.
	p := startPTY(t, s.args("watch", "--interval", "20ms", "--expiring", "1h", "--old", "0s")...)
	row := func(frame, entry string) string {
		for _, l := range strings.Split(frame, "\n") {
			if strings.Contains(l, " "+entry+" ") {
				return l
			}
		}
		return ""
	}
	eventually(t, "watch drew h1 and its waiters", func() bool {
		f := lastFrame(p.out.String())
		return row(f, "h1") != "" && row(f, "w3") != ""
	})
	f := lastFrame(p.out.String())
	for _, id := range []string{"h1", "w1", "w2", "w3"} {
		if r := row(f, id); !strings.HasPrefix(r, ansiHot) || !strings.Contains(r, ansiReset) {
			t.Errorf("row of %s = %q; want it in bold red", id, r)
		}
	}
	if r := row(f, "h1"); !strings.Contains(r, "test-host:4242") || !strings.Contains(r, "edit") || !strings.Contains(r, "call-1") || !strings.Contains(r, "acme") {
		t.Errorf("row of h1 = %q; want its owner, tool, call id and tenant", r)
	}
	if !strings.Contains(f, ansiClearLine) || !strings.HasPrefix(p.out.String(), ansiHideCursor) {
		t.Errorf("watch on a terminal did not redraw in place: %q", f)
	}

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := s.b.Release(ctx, "", []string{"h1"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "watch drew w1 holding k1", func() bool {
		r := row(lastFrame(p.out.String()), "w1")
		return strings.Contains(r, " held ")
	})
	if n := strings.Count(p.out.String(), ansiClear); n != 1 {
		t.Errorf("watch cleared the screen %d times; want once, then redraws in place", n)
	}

	p.cmd.Process.Signal(syscall.SIGINT)
	if code := p.wait(t); code != 0 {
		t.Errorf("watch after SIGINT = %d; want 0", code)
	}
	out := p.out.String()
	if !strings.HasSuffix(strings.TrimRight(out, "^C\r\n"), ansiShowCursor) {
		t.Errorf("watch did not show the cursor again at the end: %q", out[max(len(out)-40, 0):])
	}
	if strings.Contains(out, password) {
		t.Errorf("watch showed the password")
	}
}

// TestWatchTerminalQuiet: on a terminal, rows whose lease is far from its
// end and waiters younger than --old are not highlighted; SIGTERM ends
// watch with 0.
func TestWatchTerminalQuiet(t *testing.T) {
	s := newMiniredis(t)
	populate(t, s)
	p := startPTY(t, s.args("watch", "--interval", "20ms", "--expiring", "1ms", "--old", "1h")...)
	eventually(t, "watch drew the table", func() bool { return strings.Contains(lastFrame(p.out.String()), "w3") })
	if f := lastFrame(p.out.String()); strings.Contains(f, ansiHot+"k") {
		t.Errorf("watch highlighted a row with a long lease or a short wait:\n%q", f)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t); code != 0 {
		t.Errorf("watch after SIGTERM = %d; want 0", code)
	}
}

// TestTermWatchScreen draws frames on a small fake terminal: lines cut to
// its width, rows beyond its height summed up, and during an outage the
// error line in bold red above the last table seen.
func TestTermWatchScreen(t *testing.T) {
	g := &globalOptions{namespace: "ns", redisURL: "redis://:s3cret@h:6379"}
	o := &watchOptions{global: g, interval: time.Second, expiring: 2 * time.Second, old: 30 * time.Second}
	var out strings.Builder
	tw := &termWatch{w: &out, o: o, size: func() (int, int, bool) { return 30, 8, true }}
	v := statusView{Namespace: "ns", Keys: []statusKey{{Key: "k", Limit: 1,
		Holders: []holderView{{Entry: "h1", Token: 7, Host: "host", PID: 1, HeldMS: 100, LeaseLeftMS: 500}},
		Waiters: []waiterView{
			{Entry: "w1", Position: 1, Host: "host", PID: 2, WaitingMS: 31000},
			{Entry: "w2", Position: 2, Host: "host", PID: 3, WaitingMS: 10},
			{Entry: "w3", Position: 3, Host: "host", PID: 4, WaitingMS: 10},
		}}}}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := tw.show(watchFrame{view: v, at: at}); err != nil {
		t.Fatal(err)
	}
	frame := lastFrame(out.String())
	lines := strings.Split(strings.TrimSuffix(strings.TrimPrefix(frame, ansiHome), "\n"), "\n")
	if len(lines) > 7 {
		t.Errorf("a screen of 8 rows got %d lines:\n%s", len(lines), frame)
	}
	for _, l := range lines {
		plain := strings.NewReplacer(ansiHot, "", ansiReset, "", ansiClearLine, "", ansiHideCursor, "", ansiClear, "").Replace(l)
		if n := len([]rune(plain)); n > 30 {
			t.Errorf("line %q is %d wide; the terminal is 30", plain, n)
		}
	}
	if !strings.Contains(frame, "more lines") {
		t.Errorf("screen does not say that rows were left out:\n%s", frame)
	}
	if strings.Contains(out.String(), "s3cret") {
		t.Errorf("the screen shows the password")
	}

	tw.size = func() (int, int, bool) { return 0, 0, false }
	out.Reset()
	if err := tw.show(watchFrame{view: v, at: at}); err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, l := range strings.Split(lastFrame(out.String()), "\n") {
		for _, id := range []string{"h1", "w1", "w2"} {
			if strings.Contains(l, " "+id+" ") {
				rows[id] = l
			}
		}
	}
	if !strings.HasPrefix(rows["h1"], ansiHot) || !strings.HasPrefix(rows["w1"], ansiHot) || strings.HasPrefix(rows["w2"], ansiHot) {
		t.Errorf("rows = %q; want h1 (lease under 2s) and w1 (waiting 31s) highlighted, w2 not", rows)
	}

	out.Reset()
	if err := tw.show(watchFrame{at: at.Add(time.Minute), err: "lanectl: cannot reach Redis at redis://:xxxxx@h:6379: refused"}); err != nil {
		t.Fatal(err)
	}
	frame = lastFrame(out.String())
	if !strings.Contains(frame, ansiHot+"lanectl: cannot reach Redis") || !strings.Contains(frame, "as last seen at") || !strings.Contains(frame, " h1 ") {
		t.Errorf("screen during an outage:\n%q\nwant the error in bold red above the last table seen", frame)
	}
	if err := tw.close(); err != nil || !strings.HasSuffix(out.String(), ansiShowCursor) {
		t.Errorf("close() = %v; want the cursor shown again", err)
	}
}
