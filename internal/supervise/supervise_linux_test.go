package supervise

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	ossignal "os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The tests run real processes: sh, sleep, cat, setsid. The test binary is
// also the runner of TestRunnerKilled... (see runnerMain), and, as every
// binary that imports this package, the supervisor.

const (
	runnerEnv       = "SUPERVISE_TEST_RUNNER" // "supervised" or "direct"
	runnerStatusEnv = "SUPERVISE_TEST_STATUS" // where the runner writes the status
	// runnerJobEnv makes the runner a nested runner of a job control test
	// (see nestedRunner): "suspends" or "lapses", then a comma and a
	// directory.
	runnerJobEnv = "SUPERVISE_TEST_JOB"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(runnerEnv); mode != "" {
		runnerMain(mode)
	}
	os.Exit(m.Run())
}

// runnerMain is a runner as lanectl is one: it starts os.Args[1:] with a
// group of its own, passes its standard streams on, and writes the
// command's wait status to the file named by runnerStatusEnv.
func runnerMain(mode string) {
	useSupervisor = mode == "supervised"
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	job := os.Getenv(runnerJobEnv)
	nestedRunnerHook(job)
	c, err := Start(cmd, true)
	if err != nil {
		fmt.Fprintln(os.Stderr, "runner:", err)
		os.Exit(100)
	}
	if job != "" {
		nestedRunner(c, job)
	}
	_ = c.Wait()
	if f := os.Getenv(runnerStatusEnv); f != "" {
		_ = os.WriteFile(f, []byte(describe(cmd.ProcessState)), 0o600)
	}
	os.Exit(0)
}

// describe says how a process ended, from its wait status.
func describe(ps *os.ProcessState) string {
	ws := ps.Sys().(syscall.WaitStatus)
	switch {
	case ws.Exited():
		return fmt.Sprintf("exit %d", ws.ExitStatus())
	case ws.Signaled():
		return fmt.Sprintf("signal %d (%v)", int(ws.Signal()), ws.Signal())
	}
	return fmt.Sprintf("status %#x", uint32(ws))
}

// startRunner starts the test binary as a runner of argv, in a process
// group of its own if group is set.
func startRunner(t *testing.T, mode string, group bool, argv ...string) *exec.Cmd {
	t.Helper()
	r := exec.Command(os.Args[0], argv...)
	r.SysProcAttr = &syscall.SysProcAttr{Setpgid: group}
	r.Env = append(os.Environ(), runnerEnv+"="+mode, "GORACE=atexit_sleep_ms=0")
	r.Stdout, r.Stderr = os.Stdout, os.Stderr
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = r.Process.Kill()
		_ = r.Wait()
	})
	return r
}

// script writes an sh script to dir and returns its path.
func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// pidIn returns the pid written to file, 0 until it holds a whole line.
func pidIn(file string) int {
	b, err := os.ReadFile(file)
	if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// stat returns the fields of /proc/pid/stat after the command name: state,
// ppid, pgrp, session...; nil once the process is gone.
func stat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	return strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
}

// dead reports whether pid has exited (gone, or a zombie no one reaped).
func dead(pid int) bool {
	f := stat(pid)
	return f == nil || f[0] == "Z" || f[0] == "X"
}

