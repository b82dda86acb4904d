package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// (Found by a break-it review.) A lock whose own release is what learns
// that the lease was lost with the namespace's state (a state key deleted
// while the command ran, or Redis restarted empty) exited 0 and said
// nothing: the command may have run beside another holder. It exits 79
// with the cause, as when the heartbeat learns it first. On miniredis and
// real Redis, with lanectl processes.
func TestLockReleaseThatFindsTheStateLostExits79(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		ready := filepath.Join(t.TempDir(), "ready")
		lock := startBin(t, s.args("lock", "--ttl", "1m", "k", "--",
			"sh", "-c", `touch "$1"; while [ -e "$1" ]; do sleep 0.02; done`, "sh", ready)...)
		eventually(t, "the command runs", func() bool { return fileExists(ready) })
		if err := s.c.Del(context.Background(), s.b.Keys()[0]).Err(); err != nil { // entries
			t.Fatal(err)
		}
		os.Remove(ready) // before the next heartbeat (a 1m TTL: 20s)
		if code := lock.wait(t); code != exitLeaseLost {
			t.Errorf("lock whose release found the state reset = %d; want %d (lease lost): %s", code, exitLeaseLost, lock.stderr.String())
		}
		stderr := lock.stderr.String()
		assertOneLine(t, stderr)
		if !strings.HasPrefix(stderr, "lanectl: lease lost on k: ") || !strings.Contains(stderr, "reset") {
			t.Errorf("stderr = %q; want the lease lost on k, the state reset", stderr)
		}
	})
}

// (Found by a break-it review.) keys, like status, says when its own look
// reset a namespace that had lost part of its state, and how long grants
// are held back: it printed "no holders or waiters" alone. On miniredis
// and real Redis.
func TestKeysSaysItsReadReset(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		// a holder with no Session (none renews it, nor steps meanwhile)
		if _, err := s.b.Enqueue(ctx, lanes.Owner{ID: "o-keys", Host: "test-host", PID: 4242}, time.Minute,
			[]lanes.Request{{ID: "h", Lanes: []lanes.Lane{{Key: "k1", Limit: 1}}}}); err != nil {
			t.Fatal(err)
		}
		if err := s.c.Del(ctx, s.b.Keys()[3]).Err(); err != nil { // deadlines: a freeze
			t.Fatal(err)
		}
		code, out, stderr := runInProcess(t, s.args("keys")...)
		if code != exitOK || !strings.Contains(out, "\nreset now: ") || !strings.Contains(out, "\nno grants for ") {
			t.Errorf("keys after the deadlines vanished = %d, %q, %q; want the reset and the freeze told", code, out, stderr)
		}
		var v keysView
		code, out, _ = runInProcess(t, s.args("keys", "--json")...)
		if err := json.Unmarshal([]byte(out), &v); err != nil || code != exitOK || v.Reset || v.FrozenMS <= 0 {
			t.Errorf("keys --json after the reset = %d, %s (%v); want reset false (the state is whole again), frozen_ms > 0", code, out, err)
		}
	})
}

// watch prints, under a frame's first line, the lines status prints when
// a look reset the namespace and while grants are held back: without a
// terminal and on one (a review saw neither, and two frames alike where
// only the reset differed).
func TestWatchShowsResetAndFreeze(t *testing.T) {
	v := statusView{Namespace: "ns", Keys: []statusKey{}, Reset: true, FrozenMS: 2900}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var plain strings.Builder
	pw := &plainWatch{w: &plain, ns: "ns"}
	if err := pw.show(watchFrame{view: v, at: at}); err != nil {
		t.Fatal(err)
	}
	g := &globalOptions{namespace: "ns", redisURL: "redis://h:6379"}
	o := &watchOptions{global: g, interval: time.Second, expiring: 2 * time.Second, old: 30 * time.Second}
	var term strings.Builder
	tw := &termWatch{w: &term, o: o, size: func() (int, int, bool) { return 200, 20, true }}
	if err := tw.show(watchFrame{view: v, at: at}); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"plain": plain.String(), "terminal": term.String()} {
		if !strings.Contains(out, "reset now: this read found part of the namespace's state lost") || !strings.Contains(out, "no grants for 2.9s") {
			t.Errorf("%s watch frame:\n%s\nwant the reset and the freeze told", name, out)
		}
	}
}
