package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/lanes-dev/lanes/lanes"
)

// The JSON contract of `status --json`, written out again here so that a
// change of a tag in status.go fails the tests.
type statusJSON struct {
	Namespace string `json:"namespace"`
	Keys      []struct {
		Key     string `json:"key"`
		Limit   int    `json:"limit"`
		Holders []struct {
			Entry       string `json:"entry"`
			Token       uint64 `json:"token"`
			Host        string `json:"host"`
			PID         int    `json:"pid"`
			Tool        string `json:"tool"`
			CallID      string `json:"call_id"`
			Tenant      string `json:"tenant"`
			HeldMS      int64  `json:"held_ms"`
			LeaseLeftMS int64  `json:"lease_left_ms"`
		} `json:"holders"`
		Waiters []struct {
			Entry     string `json:"entry"`
			Position  int    `json:"position"`
			Host      string `json:"host"`
			PID       int    `json:"pid"`
			WaitingMS int64  `json:"waiting_ms"`
		} `json:"waiters"`
	} `json:"keys"`
}

// populate fills s's namespace through the test's own session:
//
//	k1 (limit 1): holder h1; waiters w1, w2, w3
//	k2 (limit 2): holder h2
//	k3 (limit 1): waiter w3 (it waits for k1 and k3 at once)
//
// It returns the tokens of h1 on k1 and of h2 on k2.
func populate(t *testing.T, s *server) (h1, h2 uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sess := s.session(t)
	k1 := lanes.Lane{Key: "k1", Limit: 1}
	l1, err := sess.Acquire(ctx, lanes.Request{ID: "h1", Lanes: []lanes.Lane{k1}, Tool: "edit", CallID: "call-1", Tenant: "acme"})
	if err != nil {
		t.Fatalf("Acquire(h1) = %v", err)
	}
	l2, err := sess.Acquire(ctx, lanes.Request{ID: "h2", Lanes: []lanes.Lane{{Key: "k2", Limit: 2}}})
	if err != nil {
		t.Fatalf("Acquire(h2) = %v", err)
	}
	_, err = sess.Enqueue(ctx,
		lanes.Request{ID: "w1", Lanes: []lanes.Lane{k1}},
		lanes.Request{ID: "w2", Lanes: []lanes.Lane{k1}},
		lanes.Request{ID: "w3", Lanes: []lanes.Lane{k1, {Key: "k3", Limit: 1}}},
	)
	if err != nil {
		t.Fatalf("Enqueue(w1, w2, w3) = %v", err)
	}
	return l1.Token("k1"), l2.Token("k2")
}

func TestStatusJSON(t *testing.T) {
	s := newMiniredis(t)
	tok1, tok2 := populate(t, s)
	code, out, stderr := runInProcess(t, s.args("status", "--json")...)
	if code != 0 || stderr != "" {
		t.Fatalf("status --json = %d, stderr %q; want 0 and nothing", code, stderr)
	}
	var got statusJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("status --json printed %q: %v", out, err)
	}
	if got.Namespace != s.ns {
		t.Errorf("namespace = %q; want %q", got.Namespace, s.ns)
	}
	var keys []string
	for _, k := range got.Keys {
		keys = append(keys, k.Key)
	}
	if !slices.Equal(keys, []string{"k1", "k2", "k3"}) {
		t.Fatalf("keys = %q; want [k1 k2 k3]", keys)
	}

	k1 := got.Keys[0]
	if k1.Limit != 1 || len(k1.Holders) != 1 || len(k1.Waiters) != 3 {
		t.Fatalf("k1 = %+v; want limit 1, 1 holder, 3 waiters", k1)
	}
	h := k1.Holders[0]
	if h.Entry != "h1" || h.Token != tok1 || h.Host != "test-host" || h.PID != 4242 ||
		h.Tool != "edit" || h.CallID != "call-1" || h.Tenant != "acme" {
		t.Errorf("k1 holder = %+v; want h1, token %d, test-host:4242, edit, call-1, acme", h, tok1)
	}
	if h.HeldMS < 0 || h.LeaseLeftMS <= 0 || h.LeaseLeftMS > 10000 {
		t.Errorf("k1 holder held_ms = %d, lease_left_ms = %d; want >= 0 and in (0, 10000]", h.HeldMS, h.LeaseLeftMS)
	}
	for i, w := range k1.Waiters {
		want := []string{"w1", "w2", "w3"}[i]
		if w.Entry != want || w.Position != i+1 || w.Host != "test-host" || w.PID != 4242 || w.WaitingMS < 0 {
			t.Errorf("k1 waiter %d = %+v; want %s at position %d of test-host:4242", i, w, want, i+1)
		}
	}

	k2 := got.Keys[1]
	if k2.Limit != 2 || len(k2.Holders) != 1 || k2.Holders[0].Entry != "h2" || k2.Holders[0].Token != tok2 {
		t.Errorf("k2 = %+v; want limit 2, holder h2 with token %d", k2, tok2)
	}
	k3 := got.Keys[2]
	if k3.Limit != 1 || len(k3.Holders) != 0 || len(k3.Waiters) != 1 || k3.Waiters[0].Entry != "w3" || k3.Waiters[0].Position != 1 {
		t.Errorf("k3 = %+v; want limit 1, no holder, waiter w3 at position 1", k3)
	}
}

