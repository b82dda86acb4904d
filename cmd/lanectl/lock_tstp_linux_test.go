package main

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestLockSuspendedByTSTPCommandDoesNotOutliveLease: Ctrl-Z (SIGTSTP) on a
// lanectl lock whose standard input is not a terminal (its command runs in
// a process group of its own, under the supervisor). lanectl takes the
// default action and stops; its command is not stopped and runs on. The
// lease expires after the TTL, B is granted k and runs, and A's command
// still writes: a lock that lies, for as long as the user leaves the job
// suspended. SIGTSTP, unlike SIGSTOP, can be caught: lanectl could pass it
// on to the command's group, or stay running. Expected: no line of A after
// B's. On miniredis and real Redis.
func TestLockSuspendedByTSTPCommandDoesNotOutliveLease(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		dir := t.TempDir()
		log, ready := filepath.Join(dir, "log"), filepath.Join(dir, "ready")
		a := startBin(t, s.args("lock", "--ttl", "2s", "k", "--", "sh", "-c", writerScript, "sh", "A", log, ready)...)
		writing(t, log, ready)
		b := startBin(t, s.args("lock", "--ttl", "10s", "k", "--", "sh", "-c", `echo B >> "$0"`, log)...)
		eventually(t, "B waits for k", func() bool {
			snap := s.inspect(t)
			return len(snap.Keys) == 1 && len(snap.Keys[0].Waiters) == 1
		})
		a.signal(t, syscall.SIGTSTP)
		if code := b.wait(t); code != 0 {
			t.Fatalf("B = %d: %s", code, b.stderr)
		}
		time.Sleep(300 * time.Millisecond) // what A's command writes meanwhile
		lines := logLines(t, log)
		a.signal(t, syscall.SIGCONT)
		a.wait(t)
		checkFirstThenSecond(t, lines, "A", "B")
	})
}
