package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// writeModule writes a module of three packages in dir: good passes (and
// logs a line that reads like a failure), bad has a failing subtest and a
// skip, and none has no tests.
func writeModule(t *testing.T, dir string) {
	t.Helper()
	files := map[string]string{
		"go.mod":    "module example.com/m\n\ngo 1.24\n",
		"none/x.go": "package none\n",
		"good/x.go": "package good\n",
		"bad/x.go":  "package bad\n",
		"good/x_test.go": `package good

import "testing"

func TestQuiet(t *testing.T) { t.Log("VIOLATION: this is a checker's negative test") }

func TestConformanceMemory(t *testing.T) {}
`,
		"bad/x_test.go": `package bad

import "testing"

func TestPasses(t *testing.T) { t.Log("NOISE from a passing test") }

func TestBroken(t *testing.T) {
	t.Run("sub", func(t *testing.T) { t.Error("got 1; want 2") })
	t.Run("fine", func(t *testing.T) { t.Log("NOISE from a passing subtest") })
}

func TestSkips(t *testing.T) { t.Skip("SKIP: no redis-server on PATH") }
`,
	}
	for name, text := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReport runs go test through testreport on a module of its own: a
// result line per package, the failing tests' names first, then only
// their output; passing tests' lines only in the log; skips grouped.
func TestReport(t *testing.T) {
	dir := t.TempDir()
	writeModule(t, dir)
	t.Chdir(dir)
	var out strings.Builder
	code, err := run(&out, 2, filepath.Join(dir, "test.log"), filepath.Join(dir, "times.json"), []string{"-count=1"}, []string{"./..."})
	if err != nil {
		t.Fatal(err)
	}
	got := out.String()
	t.Logf("output:\n%s", got)
	if code != 1 {
		t.Errorf("run() = %d; want 1 (a package failed)\n%s", code, got)
	}
	for _, re := range []string{
		`(?m)^ok    example\.com/m/good\s+[0-9.]+s$`,
		`(?m)^FAIL  example\.com/m/bad\s+[0-9.]+s  2 failed$`,
		`(?m)^no test files: example\.com/m/none$`,
		`(?m)^  PASS  TestConformanceMemory \(example\.com/m/good\)$`,
		`(?m)^     1 no redis-server on PATH$`,
		`(?s)FAILED in .*:\n  example\.com/m/bad: TestBroken\n  example\.com/m/bad: TestBroken/sub\n\n=== `,
		`(?s)=== example\.com/m/bad: TestBroken/sub\n.*got 1; want 2`,
	} {
		if !regexp.MustCompile(re).MatchString(got) {
			t.Errorf("output lacks %s:\n%s", re, got)
		}
	}
	for _, noise := range []string{"NOISE", "VIOLATION", "=== RUN"} {
		if strings.Contains(got, noise) {
			t.Errorf("output shows %q, from a passing test or go test's progress:\n%s", noise, got)
		}
	}
	log, err := os.ReadFile(filepath.Join(dir, "test.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"NOISE from a passing test", "VIOLATION: this is", "got 1; want 2", "### example.com/m/bad: FAIL"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("the log lacks %q", want)
		}
	}
	if times := readTimes(filepath.Join(dir, "times.json")); len(times) != 2 {
		t.Errorf("times = %v; want the two tested packages", times)
	}
}

// TestReportBuildFailure: a package that does not build is a failure of
// the package, with the compiler's message.
func TestReportBuildFailure(t *testing.T) {
	dir := t.TempDir()
	writeModule(t, dir)
	if err := os.WriteFile(filepath.Join(dir, "good", "x.go"), []byte("package good\n\nvar x int = \"s\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	var out strings.Builder
	code, err := run(&out, 1, filepath.Join(dir, "test.log"), filepath.Join(dir, "times.json"), []string{"-count=1"}, []string{"./good"})
	if err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if code != 1 || !strings.Contains(got, "example.com/m/good: the package") || !strings.Contains(got, "cannot use \"s\"") {
		t.Errorf("run() = %d:\n%s\nwant 1, the package named, and the compiler's message", code, got)
	}
}

// TestModulesOfWorkspace: without packages, every module of the go.work is
// tested, a nested one too (the root's "./..." leaves it out); without a
// go.work, the main module.
func TestModulesOfWorkspace(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":                "module example.com/m\n\ngo 1.24\n",
		"x.go":                  "package m\n",
		"tools/bench/go.mod":    "module example.com/m/tools/bench\n\ngo 1.24\n",
		"tools/bench/x.go":      "package bench\n",
		"tools/bench/y/y.go":    "package y\n",
		"unlisted/go.mod":       "module example.com/unlisted\n\ngo 1.24\n",
		"unlisted/x.go":         "package unlisted\n",
		"go.work":               "go 1.24\n\nuse (\n\t.\n\t./tools/bench\n)\n",
		"tools/bench/README.md": "a module of its own\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	t.Setenv("GOWORK", "")
	got, err := modules()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"./...", "./tools/bench/..."}; !slices.Equal(got, want) {
		t.Errorf("modules() = %q; want %q", got, want)
	}
	pkgs, err := list(got)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, p := range pkgs {
		paths = append(paths, p.path)
	}
	if want := []string{"example.com/m", "example.com/m/tools/bench", "example.com/m/tools/bench/y"}; !slices.Equal(paths, want) {
		t.Errorf("packages %q; want %q", paths, want)
	}

	if err := os.Remove(filepath.Join(dir, "go.work")); err != nil {
		t.Fatal(err)
	}
	if got, err := modules(); err != nil || !slices.Equal(got, []string{"./..."}) {
		t.Errorf("without go.work: modules() = %q, %v; want [./...]", got, err)
	}
}
