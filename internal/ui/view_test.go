package ui

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

func TestClass(t *testing.T) {
	for key, want := range map[string]string{
		"concurrency:rfd":            ClassConcurrency,
		"lock:draft:7":               ClassLock,
		"lock:file:/srv/a.md":        ClassFile,
		"file:/srv/a.md":             ClassFile,
		"tool:search":                ClassTool,
		"tenant:acme":                ClassTenant,
		"run:r1/tenant:acme":         ClassTenant,
		"run:r1/tool:search":         ClassTool,
		"report":                     ClassOther,
		"run:no-slash":               ClassOther,
		"Tool:search":                ClassOther,
		"concurrency":                ClassOther,
		"lock:file:":                 ClassFile,
		"tool:<img src=x onerror=1>": ClassTool,
	} {
		if got := Class(key); got != want {
			t.Errorf("Class(%q) = %q; want %q", key, got, want)
		}
	}
}

func TestFilterLockTakesFilesToo(t *testing.T) {
	views := []NamespaceView{{Namespace: "a", Keys: []KeyView{
		{Key: "lock:x", Class: ClassLock}, {Key: "lock:file:/y", Class: ClassFile}, {Key: "tool:z", Class: ClassTool},
	}}, {Namespace: "b", Keys: []KeyView{{Key: "lock:w", Class: ClassLock}}}}
	keys := func(v []NamespaceView) string {
		var out []string
		for _, n := range v {
			for _, k := range n.Keys {
				out = append(out, n.Namespace+"/"+k.Key)
			}
		}
		return strings.Join(out, " ")
	}
	for _, c := range []struct {
		f    Filter
		want string
	}{
		{Filter{}, "a/lock:x a/lock:file:/y a/tool:z b/lock:w"},
		{Filter{Class: ClassLock}, "a/lock:x a/lock:file:/y b/lock:w"},
		{Filter{Class: ClassFile}, "a/lock:file:/y"},
		{Filter{Prefix: "lock:f"}, "a/lock:file:/y"},
		{Filter{Namespace: "b"}, "b/lock:w"},
		{Filter{Namespace: "a", Class: ClassTool}, "a/tool:z"},
	} {
		if got := keys(c.f.apply(views)); got != c.want {
			t.Errorf("%+v.apply() = %q; want %q", c.f, got, c.want)
		}
	}
}

func TestParseFilterRefusesWhatItCannotShow(t *testing.T) {
	if _, err := ParseFilter("", "", "locks", []string{"a"}); err == nil || !strings.Contains(err.Error(), `unknown class "locks"`) {
		t.Errorf("ParseFilter(class locks) = %v; want an error naming the class", err)
	}
	if _, err := ParseFilter("zz", "", "", []string{"a"}); err == nil || !strings.Contains(err.Error(), `"zz" is not watched`) {
		t.Errorf("ParseFilter(ns zz) = %v; want an error naming the namespace", err)
	}
	if _, err := ParseFilter("a", "tool:", "tool", []string{"a"}); err != nil {
		t.Errorf("ParseFilter(a, tool:, tool) = %v; want nil", err)
	}
}

func TestBuildKeysBusiestFirst(t *testing.T) {
	snap := snapAt(1000,
		lanes.KeyState{Key: "a", Limit: 5, Holders: []lanes.Holder{holder(entry("h1", 0, "a"), 1, 0, 2000), holder(entry("h2", 0, "a"), 2, 0, 2000)}},
		lanes.KeyState{Key: "b", Limit: 1, Holders: []lanes.Holder{holder(entry("h3", 0, "b"), 1, 0, 2000)},
			Waiters: []lanes.Waiter{{Entry: entry("w1", 10, "b"), Position: 1}}},
		lanes.KeyState{Key: "c", Limit: 1, Holders: []lanes.Holder{holder(entry("h4", 0, "c"), 1, 0, 2000)}},
		lanes.KeyState{Key: "idle", Limit: 1},
	)
	var got []string
	for _, k := range buildKeys(snap, func(string, string) int64 { return 0 }) {
		got = append(got, k.Key)
	}
	if want := []string{"b", "a", "c"}; !slices.Equal(got, want) {
		t.Errorf("buildKeys() keys = %q; want %q (most waiters, then most holders, then by key; idle keys left out)", got, want)
	}
}

