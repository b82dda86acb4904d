package sched

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// maxLinks bounds the symbolic links FileKey follows for one path, as the
// kernel's ELOOP does.
const maxLinks = 255

// FileKey returns the lock key of the file at path: "file:" and the path the
// kernel would open, so every spelling of one path gives one key (a hard
// link is another path to the file, and gets its own key: a workspace that
// hard-links files it locks must lock them by one name). A relative
// path is taken against root (the workspace root; empty means the working
// directory).
//
// The path is resolved as the kernel resolves it, one component at a time
// from the root: a symbolic link is replaced by its target (followed again,
// up to 255 links), and ".." goes to the parent of what the components
// before it resolved to, so with ws/l a link to real/sub, "l/../plan.md" is
// ws/real/plan.md, not ws/plan.md. Once a component does not exist, the
// rest (the file a call will create, and its new directories) is taken
// lexically, ".." removing the component before it, so the calls that will
// create a file share its key with those that write it later.
//
// It fails for an empty path, a loop of symbolic links, and when the
// working directory or an existing parent cannot be read (a permission
// error, say).
func FileKey(root, path string) (string, error) {
	if path == "" {
		return "", errors.New("empty file path")
	}
	if !filepath.IsAbs(path) {
		if root == "" {
			wd, err := os.Getwd()
			if err != nil {
				return "", fmt.Errorf("file key of %q: %w", path, err)
			}
			root = wd
		}
		path = root + string(filepath.Separator) + path // not Join: it would clean ".." lexically
	}
	real, err := resolve(path)
	if err != nil {
		return "", fmt.Errorf("file key of %q: %w", path, err)
	}
	return "file:" + real, nil
}

// resolve returns the path the kernel would open for the absolute path p:
// see FileKey.
func resolve(p string) (string, error) {
	vol := filepath.VolumeName(p)
	cur := vol + string(filepath.Separator) // what the components so far resolved to
	rest := components(p[len(vol):])
	exists, links := true, 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		if c == ".." {
			cur = filepath.Dir(cur) // the parent of the top is the top
			continue
		}
		next := filepath.Join(cur, c)
		if !exists {
			cur = next
			continue
		}
		fi, err := os.Lstat(next)
		switch {
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
			exists = false // from here on, lexically
			cur = next
			continue
		case err != nil:
			return "", err
		case fi.Mode()&fs.ModeSymlink == 0:
			cur = next
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("more than %d symbolic links (a loop?) at %s", maxLinks, next)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			tv := filepath.VolumeName(target)
			cur, target = tv+string(filepath.Separator), target[len(tv):]
		}
		rest = append(components(target), rest...)
	}
	return cur, nil
}

// components splits p on separators, leaving out empty and "." components.
func components(p string) []string {
	var out []string
	for _, c := range strings.FieldsFunc(p, func(r rune) bool { return r < 0x80 && os.IsPathSeparator(uint8(r)) }) {
		if c != "." {
			out = append(out, c)
		}
	}
	return out
}
