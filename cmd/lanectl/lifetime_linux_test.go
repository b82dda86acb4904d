package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// familyScript is a command whose writing is done by processes it started:
// a writer in its process group and one that left it (setsid), each
// appending "$1" (and "$1-escaped") to the log $2 every 10ms. It writes the
// pids of the shell, the writer and the escaped writer to $3.sh, $3.writer
// and $3.escaped, and waits.
const familyScript = `echo $$ > "$3.sh"
sh -c 'echo $$ > "$2.writer"; while :; do echo "$0" >> "$1"; sleep 0.01; done' "$1" "$2" "$3" &
setsid sh -c 'echo $$ > "$2.escaped"; while :; do echo "$0-escaped" >> "$1"; sleep 0.01; done' "$1" "$2" "$3" &
wait`

// familyWriting waits until the family whose pid files start with pids
// writes to log, and returns the pids of the shell and its writers; they
// are killed when t ends if they still run (only if the test failed).
func familyWriting(t *testing.T, log, pids string) []int {
	t.Helper()
	var all []int
	eventually(t, "the command and its writers run and write", func() bool {
		all = all[:0]
		for _, n := range []string{"sh", "writer", "escaped"} {
			if p := pidIn(pids + "." + n); p > 0 {
				all = append(all, p)
			}
		}
		b, _ := os.ReadFile(log)
		return len(all) == 3 && strings.Count(string(b), "\n") > 4
	})
	for _, p := range all {
		t.Cleanup(func() { _ = syscall.Kill(p, syscall.SIGKILL) })
	}
	return all
}

// exited reports whether process pid has exited: it is gone, or a zombie
// that no one reaped yet.
func exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) == 0 || f[0] == "Z" || f[0] == "X"
}

// goneSoon fails t unless every process of pids has exited within a
// second.
func goneSoon(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for _, p := range pids {
		for !exited(p) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d (of %v: the shell, its writer, its escaped writer) runs 1s after its runner was killed", p, pids)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func requireSetsid(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skipf("SKIP: no setsid command (%v)", err)
	}
}

// TestLockKilledTakesTheCommandsChildren is issue 17, part 1, for lock: a
// lanectl lock killed with SIGKILL takes not only its command but what the
// command started, in its group or out of it (setsid), at once; the next
// holder, granted the key after the TTL, writes after every one of them.
// On miniredis and real Redis.
func TestLockKilledTakesTheCommandsChildren(t *testing.T) {
	requireSetsid(t)
	forEachServer(t, func(t *testing.T, s *server) {
		dir := t.TempDir()
		log, pids := filepath.Join(dir, "log"), filepath.Join(dir, "pid")
		// TTL 4s: the first keeps w until the second waits, even starved on
		// a loaded machine.
		first := startBin(t, s.args("lock", "--ttl", "4s", "w", "--", "sh", "-c", familyScript, "sh", "first", log, pids)...)
		family := familyWriting(t, log, pids)
		second := startBin(t, s.args("lock", "--ttl", "10s", "w", "--", "sh", "-c", `echo second >> "$0"`, log)...)
		eventually(t, "the second lock waits for w", func() bool {
			snap := s.inspect(t)
			return len(snap.Keys) == 1 && len(snap.Keys[0].Waiters) == 1
		})
		first.signal(t, syscall.SIGKILL)
		first.wait(t)
		goneSoon(t, family)
		if code := second.wait(t); code != 0 {
			t.Fatalf("second lock = %d: %s", code, second.stderr)
		}
		checkFirstThenSecond(t, logLines(t, log), "first", "second")
		s.assertEmpty(t)
	})
}

// TestBatchRunnerKilledTakesTheToolsChildren is the same case for a
// lanectl batch tool, as issue 17 reports it: the tool's writing is done
// by the processes it started.
func TestBatchRunnerKilledTakesTheToolsChildren(t *testing.T) {
	requireSetsid(t)
	forEachServer(t, func(t *testing.T, s *server) {
		dir := t.TempDir()
		log, pids := filepath.Join(dir, "log"), filepath.Join(dir, "pid")
		d := newBatchDir(t, fmt.Sprintf(`
[tools.writer]
command = ["sh", "-c", %q, "sh", "first", %q, %q]
concurrency = { key = "w" }

[tools.mark]
command = ["sh", "-c", "echo second >> \"$0\"", %q]
concurrency = { key = "w" }
`, familyScript, log, pids, log))
		// TTL 4s: the first keeps w until the second waits, even starved on
		// a loaded machine.
		first := startBin(t, s.args("batch", "--ttl", "4s", "--tools", d.tools, "--calls", d.calls(t, "anthropic", toolCall{"c1", "writer", `{}`}))...)
		family := familyWriting(t, log, pids)
		second := startBin(t, s.args("batch", "--json", "--tools", d.tools, "--calls", d.calls(t, "openai-chat", toolCall{"c2", "mark", `{}`}))...)
		eventually(t, "the second batch waits for w", func() bool {
			snap := s.inspect(t)
			return len(snap.Keys) == 1 && len(snap.Keys[0].Waiters) == 1
		})
		first.signal(t, syscall.SIGKILL)
		first.wait(t)
		goneSoon(t, family)
		if code := second.wait(t); code != 0 {
			t.Fatalf("second batch = %d: %s", code, second.stderr)
		}
		checkOutcomes(t, decodeBatch(t, second.stdout.String()), []want{{"c2", "mark", "ok", ""}})
		checkFirstThenSecond(t, logLines(t, log), "first", "second")
		s.assertEmpty(t)
	})
}

