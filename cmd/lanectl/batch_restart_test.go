package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/alicebob/miniredis/v2"
)

// The tests of this file are issue 11's cases on `lanectl batch`, checked
// from the tools' own log: each tool appends "start ID" and "end ID" to one
// file, so the order of the lines is the order of the writes.

// stepScript logs "start $LANES_CALL_ID", blocks (exec sleep 60, its pid
// in $3) when the call's id is $2, then logs "end" and prints "did ID".
const stepScript = `echo "start $LANES_CALL_ID" >> "$1"
if [ "$LANES_CALL_ID" = "$2" ]; then echo $$ > "$3"; exec sleep 60; fi
echo "end $LANES_CALL_ID" >> "$1"; echo "did $LANES_CALL_ID"`

// countLines counts the lines of the log at path that equal line.
func countLines(t *testing.T, path, line string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if l == line {
			n++
		}
	}
	return n
}

// Issue 11, part 3 across processes: a replica runs five calls of a
// non-idempotent (then an idempotent) tool on one key, and is killed with
// SIGKILL while the fourth runs, after three settled. Started again with
// the same run id and response, it prints the three outcomes from the
// store ("stored": true) without running them, reports the fourth as
// indeterminate (safe_to_retry for the idempotent tool) without running
// it, and runs the fifth. The tools' own log shows each call executed at
// most once. On miniredis and real Redis.
func TestBatchKilledReplicaRestartedRunsNoCallTwice(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		for _, tc := range []struct {
			tool, status, code string
		}{{"step", "indeterminate", "TOOL_INDETERMINATE"}, {"istep", "safe_to_retry", "TOOL_SAFE_TO_RETRY"}} {
			t.Run(tc.tool, func(t *testing.T) {
				dir := t.TempDir()
				log, pidFile := filepath.Join(dir, "exec.log"), filepath.Join(dir, "c4.pid")
				d := newBatchDir(t, fmt.Sprintf(`
[tools.step]
command = ["sh", "-c", %[1]q, "sh", %[2]q, "c4", %[3]q]
concurrency = { key = "steps" }

[tools.istep]
command = ["sh", "-c", %[1]q, "sh", %[2]q, "c4", %[3]q]
concurrency = { key = "steps" }
idempotent = true
`, stepScript, log, pidFile))
				var calls []toolCall
				for i := 1; i <= 5; i++ {
					calls = append(calls, toolCall{fmt.Sprintf("c%d", i), tc.tool, `{}`})
				}
				file := d.calls(t, "anthropic", calls...)
				args := s.args("batch", "--json", "--ttl", "1s", "--run-id", "replica-run-"+tc.tool, "--tools", d.tools, "--calls", file)
				first := startBin(t, args...)
				eventually(t, "c4 runs", func() bool { return countLines(t, log, "start c4") == 1 && pidIn(pidFile) > 0 })
				t.Cleanup(func() { _ = syscall.Kill(pidIn(pidFile), syscall.SIGKILL) })
				first.signal(t, syscall.SIGKILL)
				first.wait(t)
				eventually(t, "the killed replica's tool is gone with it", func() bool { return deadOrZombie(pidIn(pidFile)) })

				code, out, stderr := runBin(t, args...)
				if code != 0 {
					t.Fatalf("restarted batch = %d, stderr %q; want 0", code, stderr)
				}
				got := decodeBatch(t, out)
				checkOutcomes(t, got, []want{
					{"c1", tc.tool, "ok", ""}, {"c2", tc.tool, "ok", ""}, {"c3", tc.tool, "ok", ""},
					{"c4", tc.tool, tc.status, "in flight in another run of this run id"},
					{"c5", tc.tool, "ok", ""},
				})
				for i, o := range got {
					if stored := i < 4; o.Stored != stored {
						t.Errorf("%s: stored = %v; want %v", o.ID, o.Stored, stored)
					}
					if i < 3 && o.Output != "did "+o.ID {
						t.Errorf("%s: output %q; want the stored %q", o.ID, o.Output, "did "+o.ID)
					}
				}
				if got[3].Code != tc.code {
					t.Errorf("c4: code %q; want %s", got[3].Code, tc.code)
				}
				for i := 1; i <= 5; i++ {
					if n := countLines(t, log, fmt.Sprintf("start c%d", i)); n != 1 {
						t.Errorf("c%d executed %d times (log %q); want once", i, n, logLines(t, log))
					}
				}
				s.assertEmpty(t)
			})
		}
	})
}

