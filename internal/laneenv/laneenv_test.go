package laneenv_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/lanes-dev/lanes/internal/laneenv"
)

func TestTokensRoundTrip(t *testing.T) {
	keys := []string{"a,b=c%d", "lock:k:p,q=r", "plain", "%2C", "=", ","}
	tokens := map[string]uint64{"a,b=c%d": 1, "lock:k:p,q=r": 2, "plain": 3, "%2C": 4, "=": 5, ",": 6}
	v := laneenv.FormatTokens(keys, tokens)
	if want := "a%2Cb%3Dc%25d=1,lock:k:p%2Cq%3Dr=2,plain=3,%252C=4,%3D=5,%2C=6"; v != want {
		t.Errorf("FormatTokens() = %q; want %q", v, want)
	}
	got, err := laneenv.ParseTokens(v)
	if err != nil || !maps.Equal(got, tokens) {
		t.Errorf("ParseTokens(%q) = %v, %v; want %v", v, got, err, tokens)
	}
	if got := laneenv.FormatTokens(laneenv.SortedKeys(tokens), tokens); got[:6] != "%252C=" {
		t.Errorf("FormatTokens(sorted) = %q; want the keys sorted as written before escaping", got)
	}
}

func TestLineageRoundTrip(t *testing.T) {
	ids := []string{"run=1/call,2", "100%", "plain"}
	v := laneenv.FormatLineage(ids)
	if want := "run%3D1/call%2C2,100%25,plain"; v != want {
		t.Errorf("FormatLineage() = %q; want %q", v, want)
	}
	got, err := laneenv.ParseLineage(v)
	if err != nil || !slices.Equal(got, ids) {
		t.Errorf("ParseLineage(%q) = %q, %v; want %q", v, got, err, ids)
	}
}

func TestParseRefusesMalformed(t *testing.T) {
	for _, v := range []string{"a,,b", "a%", "a%2", "a%zz", ",", "a=b"} {
		if got, err := laneenv.ParseLineage(v); err == nil {
			t.Errorf("ParseLineage(%q) = %q, nil; want an error", v, got)
		}
	}
	for _, v := range []string{"a", "a=x", "a%=1", "a=1,", "a=-1"} {
		if got, err := laneenv.ParseTokens(v); err == nil {
			t.Errorf("ParseTokens(%q) = %v, nil; want an error", v, got)
		}
	}
}

func TestInherited(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	for _, tt := range []struct {
		name string
		env  func(string) string
		want []string
	}{
		{"nothing", env(), nil},
		{"entry only", env(laneenv.Entry, "e1"), []string{"e1"}},
		{"chain ending with the entry", env(laneenv.Entry, "e2", laneenv.Lineage, "e1,e2", laneenv.Namespace, "ns"), []string{"e1", "e2"}},
		{"chain without the entry", env(laneenv.Entry, "e2", laneenv.Lineage, "e1"), []string{"e1", "e2"}},
		{"escaped ids", env(laneenv.Entry, "r/c,2", laneenv.Lineage, "a%3Db,r/c%2C2"), []string{"a=b", "r/c,2"}},
		{"another namespace", env(laneenv.Entry, "e2", laneenv.Lineage, "e1,e2", laneenv.Namespace, "other"), nil},
	} {
		got, err := laneenv.Inherited(tt.env, "ns")
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("%s: Inherited() = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
	if _, err := laneenv.Inherited(env(laneenv.Lineage, "a,,b"), "ns"); err == nil {
		t.Error("Inherited(a malformed LANES_LINEAGE) = nil error; want one")
	}
}
