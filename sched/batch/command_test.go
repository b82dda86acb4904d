package batch_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched"
	"github.com/lanes-dev/lanes/sched/batch"
)

// inv is an Invocation with every field set.
var inv = sched.Invocation{
	CallID: "toolu_01", Tool: "rfd_renumber", Args: []byte(`{"rfd": 129, "note": "a\nb"}`),
	Operation: 2, Tenant: "acme", Entry: "run-1/toolu_01#2",
	Tokens: map[string]uint64{"lock:draft:1": 3, "concurrency:rfd": 7, "tenant:acme": 12},
}

func TestCommandArgumentsEnvironmentResult(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("LANES_TOKENS", "inherited") // replaced, not kept
	sh := script(t, filepath.Join(dir, "tool"), `cat > "$1/stdin"
for v in LANES_CALL_ID LANES_TOOL LANES_TENANT LANES_ENTRY LANES_TOKENS LANES_OPERATION; do
  eval "printf '%s=%s\n' $v \"\$$v\"" >> "$1/env"
done
env | grep -c '^LANES_TOKENS=' > "$1/count"
printf 'the result\n'`)
	out, err := batch.Command([]string{sh, dir}, "")(context.Background(), inv)
	if err != nil || out != "the result" {
		t.Fatalf("Command() = %q, %v; want %q, nil", out, err, "the result")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "stdin")); string(b) != string(inv.Args) {
		t.Errorf("the command read %q on stdin; want %q", b, inv.Args)
	}
	want := strings.Join([]string{
		"LANES_CALL_ID=toolu_01", "LANES_TOOL=rfd_renumber", "LANES_TENANT=acme", "LANES_ENTRY=run-1/toolu_01#2",
		"LANES_TOKENS=concurrency:rfd=7,lock:draft:1=3,tenant:acme=12", "LANES_OPERATION=2", "",
	}, "\n")
	if b, _ := os.ReadFile(filepath.Join(dir, "env")); string(b) != want {
		t.Errorf("the command's environment:\n%s\nwant:\n%s", b, want)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "count")); string(b) != "1\n" {
		t.Errorf("LANES_TOKENS appears %q times; want once", b)
	}
}

func TestCommandTrimsOneNewline(t *testing.T) {
	for _, tt := range []struct{ printf, want string }{
		{`a\n\n`, "a\n"}, {`a`, "a"}, {`\n`, ""}, {`a\r\n`, "a\r"}, {``, ""},
	} {
		out, err := batch.Command([]string{"printf", tt.printf}, "")(context.Background(), inv)
		if err != nil || out != tt.want {
			t.Errorf("printf %q = %q, %v; want %q", tt.printf, out, err, tt.want)
		}
	}
}

func TestCommandExitStatus(t *testing.T) {
	sh := script(t, filepath.Join(t.TempDir(), "fail"), `echo partial; echo "first problem" >&2; echo "second problem" >&2; exit 3`)
	out, err := batch.Command([]string{sh}, "")(context.Background(), inv)
	assertOneLine(t, err)
	if want := "exit status 3: first problem; second problem"; err.Error() != want || out != "partial" {
		t.Errorf("Command() = %q, %q; want %q, %q", out, err, "partial", want)
	}
}

func TestCommandStderrTail(t *testing.T) {
	sh := script(t, filepath.Join(t.TempDir(), "noisy"), `i=0; while [ $i -lt 300 ]; do echo "noise line $i" >&2; i=$((i+1)); done; echo THE-END >&2; exit 1`)
	_, err := batch.Command([]string{sh}, "")(context.Background(), inv)
	assertOneLine(t, err)
	msg := err.Error()
	if !strings.HasPrefix(msg, "exit status 1: …") || !strings.HasSuffix(msg, "THE-END") || len(msg) > 2*batch.StderrTail+32 {
		t.Errorf("Command() = %q (%d bytes); want exit status 1, the last %d bytes of stderr (lines joined by semicolons) ending in THE-END", msg, len(msg), batch.StderrTail)
	}
}

func TestCommandNotFound(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "no-such-tool")
	for _, argv0 := range []string{missing, "lanes-test-no-such-command"} {
		out, err := batch.Command([]string{argv0, "x"}, "")(context.Background(), inv)
		assertOneLine(t, err)
		if want := "command not found: " + argv0; err.Error() != want || out != "" {
			t.Errorf("Command(%s) = %q, %v; want %q", argv0, out, err, want)
		}
	}
	// A relative path is taken against dir.
	_, err := batch.Command([]string{"./no-such-tool"}, dir)(context.Background(), inv)
	if want := "command not found: " + missing; err == nil || err.Error() != want {
		t.Errorf("Command(./no-such-tool) in %s = %v; want %q", dir, err, want)
	}
}