// gateScript logs "start ID", waits up to 20s for the file $2 when the
// call's id is $3, then logs "end ID".
const gateScript = `echo "start $LANES_CALL_ID" >> "$1"
if [ "$LANES_CALL_ID" = "$3" ]; then n=0; while [ ! -e "$2" ]; do n=$((n+1)); [ $n -gt 400 ] && exit 3; sleep 0.05; done; fi
echo "end $LANES_CALL_ID" >> "$1"; echo "did $LANES_CALL_ID"`

// Issue 11, part 4: SIGUSR1 pauses a batch (the running call finishes,
// none starts) and writes its checkpoint to --checkpoint; --resume goes on
// from it with the same run id, and no call runs twice. With --local, on
// miniredis and on real Redis.
func TestBatchPauseAndResume(t *testing.T) {
	check := func(t *testing.T, global []string, local bool) {
		dir := t.TempDir()
		log, gate, cp := filepath.Join(dir, "exec.log"), filepath.Join(dir, "gate"), filepath.Join(dir, "checkpoint.json")
		d := newBatchDir(t, fmt.Sprintf(`
[runner]
max_concurrent_tools = 1

[tools.read]
command = ["sh", "-c", %q, "sh", %q, %q, "c1"]
read_only_hint = true
`, gateScript, log, gate))
		file := d.calls(t, "openai-chat", toolCall{"c1", "read", `{}`}, toolCall{"c2", "read", `{}`}, toolCall{"c3", "nope", `{}`})
		flags := []string{"batch", "--json", "--run-id", "paused-run", "--tools", d.tools, "--checkpoint", cp}
		if local {
			flags = append(flags, "--local")
		}
		p := startBin(t, append(global, append(flags, "--calls", file)...)...)
		eventually(t, "c1 runs", func() bool { return countLines(t, log, "start c1") == 1 })
		p.signal(t, syscall.SIGUSR1)
		writeFile(t, gate, "", 0o644)
		if code := p.wait(t); code != 0 {
			t.Fatalf("paused batch = %d, stderr %q; want 0", code, p.stderr)
		}
		got := decodeBatch(t, p.stdout.String())
		checkOutcomes(t, got, []want{{"c1", "read", "ok", ""}, {"c2", "read", "interrupted", "the batch paused"}, {"c3", "nope", "error", "unknown tool"}})
		if got[1].Code != "TOOL_INTERRUPTED" || countLines(t, log, "start c2") != 0 {
			t.Fatalf("c2 = %+v, log %q; want TOOL_INTERRUPTED and not started", got[1], logLines(t, log))
		}
		if fi, err := os.Stat(cp); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("checkpoint file: %v, %v; want one only its owner reads", fi, err)
		}

		if local { // its lanes were in its process: a resume on Redis is refused
			code, _, stderr := runBin(t, append(slices.Clone(flags[:len(flags)-1]), "--resume", cp)...)
			if code != exitUsage || !strings.Contains(stderr, "resume it with --local") {
				t.Errorf("batch --resume of a --local batch's checkpoint without --local = %d, %q; want %d", code, stderr, exitUsage)
			}
		}
		code, out, stderr := runBin(t, append(global, append(flags, "--resume", cp)...)...)
		if code != 0 {
			t.Fatalf("batch --resume = %d, stderr %q; want 0", code, stderr)
		}
		checkOutcomes(t, decodeBatch(t, out), []want{{"c1", "read", "ok", ""}, {"c2", "read", "ok", ""}, {"c3", "nope", "error", "unknown tool"}})
		for _, id := range []string{"c1", "c2"} {
			if n := countLines(t, log, "start "+id); n != 1 {
				t.Errorf("%s executed %d times; want once (log %q)", id, n, logLines(t, log))
			}
		}
	}
	t.Run("local", func(t *testing.T) { check(t, nil, true) })
	forEachServer(t, func(t *testing.T, s *server) {
		check(t, s.args(), false)
		s.assertEmpty(t)
	})
}

