package redislane

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/lanes-dev/lanes/lanes"
)

// cjsonHints are hint messages as lib.lua's finish publishes them (cjson:
// keys in any order, no spaces, "/" escaped): readHints takes those
// without an escape itself.
var cjsonHints = []struct {
	msg  string
	fast bool // read by readHints, not left to parseHintsJSON
}{
	{`[{"id":"abc","q":12,"x":{"k":"5"},"g":1764550000000}]`, true},
	{`[{"g":1764550000000,"x":{"file:a":"7","lock:b":"18446744073709551615"},"q":3,"id":"e-1"},{"id":"gone"}]`, true},
	{`[{"id":"taken"}]`, true},
	{`[{"x":{},"id":"a","q":1}]`, true},
	{`[{"id":"a","q":0,"g":0}]`, true},
	{`[{}]`, true},
	{`[]`, true},
	{`[{"id":"a","q":1,"x":{"k":"-1"},"g":5}]`, true}, // a token that does not parse: no grant
	{`[{"id":"a","q":1,"x":{"k":"1","j":"x"}}]`, true},
	{`[{"id":"a\/b","q":1,"x":{"k":"1"}}]`, false}, // an escape
	{`[{"id":"a","q":1e3}]`, false},
	{`[{"id":"a","q":1.0}]`, false},
	{`[{"id":"a","q":01}]`, false},
	{`[{"id":"a","q":-1}]`, false},
	{`[{"id":"a","q":18446744073709551616}]`, false},
	{`[{"id":"a","g":9223372036854775808}]`, false},
	{`[{"id":"a","ID":"b"}]`, false},
	{`[{"id":"a","id":"b"}]`, false},
	{`[{"id":"a","x":{"k":"1","k":"2"}}]`, false},
	{`[{"id":"a","x":[]}]`, false},
	{`[{"id":"a","x":null}]`, false},
	{`[{"id":null}]`, false},
	{`[{"id":"a","other":1}]`, false},
	{`[{"id":"a"} ]`, false},
	{`[{"id":"é"}]`, false},
	{`[{"id":"a"}]x`, false},
	{`[{"id":"a"},]`, false},
	{`{"reset":"123"}`, false},
	{`null`, false},
	{`a b c`, false},
	{``, false},
}

// TestReadHintsMatchesEncodingJSON holds readHints to parseHintsJSON on
// every message it takes: the messages lib.lua writes, and random ones
// near them.
func TestReadHintsMatchesEncodingJSON(t *testing.T) {
	check := func(msg string) bool {
		t.Helper()
		got, ok := readHints(msg)
		if !ok {
			return false
		}
		if want := parseHintsJSON(msg); !reflect.DeepEqual(got, want) {
			t.Fatalf("readHints(%q) =\n%#v\nwant (encoding/json)\n%#v", msg, got, want)
		}
		return true
	}
	for _, c := range cjsonHints {
		if fast := check(c.msg); fast != c.fast {
			t.Errorf("readHints(%q) took it: %v, want %v", c.msg, fast, c.fast)
		}
		if got, want := parseHints(c.msg), parseHintsJSON(c.msg); !reflect.DeepEqual(got, want) {
			t.Errorf("parseHints(%q) = %#v, want %#v", c.msg, got, want)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	strs := []string{`"a"`, `"e-1"`, `""`, `"file:x"`, `"a\/b"`, `"\u00e9"`, `"é"`, `"a b"`, `"` + "\x01" + `"`, `"\""`, `1`, `null`, `"7"`, `"-1"`, `"18446744073709551616"`}
	nums := []string{`0`, `1`, `12`, `1764550000000`, `18446744073709551615`, `18446744073709551616`, `9223372036854775807`, `9223372036854775808`, `-1`, `01`, `1.5`, `1e3`, `"1"`, `null`}
	pick := func(s []string) string { return s[r.IntN(len(s))] }
	fast := 0
	for range 20000 {
		var objs []string
		for range r.IntN(4) {
			var fields []string
			for _, k := range r.Perm(6) {
				if r.IntN(3) == 0 {
					continue
				}
				switch k {
				case 0:
					fields = append(fields, `"id":`+pick(strs))
				case 1:
					fields = append(fields, `"q":`+pick(nums))
				case 2:
					fields = append(fields, `"g":`+pick(nums))
				case 3:
					var toks []string
					for range r.IntN(3) {
						toks = append(toks, pick(strs)+`:`+pick(strs))
					}
					fields = append(fields, `"x":{`+strings.Join(toks, ",")+`}`)
				case 4:
					fields = append(fields, pick([]string{`"ID":"b"`, `"id":"b"`, `"q":2`, `"zz":1`, `"x":[]`}))
				}
			}
			objs = append(objs, `{`+strings.Join(fields, ",")+`}`)
		}
		msg := `[` + strings.Join(objs, ",") + `]`
		if r.IntN(4) == 0 && len(msg) > 0 { // cut or change one byte
			i := r.IntN(len(msg))
			if r.IntN(2) == 0 {
				msg = msg[:i]
			} else {
				const bytes = `[]{},:" 0a\`
				msg = msg[:i] + string(bytes[r.IntN(len(bytes))]) + msg[i+1:]
			}
		}
		if check(msg) {
			fast++
		}
	}
	if fast < 1000 {
		t.Errorf("readHints took %d of the random messages: the test exercises too little of it", fast)
	}
}

func FuzzReadHints(f *testing.F) {
	for _, c := range cjsonHints {
		f.Add(c.msg)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		if got, ok := readHints(msg); ok {
			if want := parseHintsJSON(msg); !reflect.DeepEqual(got, want) {
				t.Fatalf("readHints(%q) =\n%#v\nwant (encoding/json)\n%#v", msg, got, want)
			}
		}
	})
}

func BenchmarkParseHints(b *testing.B) {
	msg := `[{"g":1764550000000,"x":{"k12":"4711"},"q":31337,"id":"abcdefghijklmnopqrst"}]`
	b.Run("read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			parseHints(msg)
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			parseHintsJSON(msg)
		}
	})
}

// TestMalformedHintAsksAboutEveryEntry: a message that is no JSON list of
// hints (a damaged or hand-written PUBLISH) is read as one hint without an
// id, so the owner asks about every entry it has, and no wake-up is lost
// to it; an empty list is no hint.
func TestMalformedHintAsksAboutEveryEntry(t *testing.T) {
	for _, msg := range []string{``, `a b c`, `null`, `{"reset":"1"}`, `[{"id":"a"},]`, `[{"id":"a"`, `[1]`, `["a"]`} {
		if got := parseHints(msg); !reflect.DeepEqual(got, []lanes.Hint{{}}) {
			t.Errorf("parseHints(%q) = %#v; want one hint about every entry", msg, got)
		}
	}
	if got := parseHints(`[]`); len(got) != 0 {
		t.Errorf("parseHints(`[]`) = %#v; want none", got)
	}
}
