package main

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The tests of this file run the lanectl binary against miniredis and
// against the real Redis server (skipped when none answers).

func TestLockPassesExitStatus(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		for _, tt := range []struct {
			script string
			want   int
		}{{"exit 0", 0}, {"exit 7", 7}, {"exit 69", 69}, {"kill -KILL $$", 128 + 9}} {
			code, _, stderr := runBin(t, s.args("lock", "k", "--", "sh", "-c", tt.script)...)
			if code != tt.want || stderr != "" {
				t.Errorf("lock k -- sh -c %q = %d, stderr %q; want %d and nothing", tt.script, code, stderr, tt.want)
			}
		}
		s.assertEmpty(t)
	})
}

// printEnv prints the LANES_* variables lock sets, "unset" for a missing one.
const printEnv = `printf '%s|%s|%s|%s' "${LANES_ENTRY-unset}" "${LANES_TOKEN-unset}" "${LANES_TOKENS-unset}" "${LANES_NAMESPACE-unset}"`

func TestLockEnvironment(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		var tokens []uint64
		for i := range 2 {
			code, out, stderr := runBin(t, s.args("lock", "k", "--", "sh", "-c", printEnv)...)
			if code != 0 {
				t.Fatalf("run %d: lock = %d, stderr %q; want 0", i, code, stderr)
			}
			f := strings.Split(out, "|")
			if len(f) != 4 {
				t.Fatalf("run %d: the command printed %q; want 4 fields", i, out)
			}
			tok, err := strconv.ParseUint(f[1], 10, 64)
			if f[0] == "unset" || f[0] == "" || err != nil || f[2] != "k="+f[1] || f[3] != s.ns {
				t.Errorf("run %d: LANES_ENTRY|LANES_TOKEN|LANES_TOKENS|LANES_NAMESPACE = %q; want an entry, a token, k=<token>, %s", i, out, s.ns)
			}
			tokens = append(tokens, tok)
		}
		if tokens[1] <= tokens[0] {
			t.Errorf("tokens of two runs = %v; want them increasing", tokens)
		}

		// Two keys: LANES_TOKENS in the order given, no LANES_TOKEN; --id
		// is the entry id.
		code, out, stderr := runBin(t, s.args("lock", "--id", "my-entry", "b", "a", "--", "sh", "-c", printEnv)...)
		if code != 0 {
			t.Fatalf("lock b a = %d, stderr %q; want 0", code, stderr)
		}
		if want := regexp.MustCompile(`^my-entry\|unset\|b=[1-9][0-9]*,a=[1-9][0-9]*\|` + regexp.QuoteMeta(s.ns) + `$`); !want.MatchString(out) {
			t.Errorf("lock --id my-entry b a printed %q; want my-entry|unset|b=TOKEN,a=TOKEN|%s", out, s.ns)
		}
		s.assertEmpty(t)
	})
}

// TestLockExcludes runs three locks on one key at once: their commands
// never overlap.
func TestLockExcludes(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		log := filepath.Join(t.TempDir(), "log")
		script := `echo in >> "$1"; sleep 0.05; echo out >> "$1"`
		var procs []*proc
		for range 3 {
			procs = append(procs, startBin(t, s.args("lock", "k", "--", "sh", "-c", script, "sh", log)...))
		}
		for _, p := range procs {
			if code := p.wait(t); code != 0 {
				t.Fatalf("lock = %d, stderr %q; want 0", code, p.stderr)
			}
		}
		b, _ := os.ReadFile(log)
		if got, want := string(b), strings.Repeat("in\nout\n", 3); got != want {
			t.Errorf("the commands wrote %q; want %q (one at a time)", got, want)
		}
		s.assertEmpty(t)
	})
}

