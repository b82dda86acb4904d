package textdist

import (
	"slices"
	"testing"
)

func TestLevenshtein(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "abc", 3},
		{"abc", "", 3},
		{"default", "defualt", 2}, // a transposition is two edits
		{"kitten", "sitting", 3},
		{"report", "report", 0},
		{"agents", "agent", 1},
	} {
		if got := Levenshtein(c.a, c.b); got != c.want {
			t.Errorf("Levenshtein(%q, %q) = %d; want %d", c.a, c.b, got, c.want)
		}
		if got := Levenshtein(c.b, c.a); got != c.want {
			t.Errorf("Levenshtein(%q, %q) = %d; want %d (symmetric)", c.b, c.a, got, c.want)
		}
	}
}

func TestClosest(t *testing.T) {
	names := []string{"report", "k2", "k1", "reprot", "zzz"}
	if got := Closest([]string{"repot"}, names, 2); !slices.Equal(got, []string{"report", "reprot"}) {
		t.Errorf("Closest(repot) = %v; want [report reprot]", got)
	}
	// The least distance to any target; ties in name order; n past the end.
	if got := Closest([]string{"k3", "zz"}, names, 9); !slices.Equal(got, []string{"k1", "k2", "zzz", "report", "reprot"}) {
		t.Errorf("Closest(k3, zz) = %v; want [k1 k2 zzz report reprot]", got)
	}
}
