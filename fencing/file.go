//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package fencing

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// FenceSuffix ends the name of the lock file FileGuard keeps beside each
// target: "<path>.fence" holds the flock and the highest token, as decimal
// text. Target paths may not end with it.
const FenceSuffix = ".fence"

// FileGuard guards writes to the files under one directory, on one machine
// or on a shared filesystem that honours flock(2). Beside each target it
// keeps "<path>.fence": an exclusive flock on it serializes every check and
// write of that path, across goroutines and processes, and its content is
// the highest token seen. Fence files are never removed: a path's record
// must outlive every lease on it.
//
// A FileGuard is safe for concurrent use, by any number of goroutines and
// processes that reach the same directory.
type FileGuard struct {
	dir string
}

var _ Guard = (*FileGuard)(nil)

// NewFileGuard returns a FileGuard for the files under dir, which must be an
// existing directory (else an error wrapping ErrInvalid, or the os error).
func NewFileGuard(dir string) (*FileGuard, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("fencing: file guard: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%w file guard directory %q: not a directory", ErrInvalid, dir)
	}
	return &FileGuard{dir: dir}, nil
}

// WriteFile replaces the file at path (relative to the guard's directory)
// with data if t is not lower than the highest token seen for path, and
// records t. A lower token is refused with a *StaleError and the file is
// left as it was.
//
// It holds an exclusive flock on "<path>.fence" from the compare to the
// end of the write, so a stalled old holder that wakes up cannot overwrite
// data a newer holder wrote. The token is recorded (and synced) before the
// data is written; the data goes to a temporary file in the same directory,
// is synced and renamed over path, so readers see the old content or the new
// one, never a mix. The new file has mode perm exactly (the umask is not
// applied). If the write fails after the token was recorded, the same
// holder may retry: an equal token is accepted.
//
// path must be a local path (filepath.IsLocal: no "..", not absolute), in
// an existing directory, not ending with FenceSuffix, and otherwise valid
// as a resource (see Guard); else an error wrapping ErrInvalid. WriteFile
// waits for the flock until ctx is done, then returns ctx.Err() without
// writing.
func (g *FileGuard) WriteFile(ctx context.Context, path string, t Token, data []byte, perm os.FileMode) error {
	return g.locked(ctx, path, t, func(target string) error {
		return writeAtomic(target, data, perm)
	})
}

// Check implements Guard with resource = path, as WriteFile does, but
// writes no data: it compares t with the highest token in "<path>.fence"
// and records it, under the same flock. Use it before a change WriteFile
// cannot make, knowing that the change itself is then not covered (see
// Guard).
func (g *FileGuard) Check(ctx context.Context, path string, t Token) error {
	return g.locked(ctx, path, t, nil)
}

// locked validates path and t, takes the flock of path's fence file,
// refuses a stale t, records t and, if write is not nil, runs it on the
// target's full name, all under the flock.
func (g *FileGuard) locked(ctx context.Context, path string, t Token, write func(target string) error) (err error) {
	if err := validate(path, t); err != nil {
		return err
	}
	if !filepath.IsLocal(path) {
		return fmt.Errorf("%w path %q: not local to the guard's directory", ErrInvalid, path)
	}
	if strings.HasSuffix(path, FenceSuffix) {
		return fmt.Errorf("%w path %q: ends with %s, the guard's own suffix", ErrInvalid, path, FenceSuffix)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	target := filepath.Join(g.dir, path)
	f, err := os.OpenFile(target+FenceSuffix, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return fmt.Errorf("fencing: %s: %w", path, err)
	}
	defer f.Close() // closing also drops the flock
	if err := flock(ctx, f); err != nil {
		return err
	}
	defer func() {
		if uerr := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); uerr != nil && err == nil {
			err = fmt.Errorf("fencing: unlock %s: %w", f.Name(), uerr)
		}
	}()

	high, err := readHighest(f)
	if err != nil {
		return fmt.Errorf("fencing: %s: %w", path, err)
	}
	if t < high {
		return &StaleError{Resource: path, Token: t, Highest: high}
	}
	if t > high {
		if err := writeHighest(f, t); err != nil {
			return fmt.Errorf("fencing: %s: record token %d: %w", path, t, err)
		}
	}
	if write == nil {
		return nil
	}
	if err := write(target); err != nil {
		return fmt.Errorf("fencing: %s: write with token %d: %w", path, t, err)
	}
	return nil
}

// flock takes an exclusive flock on f, polling so that ctx can end the wait.
func flock(ctx context.Context, f *os.File) error {
	const maxDelay = 20 * time.Millisecond
	delay := time.Millisecond
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return fmt.Errorf("fencing: flock %s: %w", f.Name(), err)
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
		delay = min(2*delay, maxDelay)
	}
}

// readHighest returns the token stored in a fence file, 0 if it is empty.
func readHighest(f *os.File) (Token, error) {
	buf := make([]byte, 64)
	n, err := f.ReadAt(buf, 0)
	if err != nil && err != io.EOF {
		return 0, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	if n == len(buf) {
		return 0, fmt.Errorf("%s holds %d+ bytes, not a token", f.Name(), n)
	}
	text := string(bytes.TrimSuffix(buf[:n], []byte("\n")))
	if text == "" {
		return 0, nil
	}
	t, perr := ParseToken(text)
	if perr != nil {
		return 0, fmt.Errorf("%s holds %q, not a token", f.Name(), text)
	}
	return t, nil
}

// writeHighest stores t in a fence file, in place. Tokens only grow, so the
// new text is never shorter than the old one and overwrites it whole; the
// truncate only removes what a hand edit may have left.
func writeHighest(f *os.File, t Token) error {
	text := t.String() + "\n"
	if _, err := f.WriteAt([]byte(text), 0); err != nil {
		return err
	}
	if err := f.Truncate(int64(len(text))); err != nil {
		return err
	}
	return f.Sync()
}

// writeAtomic replaces target with data: a temporary file in the same
// directory, synced, renamed over target, then the directory synced.
func writeAtomic(target string, data []byte, perm os.FileMode) (err error) {
	dir, base := filepath.Split(target)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), target); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return nil // the rename happened; only its durability is unconfirmed
	}
	defer d.Close()
	d.Sync() // best effort: some filesystems refuse fsync on a directory
	return nil
}