func TestCommandNotExecutable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := batch.Command([]string{path}, "")(context.Background(), inv)
	assertOneLine(t, err)
	if want := "cannot run " + path + ": permission denied"; err.Error() != want {
		t.Errorf("Command(not executable) = %v; want %q", err, want)
	}
}

func TestCommandOutputLimit(t *testing.T) {
	n := strconv.Itoa(batch.MaxOutput + 1)
	out, err := batch.Command([]string{"head", "-c", n, "/dev/zero"}, "")(context.Background(), inv)
	if err == nil || !strings.Contains(err.Error(), "more than 16 MiB") || out != "" {
		t.Errorf("Command(%s bytes of output) = %d bytes, %v; want an error saying more than 16 MiB", n, len(out), err)
	}
	out, err = batch.Command([]string{"head", "-c", strconv.Itoa(batch.MaxOutput), "/dev/zero"}, "")(context.Background(), inv)
	if err != nil || len(out) != batch.MaxOutput {
		t.Errorf("Command(16 MiB of output) = %d bytes, %v; want all of it", len(out), err)
	}
}

// runUntilReady starts body on a context it cancels once the file ready
// holds a pid, and returns that pid and what body returned.
func runUntilReady(t *testing.T, body sched.Body, ready string) (int, string, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := body(ctx, inv)
		done <- result{out, err}
	}()
	var pid int
	eventually(t, "the command writes its pid", func() bool {
		b, err := os.ReadFile(ready)
		if err == nil && strings.HasSuffix(string(b), "\n") {
			pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		return err == nil && pid > 0
	})
	cancel()
	select {
	case r := <-done:
		return pid, r.out, r.err
	case <-time.After(30 * time.Second):
		t.Fatal("the body did not return within 30s of its context's cancel")
		return 0, "", nil
	}
}

// gone reports whether process pid has ended: it does not exist, or it is
// a zombie waiting for its new parent to reap it.
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return os.IsNotExist(err)
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(rest, "Z")
}

// TestCommandCancelKillsChild cancels the context of a command that runs
// sleep 60: sleep gets SIGTERM and is gone when the body returns.
func TestCommandCancelKillsChild(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "pid")
	sh := script(t, filepath.Join(dir, "sleeper"), `echo $$ > "$1"; exec sleep 60`)
	pid, _, err := runUntilReady(t, batch.Command([]string{sh, ready}, ""), ready)
	assertOneLine(t, err)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "killed by SIGTERM") {
		t.Errorf("Command() cancelled = %v; want context.Canceled, killed by SIGTERM", err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kill(%d, 0) after the body returned = %v; want ESRCH: sleep still runs", pid, err)
	}
}

// TestCommandCancelKillsProcessGroup cancels a script that runs sleep 60 in
// the background and waits for it: the signal reaches its whole process
// group, sleep included.
func TestCommandCancelKillsProcessGroup(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "pid")
	sh := script(t, filepath.Join(dir, "parent"), `sleep 60 & echo $! > "$1"; wait`)
	pid, _, err := runUntilReady(t, batch.Command([]string{sh, ready}, ""), ready)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Command() cancelled = %v; want context.Canceled", err)
	}
	eventually(t, "the background sleep is gone", func() bool { return gone(pid) })
}

// TestCommandIgnoringSIGTERMIsKilled cancels a command that ignores
// SIGTERM: it gets SIGKILL KillAfter later.
func TestCommandIgnoringSIGTERMIsKilled(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skipf("waits %v for SIGKILL", batch.KillAfter)
	}
	dir := t.TempDir()
	ready := filepath.Join(dir, "pid")
	sh := script(t, filepath.Join(dir, "stubborn"), `trap '' TERM; echo $$ > "$1"; exec sleep 60`)
	pid, _, err := runUntilReady(t, batch.Command([]string{sh, ready}, ""), ready)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "killed by SIGKILL") {
		t.Errorf("Command() cancelled, SIGTERM ignored = %v; want context.Canceled, killed by SIGKILL", err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kill(%d, 0) after the body returned = %v; want ESRCH", pid, err)
	}
}

