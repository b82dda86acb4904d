package main

import (
	"bytes"
	"errors"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	luaparse "github.com/yuin/gopher-lua/parse"
)

// TestEveryMutationApplies is make mutate's fast guard, run by go test ./...
// (make test): without running any package's tests, every mutation must
// still plant in today's code. Each edit's old text must be in its file
// (from the repository root) exactly once, and the planted file must still
// parse (Go, or Lua 5.1 as Redis runs it): a mutation that stopped
// building would be reported broken, and a Lua script that no longer
// parses would fail every test and pass for caught. A refactor that moves
// the code a mutation targets fails here; update the mutation's edits
// (mutations.go) so that it plants the same bug (its What) in the new code,
// then run it: go run ./scripts/mutate -run NAME.
func TestEveryMutationApplies(t *testing.T) {
	root := moduleRoot(t)
	if _, err := selected(""); err != nil {
		t.Fatal(err)
	}
	for _, m := range mutations {
		t.Run(m.Name, func(t *testing.T) {
			if m.What == "" {
				t.Error("no What: the bug it plants, in words")
			}
			if m.Run != "" {
				if _, err := regexp.Compile(m.Run); err != nil {
					t.Errorf("Run %q: %v", m.Run, err)
				}
			}
			for _, p := range m.Pkgs {
				if !strings.HasPrefix(p, "./") {
					t.Errorf("package %q: a path from the repository root, as ./sched", p)
				} else if fi, err := os.Stat(filepath.Join(root, p)); err != nil || !fi.IsDir() {
					t.Errorf("package %s: no such directory", p)
				}
			}
			files, err := planted(root, m)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range sortedKeys(files) {
				if err := parses(f, files[f]); err != nil {
					t.Errorf("%s does not parse with the mutation planted: %v", f, err)
				}
			}
		})
	}
}

// TestPlanted checks planted itself on a scratch tree: edits apply in order,
// and an old text that is missing or repeated is refused.
func TestPlanted(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.go"), []byte("x := 1\ny := 1\nz := 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := Mutation{Name: "t", Edits: []Edit{
		{File: "a.go", Old: "z := 2", New: "z := 3"},
		{File: "a.go", Old: "z := 3", New: "z := 4"}, // sees the edit before it
	}}
	files, err := planted(dir, m)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(files["a.go"]), "x := 1\ny := 1\nz := 4\n"; got != want {
		t.Errorf("planted a.go = %q; want %q", got, want)
	}
	for _, e := range []Edit{
		{File: "a.go", Old: ":= 1", New: ":= 5"},     // twice
		{File: "a.go", Old: "w := 0", New: "w := 5"}, // absent
		{File: "a.go", Old: "z := 2", New: "z := 2"}, // no change
		{File: "b.go", Old: "z := 2", New: "z := 5"}, // no file
	} {
		if _, err := planted(dir, Mutation{Name: "t", Edits: []Edit{e}}); err == nil {
			t.Errorf("planted accepted %+v", e)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.go")); !bytes.Equal(b, []byte("x := 1\ny := 1\nz := 2\n")) {
		t.Errorf("planted wrote the tree: %q", b)
	}
}

// parses checks that a planted Go or Lua file still parses.
func parses(name string, src []byte) error {
	switch filepath.Ext(name) {
	case ".go":
		_, err := parser.ParseFile(token.NewFileSet(), name, src, parser.SkipObjectResolution)
		return err
	case ".lua":
		_, err := luaparse.Parse(bytes.NewReader(src), name)
		return err
	}
	return nil
}

// moduleRoot is the directory of the go.mod above the test's directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		} else if !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}

// TestParses checks that the guard tells a planted file that no longer
// parses, in Go and in Lua, from one that does.
func TestParses(t *testing.T) {
	for _, c := range []struct {
		name, src string
		ok        bool
	}{
		{"a.go", "package a\n\nfunc f() bool { return false && true }\n", true},
		{"a.go", "package a\n\nfunc f() bool { return false && }\n", false},
		{"a.lua", "local function f(e)\n  if false and e.s == 'h' then return end\nend\n", true},
		{"a.lua", "local function f(e)\n  if false and then return end\nend\n", false},
		{"a.lua", "local x = 1 +\n", false},
		{"a.md", "anything (", true},
	} {
		if err := parses(c.name, []byte(c.src)); (err == nil) != c.ok {
			t.Errorf("parses(%s, %q) = %v; want ok %v", c.name, c.src, err, c.ok)
		}
	}
}
