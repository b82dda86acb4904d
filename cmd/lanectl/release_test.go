package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// The JSON contract of `release --json`.
type releaseJSON struct {
	Released []struct {
		Entry string   `json:"entry"`
		Was   string   `json:"was"`
		Keys  []string `json:"keys"`
	} `json:"released"`
	Granted []string `json:"granted"`
}

func TestReleaseJSON(t *testing.T) {
	s := newMiniredis(t)
	populate(t, s)
	code, out, stderr := runInProcess(t, s.args("release", "--force", "--json", "w3", "h1", "nosuch")...)
	if code != exitNotFound {
		t.Errorf("release of a missing entry = %d; want %d", code, exitNotFound)
	}
	assertJSONError(t, stderr, "not_found", exitNotFound) // --json: the error as JSON
	var got releaseJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("release --json printed %q: %v", out, err)
	}
	want := []struct {
		entry, was string
		keys       []string
	}{{"w3", "waiting", []string{"k1", "k3"}}, {"h1", "held", []string{"k1"}}, {"nosuch", "gone", []string{}}}
	if len(got.Released) != len(want) {
		t.Fatalf("released = %+v; want %+v", got.Released, want)
	}
	for i, w := range want {
		g := got.Released[i]
		if g.Entry != w.entry || g.Was != w.was || g.Keys == nil || !slices.Equal(g.Keys, w.keys) {
			t.Errorf("released[%d] = %+v; want %+v", i, g, w)
		}
	}
	if !slices.Equal(got.Granted, []string{"w1"}) {
		t.Errorf("granted = %q; want [w1]", got.Granted)
	}

	snap := s.inspect(t)
	if len(snap.Keys) != 2 || snap.Keys[0].Key != "k1" || snap.Keys[0].Holders[0].ID != "w1" {
		t.Errorf("after the release, Inspect() = %+v; want k1 held by w1, and k2", snap.Keys)
	}
}

func TestReleaseTable(t *testing.T) {
	s := newMiniredis(t)
	populate(t, s)
	code, out, stderr := runInProcess(t, s.args("release", "--force", "h1", "w3", "w2")...)
	if code != 0 || stderr != "" {
		t.Fatalf("release = %d, stderr %q; want 0 and nothing", code, stderr)
	}
	want := "released h1 (holder of k1)\n" +
		"removed waiter w3 (queued on k1, k3)\n" +
		"removed waiter w2 (queued on k1)\n" +
		"granted next: w1 (holder of k1, owner test-host:4242)\n"
	if out != want {
		t.Errorf("release printed:\n%s\nwant:\n%s", out, want)
	}
}

func TestReleaseNotFound(t *testing.T) {
	s := newMiniredis(t)
	code, out, stderr := runInProcess(t, s.args("release", "--force", "nosuch")...)
	if code != exitNotFound || out != "" {
		t.Errorf("release --force nosuch = %d, %q; want %d and nothing on stdout", code, out, exitNotFound)
	}
	assertOneLine(t, stderr)
	if !strings.Contains(stderr, "no entry nosuch") {
		t.Errorf("stderr = %q; want it to name the missing entry", stderr)
	}
}

func TestReleaseWithoutForce(t *testing.T) {
	s := newMiniredis(t)
	populate(t, s)
	code, out, stderr := runInProcess(t, s.args("release", "h1")...)
	if code != exitUsage || out != "" {
		t.Errorf("release without --force = %d, stdout %q; want %d and nothing", code, out, exitUsage)
	}
	assertOneLine(t, stderr)
	if snap := s.inspect(t); len(snap.Keys) == 0 || snap.Keys[0].Holders[0].ID != "h1" {
		t.Errorf("after release without --force, Inspect() = %+v; want h1 still holding k1", snap.Keys)
	}
}

