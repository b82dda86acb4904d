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

// The tests of this file force the release of a lease (`lanectl release
// --force`) while its command still runs and has started a child that left
// its process group (setsid) and ignores SIGTERM. A lost lease means
// SIGKILL at once (README, "A command never outlives its lane"), for that
// child too: before, it got SIGTERM and the supervisor's grace once the
// command died, and ran on into the next holder's turn (about a second;
// found by a review). The runner's supervisor is given a grace of an hour
// (LANES_SUPERVISOR_GRACE), so a child that waited for it would keep the
// runner from exiting: the runner's exit, within the tests' wait, is the
// check, and the child is dead then.
//
// A forced release hands the lanes on at once, while the holder's runner
// learns of it from a hint: the next holder may start a moment before the
// command is killed, so these tests do not check the order of the two.

// escapedTermIgnorer starts a child outside the command's process group
// (setsid) that ignores SIGTERM, writes its pid to $3.esc and appends
// "$1-esc" to the log $2 every 10ms; then writes the shell's pid to $3 and
// appends "$1" itself, forever.
const escapedTermIgnorer = `setsid sh -c 'trap "" TERM; echo $$ > "$2.esc"; while :; do echo "$0-esc" >> "$1"; sleep 0.01; done' "$1" "$2" "$3" &
while [ ! -s "$3.esc" ]; do sleep 0.01; done; echo $$ > "$3"; while :; do echo "$1" >> "$2"; sleep 0.01; done`

// graceAnHour makes a supervisor's grace for leftovers an hour.
var graceAnHour = []string{"LANES_SUPERVISOR_GRACE=1h"}

// forceReleaseHolder evicts the one holder of the namespace's one key.
func forceReleaseHolder(t *testing.T, s *server) {
	t.Helper()
	snap := s.inspect(t)
	if len(snap.Keys) != 1 || len(snap.Keys[0].Holders) != 1 {
		t.Fatalf("Inspect() = %+v; want one key with one holder", snap.Keys)
	}
	if code, _, stderr := runBin(t, s.args("release", "--force", "--yes", snap.Keys[0].Holders[0].ID)...); code != 0 {
		t.Fatalf("release --force = %d: %s", code, stderr)
	}
}

// escapedGone checks that the escaped child, whose pid is in ready.esc, is
// dead, and that nothing of A was written after the runner exited (n lines
// then).
func escapedGone(t *testing.T, log, ready string, n int) {
	t.Helper()
	b, err := os.ReadFile(ready + ".esc")
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("escaped child's pid %q: %v", b, err)
	}
	if err := syscall.Kill(pid, 0); err == nil && !deadOrZombie(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("the escaped child (pid %d) runs on after its runner exited", pid)
	}
	waitQuiet(t, log)
	for i, l := range logLines(t, log)[n:] {
		if strings.HasPrefix(l, "A") {
			t.Errorf("line %d %q written after A's runner exited", n+i+1, l)
			break
		}
	}
}

// TestLockForcedReleaseKillsEscapedChild: lanectl lock's command holds k
// and has an escaped child that ignores SIGTERM. The lease is released by
// force: A exits 79 at once, its escaped child killed with it. On
// miniredis and real Redis.
func TestLockForcedReleaseKillsEscapedChild(t *testing.T) {
	requireSetsid(t)
	forEachServer(t, func(t *testing.T, s *server) {
		dir := t.TempDir()
		log, ready := filepath.Join(dir, "log"), filepath.Join(dir, "ready")
		a := startBinEnv(t, graceAnHour, s.args("lock", "--ttl", "10s", "k", "--", "sh", "-c", escapedTermIgnorer, "sh", "A", log, ready)...)
		writing(t, log, ready)
		forceReleaseHolder(t, s)
		if code := a.wait(t); code != exitLeaseLost {
			t.Errorf("A = %d; want %d (lease lost): %s", code, exitLeaseLost, a.stderr)
		}
		escapedGone(t, log, ready, len(logLines(t, log)))
		s.assertEmpty(t)
	})
}

// TestBatchForcedReleaseKillsEscapedChild is the same for a lanectl batch
// tool on concurrency key k: the call ends indeterminate (lease lost), the
// batch at once, the escaped child killed with the tool. On miniredis and
// real Redis.
func TestBatchForcedReleaseKillsEscapedChild(t *testing.T) {
	requireSetsid(t)
	forEachServer(t, func(t *testing.T, s *server) {
		dir := t.TempDir()
		log, ready := filepath.Join(dir, "log"), filepath.Join(dir, "ready")
		d := newBatchDir(t, fmt.Sprintf(`
[tools.writer]
command = ["sh", "-c", %q, "sh", "A", %q, %q]
concurrency = { key = "k" }
`, escapedTermIgnorer, log, ready))
		a := startBinEnv(t, graceAnHour, s.args("batch", "--json", "--ttl", "10s", "--tools", d.tools, "--calls", d.calls(t, "anthropic", toolCall{"c1", "writer", `{}`}))...)
		writing(t, log, ready)
		forceReleaseHolder(t, s)
		if code := a.wait(t); code != 0 {
			t.Errorf("batch = %d; want 0: %s", code, a.stderr)
		}
		n := len(logLines(t, log))
		checkOutcomes(t, decodeBatch(t, a.stdout.String()), []want{{"c1", "writer", "indeterminate", "lease lost"}})
		escapedGone(t, log, ready, n)
		s.assertEmpty(t)
	})
}

// waitQuiet waits until nothing has been appended to log for 300ms (every
// writer is gone), so that what is checked is final.
func waitQuiet(t *testing.T, log string) {
	t.Helper()
	prev := -1
	eventually(t, "the log stops growing", func() bool {
		n := len(logLines(t, log))
		if n == prev {
			return true
		}
		prev = n
		time.Sleep(300 * time.Millisecond)
		return false
	})
}