func TestLockWaitRunsOut(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		lease := s.hold(t, "k")
		code, _, stderr := runBin(t, s.args("lock", "--wait", "200ms", "k", "--", "true")...)
		if code != exitWaitTimeout {
			t.Errorf("lock --wait 200ms on a held key = %d; want %d", code, exitWaitTimeout)
		}
		assertOneLine(t, stderr)
		if want := "lanectl: waited 200ms for k: not granted: k: held by test-host:4242 (test) for "; !strings.HasPrefix(stderr, want) || !strings.Contains(stderr, "lease left") {
			t.Errorf("stderr = %q; want it to start %q and say the lease left", stderr, want)
		}
		snap := s.inspect(t)
		if len(snap.Keys) != 1 || len(snap.Keys[0].Waiters) != 0 || snap.Keys[0].Holders[0].ID != lease.ID() {
			t.Errorf("Inspect() = %+v; want k held by the test, no waiter left", snap.Keys)
		}
	})
}

// TestLockSignalWhileWaiting sends SIGTERM (SIGINT) to a lanectl that waits:
// it leaves the queue and exits 143 (130).
func TestLockSignalWhileWaiting(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		s.hold(t, "k")
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
			p := startBin(t, s.args("lock", "k", "--", "true")...)
			eventually(t, "lanectl waits for k", func() bool {
				snap := s.inspect(t)
				return len(snap.Keys) == 1 && len(snap.Keys[0].Waiters) == 1
			})
			p.signal(t, sig)
			if code := p.wait(t); code != 128+int(sig) {
				t.Errorf("lock interrupted by %v while waiting = %d; want %d", sig, code, 128+int(sig))
			}
			assertOneLine(t, p.stderr.String())
			if snap := s.inspect(t); len(snap.Keys) != 1 || len(snap.Keys[0].Waiters) != 0 {
				t.Errorf("after %v, Inspect() = %+v; want no waiter left", sig, snap.Keys)
			}
		}
	})
}

// trapScript traps SIGTERM: it writes "term" to the file $1 and exits $2.
// It touches the file $3 once the trap is set.
const trapScript = `trap 'echo term > "$1"; exit $2' TERM; touch "$3"; while :; do sleep 0.02; done`

// TestLockSignalWhileHolding sends SIGTERM to a lanectl whose command runs:
// the command gets it, lanectl exits with the command's status and the
// lease is released.
func TestLockSignalWhileHolding(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		dir := t.TempDir()
		marker, ready := filepath.Join(dir, "marker"), filepath.Join(dir, "ready")
		p := startBin(t, s.args("lock", "k", "--", "sh", "-c", trapScript, "sh", marker, "3", ready)...)
		eventually(t, "the command runs", func() bool { return fileExists(ready) })
		p.signal(t, syscall.SIGTERM)
		if code := p.wait(t); code != 3 {
			t.Errorf("lock whose command trapped SIGTERM and exited 3 = %d; want 3 (stderr %q)", code, p.stderr)
		}
		if b, _ := os.ReadFile(marker); string(b) != "term\n" {
			t.Errorf("the command's marker = %q; want %q: it did not get SIGTERM", b, "term\n")
		}
		s.assertEmpty(t)
	})
}

