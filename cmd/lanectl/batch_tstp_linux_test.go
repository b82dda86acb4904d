package main

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
)

// TestBatchSuspendedByTSTPToolDoesNotOutliveLease: Ctrl-Z (SIGTSTP) on
// lanectl batch, whose tool commands run in process groups of their own
// (which a terminal's stop does not reach). lanectl stops the running tool
// with itself: before, lanectl stopped alone, and the tool ran on after its
// lease expired and B was granted the key. Continued past the lease's
// deadline, the tool is killed before it runs again, and its call ends
// indeterminate, its lease lost. No line of A may follow B's. On miniredis
// and real Redis.
func TestBatchSuspendedByTSTPToolDoesNotOutliveLease(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		dir := t.TempDir()
		log, ready := filepath.Join(dir, "log"), filepath.Join(dir, "ready")
		d := newBatchDir(t, fmt.Sprintf(`
[tools.writer]
command = ["sh", "-c", %q, "sh", "A", %q, %q]
concurrency = { key = "k" }
`, writerScript, log, ready))
		// TTL 4s: the tool keeps k until B waits, even starved on a loaded
		// machine.
		a := startBin(t, s.args("batch", "--json", "--ttl", "4s", "--tools", d.tools, "--calls", d.calls(t, "anthropic", toolCall{"c1", "writer", `{}`}))...)
		writing(t, log, ready)
		if code := suspendPastLeaseOf(t, s, a, log, "concurrency:k"); code != 0 {
			t.Errorf("batch continued past its lease = %d; want 0: %s", code, a.stderr)
		}
		checkFirstThenSecond(t, logLines(t, log), "A", "B")
		checkOutcomes(t, decodeBatch(t, a.stdout.String()), []want{{"c1", "writer", "indeterminate", "lease lost"}})
	})
}

// TestBatchSuspendedByTSTPThenContinuedInTimeFinishesTheCall: Ctrl-Z on
// lanectl batch stops its running tool with it (the tool's state is "T"
// while lanectl is stopped); continued well within the lease, the tool
// continues and its call ends ok. On miniredis and real Redis. (The tool's
// shell may be caught waiting for a stopped child it started by vfork:
// stopped, in state D; see stopped.)
func TestBatchSuspendedByTSTPThenContinuedInTimeFinishesTheCall(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		dir := t.TempDir()
		log, ready := filepath.Join(dir, "log"), filepath.Join(dir, "ready")
		// Writes 50 lines, 10 ms apart, then exits.
		script := `echo $$ > "$2"; i=0; while [ $i -lt 50 ]; do echo A >> "$1"; sleep 0.01; i=$((i+1)); done`
		d := newBatchDir(t, fmt.Sprintf(`
[tools.writer]
command = ["sh", "-c", %q, "sh", %q, %q]
concurrency = { key = "k" }
`, script, log, ready))
		a := startBin(t, s.args("batch", "--json", "--ttl", "30s", "--tools", d.tools, "--calls", d.calls(t, "anthropic", toolCall{"c1", "writer", `{}`}))...)
		eventually(t, "the tool writes", func() bool { return pidIn(ready) > 0 && fileExists(log) }) // it writes its pid, then the log
		tool := pidIn(ready)
		a.signal(t, syscall.SIGTSTP)
		defer func() {
			if t.Failed() {
				t.Logf("at the end: lanectl's state %s, the tool's %s, %d lines written; stderr %q",
					procState(a.cmd.Process.Pid), procState(tool), len(logLines(t, log)), a.stderr)
			}
		}()
		eventually(t, "lanectl and its tool are stopped", func() bool { return stopped(a.cmd.Process.Pid) && stopped(tool) })
		a.signal(t, syscall.SIGCONT)
		if code := a.wait(t); code != 0 {
			t.Fatalf("batch continued in time = %d; want 0: %s", code, a.stderr)
		}
		if n := len(logLines(t, log)); n != 50 {
			t.Errorf("the tool wrote %d lines; want all 50", n)
		}
		checkOutcomes(t, decodeBatch(t, a.stdout.String()), []want{{"c1", "writer", "ok", ""}})
	})
}