// runOnTerminal runs lanectl in process as if its standard streams were a
// terminal, with stdin as what the user types.
func runOnTerminal(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	g := &globalOptions{getenv: noEnv, terminal: func(any) bool { return true }}
	code = runWith(ctx, g, nil, args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// TestReleaseConfirm: on a terminal, release asks for each entry, evicts
// those confirmed, leaves the others alone and says so.
func TestReleaseConfirm(t *testing.T) {
	s := newMiniredis(t)
	populate(t, s)
	code, out, stderr := runOnTerminal(t, "y\nn\n", s.args("release", "--force", "h1", "w3", "nosuch")...)
	if code != exitNotFound {
		t.Errorf("release of a missing entry = %d; want %d", code, exitNotFound)
	}
	wantPrompts := "evict h1 (holder of k1) of test-host:4242? [y/N] " +
		"evict w3 (waiter on k1, k3) of test-host:4242? [y/N] left w3 alone\n"
	if !strings.HasPrefix(stderr, wantPrompts) {
		t.Errorf("stderr = %q; want the prompts %q first", stderr, wantPrompts)
	}
	if want := "released h1 (holder of k1)\ngranted next: w1 (holder of k1, owner test-host:4242)\n"; out != want {
		t.Errorf("stdout = %q; want %q", out, want)
	}
	snap := s.inspect(t)
	if hs, ws := snap.Keys[0].Holders, snap.Keys[0].Waiters; hs[0].ID != "w1" || len(ws) != 2 || ws[1].ID != "w3" {
		t.Errorf("k1 after the release = %+v, %+v; want w1 holding, w2 and w3 waiting", hs, ws)
	}
}

// TestReleaseConfirmNo: declining every entry releases nothing, exits 0.
func TestReleaseConfirmNo(t *testing.T) {
	s := newMiniredis(t)
	populate(t, s)
	for _, answer := range []string{"n\n", "\n", "whatever\n", ""} {
		code, out, stderr := runOnTerminal(t, answer, s.args("release", "--force", "h1")...)
		if code != 0 || out != "" || !strings.HasSuffix(stderr, "left h1 alone\nnothing released\n") {
			t.Errorf("release answered %q = %d, stdout %q, stderr %q; want 0, nothing, and that h1 was left alone", answer, code, out, stderr)
		}
	}
	if snap := s.inspect(t); snap.Keys[0].Holders[0].ID != "h1" {
		t.Errorf("after declining, k1 is held by %s; want h1", snap.Keys[0].Holders[0].ID)
	}
}

// TestReleaseYes: --yes evicts without asking, on a terminal too; without
// a terminal release never asks (scripts).
func TestReleaseYes(t *testing.T) {
	s := newMiniredis(t)
	populate(t, s)
	code, out, stderr := runOnTerminal(t, "", s.args("release", "--force", "--yes", "h1")...)
	if code != 0 || stderr != "" || out != "released h1 (holder of k1)\ngranted next: w1 (holder of k1, owner test-host:4242)\n" {
		t.Errorf("release --yes = %d, stdout %q, stderr %q; want 0, the release, no prompt", code, out, stderr)
	}
	code, out, stderr = runInProcess(t, s.args("release", "--force", "w1")...)
	if code != 0 || stderr != "" || out != "released w1 (holder of k1)\ngranted next: w2 (holder of k1, owner test-host:4242)\n" {
		t.Errorf("release without a terminal = %d, stdout %q, stderr %q; want 0, the release, no prompt", code, out, stderr)
	}
}

// TestReleaseConfirmPTY answers the prompt on a real pseudo-terminal.
func TestReleaseConfirmPTY(t *testing.T) {
	s := newMiniredis(t)
	populate(t, s)
	p := startPTY(t, s.args("release", "--force", "h1", "w2")...)
	prompt := func(want string) {
		t.Helper()
		eventually(t, "release asked "+want, func() bool { return strings.Contains(p.out.String(), want) })
	}
	prompt("evict h1 (holder of k1) of test-host:4242? [y/N] ")
	if _, err := p.tty.Write([]byte("y\n")); err != nil {
		t.Fatal(err)
	}
	prompt("evict w2 (waiter on k1) of test-host:4242? [y/N] ")
	if _, err := p.tty.Write([]byte("N\n")); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 0 {
		t.Errorf("release = %d; want 0; output %q", code, p.out)
	}
	out := strings.ReplaceAll(p.out.String(), "\r\n", "\n")
	for _, want := range []string{"left w2 alone\n", "released h1 (holder of k1)\n", "granted next: w1 (holder of k1, owner test-host:4242)\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output %q lacks %q", out, want)
		}
	}
	if snap := s.inspect(t); snap.Keys[0].Holders[0].ID != "w1" || len(snap.Keys[0].Waiters) != 2 {
		t.Errorf("k1 after the release = %+v; want w1 holding, w2 and w3 waiting", snap.Keys[0])
	}
}

