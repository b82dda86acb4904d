// Package textdist measures how far apart two short strings are, for
// "did you mean" hints.
package textdist

import (
	"cmp"
	"slices"
)

// Levenshtein is the edit distance of a and b, in bytes: the fewest byte
// insertions, deletions and substitutions that turn a into b. It takes
// O(len(a)*len(b)) time; callers bound the lengths.
func Levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// maxLen is the length past which Closest counts a name as far from every
// target rather than measuring it.
const maxLen = 128

// Closest returns up to n of names, the closest to one of targets first
// (the least Levenshtein distance to any of them; a name or target longer
// than 128 bytes counts as far), ties in name order.
func Closest(targets, names []string, n int) []string {
	type scored struct {
		name string
		dist int
	}
	all := make([]scored, len(names))
	for i, name := range names {
		all[i] = scored{name, maxLen}
		for _, t := range targets {
			if len(t) <= maxLen && len(name) <= maxLen {
				all[i].dist = min(all[i].dist, Levenshtein(t, name))
			}
		}
	}
	slices.SortFunc(all, func(a, b scored) int { return cmp.Or(cmp.Compare(a.dist, b.dist), cmp.Compare(a.name, b.name)) })
	out := make([]string, 0, min(n, len(all)))
	for _, s := range all[:min(n, len(all))] {
		out = append(out, s.name)
	}
	return out
}