// waitUntil polls cond every 5ms until it holds or within passes.
func waitUntil(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// killOnCleanup kills pid when t ends, in case a test left it running.
func killOnCleanup(t *testing.T, pid int) {
	t.Cleanup(func() {
		if !dead(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// family is a command that starts one of each kind of descendant and
// writes each one's pid to a file of dir: the shell itself (sh), a child in
// the background (bg), a child that left the group and session with setsid
// (setsid), and an orphan whose parent exited at once (orphan). It then
// waits, or exits 0 with "exit" as its first argument.
const family = `echo $$ > "$0/sh"
sleep 60 & echo $! > "$0/bg"
setsid sh -c 'echo $$ > "$0/setsid"; exec sleep 60' "$0" &
(sleep 60 & echo $! > "$0/orphan")
while [ ! -s "$0/setsid" ]; do sleep 0.01; done
[ "$1" = exit ] && exit 0
wait`

// familyPids waits until the family command wrote every pid, and returns
// them by name.
func familyPids(t *testing.T, dir string) map[string]int {
	t.Helper()
	names := []string{"sh", "bg", "setsid", "orphan"}
	pids := map[string]int{}
	if !waitUntil(10*time.Second, func() bool {
		all := true
		for _, n := range names {
			pids[n] = pidIn(filepath.Join(dir, n))
			all = all && pids[n] > 0
		}
		return all
	}) {
		t.Fatalf("the command wrote pids %v; want all of %v", pids, names)
	}
	for _, p := range pids {
		killOnCleanup(t, p)
	}
	return pids
}

func requireSetsid(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skipf("SKIP: no setsid command (%v)", err)
	}
}

// TestRunnerKilledTakesEveryDescendant is issue 17, part 1: a runner
// killed with SIGKILL takes the command and every process the command
// started, the one that called setsid and the one whose parent exited too,
// within a second; so does a runner killed with its whole process group
// (as a shell or a CI job kills a job), which the supervisor is not in.
// Without the supervisor (the control case), only the shell dies: its
// children run on.
func TestRunnerKilledTakesEveryDescendant(t *testing.T) {
	requireSetsid(t)
	for _, mode := range []string{"supervised", "supervised, its group killed", "direct"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			groupKill := strings.HasSuffix(mode, "its group killed")
			mode, _, _ := strings.Cut(mode, ",")
			r := startRunner(t, mode, groupKill, "sh", "-c", family, dir)
			pids := familyPids(t, dir)
			if s := stat(pids["sh"]); s == nil || s[1] == strconv.Itoa(r.Process.Pid) == (mode == "supervised") {
				t.Fatalf("the shell's stat = %q, the runner %d; want it the runner's child only if not supervised", s, r.Process.Pid)
			}
			if s := stat(pids["setsid"]); s == nil || s[3] != strconv.Itoa(pids["setsid"]) {
				t.Fatalf("the setsid child's stat = %q; want it the leader of a session of its own", s)
			}
			if groupKill {
				_ = syscall.Kill(-r.Process.Pid, syscall.SIGKILL)
			} else {
				_ = r.Process.Signal(syscall.SIGKILL)
			}
			_ = r.Wait()
			start := time.Now()
			allDead := waitUntil(time.Second, func() bool {
				for _, p := range pids {
					if !dead(p) {
						return false
					}
				}
				return true
			})
			var alive []string
			for n, p := range pids {
				if !dead(p) {
					alive = append(alive, n)
				}
			}
			slices.Sort(alive)
			switch {
			case mode == "supervised" && !allDead:
				t.Errorf("%v still run 1s after the runner was killed; want every descendant gone", alive)
			case mode == "supervised":
				t.Logf("every descendant gone %v after the runner's death", time.Since(start).Round(time.Millisecond))
			case !slices.Equal(alive, []string{"bg", "orphan", "setsid"}):
				t.Errorf("without the supervisor, %v still run; want the shell's children (the limit the supervisor lifts)", alive)
			}
		})
	}
}

// TestLeftoversGoWithTheCommand: when the command exits, what it left
// running, in its group or not, is gone by the time Wait returns.
func TestLeftoversGoWithTheCommand(t *testing.T) {
	requireSetsid(t)
	dir := t.TempDir()
	c, err := Start(exec.Command("sh", "-c", family, dir, "exit"), true)
	if err != nil {
		t.Fatal(err)
	}
	checkSupervised(t, c, true)
	pids := familyPids(t, dir)
	if err := c.Wait(); err != nil {
		t.Fatalf("Wait() = %v; want the command's exit 0", err)
	}
	for n, p := range pids {
		if !dead(p) {
			t.Errorf("%s (%d) still runs once Wait returned", n, p)
		}
	}
}

// run starts argv with a group of its own, supervised or not, lets act
// act on it once it wrote a line to ready (if ready is not ""), and
// returns how it ended.
func run(t *testing.T, supervised bool, ready string, act func(*Child), argv ...string) string {
	t.Helper()
	defer func(old bool) { useSupervisor = old }(useSupervisor)
	useSupervisor = supervised
	cmd := exec.Command(argv[0], argv[1:]...)
	c, err := Start(cmd, true)
	if err != nil {
		t.Fatal(err)
	}
	checkSupervised(t, c, supervised)
	if ready != "" {
		if !waitUntil(10*time.Second, func() bool { return pidIn(ready) > 0 }) {
			_ = c.Signal(syscall.SIGKILL)
			t.Fatalf("%q did not get ready", argv)
		}
		_ = os.Remove(ready)
	}
	if act != nil {
		act(c)
	}
	_ = c.Wait()
	// Once Wait returns, the command is gone, whatever killed it: the
	// supervisor reaped it before it passed its status on.
	if pid := c.pgid; !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		t.Errorf("%q (supervised: %v): its pid %d is still taken once Wait returned", argv, supervised, pid)
	}
	return describe(cmd.ProcessState)
}

// checkSupervised fails t unless c runs under a supervisor when supervised
// is set, and as the runner's child when it is not.
func checkSupervised(t *testing.T, c *Child, supervised bool) {
	t.Helper()
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c.Cmd.Process.Pid))
	// Empty once the process is exiting.
	if got := strings.HasPrefix(string(b), supervisorArg0+"\x00"); got != supervised && len(b) > 0 {
		t.Fatalf("the runner's child runs %q; want a supervisor: %v", b, supervised)
	}
}

