package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tests of this file send SIGUSR1 to the test process itself, at
// points they control, and run `lanectl batch` in this process: no sleep
// decides where the signal falls. They must not run in parallel with
// another test that pauses a batch in this process.

// sendPauseSignal sends SIGUSR1 to this process and returns once os/signal
// has handed it to every channel registered for it, pausesignal's (the
// batch's) included: its own channel gets it in the same pass, and
// signal.Stop waits for the pass to end.
func sendPauseSignal(t *testing.T) {
	t.Helper()
	seen := make(chan os.Signal, 1)
	signal.Notify(seen, syscall.SIGUSR1)
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		signal.Stop(seen)
		t.Fatal(err)
	}
	select {
	case <-seen:
		signal.Stop(seen)
	case <-time.After(waitFor):
		signal.Stop(seen)
		t.Fatal("SIGUSR1 did not arrive")
	}
}

// A SIGUSR1 that came before the batch started (here: before lanectl's
// command line was even read; in lanectl, any time after its first
// milliseconds) pauses it before any call: every call is interrupted, none
// runs, and the checkpoint is written; --resume runs them. It used to be
// dropped: lanectl listened for it only from the start of the batch
// command, and Go drops a SIGUSR1 that nothing listens for.
func TestBatchPauseSignalBeforeStart(t *testing.T) {
	dir := t.TempDir()
	log, cp := filepath.Join(dir, "exec.log"), filepath.Join(dir, "checkpoint.json")
	d := newBatchDir(t, fmt.Sprintf(`
[tools.read]
command = ["sh", "-c", %q, "sh", %q, "-", "-"]
read_only_hint = true
`, gateScript, log))
	file := d.calls(t, "anthropic", toolCall{"c1", "read", `{}`}, toolCall{"c2", "read", `{}`})
	flags := []string{"batch", "--local", "--json", "--run-id", "early-pause", "--tools", d.tools, "--checkpoint", cp}

	sendPauseSignal(t)
	code, out, stderr := runInProcess(t, append(flags, "--calls", file)...)
	if code != 0 || stderr != "" {
		t.Fatalf("batch after a SIGUSR1 = %d, stderr %q; want 0 and nothing", code, stderr)
	}
	paused := decodeBatch(t, out)
	checkOutcomes(t, paused, []want{{"c1", "read", "interrupted", "the batch paused"}, {"c2", "read", "interrupted", "the batch paused"}})
	if fileExists(log) {
		t.Fatalf("the paused batch ran calls (log %q); want none", logLines(t, log))
	}
	if !fileExists(cp) {
		t.Fatal("no checkpoint written")
	}

	// The command the outcome names resumes the batch as it is (a
	// README trial ran the one it named before, which lacked --tools).
	_, resume, ok := strings.Cut(paused[0].Error, "; lanectl ")
	resume, ok2 := strings.CutSuffix(resume, " runs it")
	wantCmd := fmt.Sprintf("batch --tools %s --resume %s --local", d.tools, cp)
	if !ok || !ok2 || resume != wantCmd {
		t.Fatalf("the interrupted call's outcome = %q; want it to name lanectl %s", paused[0].Error, wantCmd)
	}
	code, out, stderr = runInProcess(t, append(strings.Fields(resume), "--json")...)
	if code != 0 || stderr != "" {
		t.Fatalf("batch --resume = %d, stderr %q; want 0 and nothing", code, stderr)
	}
	checkOutcomes(t, decodeBatch(t, out), []want{{"c1", "read", "ok", ""}, {"c2", "read", "ok", ""}})
}