// SIGUSR1 without --checkpoint: the paused calls' outcomes say how the run
// goes on (the same batch again with its --run-id), and it does: the
// settled call is not run again, the paused one runs. Real Redis.
func TestBatchPauseWithoutCheckpointRealRedis(t *testing.T) {
	s := newRealRedis(t)
	dir := t.TempDir()
	log, gate := filepath.Join(dir, "exec.log"), filepath.Join(dir, "gate")
	d := newBatchDir(t, fmt.Sprintf(`
[runner]
max_concurrent_tools = 1

[tools.read]
command = ["sh", "-c", %q, "sh", %q, %q, "c1"]
read_only_hint = true
`, gateScript, log, gate))
	file := d.calls(t, "openai-chat", toolCall{"c1", "read", `{}`}, toolCall{"c2", "read", `{}`})
	flags := s.args("batch", "--json", "--run-id", "paused-run", "--tools", d.tools, "--calls", file)
	p := startBin(t, flags...)
	eventually(t, "c1 runs", func() bool { return countLines(t, log, "start c1") == 1 })
	p.signal(t, syscall.SIGUSR1)
	writeFile(t, gate, "", 0o644)
	if code := p.wait(t); code != 0 {
		t.Fatalf("paused batch = %d, stderr %q; want 0", code, p.stderr)
	}
	checkOutcomes(t, decodeBatch(t, p.stdout.String()), []want{{"c1", "read", "ok", ""}, {"c2", "read", "interrupted", "with --run-id paused-run runs it"}})
	if !strings.Contains(p.stderr.String(), "--run-id paused-run runs its rest") {
		t.Errorf("stderr %q; want the warning to say how to run the rest", p.stderr)
	}
	code, out, stderr := runBin(t, flags...)
	if code != 0 {
		t.Fatalf("the same batch again = %d, stderr %q; want 0", code, stderr)
	}
	checkOutcomes(t, decodeBatch(t, out), []want{{"c1", "read", "ok", ""}, {"c2", "read", "ok", ""}})
	for _, id := range []string{"c1", "c2"} {
		if n := countLines(t, log, "start "+id); n != 1 {
			t.Errorf("%s executed %d times; want once (log %q)", id, n, logLines(t, log))
		}
	}
}

// Issue 11, part 4: --deadline ends the whole run: the running call is
// cancelled (indeterminate: slow is not idempotent), the next one never
// dispatched, each with its code, and batch exits 0 with the outcomes.
func TestBatchDeadline(t *testing.T) {
	d := newBatchDir(t, "")
	calls := d.calls(t, "openai-chat", toolCall{"call_1", "slow", `{}`}, toolCall{"call_2", "echo", `{}`})
	code, out, stderr := runBin(t, "batch", "--local", "--json", "--deadline", "300ms", "--tools", d.tools, "--calls", calls)
	if code != 0 {
		t.Fatalf("batch --deadline = %d, stderr %q; want 0", code, stderr)
	}
	got := decodeBatch(t, out)
	checkOutcomes(t, got, []want{
		{"call_1", "slow", "indeterminate", "--deadline of 300ms passed"},
		{"call_2", "echo", "never_dispatched", "--deadline of 300ms passed"},
	})
	if got[0].Code != "TOOL_INDETERMINATE" || got[1].Code != "TOOL_NEVER_DISPATCHED" {
		t.Errorf("codes %q, %q; want TOOL_INDETERMINATE, TOOL_NEVER_DISPATCHED", got[0].Code, got[1].Code)
	}
	if pid := pidIn(filepath.Join(d.dir, "slow.pid")); pid > 0 && !deadOrZombie(pid) {
		t.Errorf("the slow tool (pid %d) still runs after the deadline", pid)
	}
}

