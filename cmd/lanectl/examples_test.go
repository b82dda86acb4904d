package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The batch example the README points to (examples/batch) runs as shipped,
// in each of the three response formats, with --local (no Redis): every
// call ok, the RFD renumbers in written order, both appends in the file in
// written order. It runs on a copy, so the checkout stays clean.
func TestBatchExampleRuns(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(filepath.Join("..", "..", "examples", "batch"))); err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"anthropic", "chat", "responses"} {
		t.Run(format, func(t *testing.T) {
			notes := filepath.Join(dir, "workspace", "notes.md")
			_ = os.Remove(notes)
			code, out, stderr := runBin(t, "batch", "--local", "--json", "--tools", filepath.Join(dir, "tools.toml"), "--calls", filepath.Join(dir, format+".json"))
			if code != 0 {
				t.Fatalf("batch = %d: %s", code, stderr)
			}
			var outcomes []struct {
				Tool, Status, Output string
				Tokens               map[string]uint64
			}
			if err := json.Unmarshal([]byte(out), &outcomes); err != nil {
				t.Fatalf("batch --json: %v: %s", err, out)
			}
			if len(outcomes) != 6 {
				t.Fatalf("%d outcomes; want the example's 6 calls: %s", len(outcomes), out)
			}
			for i, o := range outcomes {
				if o.Status != "ok" {
					t.Errorf("call %d (%s) = %s: %s", i, o.Tool, o.Status, o.Output)
				}
			}
			if a, b := outcomes[1].Tokens["concurrency:rfd"], outcomes[2].Tokens["concurrency:rfd"]; a == 0 || b <= a {
				t.Errorf("rfd tokens %d then %d; want the written order", a, b)
			}
			b, err := os.ReadFile(notes)
			if want := "renumbered 8 to 11\nrenumbered 7 to 10\n"; err != nil || string(b) != want {
				t.Errorf("notes.md = %q, %v; want %q", b, err, want)
			}
			code, out, stderr = runBin(t, "batch", "--local", "--reply", "--tools", filepath.Join(dir, "tools.toml"), "--calls", filepath.Join(dir, format+".json"))
			if code != 0 || !strings.Contains(out, "RFD 7 -> 10") {
				t.Errorf("batch --reply = %d: %s%s; want the reply holding the tools' output", code, out, stderr)
			}
		})
	}
}
