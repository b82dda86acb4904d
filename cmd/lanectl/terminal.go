package main

import (
	"os"

	"golang.org/x/term"
)

// isTerminal reports whether f, a standard stream (an io.Reader or an
// io.Writer), is a terminal.
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	return ok && term.IsTerminal(int(file.Fd()))
}

// terminalSize returns the width and height of the terminal f, or ok false
// when f is not one or its size is unknown.
func terminalSize(f any) (width, height int, ok bool) {
	file, isFile := f.(*os.File)
	if !isFile {
		return 0, 0, false
	}
	w, h, err := term.GetSize(int(file.Fd()))
	if err != nil || w <= 0 || h <= 0 {
		return 0, 0, false
	}
	return w, h, true
}