// Issue 11, part 4: fan_out = { enabled = true, on_error = "stop" } is
// accepted, and each operation's outcome appears under its call in --json:
// the failed one with its code, the one after it never dispatched.
func TestBatchFanOutOperationsInJSON(t *testing.T) {
	d := newBatchDir(t, `
[tools.del]
command = ["sh", "-c", "grep -q bad && { echo no >&2; exit 2; }; echo deleted"]
concurrency = 1
fan_out = { enabled = true, on_error = "stop" }
`)
	calls := d.calls(t, "anthropic", toolCall{"f", "del", `[{"p":"a"},{"p":"bad"},{"p":"c"}]`})
	code, out, stderr := runBin(t, "batch", "--local", "--json", "--tools", d.tools, "--calls", calls)
	if code != 0 {
		t.Fatalf("batch = %d, stderr %q; want 0", code, stderr)
	}
	got := decodeBatch(t, out)
	if len(got) != 1 || got[0].Status != "error" || got[0].Code != "TOOL_ERROR" {
		t.Fatalf("outcomes %+v; want one failed call", got)
	}
	var ops []string
	for _, o := range got[0].Operations {
		ops = append(ops, o.ID+" "+o.Status+" "+o.Code)
	}
	want := []string{"f#0 ok ", "f#1 error TOOL_ERROR", "f#2 never_dispatched TOOL_NEVER_DISPATCHED"}
	if !slices.Equal(ops, want) {
		t.Fatalf("operations %q; want %q", ops, want)
	}
}

// edit is the tool script of the case: it logs "start ID" and
// "end ID"; the first call of each key (a1, b1, c1) also waits, up to 20s,
// until the three have started, and fails if they never do.
const editScript = `echo "start $LANES_CALL_ID" >> "$1"
case "$LANES_CALL_ID" in a1|b1|c1)
  touch "$2/$LANES_CALL_ID"; n=0
  while [ ! -e "$2/a1" ] || [ ! -e "$2/b1" ] || [ ! -e "$2/c1" ]; do n=$((n+1)); [ $n -gt 400 ] && { echo "ran alone" >&2; exit 3; }; sleep 0.05; done;;
esac
echo "end $LANES_CALL_ID" >> "$1"`

// Issue 11, part 1, the issue's own case on lanectl batch: seven calls on
// three keys, tools that declare only `concurrency = { key }` (RFD 129's
// configuration): the keys run beside each other, each key's calls one at
// a time in written order. The first calls of the three keys wait for one
// another, so running the calls one after another fails the test; the
// tools' log then shows the order. With --local, on miniredis and on real
// Redis.
func TestBatchKeyedToolsRunBesideEachOther(t *testing.T) {
	check := func(t *testing.T, global []string, flags ...string) {
		dir := t.TempDir()
		log := filepath.Join(dir, "edit.log")
		var tools string
		for _, k := range []string{"a", "b", "c"} {
			tools += fmt.Sprintf("\n[tools.edit_%s]\ncommand = [\"sh\", \"-c\", %q, \"sh\", %q, %q]\nconcurrency = { key = %q }\n", k, editScript, log, dir, k)
		}
		d := newBatchDir(t, tools)
		var calls []toolCall
		for _, id := range []string{"a1", "b1", "c1", "a2", "b2", "a3", "c2"} {
			calls = append(calls, toolCall{id, "edit_" + id[:1], `{}`})
		}
		args := append(append(global, "batch", "--json", "--tools", d.tools, "--calls", d.calls(t, "anthropic", calls...)), flags...)
		code, out, stderr := runBin(t, args...)
		if code != 0 {
			t.Fatalf("batch = %d, stderr %q; want 0", code, stderr)
		}
		for _, o := range decodeBatch(t, out) {
			if o.Status != "ok" {
				t.Fatalf("%s: %s %s", o.ID, o.Status, o.Error)
			}
		}
		lines := logLines(t, log)
		at := func(l string) int { return slices.Index(lines, l) }
		for _, chain := range [][]string{{"a1", "a2", "a3"}, {"b1", "b2"}, {"c1", "c2"}} {
			for k := 1; k < len(chain); k++ {
				if at("end "+chain[k-1]) > at("start "+chain[k]) {
					t.Errorf("%s started before %s ended, on the same key: %q", chain[k], chain[k-1], lines)
				}
			}
		}
		for _, x := range []string{"a1", "b1", "c1"} {
			for _, y := range []string{"a1", "b1", "c1"} {
				if at("start "+x) > at("end "+y) {
					t.Errorf("%s started after %s ended: the keys did not run beside each other: %q", x, y, lines)
				}
			}
		}
	}
	t.Run("local", func(t *testing.T) { check(t, nil, "--local") })
	forEachServer(t, func(t *testing.T, s *server) {
		check(t, s.args())
		s.assertEmpty(t)
	})
}