// TestLockLeaseLost releases a running lock's entry by force: the key may
// be granted to another holder at once, so the command gets SIGKILL at once
// (no SIGTERM grace: its trap never runs) and lanectl exits 79 with one
// line. On miniredis and real Redis.
func TestLockLeaseLost(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		dir := t.TempDir()
		marker, ready := filepath.Join(dir, "marker"), filepath.Join(dir, "ready")
		p := startBin(t, s.args("lock", "--ttl", "3s", "k", "--", "sh", "-c", trapScript, "sh", marker, "0", ready)...) // lost by force, not by a starved heartbeat
		eventually(t, "the command runs", func() bool { return fileExists(ready) })
		snap := s.inspect(t)
		if len(snap.Keys) != 1 || len(snap.Keys[0].Holders) != 1 {
			t.Fatalf("Inspect() = %+v; want lanectl holding k", snap.Keys)
		}
		entry := snap.Keys[0].Holders[0].ID

		code, out, stderr := runBin(t, s.args("release", "--force", entry)...)
		if want := "released " + entry + " (holder of k)\n"; code != 0 || out != want {
			t.Errorf("release --force = %d, %q (stderr %q); want 0, %q", code, out, stderr, want)
		}

		if code := p.wait(t); code != exitLeaseLost {
			t.Errorf("lock whose lease was lost = %d; want %d", code, exitLeaseLost)
		}
		// The command's shell may say "Terminated"; lanectl's own is the last line.
		all := strings.Split(strings.TrimSuffix(p.stderr.String(), "\n"), "\n")
		stderr = all[len(all)-1] + "\n"
		assertOneLine(t, stderr)
		// It says why: the forced release, not an expiry.
		if want := "lanectl: lease lost on k: entry " + entry + " was released by force (lanectl release --force); "; !strings.HasPrefix(stderr, want) || !strings.Contains(stderr, "killed by SIGKILL") {
			t.Errorf("stderr = %q; want %q ... killed by SIGKILL", stderr, want)
		}
		if b, _ := os.ReadFile(marker); len(b) != 0 {
			t.Errorf("the command's marker = %q; want nothing: its SIGTERM trap ran, so it was not killed at once", b)
		}
		s.assertEmpty(t)
	})
}

// TestLockCommandNotRunnable checks 127 for a command that does not exist
// and 126 for one that is not executable, with the keys given back.
func TestLockCommandNotRunnable(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		notExec := filepath.Join(t.TempDir(), "script")
		writeFile(t, notExec, "#!/bin/sh\n", 0o644)
		for _, tt := range []struct {
			cmd  string
			want int
		}{{"lanectl-test-no-such-command", 127}, {notExec, 126}} {
			code, _, stderr := runBin(t, s.args("lock", "k", "--", tt.cmd)...)
			if code != tt.want {
				t.Errorf("lock k -- %s = %d; want %d", tt.cmd, code, tt.want)
			}
			assertOneLine(t, stderr)
		}
		s.assertEmpty(t)
	})
}

func TestLockUnreachable(t *testing.T) {
	code, _, stderr := runBin(t, "--redis", "redis://user:hunter2@127.0.0.1:1", "lock", "k", "--", "true")
	if code != exitUnavailable {
		t.Errorf("lock against an unreachable server = %d; want %d", code, exitUnavailable)
	}
	assertOneLine(t, stderr)
	if !strings.Contains(stderr, "redis://user:xxxxx@127.0.0.1:1") || strings.Contains(stderr, "hunter2") {
		t.Errorf("stderr = %q; want the redacted URL named", stderr)
	}
}

// TestLockStatusShowsCommand checks what `status` says of a running lock.
func TestLockStatusShowsCommand(t *testing.T) {
	s := newMiniredis(t)
	ready := filepath.Join(t.TempDir(), "ready")
	p := startBin(t, s.args("lock", "--limit", "2", "a", "b", "--", "sh", "-c", `touch "$1"; while [ -e "$1" ]; do sleep 0.02; done`, "sh", ready)...)
	eventually(t, "the command runs", func() bool { return fileExists(ready) })
	snap := s.inspect(t)
	var keys []string
	for _, k := range snap.Keys {
		keys = append(keys, k.Key)
		if k.Limit != 2 || len(k.Holders) != 1 || k.Holders[0].Tool != "lanectl lock" || k.Holders[0].CallID != "sh" ||
			k.Holders[0].Owner.PID != p.cmd.Process.Pid {
			t.Errorf("key %s = %+v; want limit 2, held by lanectl lock, pid %d", k.Key, k, p.cmd.Process.Pid)
		}
	}
	if !slices.Equal(keys, []string{"a", "b"}) {
		t.Errorf("keys = %q; want [a b]", keys)
	}
	os.Remove(ready)
	if code := p.wait(t); code != 0 {
		t.Errorf("lock = %d; want 0", code)
	}
	s.assertEmpty(t)
}