// TestCommandChildHoldingOutput runs the case of issue 17: a command that
// exits 0 at once while a child it started in the background keeps its
// standard output open. The status follows the command's own exit (ok, its
// output kept), the child is killed with the command's process group, and
// the body returns within the 1s timeout of the tool: the child
// does not make it a timeout that did not happen.
func TestCommandChildHoldingOutput(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	sh := script(t, filepath.Join(dir, "daemon"), `sleep 30 & echo $! > "$1"; echo started`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	out, err := batch.Command([]string{sh, pidFile}, "")(ctx, inv)
	if out != "started" || err != nil || ctx.Err() != nil {
		t.Errorf("Command() = %q, %v (context: %v); want started, nil, before the 1s timeout", out, err, ctx.Err())
	}
	b, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 {
		t.Fatalf("pid file holds %q", b)
	}
	eventually(t, "the background sleep is gone", func() bool { return gone(pid) })
}

// TestCommandEscapedChildHoldingOutput runs a command whose child leaves
// its process group (setsid) and keeps the output open: the status follows
// the command's exit, with what it wrote. On Linux the command's supervisor
// kills the child when the command exits, before the body returns;
// elsewhere it cannot be killed with the group, and the output is read for
// OutputDrain at most.
func TestCommandEscapedChildHoldingOutput(t *testing.T) {
	setsid, err := exec.LookPath("setsid")
	if err != nil {
		t.Skipf("SKIP: no setsid command (%v)", err)
	}
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	sh := script(t, filepath.Join(dir, "escape"), `"$2" sh -c 'echo $$ > "$1"; exec sleep 30' sh "$1" & echo started; while [ ! -s "$1" ]; do sleep 0.01; done`)
	out, err := batch.Command([]string{sh, pidFile, setsid}, "")(context.Background(), inv)
	b, _ := os.ReadFile(pidFile)
	if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid > 0 {
		defer syscall.Kill(pid, syscall.SIGKILL)
		if runtime.GOOS == "linux" && !gone(pid) {
			t.Errorf("the escaped child %d runs once the body returned; want it killed by the command's supervisor", pid)
		}
	}
	if out != "started" || err != nil {
		t.Errorf("Command() = %q, %v; want started, nil", out, err)
	}
}

func TestCommandContextDoneBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	marker := filepath.Join(t.TempDir(), "ran")
	_, err := batch.Command([]string{"touch", marker}, "")(ctx, inv)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Command() on a done context = %v; want context.Canceled", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran on a done context")
	}
}

