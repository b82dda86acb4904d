package sched_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/lanes-dev/lanes/sched"
)

// Every spelling of one file gives one key: relative, ./, absolute, through
// a symlinked directory, a symlink to the file, and a file not created yet.
func TestFileKeySpellings(t *testing.T) {
	root := t.TempDir()
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "docs", "plan.md"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "docs"), filepath.Join(root, "d")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "docs", "plan.md"), filepath.Join(root, "plan-link")); err != nil {
		t.Fatal(err)
	}
	want := "file:" + filepath.Join(real, "docs", "plan.md")
	for _, p := range []string{"docs/plan.md", "./docs/plan.md", "docs/../docs/plan.md", filepath.Join(root, "docs/plan.md"), "d/plan.md", "plan-link"} {
		got, err := sched.FileKey(root, p)
		if err != nil || got != want {
			t.Errorf("FileKey(%q) = %q, %v; want %q", p, got, err, want)
		}
	}
	wantNew := "file:" + filepath.Join(real, "docs", "new", "draft.md")
	for _, p := range []string{"docs/new/draft.md", "d/new/draft.md"} {
		got, err := sched.FileKey(root, p)
		if err != nil || got != wantNew {
			t.Errorf("FileKey(%q) of a file not created yet = %q, %v; want %q", p, got, err, wantNew)
		}
	}
	if _, err := sched.FileKey(root, ""); err == nil {
		t.Error("FileKey(\"\") = nil error; want one")
	}
}
