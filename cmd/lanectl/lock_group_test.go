package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/alicebob/miniredis/v2"
)

// pidIn returns the pid written in file, or 0 while the file does not hold
// one yet (it exists as soon as the shell opens it, before it writes).
func pidIn(file string) int {
	b, err := os.ReadFile(file)
	if err != nil || !strings.HasSuffix(string(b), "\n") {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// alive reports whether the process whose pid is in file runs.
func alive(file string) bool {
	pid := pidIn(file)
	return pid > 0 && !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// A lost lease stops the commands the command started too: they run in its
// process group, which gets the signals.
func TestLockLeaseLostStopsTheWholeGroup(t *testing.T) {
	s := newMiniredis(t)
	dir := t.TempDir()
	grandchild := filepath.Join(dir, "grandchild")
	// The shell starts a sleep of its own and waits for it.
	p := startBin(t, s.args("lock", "--ttl", "3s", "k", "--", "sh", "-c", `sleep 60 & echo $! >"$1"; wait`, "sh", grandchild)...)
	eventually(t, "the grandchild runs", func() bool { return alive(grandchild) })
	snap := s.inspect(t)
	if len(snap.Keys) != 1 || len(snap.Keys[0].Holders) != 1 {
		t.Fatalf("Inspect() = %+v; want lanectl holding k", snap.Keys)
	}
	if code, _, stderr := runBin(t, s.args("release", "--force", snap.Keys[0].Holders[0].ID)...); code != 0 {
		t.Fatalf("release --force = %d: %s", code, stderr)
	}
	if code := p.wait(t); code != exitLeaseLost {
		t.Fatalf("lock = %d; want %d", code, exitLeaseLost)
	}
	eventually(t, "the grandchild is stopped with its group", func() bool { return !alive(grandchild) })
}

// A lanectl that dies without a word (SIGKILL) takes its command along, on
// Linux, so no command runs on without the keys.
func TestLockKilledTakesItsCommand(t *testing.T) {
	s := newMiniredis(t)
	child := filepath.Join(t.TempDir(), "child")
	p := startBin(t, s.args("lock", "k", "--", "sh", "-c", `echo $$ >"$1"; exec sleep 60`, "sh", child)...)
	eventually(t, "the command runs", func() bool { return alive(child) })
	p.signal(t, syscall.SIGKILL)
	p.wait(t)
	eventually(t, "the command dies with lanectl", func() bool { return !alive(child) })
}

// An entry id another process holds is busy, not shared: lock exits 75
// (id_held), says when that lease ends unless renewed, and, once the
// holder was killed and its lease ran out, the same --id runs. On miniredis.
// The holder's TTL (5s) outlasts a second or two of starvation on a loaded
// machine: with 2s, a holder starved while the two other locks started
// could lose its lease, and the second lock --id same then ran.
func TestLockIDInUse(t *testing.T) {
	s := newMiniredis(t)
	ready := filepath.Join(t.TempDir(), "ready")
	p := startBin(t, s.args("lock", "--ttl", "5s", "--id", "same", "k", "--", "sh", "-c", `touch "$1"; sleep 60`, "sh", ready)...)
	eventually(t, "the first holds", func() bool { return fileExists(ready) })
	code, _, stderr := runBin(t, s.args("lock", "--id", "same", "k", "--", "true")...)
	if code != exitWaitTimeout || !strings.Contains(stderr, "--id same: entry same is held by another owner") ||
		!strings.Contains(stderr, "its lease ends in") || strings.Contains(stderr, "lanes: ") {
		t.Fatalf("second lock --id same = %d, %q; want %d naming the other owner and when its lease ends", code, stderr, exitWaitTimeout)
	}
	assertOneLine(t, stderr)
	code, _, stderr = runBin(t, s.args("--json", "lock", "--id", "same", "k", "--", "true")...)
	if code != exitWaitTimeout || !strings.Contains(stderr, `"code":"id_held"`) {
		t.Fatalf("--json second lock --id same = %d, %q; want %d and code id_held", code, stderr, exitWaitTimeout)
	}
	p.signal(t, syscall.SIGKILL) // no release: the lease runs out by its TTL
	p.wait(t)
	eventually(t, "lock --id same runs once the killed holder's lease ran out", func() bool {
		code, _, stderr := runBin(t, s.args("lock", "--id", "same", "k", "--", "true")...)
		if code != 0 && code != exitWaitTimeout {
			t.Fatalf("lock --id same after the holder was killed = %d, %q; want 0, or %d while its lease lasts", code, stderr, exitWaitTimeout)
		}
		return code == 0
	})
}

// Keys with "%", "," or "=" are escaped in LANES_TOKENS, by the encoder
// batch uses too (issue 17, part 3), and LANES_LINEAGE ends with the entry.
// On miniredis.
func TestLockTokensEscapeSeparators(t *testing.T) {
	s := newMiniredis(t)
	code, out, stderr := runBin(t, s.args("lock", "a,b=c%d", "k:p,q=r", "--", "sh", "-c", `printf '%s\n%s\n%s' "$LANES_TOKENS" "$LANES_LINEAGE" "$LANES_ENTRY"`)...)
	if code != 0 {
		t.Fatalf("lock = %d: %s", code, stderr)
	}
	lines := strings.Split(out, "\n")
	if len(lines) != 3 || !regexp.MustCompile(`^a%2Cb%3Dc%25d=[1-9][0-9]*,k:p%2Cq%3Dr=[1-9][0-9]*$`).MatchString(lines[0]) {
		t.Fatalf("LANES_TOKENS = %q; want a%%2Cb%%3Dc%%25d=TOKEN,k:p%%2Cq%%3Dr=TOKEN", lines[0])
	}
	if lines[1] != lines[2] || lines[2] == "" {
		t.Errorf("LANES_LINEAGE = %q with LANES_ENTRY = %q; want the entry alone (lock was not nested)", lines[1], lines[2])
	}
}

// A refused password is exit 77 and says Redis refused, without the password.
func TestWrongPasswordIsPermission(t *testing.T) {
	m := miniredis.RunT(t)
	m.RequireAuth("right-secret")
	code, _, stderr := runInProcess(t, "--redis", "redis://:wrong-secret@"+m.Addr(), "keys")
	if code != exitNoPerm {
		t.Fatalf("keys with a wrong password = %d (%q); want %d", code, stderr, exitNoPerm)
	}
	assertOneLine(t, stderr)
	if strings.Contains(stderr, "wrong-secret") || !strings.Contains(stderr, "refused") {
		t.Fatalf("stderr = %q; want a refusal without the password", stderr)
	}
}

// Real Redis: SIGTERM to a `lanectl lock` whose command is a shell running a
// nested `lanectl lock` stops the shell at once; the nested lanectl, left
// running in the shell's group, gets SIGTERM and time to release its own
// lease before the outer one releases and exits: no key is left held for
// its TTL.
func TestLockNestedTermReleasesEveryKeyRealRedis(t *testing.T) {
	s := newRealRedis(t)
	dir := t.TempDir()
	inner := filepath.Join(dir, "inner")
	// "; true" keeps the shell from exec'ing the nested lanectl: it stays
	// the command, and dies of SIGTERM while the nested lanectl releases.
	script := `"$0" --redis "$1" --namespace "$2" lock --ttl 1m inner -- sh -c 'echo $$ >"$0"; sleep 60' "$3"; true`
	p := startBin(t, s.args("lock", "--ttl", "1m", "outer", "--", "sh", "-c", script, lanectlBin, s.url, s.ns, inner)...)
	eventually(t, "the nested command runs", func() bool { return alive(inner) })
	if snap := s.inspect(t); len(snap.Keys) != 2 {
		t.Fatalf("Inspect() = %+v; want outer and inner held", snap.Keys)
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != 128+int(syscall.SIGTERM) {
		t.Errorf("lock = %d; want %d (its command died of SIGTERM); stderr: %s", code, 128+int(syscall.SIGTERM), p.stderr)
	}
	if snap := s.inspect(t); len(snap.Keys) != 0 {
		for _, k := range snap.Keys {
			t.Errorf("%s still has holders %+v once the outer lanectl exited; want every lease released", k.Key, k.Holders)
		}
	}
	if alive(inner) {
		t.Errorf("the nested command still runs")
	}
}

// An entry id names one request (DESIGN.md invariant 8): with `lock --id X
// a` holding a, or waiting for it, `lock --id X b` is a usage error (64) in
// one line saying the id names another request; b is not taken, its command
// does not run, and the first lock keeps its place. Real Redis, one
// namespace per subtest; every lanectl is its own process.
func TestLockIDOtherKeysIsUsage(t *testing.T) {
	for _, waiting := range []bool{false, true} {
		name := map[bool]string{false: "holding", true: "waiting"}[waiting]
		t.Run(name, func(t *testing.T) {
			s := newRealRedis(t)
			dir := t.TempDir()
			if waiting {
				held := filepath.Join(dir, "held")
				other := startBin(t, s.args("lock", "a", "--", "sh", "-c", `touch "$1"; sleep 60`, "sh", held)...)
				eventually(t, "another lock holds a", func() bool { return fileExists(held) })
				t.Cleanup(func() { other.signal(t, syscall.SIGTERM); other.wait(t) })
			}
			ready := filepath.Join(dir, "ready")
			first := startBin(t, s.args("lock", "--id", "X", "a", "--", "sh", "-c", `touch "$1"; sleep 60`, "sh", ready)...)
			firstIn := func() bool { // X holds a, or (waiting) waits for it
				for _, k := range s.inspect(t).Keys {
					if k.Key != "a" {
						continue
					}
					for _, h := range k.Holders {
						if h.ID == "X" {
							return !waiting
						}
					}
					for _, w := range k.Waiters {
						if w.ID == "X" {
							return waiting
						}
					}
				}
				return false
			}
			if waiting {
				eventually(t, "lock --id X waits for a", firstIn)
			} else {
				eventually(t, "lock --id X holds a", func() bool { return fileExists(ready) })
			}

			ran := filepath.Join(dir, "ran")
			code, _, stderr := runBin(t, s.args("lock", "--id", "X", "b", "--", "touch", ran)...)
			if code != exitUsage || !strings.Contains(stderr, "entry id X already names another request") {
				t.Errorf("lock --id X b = %d, %q; want %d saying entry id X names another request", code, stderr, exitUsage)
			}
			assertOneLine(t, stderr)
			if fileExists(ran) {
				t.Errorf("the command of lock --id X b ran")
			}
			for _, k := range s.inspect(t).Keys {
				if k.Key == "b" {
					t.Errorf("b has holders %v and waiters %v; want none", k.Holders, k.Waiters)
				}
			}
			if !firstIn() {
				t.Errorf("lock --id X a lost its place on a")
			}
			first.signal(t, syscall.SIGTERM)
			first.wait(t)
		})
	}
}
