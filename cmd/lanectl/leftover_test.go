package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The tests of this file check issue 17, part 4, for both commands that run
// commands: a call's (a lock's) status follows the command's own exit, and
// what the command left running in its process group ends with it, before
// the lane passes on.

// leftoverScript leaves a subshell that appends "A" to the log $1 every
// 10ms, writes its pid to $2 and prints "started": the command itself exits
// 0 at once, its child holding its standard output.
const leftoverScript = `(while :; do echo A >> "$1"; sleep 0.01; done) & echo $! > "$2"; echo started`

// deadOrZombie reports whether process pid has ended: gone, or a zombie
// waiting to be reaped.
func deadOrZombie(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return os.IsNotExist(err)
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(rest, "Z")
}

// checkLeftoverLog fails t unless the leftover whose pid is in pidFile
// ends, and its log has "A" lines then one "B" line (the next holder's)
// and nothing after it.
func checkLeftoverLog(t *testing.T, log, pidFile string) {
	t.Helper()
	pid := pidIn(pidFile)
	if pid <= 0 {
		t.Fatalf("no pid in %s", pidFile)
	}
	eventually(t, "the leftover child is gone", func() bool { return deadOrZombie(pid) })
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if i := strings.Index(string(b), "B\n"); i < 0 || lines[len(lines)-1] != "B" {
		t.Errorf("log = %q; want the next holder's B last: the leftover wrote after the lane passed on", lines)
	}
}

// TestBatchLeftoverChildStatusFollowsExit runs a tool that leaves a
// writing child behind, with timeout 10s, then a call on the same
// concurrency key, then issue 17's own tool, sh -c "sleep 30 & echo
// started" with timeout 10s: the first and the last end ok with their
// output (not timed_out), and the first one's background child is gone
// before the second starts. In memory, on miniredis and on real Redis, for
// each format. (The timeout is 10s, not 1s: a call that exits at once
// then passes, however long a loaded machine starves lanectl; one that
// waited for its leftover child, which never ends, still times out.)
func TestBatchLeftoverChildStatusFollowsExit(t *testing.T) {
	check := func(t *testing.T, args []string, flags ...string) {
		dir := t.TempDir()
		log, pidFile := filepath.Join(dir, "log"), filepath.Join(dir, "pid")
		d := newBatchDir(t, fmt.Sprintf(`
[tools.leave]
command = ["sh", "-c", %q, "sh", %q, %q]
concurrency = { key = "k" }
safe = true
timeout = "10s"

[tools.mark]
command = ["sh", "-c", "echo B >> \"$0\"", %q]
concurrency = { key = "k" }
safe = true

[tools.issue]
command = ["sh", "-c", "sleep 30 & echo started"]
concurrency = { key = "k" }
safe = true
timeout = "10s"
`, leftoverScript, log, pidFile, log))
		for _, format := range []string{"anthropic", "openai-chat", "openai-responses"} {
			os.Remove(log)
			calls := d.calls(t, format, toolCall{"c1", "leave", `{}`}, toolCall{"c2", "mark", `{}`}, toolCall{"c3", "issue", `{}`})
			code, out, stderr := runBin(t, append(append(args, "batch", "--json", "--tools", d.tools, "--calls", calls), flags...)...)
			if code != 0 {
				t.Fatalf("%s: batch = %d, stderr %q", format, code, stderr)
			}
			got := decodeBatch(t, out)
			checkOutcomes(t, got, []want{{"c1", "leave", "ok", ""}, {"c2", "mark", "ok", ""}, {"c3", "issue", "ok", ""}})
			if got[0].Output != "started" || got[2].Output != "started" {
				t.Errorf("%s: c1, c3 output = %q, %q; want started", format, got[0].Output, got[2].Output)
			}
			checkLeftoverLog(t, log, pidFile)
		}
	}
	t.Run("local", func(t *testing.T) { check(t, nil, "--local") })
	forEachServer(t, func(t *testing.T, s *server) {
		check(t, s.args())
		s.assertEmpty(t)
	})
}

// TestLockLeftoverChildEndsWithCommand runs the same command under lanectl
// lock, then a second lock on the key: the first exits 0 with its output,
// and its background child is gone before the second starts. On miniredis
// and real Redis.
func TestLockLeftoverChildEndsWithCommand(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		dir := t.TempDir()
		log, pidFile := filepath.Join(dir, "log"), filepath.Join(dir, "pid")
		code, out, stderr := runBin(t, s.args("lock", "k", "--", "sh", "-c", leftoverScript, "sh", log, pidFile)...)
		if code != 0 || out != "started\n" {
			t.Fatalf("lock = %d, %q (stderr %q); want 0, started", code, out, stderr)
		}
		if code, _, stderr := runBin(t, s.args("lock", "k", "--", "sh", "-c", `echo B >> "$0"`, log)...); code != 0 {
			t.Fatalf("second lock = %d: %s", code, stderr)
		}
		checkLeftoverLog(t, log, pidFile)
		s.assertEmpty(t)
	})
}
