package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/lanes-dev/lanes/internal/redisproc"
)

// The tests of this file check that a command run under a lane never runs
// on while another holder has it (issue 17, part 1; issue 10, section 4):
// each reads the order of the writes in one log that both holders append
// to, so the check is the order of the writes, not a timing.

// logLines returns the lines of the log at path.
func logLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// checkFirstThenSecond fails t unless the log has lines of the first
// holder (first, or firstTerm) and then, after the last of them, the second
// holder's lines only.
func checkFirstThenSecond(t *testing.T, lines []string, first, second string) {
	t.Helper()
	lastFirst, firstSecond := -1, -1
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, first):
			lastFirst = i
		case strings.HasPrefix(l, second) && firstSecond < 0:
			firstSecond = i
		}
	}
	if lastFirst < 0 || firstSecond < 0 {
		t.Fatalf("log = %q; want lines of %s, then of %s", lines, first, second)
	}
	if lastFirst > firstSecond {
		t.Errorf("%s wrote its line %d after %s's first write (line %d): two holders of a limit-1 lane at once; lines %d to %d: %q",
			first, lastFirst, second, firstSecond, max(0, firstSecond-2), lastFirst, lines[max(0, firstSecond-2):lastFirst+1])
	}
}

// writerScript appends "$1" to the log $2 every 10ms, forever, after
// writing its pid to $3; with $4 = trap, a SIGTERM only logs "$1-term" and
// the loop goes on (a command that stops too slowly for its lease).
const writerScript = `[ "$4" = trap ] && trap 'echo "$1-term" >> "$2"' TERM; echo $$ > "$3"; while :; do echo "$1" >> "$2"; sleep 0.01; done`

// writing waits until the writer whose pid file is ready writes, and kills
// it when t ends if it still runs (it does only if the test failed).
func writing(t *testing.T, log, ready string) {
	t.Helper()
	eventually(t, "the writer writes", func() bool {
		b, _ := os.ReadFile(log)
		return pidIn(ready) > 0 && strings.Count(string(b), "\n") > 2
	})
	pid := pidIn(ready)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
}

// TestBatchRunnerKilledTakesItsTool is issue 17, part 1: a lanectl batch
// whose tool holds the limit-1 key w is killed with SIGKILL while the tool
// writes. The tool dies with it (Linux: a parent-death signal), so when its
// lease expires and a second batch, already waiting, is granted w, nothing
// of the first writes any more. On miniredis and real Redis.
func TestBatchRunnerKilledTakesItsTool(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		dir := t.TempDir()
		log, ready := filepath.Join(dir, "log"), filepath.Join(dir, "ready")
		d := newBatchDir(t, fmt.Sprintf(`
[tools.writer]
command = ["sh", "-c", %q, "sh", "first", %q, %q]
concurrency = { key = "w" }

[tools.mark]
command = ["sh", "-c", "echo second >> \"$0\"", %q]
concurrency = { key = "w" }
`, writerScript, log, ready, log))
		// TTL 4s: the first keeps w until the second waits, even starved on
		// a loaded machine.
		first := startBin(t, s.args("batch", "--ttl", "4s", "--tools", d.tools, "--calls", d.calls(t, "anthropic", toolCall{"c1", "writer", `{}`}))...)
		writing(t, log, ready)
		second := startBin(t, s.args("batch", "--json", "--tools", d.tools, "--calls", d.calls(t, "openai-chat", toolCall{"c2", "mark", `{}`}))...)
		eventually(t, "the second batch waits for w", func() bool {
			snap := s.inspect(t)
			return len(snap.Keys) == 1 && len(snap.Keys[0].Waiters) == 1
		})
		first.signal(t, syscall.SIGKILL)
		first.wait(t)
		if code := second.wait(t); code != 0 {
			t.Fatalf("second batch = %d: %s", code, second.stderr)
		}
		checkOutcomes(t, decodeBatch(t, second.stdout.String()), []want{{"c2", "mark", "ok", ""}})
		checkFirstThenSecond(t, logLines(t, log), "first", "second")
		s.assertEmpty(t)
	})
}

// pausedRedis starts a redis-server of the test's own (so pausing it
// stops no one else's tests) and returns a server on it.
func pausedRedis(t *testing.T) (*server, func(d time.Duration)) {
	t.Helper()
	rs := redisproc.StartServer(t, redisproc.ServerOptions{})
	s := newServer(t, "redis-server", rs.URL())
	return s, func(d time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.c.Do(ctx, "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err(); err != nil {
			t.Fatalf("CLIENT PAUSE: %v", err)
		}
	}
}

// pauseFor is how long the lease tests pause Redis, with a TTL of 3s and
// renewals every second: A's local deadline lies 2.7s after its last
// renewal that reached Redis, so at most 2.7s into the pause, and Redis
// can grant k to B at the earliest when the pause ends (A's release after
// its loss waits for it too). 4s leaves A's SIGKILL 1.3s at least (2.9s
// left 0.2s, too little for a process starved on a loaded machine).
const pauseFor = 4 * time.Second

