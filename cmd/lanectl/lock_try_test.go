package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// The tests of this file run the lanectl binary against miniredis and the
// real Redis server (skipped when none answers): the key is held by the
// test's own process, lanectl's --try runs in another.

// TestLockTry: --try on a held key gives up at once (75, or
// --conflict-exit-code), says who holds the key, and leaves no waiter; on
// a free key it runs the command.
func TestLockTry(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		lease := s.hold(t, "k")
		for _, tt := range []struct {
			flags []string
			code  int
		}{{nil, exitWaitTimeout}, {[]string{"--conflict-exit-code", "9"}, 9}, {[]string{"--conflict-exit-code", "0"}, 0}} {
			args := s.args(append(append([]string{"lock", "--try"}, tt.flags...), "k", "--", "sh", "-c", "echo ran")...)
			code, out, stderr := runBin(t, args...)
			if code != tt.code || out != "" {
				t.Errorf("lock --try %q on a held key = %d, stdout %q; want %d and the command not run", tt.flags, code, out, tt.code)
			}
			assertOneLine(t, stderr)
			if want := "lanectl: k not granted at once (--try): k: held by test-host:4242 (test) for "; !strings.HasPrefix(stderr, want) || !strings.Contains(stderr, "lease left") {
				t.Errorf("stderr = %q; want it to start %q and say the lease left", stderr, want)
			}
			snap := s.inspect(t)
			if len(snap.Keys) != 1 || len(snap.Keys[0].Waiters) != 0 || len(snap.Keys[0].Holders) != 1 || snap.Keys[0].Holders[0].ID != lease.ID() {
				t.Errorf("Inspect() after lock --try = %+v; want k held by the test and no waiter left", snap.Keys)
			}
		}
		// --json: the conflict is the JSON error, with its own code.
		code, _, stderr := runBin(t, s.args("--json", "lock", "--try", "k", "--", "true")...)
		if code != exitWaitTimeout {
			t.Errorf("--json lock --try = %d; want %d", code, exitWaitTimeout)
		}
		assertJSONError(t, stderr, "conflict", exitWaitTimeout)

		// A free key: granted in the step that enqueued it, the command runs.
		code, out, stderr := runBin(t, s.args("lock", "--try", "free", "--", "sh", "-c", "echo ran")...)
		if code != 0 || out != "ran\n" || stderr != "" {
			t.Errorf("lock --try on a free key = %d, %q, stderr %q; want 0, the command's output, nothing", code, out, stderr)
		}
		// A key of limit 2 with one holder has room; with two it has none,
		// and a request for both keys is granted neither.
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		sess := s.session(t)
		for _, key := range []string{"two", "full", "full"} {
			if _, err := sess.Acquire(ctx, lanes.Request{Lanes: []lanes.Lane{{Key: key, Limit: 2}}, Tool: "test"}); err != nil {
				t.Fatalf("Acquire(%s) = %v", key, err)
			}
		}
		if code, _, stderr := runBin(t, s.args("lock", "--try", "--limit", "2", "two", "--", "true")...); code != 0 {
			t.Errorf("lock --try --limit 2 on a key with one holder = %d (%s); want 0", code, stderr)
		}
		code, _, stderr = runBin(t, s.args("lock", "--try", "--limit", "2", "two", "full", "--", "true")...)
		if code != exitWaitTimeout || !strings.Contains(stderr, "full: held by 2 of 2, the longest by test-host:4242 (test)") {
			t.Errorf("lock --try two full = %d, %q; want %d saying full is held by 2 of 2", code, stderr, exitWaitTimeout)
		}
		for _, k := range s.inspect(t).Keys {
			if len(k.Waiters) != 0 || (k.Key == "two" && len(k.Holders) != 1) {
				t.Errorf("key %s after lock --try = %d holders, %d waiters; want none left by lock", k.Key, len(k.Holders), len(k.Waiters))
			}
		}
	})
}

