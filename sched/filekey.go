package sched

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// FileKey returns the lock key of the file at path: "file:" and its real
// path, every symlink followed, so every spelling of one file gives one key.
// A relative path is taken against root (the workspace root; empty means the
// working directory). A file that does not exist yet gets the real path of
// its deepest existing parent joined with the rest, so the calls that will
// create it share its key with those that write it later.
//
// ".." is resolved by the lexical rule of filepath.Clean before symlinks are
// followed. It fails only when the working directory or a parent cannot be
// read (a permission error, say).
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
		path = filepath.Join(root, path)
	}
	path = filepath.Clean(path)
	var rest []string
	for dir := path; ; {
		real, err := filepath.EvalSymlinks(dir)
		if err == nil {
			return "file:" + filepath.Join(append([]string{real}, rest...)...), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("file key of %q: %w", path, err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "file:" + path, nil
		}
		rest = append([]string{filepath.Base(dir)}, rest...)
		dir = parent
	}
}
