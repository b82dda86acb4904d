package main

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// The tests of this file force the release of a lease (`lanectl release
// --force`) while its command still runs and has started a child that left
// its process group (setsid) and ignores SIGTERM. README ("A command never
// outlives its lane"): a lease released by force means SIGKILL at once, and
// the command is stopped before anyone else can be granted its lanes. The
// next holder is granted the moment the release is forced (there is no
// margin of TTL/10 as with an expired lease), so the escaped child must be
// gone by then; the log both holders append to shows whether it was.

// escapedTermIgnorer starts a child outside the command's process group
// (setsid) that ignores SIGTERM and appends "$1-esc" to the log $2 every
// 10ms, writes the shell's pid to $3 and appends "$1" itself, forever.
const escapedTermIgnorer = `setsid sh -c 'trap "" TERM; while :; do echo "$0-esc" >> "$1"; sleep 0.01; done' "$1" "$2" &
echo $$ > "$3"; while :; do echo "$1" >> "$2"; sleep 0.01; done`

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

// TestLockForcedReleaseKillsEscapedChildBeforeNextHolder: lanectl lock's
// command holds k and has an escaped child that ignores SIGTERM; B waits for
// k. The lease is released by force: A exits 79, B is granted at once, and
// no line of A (nor of its escaped child) may follow B's. Observed: the
// escaped child writes for about a second after B (the supervisor's
// SIGTERM-then-a-second for leftovers, which the forced release does not
// cut short). On miniredis and real Redis.
func TestLockForcedReleaseKillsEscapedChildBeforeNextHolder(t *testing.T) {
	requireSetsid(t)
	forEachServer(t, func(t *testing.T, s *server) {
		dir := t.TempDir()
		log, ready := filepath.Join(dir, "log"), filepath.Join(dir, "ready")
		a := startBin(t, s.args("lock", "--ttl", "10s", "k", "--", "sh", "-c", escapedTermIgnorer, "sh", "A", log, ready)...)
		writing(t, log, ready)
		b := startBin(t, s.args("lock", "--ttl", "10s", "k", "--", "sh", "-c", `echo B >> "$0"`, log)...)
		eventually(t, "B waits for k", func() bool {
			snap := s.inspect(t)
			return len(snap.Keys) == 1 && len(snap.Keys[0].Waiters) == 1
		})
		forceReleaseHolder(t, s)
		if code := a.wait(t); code != exitLeaseLost {
			t.Errorf("A = %d; want %d (lease lost): %s", code, exitLeaseLost, a.stderr)
		}
		if code := b.wait(t); code != 0 {
			t.Fatalf("B = %d: %s", code, b.stderr)
		}
		waitQuiet(t, log)
		checkFirstThenSecond(t, logLines(t, log), "A", "B")
		s.assertEmpty(t)
	})
}

// TestBatchForcedReleaseKillsEscapedChildBeforeNextHolder is the same for a
// lanectl batch tool on concurrency key k, with a lanectl lock waiting for
// concurrency:k: the call ends indeterminate (lease lost), and nothing of
// the tool may write after the lock's command. On miniredis and real Redis.
func TestBatchForcedReleaseKillsEscapedChildBeforeNextHolder(t *testing.T) {
	requireSetsid(t)
	forEachServer(t, func(t *testing.T, s *server) {
		dir := t.TempDir()
		log, ready := filepath.Join(dir, "log"), filepath.Join(dir, "ready")
		d := newBatchDir(t, fmt.Sprintf(`
[tools.writer]
command = ["sh", "-c", %q, "sh", "A", %q, %q]
concurrency = { key = "k" }
`, escapedTermIgnorer, log, ready))
		a := startBin(t, s.args("batch", "--json", "--ttl", "10s", "--tools", d.tools, "--calls", d.calls(t, "anthropic", toolCall{"c1", "writer", `{}`}))...)
		writing(t, log, ready)
		b := startBin(t, s.args("lock", "--ttl", "10s", "concurrency:k", "--", "sh", "-c", `echo B >> "$0"`, log)...)
		eventually(t, "the lock waits for concurrency:k", func() bool {
			snap := s.inspect(t)
			return len(snap.Keys) == 1 && len(snap.Keys[0].Waiters) == 1
		})
		forceReleaseHolder(t, s)
		if code := a.wait(t); code != 0 {
			t.Errorf("batch = %d; want 0: %s", code, a.stderr)
		}
		if code := b.wait(t); code != 0 {
			t.Fatalf("lock = %d: %s", code, b.stderr)
		}
		checkOutcomes(t, decodeBatch(t, a.stdout.String()), []want{{"c1", "writer", "indeterminate", "lease lost"}})
		waitQuiet(t, log)
		checkFirstThenSecond(t, logLines(t, log), "A", "B")
		s.assertEmpty(t)
	})
}

// waitQuiet waits until nothing has been appended to log for 300ms (every
// writer is gone), so that the order checked is final.
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
