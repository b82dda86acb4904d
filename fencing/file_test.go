//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/fencing"
)

func newFileGuard(t *testing.T) (*fencing.FileGuard, string) {
	t.Helper()
	dir := t.TempDir()
	g, err := fencing.NewFileGuard(dir)
	if err != nil {
		t.Fatalf("NewFileGuard(%q) = %v", dir, err)
	}
	return g, dir
}

func TestFileGuard(t *testing.T) {
	testGuard(t, suite{
		newGuard:   func(t *testing.T) fencing.Guard { g, _ := newFileGuard(t); return g },
		shortNames: true,
	})
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatalf("ReadFile(%s) = %v", name, err)
	}
	return string(b)
}

func TestFileGuardStaleWriterNeverLands(t *testing.T) {
	g, dir := newFileGuard(t)
	ctx := context.Background()
	target := filepath.Join(dir, "report.txt")

	if err := g.WriteFile(ctx, "report.txt", 7, []byte("seven"), 0o644); err != nil {
		t.Fatalf("WriteFile(report.txt, 7) = %v", err)
	}
	if err := g.WriteFile(ctx, "report.txt", 8, []byte("eight"), 0o644); err != nil {
		t.Fatalf("WriteFile(report.txt, 8) = %v", err)
	}
	err := g.WriteFile(ctx, "report.txt", 7, []byte("stale seven"), 0o644)
	var se *fencing.StaleError
	if !errors.As(err, &se) || *se != (fencing.StaleError{Resource: "report.txt", Token: 7, Highest: 8}) {
		t.Fatalf("WriteFile(report.txt, 7) after 8 = %v; want StaleError{report.txt, 7, 8}", err)
	}
	if got := readFile(t, target); got != "eight" {
		t.Errorf("report.txt = %q; want %q (the stale write must not land)", got, "eight")
	}
	if got := readFile(t, target+fencing.FenceSuffix); got != "8\n" {
		t.Errorf("report.txt.fence = %q; want %q", got, "8\n")
	}
	// The same holder writes again with its token.
	if err := g.WriteFile(ctx, "report.txt", 8, []byte("eight again"), 0o600); err != nil {
		t.Fatalf("WriteFile(report.txt, 8) again = %v", err)
	}
	fi, err := os.Stat(target)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("Stat(report.txt) = %v, %v; want mode 0600", fi.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"report.txt", "report.txt.fence"}; !slices.Equal(names, want) {
		t.Errorf("directory holds %q; want %q (no temporary file left)", names, want)
	}
}

// TestFileGuardRace starts a stale writer (token 7) and a newer one (8)
// together, many times: whichever runs first, the file ends with 8's data.
func TestFileGuardRace(t *testing.T) {
	g, dir := newFileGuard(t)
	ctx := context.Background()
	for i := range 100 {
		name := fmt.Sprintf("f%d", i)
		start := make(chan struct{})
		var wg sync.WaitGroup
		var err7, err8 error
		wg.Go(func() { <-start; err7 = g.WriteFile(ctx, name, 7, []byte("old holder 7"), 0o644) })
		wg.Go(func() { <-start; err8 = g.WriteFile(ctx, name, 8, []byte("new holder 8"), 0o644) })
		close(start)
		wg.Wait()
		if err8 != nil {
			t.Fatalf("%s: WriteFile(8) = %v; want nil", name, err8)
		}
		if err7 != nil && !errors.Is(err7, fencing.ErrStale) {
			t.Fatalf("%s: WriteFile(7) = %v; want nil or ErrStale", name, err7)
		}
		if got := readFile(t, filepath.Join(dir, name)); got != "new holder 8" {
			t.Fatalf("%s = %q after the race (7: %v); want the data of token 8", name, got, err7)
		}
	}
}

