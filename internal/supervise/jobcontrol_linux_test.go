package supervise

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tests of this file check job control across nested runners: the
// test is a runner whose command is this test binary as a runner (a
// nested runner, as a lanectl lock that a lanectl lock runs), whose own
// command, under a supervisor of its own, is a shell. The test's Suspend
// stops all of them; its Resume continues the nested runner, and leaves
// the nested runner's command to it: only the nested runner knows the
// lease that command runs under (before, Resume continued it, and it ran
// on for a moment after that lease had lapsed, beside its next holder).

// nestedRunner is the part of a nested runner (runnerMain) that job sets:
// "suspends,DIR" stops its command itself (Suspend) once it has written
// its pid, and then writes DIR/suspended; "lapses,DIR" watches its command with a Guard whose local
// deadline has passed once DIR/lapsed exists (none before), then writes
// DIR/guarded, and appends a line to DIR/passes each time it has looked at
// its commands after a SIGCONT.
func nestedRunner(c *Child, job string) {
	mode, dir, _ := strings.Cut(job, ",")
	switch mode {
	case "suspends":
		for pidIn(filepath.Join(dir, "sh")) == 0 {
			time.Sleep(5 * time.Millisecond) // the shell runs, and has said so
		}
		c.Suspend()
		_ = os.WriteFile(filepath.Join(dir, "suspended"), nil, 0o600)
	case "lapses":
		c.Guard(nil, nil, func() time.Time {
			if fileExists(filepath.Join(dir, "lapsed")) {
				return time.Now().Add(-time.Second)
			}
			return time.Time{}
		}, 0)
		_ = os.WriteFile(filepath.Join(dir, "guarded"), nil, 0o600)
	}
}

// nestedRunnerHook sets, before its Start, what a "lapses" nestedRunner
// does after each look at its commands.
func nestedRunnerHook(job string) {
	mode, dir, _ := strings.Cut(job, ",")
	if mode != "lapses" {
		return
	}
	continuedHook = func() {
		f, err := os.OpenFile(filepath.Join(dir, "passes"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err == nil {
			_, _ = f.WriteString("pass\n")
			f.Close()
		}
	}
}

// startNested starts, as the test's command, a nested runner of a shell
// that writes its pid to dir/sh and becomes a sleep (one process, which
// forks nothing: its state is the command's), job its runnerJobEnv (""
// none); it returns the Child, the nested runner's pid and the command's.
// The command ignores SIGTERM: a Guard sends it one when the deadline has
// passed, which would end it even stopped.
func startNested(t *testing.T, dir, job string) (c *Child, runner, sh int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "sh", "-c", `trap "" TERM; echo $$ > "$0/sh"; exec sleep 600`, dir)
	cmd.Env = append(os.Environ(), runnerEnv+"=supervised", "GORACE=atexit_sleep_ms=0")
	if job != "" {
		cmd.Env = append(cmd.Env, runnerJobEnv+"="+job+","+dir)
	}
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	c, err := Start(cmd, true)
	if err != nil {
		t.Fatal(err)
	}
	checkSupervised(t, c, true)
	t.Cleanup(func() {
		c.Resume() // a stopped runner would not die of its lifeline's end
		_ = c.Signal(syscall.SIGKILL)
		_ = c.Wait()
	})
	if !waitUntil(10*time.Second, func() bool { return pidIn(filepath.Join(dir, "sh")) > 0 }) {
		t.Fatal("the nested runner's command did not start")
	}
	sh = pidIn(filepath.Join(dir, "sh"))
	killOnCleanup(t, sh)
	if strings.HasPrefix(job, "lapses") && !waitUntil(10*time.Second, func() bool { return fileExists(filepath.Join(dir, "guarded")) }) {
		t.Fatal("the nested runner did not guard its command")
	}
	return c, c.pgid, sh
}

// state returns process pid's state letter ("T": stopped), "gone" once it
// has exited.
func state(pid int) string {
	if f := stat(pid); f != nil {
		return f[0]
	}
	return "gone"
}

// suspendAll stops c with everything below it, and waits until the
// nested runner and its command are stopped (a stop takes effect a moment
// after the signal is sent).
func suspendAll(t *testing.T, c *Child, runner, sh int) {
	t.Helper()
	c.Suspend()
	if !waitUntil(10*time.Second, func() bool { return state(runner) == "T" && state(sh) == "T" }) {
		t.Fatalf("after Suspend, the nested runner's state = %q and its command's %q; want both stopped (T)", state(runner), state(sh))
	}
}

// TestResumeLeavesNestedCommandsToTheirRunner: a nested runner that had
// stopped its command itself (Suspend) before the test's Suspend finds it
// still stopped once the test's Resume returns: Resume continued the
// nested runner, not what it runs, which it resumes if and when it
// decides. Before, Resume continued every descendant.
func TestResumeLeavesNestedCommandsToTheirRunner(t *testing.T) {
	dir := t.TempDir()
	c, runner, sh := startNested(t, dir, "suspends")
	if !waitUntil(10*time.Second, func() bool { return fileExists(filepath.Join(dir, "suspended")) }) {
		t.Fatal("the nested runner did not stop its command")
	}
	suspendAll(t, c, runner, sh)
	c.Resume()
	if r := state(runner); r == "T" {
		t.Fatalf("after Resume, the nested runner's state = %q; want it continued", r)
	}
	if s := state(sh); s != "T" {
		t.Errorf("after Resume, the nested runner's command's state = %q; want it still stopped (T), as its runner left it", s)
	}
}

// TestContinuedRunnerLeavesLapsedCommandStopped: a nested runner whose
// command's lease lapsed while the test had them stopped does not continue
// that command when the test continues it (Guard's SIGKILL, in a real
// runner, ends it still stopped); before, the test's Resume continued the
// command itself.
func TestContinuedRunnerLeavesLapsedCommandStopped(t *testing.T) {
	dir := t.TempDir()
	c, runner, sh := startNested(t, dir, "lapses")
	suspendAll(t, c, runner, sh)
	if err := os.WriteFile(filepath.Join(dir, "lapsed"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c.Resume()
	if !waitUntil(10*time.Second, func() bool { return fileExists(filepath.Join(dir, "passes")) }) {
		t.Fatalf("the nested runner (state %q) did not look at its command after it was continued", state(runner))
	}
	if s := state(sh); s != "T" {
		t.Errorf("the nested runner's command, whose lease lapsed while it was stopped, has state %q once its runner was continued; want it still stopped (T)", s)
	}
}

// TestContinuedRunnerContinuesItsCommand: a nested runner whose command
// may run (its lease holds) continues it once the test continues the
// runner.
func TestContinuedRunnerContinuesItsCommand(t *testing.T) {
	for _, job := range []string{"", "lapses"} { // "lapses" without the lapse: a Guard whose lease holds
		name := job
		if name == "" {
			name = "no guard"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			c, runner, sh := startNested(t, dir, job)
			suspendAll(t, c, runner, sh)
			c.Resume()
			if !waitUntil(10*time.Second, func() bool { return state(sh) != "T" }) {
				t.Errorf("the nested runner's command is still stopped 10s after the test continued its runner (state %q); want it continued", state(runner))
			}
		})
	}
}
