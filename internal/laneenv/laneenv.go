// Package laneenv writes and reads the LANES_* variables that `lanectl lock`
// and `lanectl batch` put in the environment of the commands they run, so
// that every command writes them one way and a nested lanectl reads them
// back (DESIGN.md invariant 10: lineage crosses processes).
//
// A list variable (LANES_TOKENS, LANES_LINEAGE) is comma-separated; in each
// item "%", "," and "=" are written %25, %2C and %3D, so any key or entry id
// can be split back out. LANES_ENTRY and LANES_NAMESPACE hold one value
// each, as it is.
package laneenv

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The variables, by name.
const (
	Entry     = "LANES_ENTRY"     // the entry id the command runs under
	Tokens    = "LANES_TOKENS"    // key=token,... : the fencing token of each lane key held
	Token     = "LANES_TOKEN"     // the one token, when `lanectl lock` holds one key
	Lineage   = "LANES_LINEAGE"   // the entry ids of the chain, outermost first, ending with LANES_ENTRY
	Namespace = "LANES_NAMESPACE" // the namespace of the entries above
)

var escaper = strings.NewReplacer("%", "%25", ",", "%2C", "=", "%3D")

// Escape writes s as one item of a list variable: "%", "," and "=" as %25,
// %2C and %3D.
func Escape(s string) string { return escaper.Replace(s) }

// Unescape reverses Escape. It fails on a "%" that does not start one of
// the three escapes, and on a bare "," or "=".
func Unescape(s string) (string, error) {
	if !strings.ContainsAny(s, "%,=") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case ',', '=':
			return "", fmt.Errorf("%q holds an unescaped %q", s, c)
		case '%':
			switch strings.ToUpper(s[i+1 : min(i+3, len(s))]) {
			case "25":
				b.WriteByte('%')
			case "2C":
				b.WriteByte(',')
			case "3D":
				b.WriteByte('=')
			default:
				return "", fmt.Errorf("%q holds %q, which is none of %%25, %%2C, %%3D", s, s[i:min(i+3, len(s))])
			}
			i += 2
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// FormatTokens returns the value of LANES_TOKENS: key=token for each of
// keys, in their order, each key escaped. A key tokens lacks gets 0.
func FormatTokens(keys []string, tokens map[string]uint64) string {
	items := make([]string, len(keys))
	for i, k := range keys {
		items[i] = Escape(k) + "=" + strconv.FormatUint(tokens[k], 10)
	}
	return strings.Join(items, ",")
}

// SortedKeys returns the keys of tokens, sorted: the order `lanectl batch`
// writes LANES_TOKENS in.
func SortedKeys(tokens map[string]uint64) []string {
	keys := make([]string, 0, len(tokens))
	for k := range tokens {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// ParseTokens reads a LANES_TOKENS value back: the token of each key. An
// empty value is no tokens.
func ParseTokens(v string) (map[string]uint64, error) {
	out := map[string]uint64{}
	if v == "" {
		return out, nil
	}
	for item := range strings.SplitSeq(v, ",") {
		k, t, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("%s: item %q is not key=token", Tokens, item)
		}
		key, err := Unescape(k)
		if err != nil {
			return nil, fmt.Errorf("%s: key %w", Tokens, err)
		}
		tok, err := strconv.ParseUint(t, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: token of %q is %q, not a number", Tokens, key, t)
		}
		out[key] = tok
	}
	return out, nil
}

// FormatLineage returns the value of LANES_LINEAGE: ids, outermost first,
// each escaped.
func FormatLineage(ids []string) string {
	items := make([]string, len(ids))
	for i, id := range ids {
		items[i] = Escape(id)
	}
	return strings.Join(items, ",")
}

// ParseLineage reads a LANES_LINEAGE value back; empty is no lineage. It
// fails on an empty item or a bad escape.
func ParseLineage(v string) ([]string, error) {
	if v == "" {
		return nil, nil
	}
	var out []string
	for item := range strings.SplitSeq(v, ",") {
		if item == "" {
			return nil, errors.New(Lineage + ": an empty entry id")
		}
		id, err := Unescape(item)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", Lineage, err)
		}
		out = append(out, id)
	}
	return out, nil
}

// Inherited returns the lineage a lanectl started with getenv's variables
// takes as its own parent chain: LANES_LINEAGE, with LANES_ENTRY appended
// when the chain does not already end with it. It returns nil when neither
// is set, or when LANES_NAMESPACE names a namespace other than ns (the
// parent's entries live elsewhere).
func Inherited(getenv func(string) string, ns string) ([]string, error) {
	if pns := getenv(Namespace); pns != "" && pns != ns {
		return nil, nil
	}
	chain, err := ParseLineage(getenv(Lineage))
	if err != nil {
		return nil, err
	}
	if e := getenv(Entry); e != "" && (len(chain) == 0 || chain[len(chain)-1] != e) {
		chain = append(chain, e)
	}
	return chain, nil
}
