package main

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestLockSuspendedByTSTPCommandDoesNotOutliveLease: Ctrl-Z (SIGTSTP) on a
// lanectl lock whose standard input is not a terminal, so that its command
// runs in a process group of its own, under the supervisor. lanectl stops
// its command's group with itself: before, it stopped alone and the
// command ran on after the lease expired and B was granted k (found by a
// review). Continued past the lease's deadline, lanectl kills the command
// before it runs again and exits 79. No line of A may follow B's. On
// miniredis and real Redis.
func TestLockSuspendedByTSTPCommandDoesNotOutliveLease(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		dir := t.TempDir()
		log, ready := filepath.Join(dir, "log"), filepath.Join(dir, "ready")
		// TTL 4s, not 2s: A must keep k until B is seen waiting, though a
		// loaded CI machine may starve it for a second or two meanwhile.
		a := startBin(t, s.args("lock", "--ttl", "4s", "k", "--", "sh", "-c", writerScript, "sh", "A", log, ready)...)
		writing(t, log, ready)
		code := suspendPastLease(t, s, a, log)
		if code != exitLeaseLost {
			t.Errorf("A continued past its lease = %d; want %d (lease lost): %s", code, exitLeaseLost, a.stderr)
		}
		checkFirstThenSecond(t, logLines(t, log), "A", "B")
	})
}

// suspendPastLease starts B, a lock of k that appends "B" to log, waits
// until it waits for k, then stops a (SIGTSTP), which holds k with a TTL
// short enough that B is granted k while a is stopped; it gives a's command
// a window to write, if it ran, continues a (SIGCONT), and returns a's
// exit status.
func suspendPastLease(t *testing.T, s *server, a *proc, log string) int {
	t.Helper()
	return suspendPastLeaseOf(t, s, a, log, "k")
}

// suspendPastLeaseOf is suspendPastLease on the lane key key.
func suspendPastLeaseOf(t *testing.T, s *server, a *proc, log, key string) int {
	t.Helper()
	b := startBin(t, s.args("lock", "--ttl", "10s", key, "--", "sh", "-c", `echo B >> "$0"`, log)...)
	eventually(t, "B waits for "+key, func() bool {
		for _, k := range s.inspect(t).Keys {
			if k.Key == key && len(k.Waiters) == 1 {
				return true
			}
		}
		return false
	})
	a.signal(t, syscall.SIGTSTP)
	if code := b.wait(t); code != 0 {
		t.Fatalf("B = %d: %s", code, b.stderr)
	}
	time.Sleep(300 * time.Millisecond) // a window for what a started to write, if it ran
	a.signal(t, syscall.SIGCONT)
	return a.wait(t)
}