// eventually polls cond until it holds, or fails t after 20s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCommandBackgroundChildGoesWithIt runs a command that leaves a child
// in the background (its output closed) and exits at once: the child is
// killed when the body returns, so nothing of the command runs after its
// lanes pass on.
func TestCommandBackgroundChildGoesWithIt(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	sh := script(t, filepath.Join(dir, "detach"), `sleep 60 >/dev/null 2>&1 </dev/null & echo $! > "$1"; echo started`)
	out, err := batch.Command([]string{sh, pidFile}, "")(context.Background(), sched.Invocation{CallID: "c", Tool: "t", Args: []byte(`{}`)})
	if err != nil || out != "started" {
		t.Fatalf("Command() = %q, %v; want started", out, err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the background sleep is gone", func() bool { return gone(pid) })
}

// runLeased runs body with inv's lease fields set to lost and deadline,
// on a context that never ends, and returns what it returned; once the
// file ready exists (unless ready is ""), it calls onReady. It fails t
// if the body does not return within 20s (it would not without a signal
// from the lease's schedule).
func runLeased(t *testing.T, body sched.Body, lost chan struct{}, deadline time.Time, ready string, onReady func()) (string, error) {
	t.Helper()
	lv := inv
	lv.Lost, lv.Deadline, lv.Margin = lost, func() time.Time { return deadline }, 100*time.Millisecond
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := body(context.Background(), lv)
		done <- result{out, err}
	}()
	if ready != "" {
		eventually(t, "the command runs", func() bool { return fileExists(ready) })
		onReady()
	}
	select {
	case r := <-done:
		return r.out, r.err
	case <-time.After(20 * time.Second):
		t.Fatal("the body did not return within 20s: its command was not stopped")
		return "", nil
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestCommandLeaseLostKillsAtOnce closes Invocation.Lost under a command
// that ignores SIGTERM: its group gets SIGKILL at once, without waiting
// KillAfter, since its lanes may pass on a margin later.
func TestCommandLeaseLostKillsAtOnce(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	sh := script(t, filepath.Join(dir, "stubborn"), `trap '' TERM; touch "$1"; while :; do sleep 0.01; done`)
	lost := make(chan struct{})
	_, err := runLeased(t, batch.Command([]string{sh, ready}, ""), lost, time.Now().Add(time.Hour), ready, func() { close(lost) })
	assertOneLine(t, err)
	if !strings.Contains(err.Error(), "stopped: SIGKILL: its lease was lost: killed by SIGKILL") {
		t.Errorf("Command() with its lease lost = %v; want stopped: SIGKILL: its lease was lost: killed by SIGKILL", err)
	}
}

// TestCommandLeaseDeadlineSendsSIGTERM runs a command under a lease whose
// local deadline is less than the margin away: it gets SIGTERM (not
// SIGKILL), a chance to stop cleanly before the lease is lost. The signal
// may come before the shell set its trap; then SIGTERM kills it.
func TestCommandLeaseDeadlineSendsSIGTERM(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	sh := script(t, filepath.Join(dir, "graceful"), `trap 'echo term > "$1"; exit 3' TERM; while :; do sleep 0.01; done`)
	_, err := runLeased(t, batch.Command([]string{sh, marker}, ""), make(chan struct{}), time.Now().Add(50*time.Millisecond), "", nil)
	assertOneLine(t, err)
	b, _ := os.ReadFile(marker)
	trapped := strings.Contains(err.Error(), "exit status 3") && string(b) == "term\n"
	if !strings.Contains(err.Error(), "stopped: SIGTERM: its lease's local deadline was less than 100ms away") ||
		!(trapped || strings.Contains(err.Error(), "killed by SIGTERM")) {
		t.Errorf("Command() near its lease's deadline = %v (marker %q); want stopped: SIGTERM ..., then exit status 3 from its trap or killed by SIGTERM", err, b)
	}
}

// TestCommandEnvironmentEscapes checks the list variables with keys and
// ids that hold their separators (issue 17, part 3): LANES_TOKENS and
// LANES_LINEAGE escape "%", "," and "=", and LANES_NAMESPACE is the run's.
func TestCommandEnvironmentEscapes(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("LANES_NAMESPACE", "inherited")
	t.Setenv("LANES_LINEAGE", "inherited")
	sh := script(t, filepath.Join(dir, "env"), `printf '%s\n%s\n%s\n' "$LANES_TOKENS" "$LANES_LINEAGE" "$LANES_NAMESPACE"`)
	lv := inv
	lv.Entry = "run=1/call,2"
	lv.Tokens = map[string]uint64{"concurrency:a,b=c%d": 1, "lock:k:p,q=r": 2}
	ctx := lanes.WithLineage(context.Background(), []string{"outer%1", "run=1/call,2"})
	out, err := batch.Command([]string{sh}, "")(batch.WithNamespace(ctx, "ns-1"), lv)
	want := "concurrency:a%2Cb%3Dc%25d=1,lock:k:p%2Cq%3Dr=2\nouter%251,run%3D1/call%2C2\nns-1"
	if err != nil || out != want {
		t.Errorf("Command() printed %q, %v; want %q", out, err, want)
	}
	tokens, err := laneenvParseTokens(strings.Split(out, "\n")[0])
	if err != nil || tokens["concurrency:a,b=c%d"] != 1 || tokens["lock:k:p,q=r"] != 2 || len(tokens) != 2 {
		t.Errorf("LANES_TOKENS read back = %v, %v; want both keys with their tokens", tokens, err)
	}
}

// laneenvParseTokens splits a LANES_TOKENS value as a tool would: on ",",
// then on the last "=", then unescaping %2C, %3D and %25.
func laneenvParseTokens(v string) (map[string]uint64, error) {
	out := map[string]uint64{}
	unescape := strings.NewReplacer("%2C", ",", "%3D", "=", "%25", "%")
	for _, item := range strings.Split(v, ",") {
		i := strings.LastIndexByte(item, '=')
		if i < 0 {
			return nil, errors.New("no = in " + item)
		}
		n, err := strconv.ParseUint(item[i+1:], 10, 64)
		if err != nil {
			return nil, err
		}
		out[unescape.Replace(item[:i])] = n
	}
	return out, nil
}

// TestCommandOutputBeforeExitIsKept runs a command that writes 200,000
// bytes and exits while an escaped child (setsid) keeps its output open,
// under a context with a deadline: the drains end early (OutputDrain, or
// half the time left), so that no timeout is reported that did not happen,
// but nothing the command wrote before its exit is cut.
func TestCommandOutputBeforeExitIsKept(t *testing.T) {
	setsid, err := exec.LookPath("setsid")
	if err != nil {
		t.Skipf("SKIP: no setsid command (%v)", err)
	}
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	sh := script(t, filepath.Join(dir, "big"), `"$2" sh -c 'echo $$ > "$1"; exec sleep 30' sh "$1" &
while [ ! -s "$1" ]; do sleep 0.01; done
head -c 200000 /dev/zero | tr '\0' x`)
	// 10s, not 2s: the script (a fork, setsid, 200KB through a pipe) must
	// finish within it though a loaded machine may starve it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := batch.Command([]string{sh, pidFile, setsid}, "")(ctx, inv)
	b, _ := os.ReadFile(pidFile)
	if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid > 0 {
		defer syscall.Kill(pid, syscall.SIGKILL)
	}
	if err != nil || len(out) != 200000 || strings.Trim(out, "x") != "" {
		t.Errorf("Command() = %d bytes, %v; want the 200000 bytes written before the exit", len(out), err)
	}
}