// TestLockWaiterReleasedByForce evicts a waiting lanectl from its queue:
// it exits 79 with one line, and its command never runs.
func TestLockWaiterReleasedByForce(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		s.hold(t, "k")
		ran := filepath.Join(t.TempDir(), "ran")
		p := startBin(t, s.args("lock", "--ttl", "3s", "k", "--", "touch", ran)...) // evicted by force, not by a starved heartbeat
		var entry string
		eventually(t, "lanectl waits for k", func() bool {
			snap := s.inspect(t)
			if len(snap.Keys) == 1 && len(snap.Keys[0].Waiters) == 1 {
				entry = snap.Keys[0].Waiters[0].ID
				return true
			}
			return false
		})
		code, out, _ := runBin(t, s.args("release", "--force", entry)...)
		if want := "removed waiter " + entry + " (queued on k)\n"; code != 0 || out != want {
			t.Errorf("release --force = %d, %q; want 0, %q", code, out, want)
		}
		if code := p.wait(t); code != exitLeaseLost {
			t.Errorf("lock evicted from the queue = %d; want %d", code, exitLeaseLost)
		}
		assertOneLine(t, p.stderr.String())
		if want := "entry " + entry + " was removed from its queues by force (lanectl release --force)"; !strings.Contains(p.stderr.String(), want) {
			t.Errorf("stderr = %q; want it to say %q", p.stderr, want)
		}
		if fileExists(ran) {
			t.Errorf("the command ran although lanectl was never granted k")
		}
	})
}

// TestLockFileSharesBatchLane: lanectl lock --file names the lock key batch
// gives the file (issue 17, part 2, for lock): with ws/l a link to real/sub,
// --file ws/l/../plan.md holds lock:file:<ws>/real/plan.md, the lane of a
// batch tool whose lock key is file:{path} with path real/plan.md. On
// miniredis.
func TestLockFileSharesBatchLane(t *testing.T) {
	s := newMiniredis(t)
	ws := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, "real", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real/sub", filepath.Join(ws, "l")); err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(ws)
	if err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runBin(t, s.args("lock", "--file", filepath.Join(ws, "l")+"/../plan.md", "--", "sh", "-c", `printf %s "$LANES_TOKENS"`)...)
	key := "lock:file:" + filepath.Join(real, "real", "plan.md")
	if code != 0 || !strings.HasPrefix(out, key+"=") || strings.Contains(out, ",") {
		t.Errorf("lock --file = %d, LANES_TOKENS %q (stderr %q); want %s=TOKEN alone", code, out, stderr, key)
	}
	for _, args := range [][]string{
		{"lock", "--file", "x", "--limit", "2", "--", "true"},
		{"lock", "--", "true"},
	} {
		if code, _, stderr := runInProcess(t, args...); code != exitUsage {
			t.Errorf("lanectl %q = %d (%q); want %d", args, code, stderr, exitUsage)
		}
	}
}

// TestUnreachableTriedOnce checks that the first contact with a server
// that drops every connection is one attempt, reported at once, not four
// (go-redis's default retries). The listener counts the attempts; no
// Redis is involved.
func TestUnreachableTriedOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	conns := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(conns)
				return
			}
			c.Close()
			conns <- c
		}
	}()
	code, _, stderr := runBin(t, "--redis", "redis://"+l.Addr().String(), "status")
	if code != exitUnavailable {
		t.Errorf("status against a server that drops connections = %d; want %d (stderr %q)", code, exitUnavailable, stderr)
	}
	assertOneLine(t, stderr)
	// A last connection of the test's own: the listener accepts in arrival
	// order, so once it is accepted every attempt of lanectl's was.
	own, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	n := 0
	for c := range conns {
		if c.RemoteAddr().String() == own.LocalAddr().String() {
			break
		}
		n++
	}
	if n != 1 {
		t.Errorf("connections lanectl made = %d; want 1", n)
	}
}
