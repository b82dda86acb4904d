package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
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
	assertOneLine(t, stderr)
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
		"granted next: w1\n"
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