// TestStatusPassesThrough: a supervised command's wait status, as its
// runner sees it, is the one it has when started directly: exit codes, and
// deaths by a signal it raised or the runner sent (with no core dumped).
func TestStatusPassesThrough(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	signal := func(sig syscall.Signal) func(*Child) {
		return func(c *Child) { _ = c.Signal(sig) }
	}
	cases := []struct {
		name string
		act  func(*Child)
		sh   string
	}{
		{"exit 0", nil, "exit 0"},
		{"exit 3", nil, "exit 3"},
		{"exit 255", nil, "exit 255"},
		{"raises SIGTERM", nil, "kill -TERM $$"},
		{"raises SIGINT", nil, "kill -INT $$"},
		{"raises SIGHUP", nil, "kill -HUP $$"},
		{"raises SIGQUIT", nil, "kill -QUIT $$"},
		{"raises SIGSEGV", nil, "kill -SEGV $$"},
		{"raises SIGABRT", nil, "kill -ABRT $$"},
		{"raises SIGUSR1", nil, "kill -USR1 $$"},
		{"raises SIGKILL", nil, "kill -KILL $$"},
		{"sent SIGTERM", signal(syscall.SIGTERM), "echo $$ > " + ready + "; exec sleep 60"},
		{"sent SIGINT", signal(syscall.SIGINT), "echo $$ > " + ready + "; exec sleep 60"},
		{"sent SIGKILL", signal(syscall.SIGKILL), "echo $$ > " + ready + "; exec sleep 60"},
		{"traps SIGTERM, exits 7", signal(syscall.SIGTERM), "trap 'exit 7' TERM; echo $$ > " + ready + "; while :; do sleep 0.01; done"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sh := "ulimit -c 0; " + tc.sh
			want := run(t, false, readyIf(tc.act, ready), tc.act, "sh", "-c", sh)
			got := run(t, true, readyIf(tc.act, ready), tc.act, "sh", "-c", sh)
			if got != want {
				t.Errorf("supervised: %s; want %s, as started directly", got, want)
			}
		})
	}
}

func readyIf(act func(*Child), ready string) string {
	if act == nil {
		return ""
	}
	return ready
}

// TestGroupSignalsReachTheCommandOnce: every signal the runner sends the
// group reaches the command once (the supervisor does not pass it on a
// second time), and none of them ends the supervisor: the command exits of
// its own accord, and its status is the runner's.
func TestGroupSignalsReachTheCommandOnce(t *testing.T) {
	dir := t.TempDir()
	log, ready, stop := filepath.Join(dir, "log"), filepath.Join(dir, "ready"), filepath.Join(dir, "stop")
	sigs := []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGWINCH}
	// A signal ignored when the tests started (SIGHUP under nohup) stays
	// ignored in the command, and a shell cannot trap it: left out.
	sigs = slices.DeleteFunc(sigs, func(s syscall.Signal) bool { return ossignal.Ignored(s) })
	var traps strings.Builder
	for _, s := range sigs {
		name := strings.TrimPrefix(unixName(s), "SIG")
		fmt.Fprintf(&traps, "trap 'echo %s >> %s' %s; ", name, log, name)
	}
	body := traps.String() + "echo $$ > " + ready + "; while [ ! -e " + stop + " ]; do sleep 0.01; done; exit 5"
	got := run(t, true, ready, func(c *Child) {
		for i, s := range sigs {
			_ = c.Signal(s)
			if !waitUntil(5*time.Second, func() bool {
				b, _ := os.ReadFile(log)
				return strings.Count(string(b), "\n") > i
			}) {
				t.Errorf("the command did not trap %v", s)
			}
		}
		time.Sleep(100 * time.Millisecond) // a second delivery would show by now
		// Stop signals stop the command (here its sleep), not the
		// supervisor, which would not see the runner die while stopped.
		for _, s := range []syscall.Signal{syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU} {
			_ = c.Signal(s)
			time.Sleep(20 * time.Millisecond)
			if st := stat(c.Cmd.Process.Pid); st == nil || st[0] == "T" {
				t.Errorf("after %v, the supervisor's stat = %q; want it running", s, st)
			}
			_ = c.Signal(syscall.SIGCONT)
		}
		if err := os.WriteFile(stop, nil, 0o600); err != nil {
			t.Error(err)
		}
	}, "sh", "-c", body)
	if got != "exit 5" {
		t.Errorf("supervised command ended with %s; want exit 5 (its own)", got)
	}
	b, _ := os.ReadFile(log)
	var want strings.Builder
	for _, s := range sigs {
		want.WriteString(strings.TrimPrefix(unixName(s), "SIG") + "\n")
	}
	if string(b) != want.String() {
		t.Errorf("the command trapped\n%s; want each signal once:\n%s", b, want.String())
	}
}

