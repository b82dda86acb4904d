package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tests of this file check lanectl lock's handling of SIGTSTP (Ctrl-Z)
// when its standard input is not a terminal (suspendWith): lanectl stops
// everything its command started (its group, and under the supervisor what
// left it) and then itself, and waits for a SIGCONT. Each case was found by
// a review.

// TestLockTSTPThenCONTAtOnceLeavesLockRunning: SIGTSTP and, at once,
// SIGCONT sent to lanectl lock (`kill -TSTP $p; kill -CONT $p`). The two
// reach lanectl's channel in no set order, and the SIGCONT may come first:
// lanectl must not stop then (before, it stopped with its command until
// another SIGCONT, and its lease expired). lock runs on and exits 0.
// Several tries, since the race was lost only some of the time. On
// miniredis and real Redis.
func TestLockTSTPThenCONTAtOnceLeavesLockRunning(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		dir := t.TempDir()
		for i := range 10 {
			ready := filepath.Join(dir, "ready"+strconv.Itoa(i))
			a := startBin(t, s.args("lock", "--ttl", "3s", "k", "--", "sh", "-c", `echo $$ > "$0"; sleep 0.5`, ready)...)
			eventually(t, "the command runs", func() bool { return pidIn(ready) > 0 })
			_ = syscall.Kill(a.cmd.Process.Pid, syscall.SIGTSTP)
			_ = syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT)
			select {
			case <-a.done:
				if code := a.cmd.ProcessState.ExitCode(); code != 0 {
					t.Fatalf("try %d: lock = %d; want 0: %s", i, code, a.stderr)
				}
			case <-time.After(5 * time.Second):
				state := procState(a.cmd.Process.Pid)
				_ = syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT)
				a.wait(t)
				t.Fatalf("try %d: lanectl lock (state %q) has not exited 5s after SIGTSTP then SIGCONT, for a command of 0.5s: it stays stopped, its command too, until another SIGCONT; then: %s",
					i, state, a.stderr)
			}
		}
	})
}

// procState returns the state letter of process pid ("T": stopped).
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "gone"
	}
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' && i+2 < len(b) {
			return string(b[i+2])
		}
	}
	return "?"
}

// stopped reports whether process pid is stopped: in state T, or in state
// D with a stopped child. A shell that runs a command by vfork (dash does)
// waits for the child to exec, uninterruptibly: when the SIGSTOP of their
// group takes the child first, the shell stays in D, running nothing,
// until the child is continued. (A CI run saw the tool's shell in D for
// 20s while lanectl stopped it.)
func stopped(pid int) bool {
	switch procState(pid) {
	case "T":
		return true
	case "D":
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil && procState(c) == "T" {
				return true
			}
		}
	}
	return false
}

// TestLockSuspendedByTSTPEscapedChildDoesNotOutliveLease: as
// TestLockSuspendedByTSTPCommandDoesNotOutliveLease, with a command that
// started a child outside its process group (setsid). The supervisor stops
// that child too (before, only the command's group was stopped, and the
// child ran on past the lease's expiry while B held k). No line of A's
// (nor of its child's) after B's. On miniredis and real Redis.
func TestLockSuspendedByTSTPEscapedChildDoesNotOutliveLease(t *testing.T) {
	requireSetsid(t)
	forEachServer(t, func(t *testing.T, s *server) {
		dir := t.TempDir()
		log, ready := filepath.Join(dir, "log"), filepath.Join(dir, "ready")
		// TTL 4s: A keeps k until B waits, even starved on a loaded machine.
		a := startBin(t, s.args("lock", "--ttl", "4s", "k", "--", "sh", "-c", escapedTermIgnorer, "sh", "A", log, ready)...)
		writing(t, log, ready)
		esc := pidIn(ready + ".esc")
		t.Cleanup(func() { _ = syscall.Kill(esc, syscall.SIGKILL) })
		suspendPastLease(t, s, a, log)
		checkFirstThenSecond(t, logLines(t, log), "A", "B")
	})
}