// TestReleaseNamesNextHolderAsStatusDoes: the entry a forced release
// grants is named as `lanectl status` names a holder, not by its id alone:
// a waiting `lanectl lock` by its owner host:pid and command, a library
// entry by its owner, tool, call id and tenant; --json gives the same in
// "granted_holders". The lock is another process: on miniredis and on the
// real Redis server.
func TestReleaseNamesNextHolderAsStatusDoes(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h := s.hold(t, "k")
		ready := filepath.Join(t.TempDir(), "ready")
		p := startBin(t, s.args("lock", "k", "--", "sh", "-c", `touch "$1"; while [ -e "$1" ]; do sleep 0.02; done`, "sh", ready)...)
		var lockEntry string
		eventually(t, "lanectl lock waits for k", func() bool {
			if ks := s.inspect(t).Keys; len(ks) == 1 && len(ks[0].Waiters) == 1 {
				lockEntry = ks[0].Waiters[0].ID
				return true
			}
			return false
		})
		// A library entry behind it, granted when the lock's lease is released.
		if _, err := s.session(t).Enqueue(ctx, lanes.Request{ID: "w-tool", Lanes: []lanes.Lane{{Key: "k", Limit: 1}}, Tool: "edit", CallID: "call-2", Tenant: "acme"}); err != nil {
			t.Fatal(err)
		}
		host, _ := os.Hostname()
		code, out, stderr := runInProcess(t, s.args("release", "--force", h.ID())...)
		want := "released " + h.ID() + " (holder of k)\n" +
			"granted next: " + lockEntry + " (holder of k, owner " + host + ":" + strconv.Itoa(p.cmd.Process.Pid) + ", command sh)\n"
		if code != 0 || out != want || stderr != "" {
			t.Errorf("release --force of the holder = %d, %q (stderr %q); want 0, %q", code, out, stderr, want)
		}
		eventually(t, "the command runs", func() bool { return fileExists(ready) })

		code, out, stderr = runInProcess(t, s.args("release", "--force", "--json", lockEntry)...)
		var got struct {
			Granted []string `json:"granted"`
			Next    []struct {
				Entry   string   `json:"entry"`
				Keys    []string `json:"keys"`
				Host    string   `json:"host"`
				PID     int      `json:"pid"`
				Tool    string   `json:"tool"`
				CallID  string   `json:"call_id"`
				Command string   `json:"command"`
				Tenant  string   `json:"tenant"`
			} `json:"granted_holders"`
		}
		if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil {
			t.Fatalf("release --force --json of the lock = %d, %q (stderr %q), %v", code, out, stderr, err)
		}
		if len(got.Next) != 1 || !slices.Equal(got.Granted, []string{"w-tool"}) {
			t.Fatalf("release --force --json of the lock = %s; want w-tool granted", out)
		}
		if n := got.Next[0]; n.Entry != "w-tool" || !slices.Equal(n.Keys, []string{"k"}) || n.Host != "test-host" || n.PID != 4242 ||
			n.Tool != "edit" || n.CallID != "call-2" || n.Command != "" || n.Tenant != "acme" {
			t.Errorf("granted_holders = %+v; want w-tool on k, test-host:4242, tool edit, call id call-2, tenant acme", n)
		}
		var table bytes.Buffer
		if err := (tablePrinter{&table}).Release(releaseView{Next: []grantedEntry{{Entry: "w-tool", Keys: []string{"k"}, Host: "test-host", PID: 4242, Tool: "edit", CallID: "call-2", Tenant: "acme"}}}); err != nil {
			t.Fatal(err)
		}
		if want := "granted next: w-tool (holder of k, owner test-host:4242, tool edit, call id call-2, tenant acme)\n"; table.String() != want {
			t.Errorf("the table says %q; want %q", table.String(), want)
		}
		os.Remove(ready)
		if code := p.wait(t); code != exitLeaseLost {
			t.Errorf("lock released by force = %d; want %d", code, exitLeaseLost)
		}
	})
}