func unixName(s syscall.Signal) string {
	names := map[syscall.Signal]string{
		syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT", syscall.SIGHUP: "SIGHUP", syscall.SIGQUIT: "SIGQUIT",
		syscall.SIGUSR1: "SIGUSR1", syscall.SIGUSR2: "SIGUSR2", syscall.SIGALRM: "SIGALRM", syscall.SIGWINCH: "SIGWINCH",
	}
	return names[s]
}

// TestStreamsPassThrough: standard input, output and error reach the
// command as they are: a megabyte through pipes both ways, complete.
func TestStreamsPassThrough(t *testing.T) {
	in := make([]byte, 1<<20)
	_, _ = rand.Read(in)
	var out, errOut bytes.Buffer
	cmd := exec.Command("sh", "-c", "cat; echo done >&2")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &out, &errOut
	c, err := Start(cmd, true)
	if err != nil {
		t.Fatal(err)
	}
	checkSupervised(t, c, true)
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), in) || errOut.String() != "done\n" {
		t.Errorf("output: %d bytes (equal: %v), stderr %q; want the %d bytes of input, done", out.Len(), bytes.Equal(out.Bytes(), in), errOut.String(), len(in))
	}
}

// openPTY opens a new pseudo-terminal, its master and its terminal, as
// posix_openpt, unlockpt and ptsname do (the root module keeps no
// dependency for it; cmd/lanectl's tests use github.com/creack/pty).
func openPTY() (ptm, tty *os.File, err error) {
	ptm, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	fd := int(ptm.Fd())
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err == nil {
		err = unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0)
	}
	if err == nil {
		tty, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	}
	if err != nil {
		ptm.Close()
		return nil, nil, err
	}
	return ptm, tty, nil
}

// TestTerminalPassesThrough: a terminal on the standard streams is the
// command's terminal, supervised or not.
func TestTerminalPassesThrough(t *testing.T) {
	for _, supervised := range []bool{false, true} {
		ptm, tty, err := openPTY()
		if err != nil {
			t.Skipf("SKIP: no pseudo-terminal: %v", err)
		}
		useSupervisor = supervised
		cmd := exec.Command("sh", "-c", "test -t 0 && test -t 1 && test -t 2 && tty")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		c, err := Start(cmd, true)
		useSupervisor = true
		if err != nil {
			t.Fatal(err)
		}
		werr := c.Wait()
		tty.Close()
		out, _ := io.ReadAll(ptm) // EIO once the last process with the terminal is gone
		ptm.Close()
		if werr != nil || strings.TrimSpace(string(out)) != tty.Name() {
			t.Errorf("supervised %v: %v, %q; want %s", supervised, werr, out, tty.Name())
		}
	}
}