// TestLockSuspendedByTSTPNestedLockCommandDoesNotOutliveLease: an outer
// lanectl lock (key outer) whose command is a nested lanectl lock of k,
// whose command writes A. SIGTSTP to the outer lanectl stops the nested
// lanectl's command too (in a process group of its own, under its own
// supervisor: a descendant the outer supervisor reaches), so it does not
// run on after the nested lease on k expires and B is granted k. Once the
// outer lanectl is continued, it continues the nested lanectl but not its
// command: the nested lanectl finds its lease lapsed and kills the command
// still stopped. (Before, the outer supervisor continued the command with
// the nested lanectl, and it wrote once more, after B, about one run in 20
// to 40, whatever the TTL.) No line of A after B's. On miniredis and real
// Redis.
func TestLockSuspendedByTSTPNestedLockCommandDoesNotOutliveLease(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		dir := t.TempDir()
		log, ready := filepath.Join(dir, "log"), filepath.Join(dir, "ready")
		// TTL 4s: the inner lock keeps k until B waits, even starved on a
		// loaded machine.
		inner := append([]string{lanectlBin}, s.args("lock", "--ttl", "4s", "k", "--", "sh", "-c", writerScript, "sh", "A", log, ready)...)
		a := startBin(t, s.args(append([]string{"lock", "--ttl", "30s", "outer", "--"}, inner...)...)...)
		writing(t, log, ready)
		suspendPastLease(t, s, a, log)
		checkFirstThenSecond(t, logLines(t, log), "A", "B")
	})
}

// TestLockSuspendedByTSTPThenContinuedInTimeNestedCommandFinishes: SIGTSTP
// to an outer lanectl lock whose command is a nested lanectl lock, or a
// nested lanectl batch, of k, whose command (tool) writes 50 lines and
// exits. The outer lanectl stops everything below it, the nested
// command too, and once continued, continues the nested lanectl but not
// what the nested lanectl runs: the nested lanectl continues that itself,
// its lease on k still held (30s), so the command finishes, and every
// lanectl exits 0. (A nested command left stopped would hold k forever.)
// On miniredis and real Redis.
func TestLockSuspendedByTSTPThenContinuedInTimeNestedCommandFinishes(t *testing.T) {
	const script = `echo $$ > "$2"; i=0; while [ $i -lt 50 ]; do echo A >> "$1"; sleep 0.01; i=$((i+1)); done`
	for _, nested := range []string{"lock", "batch"} {
		t.Run(nested, func(t *testing.T) {
			forEachServer(t, func(t *testing.T, s *server) {
				dir := t.TempDir()
				log, ready := filepath.Join(dir, "log"), filepath.Join(dir, "ready")
				inner := append([]string{lanectlBin}, s.args("lock", "--ttl", "30s", "k", "--", "sh", "-c", script, "sh", log, ready)...)
				if nested == "batch" {
					d := newBatchDir(t, fmt.Sprintf(`
[tools.writer]
command = ["sh", "-c", %q, "sh", %q, %q]
concurrency = { key = "k" }
`, script, log, ready))
					inner = append([]string{lanectlBin}, s.args("batch", "--json", "--ttl", "30s", "--tools", d.tools, "--calls", d.calls(t, "anthropic", toolCall{"c1", "writer", `{}`}))...)
				}
				a := startBin(t, s.args(append([]string{"lock", "--ttl", "30s", "outer", "--"}, inner...)...)...)
				eventually(t, "the nested command writes", func() bool { return pidIn(ready) > 0 && fileExists(log) })
				writer := pidIn(ready)
				t.Cleanup(func() { _ = syscall.Kill(writer, syscall.SIGKILL) })
				a.signal(t, syscall.SIGTSTP)
				// lanectl stops itself once everything below it is stopped.
				eventually(t, "the outer lanectl is stopped", func() bool { return procState(a.cmd.Process.Pid) == "T" })
				a.signal(t, syscall.SIGCONT)
				if code := a.wait(t); code != 0 {
					t.Fatalf("outer lock continued in time = %d; want 0: %s", code, a.stderr)
				}
				if n := len(logLines(t, log)); n != 50 {
					t.Errorf("the nested command wrote %d lines; want all 50", n)
				}
				if nested == "batch" {
					checkOutcomes(t, decodeBatch(t, a.stdout.String()), []want{{"c1", "writer", "ok", ""}})
				}
			})
		})
	}
}
