//go:build !unix

package batch

import "os/exec"

// ownGroup leaves cmd to exec's default: the end of its context kills the
// process.
func ownGroup(*exec.Cmd) {}

func killGroup(*exec.Cmd) {}
