package main

import (
	"encoding/json"
	"testing"
)

// The JSON contract of `keys --json`.
type keysJSON struct {
	Namespace string `json:"namespace"`
	Keys      []struct {
		Key     string `json:"key"`
		Limit   int    `json:"limit"`
		Holders int    `json:"holders"`
		Waiters int    `json:"waiters"`
	} `json:"keys"`
}

func TestKeysJSON(t *testing.T) {
	s := newMiniredis(t)
	populate(t, s)
	code, out, stderr := runInProcess(t, s.args("keys", "--json")...)
	if code != 0 || stderr != "" {
		t.Fatalf("keys --json = %d, stderr %q; want 0 and nothing", code, stderr)
	}
	var got keysJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("keys --json printed %q: %v", out, err)
	}
	if got.Namespace != s.ns {
		t.Errorf("namespace = %q; want %q", got.Namespace, s.ns)
	}
	// Most waiters first, then by key.
	want := []struct {
		key                     string
		limit, holders, waiters int
	}{{"k1", 1, 1, 3}, {"k3", 1, 0, 1}, {"k2", 2, 1, 0}}
	if len(got.Keys) != len(want) {
		t.Fatalf("keys = %+v; want %+v", got.Keys, want)
	}
	for i, w := range want {
		g := got.Keys[i]
		if g.Key != w.key || g.Limit != w.limit || g.Holders != w.holders || g.Waiters != w.waiters {
			t.Errorf("keys[%d] = %+v; want %+v", i, g, w)
		}
	}
}

func TestKeysEmpty(t *testing.T) {
	s := newMiniredis(t)
	_, out, _ := runInProcess(t, s.args("keys", "--json")...)
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	if keys, ok := raw["keys"].([]any); !ok || len(keys) != 0 {
		t.Errorf("keys --json on an empty namespace = %s; want keys []", out)
	}
	// Never used on the server: said so, as status says it (a README
	// trial found keys silent where status named the namespaces in use).
	want := "namespace " + s.ns + " on " + s.url + "\nnamespace " + s.ns + " has no lanes on this server\n"
	if _, out, _ = runInProcess(t, s.args("keys")...); out != want {
		t.Errorf("keys on a namespace never used = %q; want %q", out, want)
	}
	if no, ok := raw["no_lanes"].(bool); !ok || !no {
		t.Errorf("keys --json on a namespace never used = %s; want no_lanes true", out)
	}
	// Used, and idle now.
	if code, _, stderr := runInProcess(t, s.args("lock", "k", "--", "true")...); code != 0 {
		t.Fatalf("lock = %d, %s", code, stderr)
	}
	want = "namespace " + s.ns + " on " + s.url + "\nno holders or waiters\n"
	if _, out, _ = runInProcess(t, s.args("keys")...); out != want {
		t.Errorf("keys on an idle namespace = %q; want %q", out, want)
	}
}
