package main

import (
	"strings"
	"testing"
)

// TestDemo runs `lanectl demo` as a user does: the run with lanes comes out
// right (exit 0, every check passed) and the run without shows collisions.
func TestDemo(t *testing.T) {
	code, out, stderr := runBin(t, "demo")
	if code != 0 {
		t.Fatalf("lanectl demo = %d; stderr %q; output:\n%s", code, stderr, out)
	}
	with, without, ok := strings.Cut(out, "== without lanes")
	if !ok {
		t.Fatalf("no run without lanes in the output:\n%s", out)
	}
	if strings.Count(with, "✓") != 4 || strings.Contains(with, "✗") {
		t.Errorf("the run with lanes did not pass all four checks:\n%s", with)
	}
	if !strings.Contains(without, "✗") {
		t.Errorf("the run without lanes showed no collision:\n%s", without)
	}
}
