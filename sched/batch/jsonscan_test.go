package batch

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzScanAgreesWithJSON checks the response scanner against encoding/json
// on documents shallow enough for encoding/json: both accept the same
// texts, and the scanner splits an object into the members encoding/json
// decodes. The seeds run with go test.
func FuzzScanAgreesWithJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `{"a": [1, -2.5e+3, "x\"y\u00e9", true, false, null, {}]}`, ` [ 1 , 2 ] `, `{"a":1,"a":2}`,
		`{"a" 1}`, `[1,]`, `{,}`, `01`, `1.`, `-`, `"\x"`, "\"\x01\"", `[1 2]`, `{"a":1}}`, `nul`, `"\u12"`, ``, ` `,
		`{"k": "v", "n": {"m": [[[]]]}}`, `1e5`, `-0.0E-1`, `[{"a":[{"b":{}}]}]`, "\"\xff\"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		data := []byte(s)
		if strings.Count(s, "[")+strings.Count(s, "{") > 9000 {
			return // encoding/json's depth limit would decide
		}
		got, want := checkDocument(data) == nil, json.Valid(data)
		if got != want {
			t.Fatalf("checkDocument(%q) accepts: %v; json.Valid: %v", s, got, want)
		}
		if !got {
			return
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(data, &m) != nil || m == nil {
			if _, ok := objectMap(data); ok {
				t.Fatalf("objectMap(%q) ok; encoding/json does not decode an object", s)
			}
			return
		}
		got2, ok := objectMap(data)
		if !ok || len(got2) != len(m) {
			t.Fatalf("objectMap(%q) = %v, %v; want %v", s, got2, ok, m)
		}
		for k, v := range m {
			if string(got2[k]) != string(v) {
				t.Fatalf("objectMap(%q)[%q] = %s; want %s", s, k, got2[k], v)
			}
		}
	})
}

// TestScanDeep reads a document nested 100,000 levels deep, which
// encoding/json refuses, and refuses the same one cut short.
func TestScanDeep(t *testing.T) {
	deep := `{"content": [{"type": "tool_use", "input": {"x": ` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}}]}`
	if err := checkDocument([]byte(deep)); err != nil {
		t.Errorf("checkDocument(100,000 levels) = %v; want nil", err)
	}
	if err := checkDocument([]byte(deep[:len(deep)-3])); err == nil {
		t.Error("checkDocument(100,000 levels, cut short) = nil; want an error")
	}
}