// TestLockKilledBeforeNextHolder is issue 10, section 4: with TTL 3s and
// Redis paused by CLIENT PAUSE (pauseFor) past it, A's renewals stop; its
// command, which traps SIGTERM and keeps writing, gets SIGTERM a margin
// (0.3s) before A's local deadline (TestCommandLeaseDeadlineSendsSIGTERM
// checks that part) and SIGKILL at it, so its last write precedes B's
// first. A real redis-server of the test's own.
func TestLockKilledBeforeNextHolder(t *testing.T) {
	s, pause := pausedRedis(t)
	dir := t.TempDir()
	log, ready := filepath.Join(dir, "log"), filepath.Join(dir, "ready")
	a := startBin(t, s.args("lock", "--ttl", "3s", "k", "--", "sh", "-c", writerScript, "sh", "A", log, ready, "trap")...)
	writing(t, log, ready)
	// B waits with a TTL that outlasts the pause, so its place survives it.
	b := startBin(t, s.args("lock", "--ttl", "10s", "k", "--", "sh", "-c", `echo B >> "$0"`, log)...)
	eventually(t, "B waits for k", func() bool {
		snap := s.inspect(t)
		return len(snap.Keys) == 1 && len(snap.Keys[0].Waiters) == 1
	})
	pause(pauseFor)
	if code := a.wait(t); code != exitLeaseLost {
		t.Errorf("A = %d; want %d (lease lost): %s", code, exitLeaseLost, a.stderr)
	}
	if code := b.wait(t); code != 0 {
		t.Fatalf("B = %d: %s", code, b.stderr)
	}
	checkFirstThenSecond(t, logLines(t, log), "A", "B")
	if !strings.Contains(a.stderr.String(), "killed by SIGKILL") {
		t.Errorf("A's stderr = %q; want the command killed by SIGKILL", a.stderr)
	}
	s.assertEmpty(t)
}

// TestBatchToolKilledBeforeNextHolder is the same case for a batch tool:
// the tool holds concurrency:k, Redis pauses (pauseFor) past the TTL, and a
// lanectl lock on that lane waits. The tool, which traps SIGTERM, gets
// SIGKILL at the lease's local deadline, before the lock's command starts;
// the call ends indeterminate (cut off by its lost lease). A real
// redis-server of the test's own.
func TestBatchToolKilledBeforeNextHolder(t *testing.T) {
	s, pause := pausedRedis(t)
	dir := t.TempDir()
	log, ready := filepath.Join(dir, "log"), filepath.Join(dir, "ready")
	d := newBatchDir(t, fmt.Sprintf(`
[tools.writer]
command = ["sh", "-c", %q, "sh", "A", %q, %q, "trap"]
concurrency = { key = "k" }
`, writerScript, log, ready))
	a := startBin(t, s.args("batch", "--json", "--ttl", "3s", "--tools", d.tools, "--calls", d.calls(t, "openai-responses", toolCall{"c1", "writer", `{}`}))...)
	writing(t, log, ready)
	b := startBin(t, s.args("lock", "--ttl", "10s", "concurrency:k", "--", "sh", "-c", `echo B >> "$0"`, log)...)
	eventually(t, "the lock waits for concurrency:k", func() bool {
		snap := s.inspect(t)
		return len(snap.Keys) == 1 && len(snap.Keys[0].Waiters) == 1
	})
	pause(pauseFor)
	if code := a.wait(t); code != 0 {
		t.Errorf("batch = %d; want 0: %s", code, a.stderr)
	}
	if code := b.wait(t); code != 0 {
		t.Fatalf("lock = %d: %s", code, b.stderr)
	}
	checkOutcomes(t, decodeBatch(t, a.stdout.String()), []want{{"c1", "writer", "indeterminate", "lease"}})
	checkFirstThenSecond(t, logLines(t, log), "A", "B")
	s.assertEmpty(t)
}

// TestLockLeaseLostToOutageWhenCommandObeysSIGTERM: Redis becomes
// unreachable while lock's command (sh exec'ing sleep 60, which does not
// trap SIGTERM) runs; lanectl's guard sends it SIGTERM a margin before the
// lease's local deadline and the command dies of it. lanectl must still
// exit 79 (lease lost) with one line that says so and why, not pass on the
// command's 143 in silence. The outage is a miniredis server closed under
// lanectl (renewals refused), and a real redis-server of the test's own
// paused with CLIENT PAUSE (renewals hang); in both the lease's local
// deadline passes before any renewal, so the loss is certain, not a race.
func TestLockLeaseLostToOutageWhenCommandObeysSIGTERM(t *testing.T) {
	check := func(t *testing.T, s *server, ttl string, outage func()) {
		// The command writes its pid and becomes sleep 60. The outage
		// starts once it runs: a holder seen in the namespace is not yet a
		// grant lanectl has read (the grant's reply can be lost to the
		// outage, and then lanectl rightly exits 69, unable to tell).
		ready := filepath.Join(t.TempDir(), "ready")
		p := startBin(t, s.args("lock", "--ttl", ttl, "k", "--", "sh", "-c", `echo $$ > "$0"; exec sleep 60`, ready)...)
		eventually(t, "lock's command runs", func() bool { return pidIn(ready) > 0 })
		pid := pidIn(ready)
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
		outage()
		code := p.wait(t)
		stderr := p.stderr.String()
		if code != exitLeaseLost {
			t.Errorf("lock whose command obeyed the guard's SIGTERM in an outage = %d; want %d (lease lost); stderr %q", code, exitLeaseLost, stderr)
		}
		assertOneLine(t, stderr)
		for _, want := range []string{"lanectl: lease lost on k: ", "no heartbeat reached the backend", "SIGTERM"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr = %q; want it to contain %q", stderr, want)
			}
		}
	}
	t.Run("miniredis-closed", func(t *testing.T) {
		m := miniredis.RunT(t)
		s := newServer(t, "miniredis", "redis://"+m.Addr())
		check(t, s, "1s", m.Close)
		// Back for the cleanup, which deletes the namespace.
		if err := m.Restart(); err != nil {
			t.Fatalf("restarting miniredis: %v", err)
		}
	})
	t.Run("redis-paused", func(t *testing.T) {
		s, pause := pausedRedis(t)
		check(t, s, "3s", func() { pause(pauseFor) })
	})
}