// A SIGUSR1 that comes when no call is left to start (the last one runs)
// pauses nothing, and stderr says so in one line: the batch runs to its
// end and writes no checkpoint. It used to be silent.
func TestBatchPauseSignalWhenNothingLeft(t *testing.T) {
	dir := t.TempDir()
	log, gate, cp := filepath.Join(dir, "exec.log"), filepath.Join(dir, "gate"), filepath.Join(dir, "checkpoint.json")
	d := newBatchDir(t, fmt.Sprintf(`
[tools.read]
command = ["sh", "-c", %q, "sh", %q, %q, "c2"]
read_only_hint = true
`, gateScript, log, gate))
	file := d.calls(t, "anthropic", toolCall{"c1", "read", `{}`}, toolCall{"c2", "read", `{}`})
	type result struct {
		code        int
		out, stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, out, stderr := runInProcess(t, "batch", "--local", "--json", "--run-id", "late-pause", "--tools", d.tools, "--checkpoint", cp, "--calls", file)
		done <- result{code, out, stderr}
	}()
	eventually(t, "c1 ends and c2 runs", func() bool { return countLines(t, log, "end c1") == 1 && countLines(t, log, "start c2") == 1 })
	sendPauseSignal(t)
	writeFile(t, gate, "", 0o644)
	r := <-done
	if r.code != 0 || r.stderr != nothingToPause+"\n" {
		t.Fatalf("batch = %d, stderr %q; want 0 and %q", r.code, r.stderr, nothingToPause)
	}
	checkOutcomes(t, decodeBatch(t, r.out), []want{{"c1", "read", "ok", ""}, {"c2", "read", "ok", ""}})
	if fileExists(cp) {
		t.Error("a checkpoint was written; want none: nothing was left to pause")
	}
}

// The resume command names the server and namespace this batch's flags
// named (a fresh user's check found a batch of --namespace nsx resumed in
// the namespace default), and never a password.
func TestResumeCommandNamesFlags(t *testing.T) {
	for _, tc := range []struct {
		name   string
		g      globalOptions
		local  bool
		want   string
		secret bool
	}{
		{"from the environment", globalOptions{redisURL: "redis://h:1", urlFromEnv: true, namespace: "nsx"}, false,
			"lanectl batch --tools t.toml --resume '/tmp/my ck.json'", false},
		{"flags", globalOptions{redisURL: "redis://h:1/2", urlFromFlag: true, namespace: "nsx", nsFromFlag: true, allowEviction: true}, false,
			"lanectl --redis redis://h:1/2 --allow-eviction --namespace nsx batch --tools t.toml --resume '/tmp/my ck.json'", false},
		{"a URL file and a CA file", globalOptions{urlFile: "/run/url", urlFileFrom: "--redis-url-file", caFile: "/ca.pem", caFileFrom: "--redis-ca-file"}, false,
			"lanectl --redis-url-file /run/url --redis-ca-file /ca.pem batch --tools t.toml --resume '/tmp/my ck.json'", false},
		{"a password", globalOptions{redisURL: "redis://:s3cret@h:1", urlFromFlag: true}, false,
			"lanectl batch --tools t.toml --resume '/tmp/my ck.json'", true},
		{"local", globalOptions{redisURL: "redis://h:1", urlFromFlag: true, namespace: "nsx", nsFromFlag: true}, true,
			"lanectl --namespace nsx batch --tools t.toml --resume '/tmp/my ck.json' --local", false},
	} {
		o := &batchOptions{global: &tc.g, tools: "t.toml", checkpoint: "/tmp/my ck.json", local: tc.local}
		got, secret := o.resumeCommand()
		// a relative --tools is printed absolute: the command runs from
		// any directory (a new user's trial found it only ran from the
		// same one)
		abs, _ := filepath.Abs("t.toml")
		tc.want = strings.Replace(tc.want, "--tools t.toml", "--tools "+shellWord(abs), 1)
		if got != tc.want || secret != tc.secret {
			t.Errorf("%s: resumeCommand() = %q, %v; want %q, %v", tc.name, got, secret, tc.want, tc.secret)
		}
		if strings.Contains(got, "s3cret") || strings.Contains(o.pausedText(), "s3cret") {
			t.Errorf("%s: %q names the password", tc.name, o.pausedText())
		}
	}
}