// TestMCPServeKilledTakesTheToolsChildren is the same case for a command
// tool of `lanectl mcp serve`, under the limit-1 lock key doc:w that its
// lock_keys name: SIGKILL to the proxy, while the tool runs for a tools/call
// of its MCP client, takes the tool and what it started at once; a lanectl
// lock waiting for that key writes after every one of them. On miniredis
// and real Redis.
func TestMCPServeKilledTakesTheToolsChildren(t *testing.T) {
	requireSetsid(t)
	forEachServer(t, func(t *testing.T, s *server) {
		dir := t.TempDir()
		log, pids := filepath.Join(dir, "log"), filepath.Join(dir, "pid")
		tools := filepath.Join(dir, "tools.toml")
		writeFile(t, tools, fmt.Sprintf(`
[tools.writer]
command = ["sh", "-c", %q, "sh", "first", %q, %q]
lock_keys = ["doc:{id}"]
`, familyScript, log, pids), 0o600)

		var stderr syncBuffer
		// TTL 4s: the proxy keeps lock:doc:w until the lock waits, even
		// starved on a loaded machine.
		proxy := exec.Command(lanectlBin, s.args("mcp", "serve", "--ttl", "4s", "--tools", tools)...)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "LANES_") {
				proxy.Env = append(proxy.Env, kv)
			}
		}
		proxy.Stderr = &stderr
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: proxy}, nil)
		if err != nil {
			t.Fatalf("connecting to lanectl mcp serve: %v; its stderr: %s", err, &stderr)
		}
		t.Cleanup(func() {
			_ = proxy.Process.Kill() // killed already, unless the test stopped early
			_ = cs.Close()           // reaps it; its error says only that it was killed
		})
		call := startCall(cs, "writer", map[string]any{"id": "w"})
		family := familyWriting(t, log, pids)
		second := startBin(t, s.args("lock", "--ttl", "10s", "lock:doc:w", "--", "sh", "-c", `echo second >> "$0"`, log)...)
		eventually(t, "the lock waits for lock:doc:w", func() bool { h, w := s.queue(t, "lock:doc:w"); return h == 1 && w == 1 })

		if err := proxy.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-call.done
		if call.err == nil {
			t.Errorf("tools/call = %+v after its server was killed; want an error", call.res)
		}
		goneSoon(t, family)
		if code := second.wait(t); code != 0 {
			t.Fatalf("lock after the killed proxy = %d: %s", code, second.stderr)
		}
		checkFirstThenSecond(t, logLines(t, log), "first", "second")
		s.assertEmpty(t)
	})
}

// TestLockOnATerminalHasNoSupervisor: with a terminal on standard input,
// lock runs its command as it always did, without a supervisor: its own
// child, in its process group, with the terminal as standard input.
func TestLockOnATerminalHasNoSupervisor(t *testing.T) {
	ptm, tty, err := pty.Open()
	if err != nil {
		t.Skipf("SKIP: no pseudo-terminal: %v", err)
	}
	defer ptm.Close()
	go func() { _, _ = io.Copy(io.Discard, ptm) }()
	s := newMiniredis(t)
	out := filepath.Join(t.TempDir(), "out")
	p := &proc{cmd: exec.Command(lanectlBin, s.args("lock", "k", "--", "sh", "-c", `test -t 0 && echo "$PPID $(ps -o pgid= -p $$)" > "$0"`, out)...), stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = tty, p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	if code := p.wait(t); code != 0 {
		t.Fatalf("lock = %d: %s", code, p.stderr)
	}
	b, _ := os.ReadFile(out)
	want := fmt.Sprintf("%d %d", p.cmd.Process.Pid, syscall.Getpgrp())
	if got := strings.Join(strings.Fields(string(b)), " "); got != want {
		t.Errorf("the command's parent and process group = %q; want lanectl's pid and group, %q, and the terminal on its standard input", got, want)
	}
}
