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

// TestFileKeyDotDotAfterSymlink is issue 17, part 2: with ws/l a link to
// real/sub, "l/../plan.md" names ws/real/plan.md, as the kernel resolves it
// (l first, then ..), not ws/plan.md as a lexical clean would; beside the
// spellings that already agreed, for a file that exists and one that does
// not exist yet.
func TestFileKeyDotDotAfterSymlink(t *testing.T) {
	ws := t.TempDir()
	real, err := filepath.EvalSymlinks(ws)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(ws, "real", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real/sub", filepath.Join(ws, "l")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(ws, "l"), filepath.Join(ws, "abs-l")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"plan.md", "draft.md"} { // plan.md exists, draft.md not yet
		if name == "plan.md" {
			writeEmpty(t, filepath.Join(ws, "real", "plan.md"))
		}
		want := "file:" + filepath.Join(real, "real", name)
		for _, p := range []string{
			"real/" + name, "./real/" + name, "real/sub/../" + name, filepath.Join(ws, "real", name),
			"l/../" + name, "l/./../" + name, "abs-l/../" + name, "l/../../real/" + name, filepath.Join(ws, "l") + "/../" + name,
		} {
			got, err := sched.FileKey(ws, p)
			if err != nil || got != want {
				t.Errorf("FileKey(%q) = %q, %v; want %q", p, got, err, want)
			}
		}
		// The lexical reading is another file.
		if got, _ := sched.FileKey(ws, name); got == want {
			t.Errorf("FileKey(%q) = %q; want ws/%s, another file", name, got, name)
		}
	}
}

// TestFileKeyMissingTailIsLexical: once a component does not exist, the
// rest is taken lexically, ".." included; a symlink whose target does not
// exist names its target (what a write through it creates).
func TestFileKeyMissingTailIsLexical(t *testing.T) {
	ws := t.TempDir()
	real, err := filepath.EvalSymlinks(ws)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("target/new.md", filepath.Join(ws, "dangling")); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{
		"new/dir/../file.md":                filepath.Join(real, "new", "file.md"),
		"new/../file.md":                    filepath.Join(real, "file.md"),
		"dangling":                          filepath.Join(real, "target", "new.md"),
		"../" + filepath.Base(ws) + "/x.md": filepath.Join(real, "x.md"),
	} {
		got, err := sched.FileKey(ws, p)
		if err != nil || got != "file:"+want {
			t.Errorf("FileKey(%q) = %q, %v; want %q", p, got, err, "file:"+want)
		}
	}
}

// TestFileKeySymlinkLoop fails, as the kernel's ELOOP, instead of looping.
func TestFileKeySymlinkLoop(t *testing.T) {
	ws := t.TempDir()
	if err := os.Symlink("b", filepath.Join(ws, "a")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a", filepath.Join(ws, "b")); err != nil {
		t.Fatal(err)
	}
	if got, err := sched.FileKey(ws, "a/x.md"); err == nil {
		t.Errorf("FileKey(a loop) = %q, nil; want an error", got)
	}
}

func writeEmpty(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}