// TestStatusTable checks what the golden files (golden_test.go) cannot,
// since they align the normalized columns again: the columns line up, and
// the first line names the namespace and the server, password redacted.
func TestStatusTable(t *testing.T) {
	m := miniredis.RunT(t)
	m.RequireAuth("s3cret")
	s := newServer(t, "miniredis", "redis://:s3cret@"+m.Addr())
	populate(t, s)
	code, out, stderr := runInProcess(t, s.args("status")...)
	if code != 0 || stderr != "" {
		t.Fatalf("status = %d, stderr %q; want 0 and nothing", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2+6 { // server line, header, h1, w1, w2, w3, h2, w3 on k3
		t.Fatalf("status printed %d lines; want 8:\n%s", len(lines), out)
	}
	if want := "namespace " + s.ns + " on redis://:xxxxx@" + m.Addr(); lines[0] != want {
		t.Errorf("first line = %q; want %q", lines[0], want)
	}
	// Columns line up: every row has ENTRY where the header has it.
	col := strings.Index(lines[1], "ENTRY")
	for _, l := range lines[2:] {
		if len(l) <= col || l[col-1] != ' ' || l[col] == ' ' {
			t.Errorf("row %q is not aligned on the ENTRY column (%d)", l, col)
		}
	}
	if strings.Contains(out, "s3cret") {
		t.Errorf("status printed the password:\n%s", out)
	}
}

func TestStatusNamedKeys(t *testing.T) {
	s := newMiniredis(t)
	populate(t, s)
	_, out, _ := runInProcess(t, s.args("--json", "status", "k3", "nosuch")...)
	var got statusJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Keys) != 1 || got.Keys[0].Key != "k3" {
		t.Errorf("status k3 nosuch = %+v; want k3 only", got.Keys)
	}
}

func TestStatusEmpty(t *testing.T) {
	s := newMiniredis(t)
	code, out, stderr := runInProcess(t, s.args("status", "--json")...)
	if code != 0 || stderr != "" {
		t.Fatalf("status --json = %d, stderr %q; want 0 and nothing", code, stderr)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	if keys, ok := raw["keys"].([]any); !ok || len(keys) != 0 || raw["namespace"] != s.ns {
		t.Errorf("status --json on an empty namespace = %s; want namespace %s and keys []", out, s.ns)
	}
	// A namespace never used on the server says so (TestStatusNamespaceWithNoLanes).
	_, out, _ = runInProcess(t, s.args("status")...)
	if want := "namespace " + s.ns + " on " + s.url + "\nnamespace " + s.ns + " has no lanes on this server\n"; out != want {
		t.Errorf("status on a namespace never used = %q; want %q", out, want)
	}
	// One used, whose lanes are all free now, has no holders or waiters.
	if err := s.hold(t, "k").Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, out, _ = runInProcess(t, s.args("status")...)
	if want := "namespace " + s.ns + " on " + s.url + "\nno holders or waiters\n"; out != want {
		t.Errorf("status on an empty namespace = %q; want %q", out, want)
	}
}

// Miniredis: a holder kept after its own lease ended (leases borrowed
// from it still run) shows as "ended" in status, and a forced release of
// it says so; a namespace whose deadlines vanished says grants are held
// back.
func TestStatusEndedLenderAndFreeze(t *testing.T) {
	s := newMiniredis(t)
	ctx := context.Background()
	a := s.hold(t, "k")
	borrower := lanes.Owner{ID: "borrower-owner", Host: "h", PID: 3}
	st, err := s.b.Enqueue(ctx, borrower, time.Minute, []lanes.Request{{ID: "c", Lanes: []lanes.Lane{{Key: "k", Limit: 1}}, Lineage: []string{a.ID()}}})
	if err != nil || st[0].State != lanes.Held {
		t.Fatalf("the borrower's enqueue = %+v, %v; want held", st, err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runInProcess(t, s.args("status", "--json")...)
	var v statusView
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil {
		t.Fatalf("status --json = %d, %v: %s%s", code, err, out, stderr)
	}
	if len(v.Keys) != 1 || len(v.Keys[0].Holders) != 1 || v.Keys[0].Holders[0].Entry != a.ID() || !v.Keys[0].Holders[0].Ended {
		t.Fatalf("status --json keys = %+v; want %s kept as an ended holder", v.Keys, a.ID())
	}
	if _, out, _ := runInProcess(t, s.args("status")...); !strings.Contains(out, " ended ") {
		t.Errorf("status table:\n%s\nwant the kept lender's STATE ended", out)
	}
	code, out, stderr = runInProcess(t, s.args("release", "--force", a.ID())...)
	if code != 0 || !strings.Contains(out, "whose lease had ended") || !strings.Contains(out, "may still be finishing") {
		t.Errorf("release --force of the kept lender = %d: %s%s; want it to say the borrowed leases may still be finishing", code, out, stderr)
	}

	// The deadlines vanish while a lease runs: the state is reset, and no
	// grant happens until that lease would have expired.
	s.hold(t, "k2")
	s.c.Del(ctx, s.b.Keys()[3])
	code, out, stderr = runInProcess(t, s.args("status", "--json")...)
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v.FrozenMS <= 0 {
		t.Fatalf("status --json after the deadlines vanished = %d, %v, frozen_ms %d: %s%s; want a freeze", code, err, v.FrozenMS, out, stderr)
	}
	if _, out, _ := runInProcess(t, s.args("status")...); !strings.Contains(out, "no grants for ") {
		t.Errorf("status table:\n%s\nwant a line saying grants are held back", out)
	}
}

// (Found by an outside trial.) status on a mistyped namespace, one with no
// lanes on a server where others have some, printed "no holders or
// waiters" as for a namespace merely idle. It now says the namespace has
// no lanes there and names those that have, the closest first: the one
// meant leads. status writes nothing meanwhile. On miniredis and real
// Redis (whose other namespaces, of other tests, may be listed too).
func TestStatusNamespaceWithNoLanes(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		populate(t, s)
		typo := s.ns + "x"
		args := []string{"--redis", s.url, "--namespace", typo, "status"}
		code, out, stderr := runInProcess(t, args...)
		want := "namespace " + typo + " on " + s.url + "\nnamespace " + typo + " has no lanes on this server; namespaces with lanes here, closest first: " + s.ns
		if code != 0 || stderr != "" || !strings.HasPrefix(out, want) || strings.Count(out, "\n") != 2 {
			t.Errorf("status on %s = %d, %q, stderr %q; want 0 and two lines, the second naming %s first:\n%s", typo, code, out, stderr, s.ns, want)
		}
		code, out, stderr = runInProcess(t, append(args, "--json")...)
		var got struct {
			Namespace       string   `json:"namespace"`
			NoLanes         bool     `json:"no_lanes"`
			OtherNamespaces []string `json:"other_namespaces"`
			Keys            []any    `json:"keys"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil || code != 0 {
			t.Fatalf("status --json = %d, %q, %q: %v", code, out, stderr, err)
		}
		if got.Namespace != typo || !got.NoLanes || len(got.OtherNamespaces) == 0 || got.OtherNamespaces[0] != s.ns ||
			len(got.OtherNamespaces) > maxNamespaceHints || got.Keys == nil || len(got.Keys) != 0 {
			t.Errorf("status --json on %s = %s; want no_lanes, other_namespaces led by %s (at most %d), keys []", typo, out, s.ns, maxNamespaceHints)
		}
		// The namespace meant has lanes: no such line, no such fields.
		_, out, _ = runInProcess(t, s.args("status", "--json")...)
		if strings.Contains(out, "no_lanes") || strings.Contains(out, "other_namespaces") {
			t.Errorf("status --json on %s, which has lanes = %s; want no no_lanes nor other_namespaces", s.ns, out)
		}
		// status left nothing in the namespace it read.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if n, err := s.c.Exists(ctx, "lanes:{"+typo+"}:meta", "lanes:{"+typo+"}:lanes").Result(); err != nil || n != 0 {
			t.Errorf("after status, %s has %d keys (%v); want none", typo, n, err)
		}
	})
}

// status of a key nobody holds or waits for, in a namespace whose other
// keys are busy (a mistyped key), names the busy keys, the closest to the
// one asked first; with --json as other_keys (forEachServer: miniredis and
// real Redis).
func TestStatusIdleKeyNamesBusyKeys(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		populate(t, s) // k1, k2, k3 busy
		code, out, stderr := runInProcess(t, s.args("status", "k3x")...)
		want := "namespace " + s.ns + " on " + s.url + "\nno holders or waiters for k3x; keys with holders or waiters, closest first: k3, k1, k2\n"
		if code != 0 || stderr != "" || out != want {
			t.Errorf("status k3x = %d, %q, stderr %q; want 0 and\n%s", code, out, stderr, want)
		}
		_, out, _ = runInProcess(t, s.args("status", "k3x", "--json")...)
		var got struct {
			OtherKeys []string `json:"other_keys"`
			Keys      []any    `json:"keys"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil || !slices.Equal(got.OtherKeys, []string{"k3", "k1", "k2"}) || len(got.Keys) != 0 {
			t.Errorf("status k3x --json = %s (%v); want other_keys [k3 k1 k2] and no keys", out, err)
		}
		// An idle key named twice is said once.
		_, out, _ = runInProcess(t, s.args("status", "k3x", "k3x")...)
		if !strings.Contains(out, "no holders or waiters for k3x; ") {
			t.Errorf("status k3x k3x = %q; want k3x said once", out)
		}
		// A busy key asked for: its table, no hint.
		_, out, _ = runInProcess(t, s.args("status", "k3")...)
		if strings.Contains(out, "closest first") || !strings.Contains(out, "w3") {
			t.Errorf("status k3 = %q; want its table (w3 waiting) and no hint", out)
		}
	})
}

// TestStatusNamesIdleKeysBesideBusyOnes: `status k3 nosuch` printed k3's
// table and nothing of nosuch (a break-it review): the table's last line
// names the keys given that nobody holds or waits for; so does each table
// of `watch k3 nosuch`, and --json as idle_keys. miniredis.
func TestStatusNamesIdleKeysBesideBusyOnes(t *testing.T) {
	s := newMiniredis(t)
	populate(t, s)
	code, out, stderr := runInProcess(t, s.args("status", "k3", "nosuch", "k1", "other", "nosuch")...)
	if code != 0 || stderr != "" {
		t.Fatalf("status = %d, stderr %q; want 0 and nothing", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if last := lines[len(lines)-1]; last != "no holders or waiters for nosuch, other" {
		t.Errorf("status k3 nosuch k1 other nosuch ended %q; want the idle keys named once each:\n%s", last, out)
	}
	if !strings.Contains(out, "w3") || !strings.Contains(out, "h1") {
		t.Errorf("status printed:\n%s\nwant k1's and k3's entries", out)
	}
	_, out, _ = runInProcess(t, s.args("status", "k3", "k1")...)
	if strings.Contains(out, "no holders or waiters") {
		t.Errorf("status of busy keys alone printed:\n%s\nwant no idle line", out)
	}
	// --json names them as idle_keys (the table's line alone did).
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"k3", "nosuch", "k1", "other", "nosuch"}, []string{"nosuch", "other"}},
		{[]string{"nosuch"}, []string{"nosuch"}},
		{[]string{"k3", "k1"}, nil},
		{nil, nil},
	} {
		_, out, _ = runInProcess(t, s.args(append([]string{"status", "--json"}, c.args...)...)...)
		var got struct {
			IdleKeys []string `json:"idle_keys"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil || !slices.Equal(got.IdleKeys, c.want) {
			t.Errorf("status --json %v = %s (%v); want idle_keys %v", c.args, out, err, c.want)
		}
	}

	p := startInProcess(t, s.args("watch", "--interval", "20ms", "k3", "nosuch")...)
	eventually(t, "watch printed k3's table", func() bool { return strings.Contains(p.stdout.String(), "w3") })
	if code := p.stop(t); code != 0 {
		t.Errorf("watch = %d; want 0", code)
	}
	lines = strings.Split(strings.TrimSuffix(p.stdout.String(), "\n"), "\n")
	if last := lines[len(lines)-1]; last != "no holders or waiters for nosuch" {
		t.Errorf("watch k3 nosuch ended %q; want the idle key named:\n%s", last, p.stdout)
	}

	p = startInProcess(t, s.args("watch", "--json", "--interval", "20ms", "k3", "nosuch")...)
	eventually(t, "watch --json printed a frame", func() bool { return strings.Contains(p.stdout.String(), "\n") })
	if code := p.stop(t); code != 0 {
		t.Errorf("watch --json = %d; want 0", code)
	}
	var frame struct {
		IdleKeys []string `json:"idle_keys"`
	}
	first, _, _ := strings.Cut(p.stdout.String(), "\n")
	if err := json.Unmarshal([]byte(first), &frame); err != nil || !slices.Equal(frame.IdleKeys, []string{"nosuch"}) {
		t.Errorf("watch --json k3 nosuch printed %s (%v); want idle_keys [nosuch]", first, err)
	}
}

// TestWatchCountsEntriesOnce: watch's header counts entries, not rows: w3
// waits on k1 and k3 and is one waiter (a break-it review: it said 4).
// miniredis.
func TestWatchCountsEntriesOnce(t *testing.T) {
	s := newMiniredis(t)
	populate(t, s)
	if got, want := counts(newStatusView(s.inspect(t))), "3 keys, 2 holders, 3 waiters"; got != want {
		t.Errorf("counts = %q; want %q", got, want)
	}
}

// TestStatusSuggestsNoRateOnlyKey: `status zzz` in a namespace whose one
// key has a rate window and no holders or waiters named it among "keys
// with holders or waiters" (a new user's trial); it names none, and a key
// that is held it does name. miniredis.
func TestStatusSuggestsNoRateOnlyKey(t *testing.T) {
	s := newMiniredis(t)
	if code, _, stderr := runInProcess(t, s.args("lock", "--rate", "10/m", "ratek", "--", "true")...); code != 0 {
		t.Fatalf("lock --rate = %d, %s", code, stderr)
	}
	code, out, stderr := runInProcess(t, s.args("status", "zzz")...)
	if code != 0 || stderr != "" || strings.Contains(out, "ratek") || !strings.Contains(out, "no holders or waiters") {
		t.Errorf("status zzz beside a rate-only key = %d, %q, %q; want it not named", code, out, stderr)
	}
	_, out, _ = runInProcess(t, s.args("status", "zzz", "--json")...)
	if strings.Contains(out, "other_keys") {
		t.Errorf("status zzz --json = %s; want no other_keys", out)
	}
	populate(t, s) // k1, k2, k3 busy
	if _, out, _ = runInProcess(t, s.args("status", "zzz")...); !strings.Contains(out, "closest first: ") || strings.Contains(out, "ratek") {
		t.Errorf("status zzz beside busy keys = %q; want them named, and not ratek", out)
	}
}

// (Found by a new user's trial.) status on a namespace that had lost part
// of its state reset it, as every step does, and said nothing when no lease
// ended with it: a read that changed the namespace unseen. It now says so,
// once: the read after it finds the state whole (miniredis and real Redis).
func TestStatusSaysItsReadReset(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		l := s.hold(t, "k1")
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.c.Del(ctx, s.b.Keys()[2]).Err(); err != nil { // the queue
			t.Fatal(err)
		}
		code, out, stderr := runInProcess(t, s.args("status")...)
		if code != exitOK || !strings.Contains(out, "\nreset now: this read found part of the namespace's state lost and reset it") {
			t.Errorf("status after the queue vanished = %d, %q, %q; want 0 and the reset told", code, out, stderr)
		}
		if strings.Contains(out, "no grants for ") {
			t.Errorf("status = %q; no lease was running, so no freeze", out)
		}
		var v statusView
		code, out, _ = runInProcess(t, s.args("status", "--json")...)
		if err := json.Unmarshal([]byte(out), &v); err != nil || code != exitOK || v.Reset {
			t.Errorf("status --json after the reset = %d, %s (%v); want reset false: the state is whole again", code, out, err)
		}
		if snap := s.inspect(t); snap.Stats.Resets != 1 || snap.Reset {
			t.Errorf("Inspect() after status = resets %d, reset %v; want 1 and false", snap.Stats.Resets, snap.Reset)
		}

		// Again, with --json, and a lease running (no Session: none steps
		// meanwhile): it ends, grants freeze.
		if _, err := s.b.Enqueue(ctx, lanes.Owner{ID: "o-status", Host: "test-host", PID: 4242}, time.Minute,
			[]lanes.Request{{ID: "h2", Lanes: []lanes.Lane{{Key: "k2", Limit: 1}}}}); err != nil {
			t.Fatal(err)
		}
		if err := s.c.Del(ctx, s.b.Keys()[4]).Err(); err != nil { // nested
			t.Fatal(err)
		}
		code, out, stderr = runInProcess(t, s.args("status", "--json")...)
		if err := json.Unmarshal([]byte(out), &v); err != nil || code != exitOK || !v.Reset || v.FrozenMS <= 0 || len(v.Keys) != 0 {
			t.Errorf("status --json after nested vanished = %d, %s%s (%v); want reset true, a freeze, no keys", code, out, stderr, err)
		}
	})
}
