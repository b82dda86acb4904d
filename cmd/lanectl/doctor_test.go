package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/internal/redisproc"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

// doctor and gc on miniredis and real Redis: a sound namespace is reported
// sound (exit 0); a stray holder member is reported (exit 1, one line per
// problem) and, with --repair, removed; doctor tells of expired entries
// not yet removed, and gc removes them.
func TestDoctorAndGC(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		populate(t, s)
		code, out, stderr := runInProcess(t, s.args("doctor")...)
		if code != exitOK || !strings.Contains(out, "no problem found") {
			t.Fatalf("doctor of a sound namespace = %d, %q, %q; want 0 and no problem", code, out, stderr)
		}
		ctx := context.Background()
		s.c.ZAdd(ctx, s.b.Keys()[3], redis.Z{Score: 1e15, Member: "ghost"})
		code, out, _ = runInProcess(t, s.args("doctor")...)
		if code != exitNotFound || !strings.Contains(out, "problem: deadline of ghost: no such entry") {
			t.Fatalf("doctor with a stray member = %d, %q; want 1 and the problem", code, out)
		}
		code, out, _ = runInProcess(t, s.args("doctor", "--repair", "--json")...)
		var r struct {
			Problems []string `json:"problems"`
			Repairs  []string `json:"repairs"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil || code != exitNotFound || len(r.Repairs) != 1 {
			t.Fatalf("doctor --repair --json = %d, %q (%v); want the repair", code, out, err)
		}
		if !strings.Contains(out, `"repairs": [`) || !strings.Contains(out, `"ok": false`) || !strings.Contains(out, `"missing": []`) {
			t.Errorf("doctor --repair --json = %s; want lower-case fields as lanectl's other JSON, lists never null", out)
		}
		if code, _, _ = runInProcess(t, s.args("doctor")...); code != exitOK {
			t.Fatalf("doctor after the repair = %d; want 0", code)
		}
		// gc: a dead owner's entries expire; gc removes them at once.
		dead := lanes.Owner{ID: "dead-owner", Host: "gone", PID: 1}
		if _, err := s.b.Enqueue(ctx, dead, 50*time.Millisecond, []lanes.Request{{ID: "d1", Lanes: []lanes.Lane{{Key: "gc", Limit: 1}}}, {ID: "d2", Lanes: []lanes.Lane{{Key: "gc", Limit: 1}}}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		// doctor (a check) tells of them, and finds no problem in them.
		code, out, stderr = runInProcess(t, s.args("doctor")...)
		if code != exitOK || !strings.Contains(out, "\n2 expired entries are not yet removed: ") || !strings.Contains(out, "no problem found") {
			t.Fatalf("doctor with two expired entries = %d, %q, %q; want 0, the two entries and no problem", code, out, stderr)
		}
		code, out, stderr = runInProcess(t, s.args("gc", "--json")...)
		if code != exitOK || !strings.Contains(out, `"reaped": 2`) {
			t.Fatalf("gc = %d, %q, %q; want the two expired entries removed", code, out, stderr)
		}
		if code, out, _ = runInProcess(t, s.args("doctor", "--json")...); code != exitOK || !strings.Contains(out, `"expired": 0`) {
			t.Errorf("doctor --json after gc = %d, %s; want 0 and \"expired\": 0", code, out)
		}
	})
}

// A private redis-server whose maxmemory-policy may evict lanes' keys: lock
// refuses it (exit 78, naming the policy and the flag), and runs with
// --allow-eviction.
func TestLockRefusesEvictingRedis(t *testing.T) {
	srv := redisproc.StartServer(t, redisproc.ServerOptions{Extra: []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}})
	s := newServer(t, "allkeys-lru", srv.URL())
	code, _, stderr := runInProcess(t, s.args("lock", "k", "--", "true")...)
	if code != exitConfig || !strings.Contains(stderr, "allkeys-lru") || !strings.Contains(stderr, "--allow-eviction") {
		t.Fatalf("lock on an allkeys-lru server = %d, %q; want %d naming the policy and --allow-eviction", code, stderr, exitConfig)
	}
	assertOneLine(t, stderr)
	if strings.Contains(stderr, "redislane") {
		t.Errorf("lock on an allkeys-lru server: %q; want the flag's words, not the Go package's", stderr)
	}
	if code, _, stderr := runInProcess(t, s.args("--allow-eviction", "lock", "k", "--", "true")...); code != exitOK {
		t.Fatalf("lock --allow-eviction = %d, %q; want 0", code, stderr)
	}
	// doctor reports it as a problem (a new user's trial saw "no problem
	// found", exit 0, where every lock failed), but not when allowed
	if code, out, stderr := runInProcess(t, s.args("doctor")...); code != exitNotFound || !strings.Contains(out, "problem: the server's maxmemory-policy is allkeys-lru") {
		t.Errorf("doctor on an allkeys-lru server = %d, %q %q; want %d and the policy as a problem", code, out, stderr, exitNotFound)
	}
	if code, out, stderr := runInProcess(t, s.args("--allow-eviction", "doctor")...); code != exitOK {
		t.Errorf("doctor --allow-eviction on an allkeys-lru server = %d, %q %q; want 0", code, out, stderr)
	}
}

// Miniredis: doctor and gc take the namespace as an argument too, and
// refuse two different ones or more than one argument.
func TestDoctorNamespaceArgument(t *testing.T) {
	s := newMiniredis(t)
	s.hold(t, "k")
	for _, cmd := range []string{"doctor", "gc"} {
		code, out, stderr := runInProcess(t, "--redis", s.url, cmd, s.ns)
		if code != 0 || !strings.Contains(out, "namespace "+s.ns) {
			t.Errorf("%s %s = %d: %s%s; want it to read namespace %s", cmd, s.ns, code, out, stderr, s.ns)
		}
		code, _, stderr = runInProcess(t, "--redis", s.url, "--namespace", "other", cmd, s.ns)
		if code != exitUsage || !strings.Contains(stderr, "two namespaces given") {
			t.Errorf("%s with --namespace other and %s = %d, %q; want %d", cmd, s.ns, code, stderr, exitUsage)
		}
		assertOneLine(t, stderr)
		if code, _, stderr = runInProcess(t, "--redis", s.url, cmd, s.ns, "x"); code != exitUsage {
			t.Errorf("%s with two arguments = %d, %q; want %d", cmd, code, stderr, exitUsage)
		}
	}
}

// writeReport prints doctor's sentences whole (a repair of a reset was cut
// at a cell's 40 runes), does not promise a reset it made already, and
// says when a namespace holds no state (a misspelled name looks sound).
func TestDoctorReportLines(t *testing.T) {
	long := "reset the namespace: some of its keys were missing (every entry ended)"
	var b strings.Builder
	r := &redislane.Report{Namespace: "ns", Missing: []string{"lanes:{ns}:queue"}, Repairs: []string{long}}
	if err := writeReport(&b, r, "redis://h:1"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "repaired: "+long+"\n") {
		t.Errorf("report = %q; want the repair whole", out)
	}
	if !strings.HasPrefix(out, "namespace ns on redis://h:1, epoch") {
		t.Errorf("report = %q; want it to name the server it checked", out)
	}
	if strings.Contains(out, "the next step resets") || !strings.Contains(out, "epoch none (some of its keys are missing)") {
		t.Errorf("report = %q; want no promise of a reset made already, and the missing keys named in the epoch line", out)
	}
	b.Reset()
	if err := writeReport(&b, &redislane.Report{Namespace: "typo"}, "redis://h:1"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "no problem found: the namespace holds no state") {
		t.Errorf("report of an unused namespace = %q; want it to say it holds no state", b.String())
	}
}

// After a step reset the namespace on its own (a state key vanished), doctor
// finds nothing to repair yet says so: how many resets the namespace has had
// and how long grants are still held back (miniredis and real Redis).
func TestDoctorTellsOfAnAutomaticReset(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		populate(t, s)
		ctx := context.Background()
		if err := s.c.Del(ctx, s.b.Keys()[2]).Err(); err != nil { // the queue
			t.Fatal(err)
		}
		// The next step finds the queue gone and resets the state.
		if _, err := s.b.Heartbeat(ctx, "someone", time.Minute, []string{"x"}); err != nil {
			t.Fatal(err)
		}
		code, out, stderr := runInProcess(t, s.args("doctor")...)
		if code != exitOK || !strings.Contains(out, "no problem found") || !strings.Contains(out, "reset 1 time since it was made") ||
			!strings.Contains(out, "; the current epoch began 20") || !strings.Contains(out, "no grants for ") {
			t.Fatalf("doctor after an automatic reset = %d, %q, %q; want 0, no problem, the reset (with its epoch's time) and the freeze told", code, out, stderr)
		}
		code, out, _ = runInProcess(t, s.args("doctor", "--json")...)
		var r struct {
			Resets   int64 `json:"resets"`
			FrozenMS int64 `json:"frozen_ms"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil || code != exitOK || r.Resets != 1 || r.FrozenMS <= 0 {
			t.Fatalf("doctor --json after an automatic reset = %d, %s (%v); want resets 1 and frozen_ms > 0", code, out, err)
		}
	})
}