// TestCommandSeesWhatItWould: the command's environment, open descriptors
// (ExtraFiles at their numbers, nothing of the supervisor's) and signal
// dispositions and mask are those it gets when started directly. Each is
// read by a program of its own (a shell would add its own descriptors and
// masks, at moments of its own).
func TestCommandSeesWhatItWould(t *testing.T) {
	show := func(supervised bool, argv ...string) string {
		defer func(old bool) { useSupervisor = old }(useSupervisor)
		useSupervisor = supervised
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var out bytes.Buffer
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), "SUPERVISE_TEST_VAR=x", "SUPERVISE_TEST_VAR=y")
		cmd.Stdout = &out
		cmd.ExtraFiles = []*os.File{r}
		_, _ = w.WriteString("extra\n")
		c, err := Start(cmd, true)
		w.Close()
		if err != nil {
			t.Fatal(err)
		}
		checkSupervised(t, c, supervised)
		if err := c.Wait(); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(argv, "/proc/self/status") {
			var keep []string
			for _, l := range strings.Split(out.String(), "\n") {
				if strings.HasPrefix(l, "Sig") && !strings.HasPrefix(l, "SigQ") {
					keep = append(keep, l)
				}
			}
			return strings.Join(keep, "\n")
		}
		return out.String()
	}
	for _, argv := range [][]string{
		{"env"},
		{"ls", "/proc/self/fd"},
		{"cat", "/proc/self/status"},
		{"cat", "/proc/self/fd/3"},
	} {
		direct, supervised := show(false, argv...), show(true, argv...)
		if direct != supervised {
			t.Errorf("%q started directly:\n%s\nsupervised:\n%s", argv, direct, supervised)
		}
		if argv[0] == "env" && (strings.Contains(supervised, supervisorEnv) || !strings.Contains(supervised, "SUPERVISE_TEST_VAR=y\n")) {
			t.Errorf("supervised command's environment:\n%s\nwant SUPERVISE_TEST_VAR=y and no %s", supervised, supervisorEnv)
		}
		if slices.Contains(argv, "/proc/self/fd/3") && supervised != "extra\n" {
			t.Errorf("descriptor 3 of the supervised command holds %q; want extra", supervised)
		}
	}
}

// TestIgnoredSignalsStayIgnored: a signal ignored when the runner started
// (SIGHUP under nohup, SIGINT in a background job) is ignored in the
// command, supervised or not.
func TestIgnoredSignalsStayIgnored(t *testing.T) {
	status := func(mode string) string {
		out := filepath.Join(t.TempDir(), "out")
		r := exec.Command("sh", "-c", `trap "" HUP INT; exec "$@"`, "sh", os.Args[0], "sh", "-c", `exec grep -E '^Sig(Blk|Ign)' /proc/self/status > "$0"`, out)
		r.Env = append(os.Environ(), runnerEnv+"="+mode, "GORACE=atexit_sleep_ms=0")
		if b, err := r.CombinedOutput(); err != nil {
			t.Fatalf("runner: %v: %s", err, b)
		}
		b, _ := os.ReadFile(out)
		return string(b)
	}
	// What this test process ignores already (make ignores some) stays
	// ignored in its children; the runner adds SIGHUP and SIGINT (3).
	self, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	var inherited uint64
	if m := regexp.MustCompile(`(?m)^SigIgn:\t([0-9a-f]+)$`).FindSubmatch(self); m != nil {
		inherited, _ = strconv.ParseUint(string(m[1]), 16, 64)
	}
	want := fmt.Sprintf("SigIgn:\t%016x\n", inherited|3)
	direct, supervised := status("direct"), status("supervised")
	if direct != supervised || !strings.Contains(direct, want) {
		t.Errorf("ignored signals, started directly:\n%s\nsupervised:\n%s\nwant the same, %q (what this test ignores, and SIGHUP and SIGINT)", direct, supervised, want)
	}
}

// TestStartErrorsAreTheCommands: a command that cannot be started fails
// Start with the error it would give started directly.
func TestStartErrorsAreTheCommands(t *testing.T) {
	dir := t.TempDir()
	noExec := filepath.Join(dir, "noexec")
	if err := os.WriteFile(noExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noFormat := filepath.Join(dir, "noformat")
	if err := os.WriteFile(noFormat, []byte{0x7f, 'E', 'L', 'F', 0, 0, 0, 0}, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cmd  func() *exec.Cmd
		is   error
	}{
		{"missing", func() *exec.Cmd { return exec.Command(filepath.Join(dir, "missing")) }, fs.ErrNotExist},
		{"not in PATH", func() *exec.Cmd { return exec.Command("lanes-no-such-command") }, exec.ErrNotFound},
		{"not executable", func() *exec.Cmd { return exec.Command(noExec) }, fs.ErrPermission},
		{"not a program", func() *exec.Cmd { return exec.Command(noFormat) }, syscall.ENOEXEC},
		{"no such directory", func() *exec.Cmd {
			c := exec.Command("true")
			c.Dir = filepath.Join(dir, "missing")
			return c
		}, fs.ErrNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := func(supervised bool) error {
				defer func(old bool) { useSupervisor = old }(useSupervisor)
				useSupervisor = supervised
				c, err := Start(tc.cmd(), true)
				if err == nil {
					_ = c.Wait()
				}
				return err
			}
			direct, supervised := start(false), start(true)
			if supervised == nil || direct == nil || supervised.Error() != direct.Error() || !errors.Is(supervised, tc.is) {
				t.Errorf("Start() = %v supervised, %v directly; want the same error, %v", supervised, direct, tc.is)
			}
		})
	}
}