// fileScript logs "start ID" and "end ID"; r1 waits, up to 20s, until r2
// has started (and fails if it never does).
const fileScript = `echo "start $LANES_CALL_ID" >> "$1"
if [ "$LANES_CALL_ID" = r1 ]; then n=0; while ! grep -q "start r2" "$1"; do n=$((n+1)); [ $n -gt 400 ] && exit 3; sleep 0.05; done; fi
echo "end $LANES_CALL_ID" >> "$1"`

// Issue 11, part 4, Cogitator's isConcurrencySafe(args) as TOML: safe_if
// is a CEL expression over the arguments. Two reads run beside each other
// (r1 waits for r2 to start), the write is a barrier, and a call whose
// arguments the expression cannot evaluate (no mode) is one too. With
// --local, on miniredis and on real Redis.
func TestBatchSafeIfFromArguments(t *testing.T) {
	check := func(t *testing.T, global []string, flags ...string) {
		dir := t.TempDir()
		log := filepath.Join(dir, "file.log")
		d := newBatchDir(t, fmt.Sprintf(`
[tools.file]
command = ["sh", "-c", %q, "sh", %q]
safe_if = 'args.mode == "read"'
`, fileScript, log))
		file := d.calls(t, "openai-responses", toolCall{"r1", "file", `{"mode":"read"}`}, toolCall{"r2", "file", `{"mode":"read"}`},
			toolCall{"w", "file", `{"mode":"write"}`}, toolCall{"r3", "file", `{"mode":"read"}`}, toolCall{"x", "file", `{}`}, toolCall{"r4", "file", `{"mode":"read"}`})
		code, out, stderr := runBin(t, append(append(global, "batch", "--json", "--tools", d.tools, "--calls", file), flags...)...)
		if code != 0 {
			t.Fatalf("batch = %d, stderr %q; want 0", code, stderr)
		}
		for _, o := range decodeBatch(t, out) {
			if o.Status != "ok" {
				t.Fatalf("%s: %s %s", o.ID, o.Status, o.Error)
			}
		}
		lines := logLines(t, log)
		at := func(l string) int { return slices.Index(lines, l) }
		for _, order := range [][2]string{{"end r1", "start w"}, {"end r2", "start w"}, {"end w", "start r3"}, {"end r3", "start x"}, {"end x", "start r4"}} {
			if at(order[0]) > at(order[1]) {
				t.Errorf("%q came after %q: %q", order[0], order[1], lines)
			}
		}
	}
	t.Run("local", func(t *testing.T) { check(t, nil, "--local") })
	forEachServer(t, func(t *testing.T, s *server) {
		check(t, s.args())
		s.assertEmpty(t)
	})
}

// nsScript is gateScript that prints, as its output, the namespace the
// batch gave it ($LANES_NAMESPACE).
const nsScript = `echo "start $LANES_CALL_ID" >> "$1"
if [ "$LANES_CALL_ID" = "$3" ]; then n=0; while [ ! -e "$2" ]; do n=$((n+1)); [ $n -gt 400 ] && exit 3; sleep 0.05; done; fi
echo "ns $LANES_NAMESPACE"`