func TestBuildKeysMeasuresOnTheRedisClock(t *testing.T) {
	kept := holder(entry("kept", 0, "k"), 7, 0, 5000)
	kept.Ended = true
	keys := buildKeys(snapAt(100, lanes.KeyState{Key: "k", Limit: 1, Holders: []lanes.Holder{kept}}),
		func(string, string) int64 { return 9000 })
	h := keys[0].Holders[0]
	if !h.Ended || h.HeldMS != 100 || h.LeaseLeftMS != 4900 || h.LeaseMS != 9000 || h.Granted != "2026-01-02T03:04:05.000Z" {
		t.Errorf("holder = %+v; want ended, held 100ms, 4900ms left of the 9000ms seen, granted at t0 (Redis clock)", h)
	}
}

func TestNextGranted(t *testing.T) {
	ids := func(es []lanes.Entry) string {
		var out []string
		for _, e := range es {
			out = append(out, e.ID)
		}
		return strings.Join(out, " ")
	}
	a := entry("a", 0, "k")
	b := entry("b", 10, "k")
	c := entry("c", 20, "k", "j") // waits for k and for j, which d holds
	d := entry("d", 0, "j")
	e := entry("e", 30, "k")
	snap := snapAt(100,
		lanes.KeyState{Key: "j", Limit: 1, Holders: []lanes.Holder{holder(d, 1, 0, 999)},
			Waiters: []lanes.Waiter{{Entry: c, Position: 1}}},
		lanes.KeyState{Key: "k", Limit: 2, Holders: []lanes.Holder{holder(a, 1, 0, 999), holder(entry("z", 0, "k"), 2, 0, 999)},
			Waiters: []lanes.Waiter{{Entry: b, Position: 1}, {Entry: c, Position: 2}, {Entry: e, Position: 3}}},
	)
	for _, tc := range []struct{ release, want string }{
		{"a", "b"},     // frees one slot of k: b, the head
		{"d", ""},      // frees j, but c is second on k, full
		{"b", ""},      // a waiter leaving grants nobody while k is full
		{"nobody", ""}, // not there
	} {
		if got := ids(NextGranted(snap, tc.release)); got != tc.want {
			t.Errorf("NextGranted(%s) = %q; want %q", tc.release, got, tc.want)
		}
	}
	frozen := *snap
	frozen.Frozen = at(500)
	if got := NextGranted(&frozen, "a"); got != nil {
		t.Errorf("NextGranted(a) in a frozen namespace = %v; want none", ids(got))
	}
}

// Rate lanes (issue 15): a rate key's window is in the key's JSON,
// measured on the Redis clock.
func TestBuildKeysShowsRateWindow(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	snap := &lanes.Snapshot{Time: now, Keys: []lanes.KeyState{{
		Key: "concurrency:partner", Limit: 3,
		Rate:    &lanes.RateWindow{Rate: lanes.Rate{Limit: 20, Per: time.Second}, Spent: 7, NextFree: now.Add(250 * time.Millisecond)},
		Holders: []lanes.Holder{{Entry: lanes.Entry{ID: "a"}, Token: 1, Granted: now, Expires: now.Add(time.Second)}},
	}}}
	keys := buildKeys(snap, func(string, string) int64 { return 0 })
	want := RateView{Rate: "20/s", Limit: 20, PerMS: 1000, Spent: 7, NextFreeMS: 250}
	if len(keys) != 1 || keys[0].Rate == nil || *keys[0].Rate != want {
		t.Fatalf("buildKeys() = %+v; want the window %+v", keys, want)
	}
}