// TestLockWaitConflictExitCode: --conflict-exit-code is also the status
// of a --wait that ran out, as flock -E.
func TestLockWaitConflictExitCode(t *testing.T) {
	s := newMiniredis(t)
	s.hold(t, "k")
	code, _, stderr := runBin(t, s.args("lock", "--wait", "100ms", "--conflict-exit-code", "3", "k", "--", "true")...)
	if want := "lanectl: waited 100ms for k: not granted: k: held by test-host:4242 (test) for "; code != 3 || !strings.HasPrefix(stderr, want) {
		t.Errorf("lock --wait 100ms --conflict-exit-code 3 = %d, %q; want 3 and the wait's message naming the holder", code, stderr)
	}
	assertOneLine(t, stderr)
	if snap := s.inspect(t); len(snap.Keys) != 1 || len(snap.Keys[0].Waiters) != 0 {
		t.Errorf("Inspect() = %+v; want k held by the test, no waiter left", snap.Keys)
	}
}

// TestLockQuietGivesUpSilently: with --quiet, a --try or --wait that gives
// up writes nothing; the exit status says it (0 with --conflict-exit-code
// 0: a silent success for cron).
func TestLockQuietGivesUpSilently(t *testing.T) {
	s := newMiniredis(t)
	s.hold(t, "k")
	for _, tt := range []struct {
		flags []string
		code  int
	}{
		{[]string{"--try", "--quiet", "--conflict-exit-code", "0"}, 0},
		{[]string{"--try", "-q"}, exitWaitTimeout},
		{[]string{"--wait", "100ms", "-q"}, exitWaitTimeout},
	} {
		code, out, stderr := runBin(t, s.args(append(append([]string{"lock"}, tt.flags...), "k", "--", "echo", "ran")...)...)
		if code != tt.code || out != "" || stderr != "" {
			t.Errorf("lock %q on a held key = %d, %q, stderr %q; want %d and nothing written", tt.flags, code, out, stderr, tt.code)
		}
	}
}

func TestLockTryBadFlags(t *testing.T) {
	s := newMiniredis(t)
	for _, args := range [][]string{
		{"lock", "--try", "--wait", "1s", "k", "--", "true"},
		{"lock", "--conflict-exit-code", "256", "k", "--", "true"},
		{"lock", "--conflict-exit-code", "-1", "k", "--", "true"},
	} {
		code, _, stderr := runInProcess(t, s.args(args...)...)
		if code != exitUsage {
			t.Errorf("lanectl %q = %d; want %d", args, code, exitUsage)
		}
		assertOneLine(t, stderr)
	}
	s.assertEmpty(t)
}

// lock --id of an id Redis holds a tombstone for (a settled id: an earlier
// step of it got no answer) exits 75, says the id cannot be used now, for
// how long at most and what to do, and --json names the kind id_retired
// (forEachServer: miniredis and real Redis).
func TestLockRetiredIDSaysWhatToDo(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := s.b.Settle(ctx, "gone-owner", time.Minute, []string{"fixed-id"}); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := runInProcess(t, s.args("lock", "--ttl", "3s", "--id", "fixed-id", "k", "--", "true")...)
		if code != exitWaitTimeout || !strings.Contains(stderr, "--id fixed-id cannot be used now") ||
			!strings.Contains(stderr, "6s") || !strings.Contains(stderr, "another --id") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("lock --id of a retired id = %d, %q; want %d and one line: cannot be used now, for up to 6s, another --id", code, stderr, exitWaitTimeout)
		}
		code, _, stderr = runInProcess(t, s.args("--json", "lock", "--id", "fixed-id", "k", "--", "true")...)
		if code != exitWaitTimeout || !strings.Contains(stderr, `"code":"id_retired"`) {
			t.Errorf("--json lock --id of a retired id = %d, %q; want %d and code id_retired", code, stderr, exitWaitTimeout)
		}
	})
}