// A batch paused in the namespace of $LANES_NAMESPACE resumes in it from a
// shell without the variable: the checkpoint records the namespace, so the
// resumed calls queue with the other runners of the lanes they paused in.
// A namespace given that is not the checkpoint's is refused (exit 64), and
// nothing runs; so are another server, and --local (a new user's trial saw
// the resume run on the server of the shell's default, beside none of the
// batch's other runners). Real Redis.
func TestBatchResumeKeepsTheNamespaceRealRedis(t *testing.T) {
	s := newRealRedis(t)
	dir := t.TempDir()
	log, gate, cp := filepath.Join(dir, "exec.log"), filepath.Join(dir, "gate"), filepath.Join(dir, "checkpoint.json")
	d := newBatchDir(t, fmt.Sprintf(`
[runner]
max_concurrent_tools = 1

[tools.read]
command = ["sh", "-c", %q, "sh", %q, %q, "c1"]
read_only_hint = true
`, nsScript, log, gate))
	file := d.calls(t, "openai-chat", toolCall{"c1", "read", `{}`}, toolCall{"c2", "read", `{}`})
	flags := []string{"--redis", s.url, "batch", "--json", "--run-id", "ns-run", "--tools", d.tools, "--checkpoint", cp}
	p := startBinEnv(t, []string{"LANES_NAMESPACE=" + s.ns}, append(flags, "--calls", file)...)
	eventually(t, "c1 runs", func() bool { return countLines(t, log, "start c1") == 1 })
	p.signal(t, syscall.SIGUSR1)
	writeFile(t, gate, "", 0o644)
	if code := p.wait(t); code != 0 {
		t.Fatalf("paused batch = %d, stderr %q; want 0", code, p.stderr)
	}
	checkOutcomes(t, decodeBatch(t, p.stdout.String()), []want{{"c1", "read", "ok", ""}, {"c2", "read", "interrupted", "the batch paused"}})

	other := miniredis.RunT(t) // another server
	for _, refused := range []struct {
		env   []string
		args  []string
		flags []string
		says  string
	}{
		{nil, []string{"--namespace", s.ns + "-other"}, flags, "is not the checkpoint's namespace"},
		{[]string{"LANES_NAMESPACE=" + s.ns + "-other"}, nil, flags, "is not the checkpoint's namespace"},
		{nil, []string{"--redis", "redis://" + other.Addr()}, flags[2:], "the checkpoint's batch ran on the Redis at 127.0.0.1:"},
		{nil, nil, append(slices.Clone(flags), "--local"), "resume it without --local"},
	} {
		q := startBinEnv(t, refused.env, append(refused.args, append(refused.flags, "--resume", cp)...)...)
		if code := q.wait(t); code != exitUsage || !strings.Contains(q.stderr.String(), refused.says) {
			t.Errorf("resume with %v %v %v = %d, stderr %q; want %d saying %q", refused.env, refused.args, refused.flags, code, q.stderr, exitUsage, refused.says)
		}
	}
	if keys := other.Keys(); len(keys) != 0 {
		t.Errorf("a refused resume on another server wrote %v there", keys)
	}
	if n := countLines(t, log, "start c2"); n != 0 {
		t.Fatalf("a refused resume ran c2 (%d times)", n)
	}

	code, out, stderr := runBin(t, append(flags, "--resume", cp)...)
	if code != 0 {
		t.Fatalf("batch --resume without LANES_NAMESPACE = %d, stderr %q; want 0", code, stderr)
	}
	got := decodeBatch(t, out)
	checkOutcomes(t, got, []want{{"c1", "read", "ok", ""}, {"c2", "read", "ok", ""}})
	if want := "ns " + s.ns; got[1].Output != want {
		t.Errorf("the resumed c2 printed %q; want %q: it ran in another namespace than the one it paused in", got[1].Output, want)
	}
	s.assertEmpty(t)
}