// TestFileGuardStalledHolder holds the flock the way an old holder stalled
// in the middle of WriteFile would, and checks that the newer holder waits
// for it, honours its context while waiting, and writes after it.
func TestFileGuardStalledHolder(t *testing.T) {
	g, dir := newFileGuard(t)
	ctx := context.Background()
	if err := g.WriteFile(ctx, "data", 7, []byte("v7"), 0o644); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "data"+fencing.FenceSuffix), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	// While it is held, a write gives up when its context ends.
	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	if err := g.WriteFile(short, "data", 8, []byte("v8"), 0o644); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WriteFile(8) while the flock is held = %v; want context.DeadlineExceeded", err)
	}
	if got := readFile(t, filepath.Join(dir, "data")); got != "v7" {
		t.Fatalf("data = %q after a write that timed out; want v7", got)
	}

	// A write with a live context waits, then lands once the lock is free.
	done := make(chan error)
	go func() { done <- g.WriteFile(ctx, "data", 8, []byte("v8"), 0o644) }()
	select {
	case err := <-done:
		t.Fatalf("WriteFile(8) returned %v while the flock was held", err)
	case <-time.After(20 * time.Millisecond):
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("WriteFile(8) after the flock was released = %v", err)
	}
	if got := readFile(t, filepath.Join(dir, "data")); got != "v8" {
		t.Errorf("data = %q; want v8", got)
	}
}

func TestFileGuardInvalidPath(t *testing.T) {
	g, dir := newFileGuard(t)
	ctx := context.Background()
	for _, p := range []string{"", "../x", "/etc/passwd", "a/../../x", "x.fence", "a\x00b", strings.Repeat("p", fencing.MaxResourceLen+1)} {
		if err := g.WriteFile(ctx, p, 1, []byte("x"), 0o644); !errors.Is(err, fencing.ErrInvalid) {
			t.Errorf("WriteFile(%.20q) = %v; want ErrInvalid", p, err)
		}
		if err := g.Check(ctx, p, 1); !errors.Is(err, fencing.ErrInvalid) {
			t.Errorf("Check(%.20q) = %v; want ErrInvalid", p, err)
		}
	}
	if err := g.WriteFile(ctx, "x", 0, []byte("x"), 0o644); !errors.Is(err, fencing.ErrInvalidToken) {
		t.Errorf("WriteFile(x, 0) = %v; want ErrInvalidToken", err)
	}
	if err := g.WriteFile(ctx, "missing/dir/x", 1, []byte("x"), 0o644); err == nil || errors.Is(err, fencing.ErrInvalid) {
		t.Errorf("WriteFile(missing/dir/x) = %v; want an os error", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("directory holds %d entries after invalid writes; want none", len(entries))
	}
	if _, err := fencing.NewFileGuard(filepath.Join(dir, "nope")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("NewFileGuard(missing) = %v; want os.ErrNotExist", err)
	}
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	if _, err := fencing.NewFileGuard(file); !errors.Is(err, fencing.ErrInvalid) {
		t.Errorf("NewFileGuard(a file) = %v; want ErrInvalid", err)
	}
}

func TestFileGuardSubdirectory(t *testing.T) {
	g, dir := newFileGuard(t)
	ctx := context.Background()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := g.WriteFile(ctx, "sub/a.txt", 3, []byte("three"), 0o644); err != nil {
		t.Fatalf("WriteFile(sub/a.txt, 3) = %v", err)
	}
	if err := g.Check(ctx, "sub/a.txt", 2); !errors.Is(err, fencing.ErrStale) {
		t.Errorf("Check(sub/a.txt, 2) = %v; want ErrStale", err)
	}
	if got := readFile(t, filepath.Join(dir, "sub", "a.txt")); got != "three" {
		t.Errorf("sub/a.txt = %q; want three", got)
	}
}

func TestFileGuardCorruptFence(t *testing.T) {
	g, dir := newFileGuard(t)
	ctx := context.Background()
	for _, bad := range []string{"abc", "0", "07\n", "18446744073709551616", strings.Repeat("9", 100)} {
		if err := os.WriteFile(filepath.Join(dir, "x.fence"), []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		err := g.WriteFile(ctx, "x", 5, []byte("data"), 0o644)
		if err == nil || errors.Is(err, fencing.ErrStale) || !strings.Contains(err.Error(), "not a token") {
			t.Errorf("WriteFile over fence file %.20q = %v; want a 'not a token' error", bad, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "x")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("x exists after a refused write over fence file %.20q", bad)
		}
	}
}