// BenchmarkStartWait measures what the supervisor adds to starting and
// waiting for a command: go test -run '^$' -bench StartWait ./internal/supervise/
func BenchmarkStartWait(b *testing.B) {
	truePath, err := exec.LookPath("true")
	if err != nil {
		b.Skip(err)
	}
	for _, supervised := range []bool{false, true} {
		name := "direct"
		if supervised {
			name = "supervised"
		}
		b.Run(name, func(b *testing.B) {
			defer func(old bool) { useSupervisor = old }(useSupervisor)
			useSupervisor = supervised
			for b.Loop() {
				c, err := Start(exec.Command(truePath), true)
				if err != nil {
					b.Fatal(err)
				}
				if err := c.Wait(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestLeftoversGetTermFirst: what a command leaves running when it exits
// gets SIGTERM and time to finish (a nested `lanectl lock` releases its
// lease then) before anything is killed; one that ignores SIGTERM is
// killed all the same before Wait returns.
func TestLeftoversGetTermFirst(t *testing.T) {
	dir := t.TempDir()
	polite := script(t, dir, "polite", `trap 'echo cleaned > "$1/cleaned"; exit 0' TERM
echo $$ > "$1/polite.pid"
while :; do sleep 0.01; done`)
	stubborn := script(t, dir, "stubborn", `trap '' TERM
echo $$ > "$1/stubborn.pid"
while :; do sleep 0.01; done`)
	cmd := exec.Command("sh", "-c", `"$1" "$0" & "$2" "$0" &
while [ ! -s "$0/polite.pid" ] || [ ! -s "$0/stubborn.pid" ]; do sleep 0.01; done`, dir, polite, stubborn)
	c, err := Start(cmd, true)
	if err != nil {
		t.Fatal(err)
	}
	checkSupervised(t, c, true)
	if err := c.Wait(); err != nil {
		t.Fatalf("Wait() = %v; want the command's exit 0", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cleaned")); err != nil || string(b) != "cleaned\n" {
		t.Errorf("the leftover that traps SIGTERM wrote %q (%v); want it told to stop and given time to clean up", b, err)
	}
	for _, n := range []string{"polite", "stubborn"} {
		if p := pidIn(filepath.Join(dir, n+".pid")); p == 0 || !dead(p) {
			t.Errorf("%s (%d) still runs once Wait returned", n, p)
		}
	}
}

// TestRunnerKilledDuringTheGraceEndsIt: a runner killed while what its
// command left behind has its grace (the command exited; the leftover
// ignores SIGTERM) takes the leftover at once, as when it dies while the
// command runs: no lease covers the leftover any more. The grace is a
// minute here, far longer than the test waits.
func TestRunnerKilledDuringTheGraceEndsIt(t *testing.T) {
	dir := t.TempDir()
	stubborn := script(t, dir, "stubborn", `trap '' TERM
echo $$ > "$1/stubborn.pid"
while :; do sleep 0.01; done`)
	r := exec.Command(os.Args[0], "sh", "-c", `"$1" "$0" &
while [ ! -s "$0/stubborn.pid" ]; do sleep 0.01; done
touch "$0/exiting"`, dir, stubborn)
	r.Env = append(os.Environ(), runnerEnv+"=supervised", graceEnv+"=1m", "GORACE=atexit_sleep_ms=0")
	r.Stdout, r.Stderr = os.Stdout, os.Stderr
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = r.Process.Kill()
		_ = r.Wait()
	})
	if !waitUntil(10*time.Second, func() bool {
		return fileExists(filepath.Join(dir, "exiting")) && pidIn(filepath.Join(dir, "stubborn.pid")) > 0
	}) {
		t.Fatal("the command did not start its leftover and exit")
	}
	p := pidIn(filepath.Join(dir, "stubborn.pid"))
	killOnCleanup(t, p)
	_ = r.Process.Signal(syscall.SIGKILL)
	_ = r.Wait()
	if !waitUntil(10*time.Second, func() bool { return dead(p) }) {
		t.Errorf("the leftover (%d) still runs 10s after its runner was killed in its minute of grace; want it killed at once", p)
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
