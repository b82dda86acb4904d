package main

import (
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"time"
)

// maxLines bounds the output printed for one failing test; the log has it
// all.
const maxLines = 200

// skipLine is how a test says why it skipped (redistest and the others
// write "SKIP: <why>").
var skipLine = regexp.MustCompile(`^\s+\S+\.go:[0-9]+: SKIP: (.*)$`)

// summary prints what the run covered and, on a failure, the failing
// tests' names and then their output. It returns the exit status.
func summary(w io.Writer, pkgs, none []*pkg, logPath string, took time.Duration) int {
	if len(none) > 0 {
		var names []string
		for _, p := range none {
			names = append(names, short(p.path))
		}
		fmt.Fprintf(w, "no test files: %s\n", strings.Join(names, ", "))
	}

	fmt.Fprintln(w, "\nconformance suite, by backend:")
	skips := map[string]int{}
	for _, p := range pkgs {
		for _, t := range p.order {
			if !strings.Contains(t, "/") && strings.HasPrefix(t, "TestConformance") {
				fmt.Fprintf(w, "  %-4s  %s (%s)\n", strings.ToUpper(p.results[t]), t, short(p.path))
			}
		}
		for _, b := range p.output {
			for _, line := range strings.Split(b.String(), "\n") {
				if m := skipLine.FindStringSubmatch(line); m != nil {
					skips[m[1]]++
				}
			}
		}
	}
	if len(skips) > 0 {
		fmt.Fprintln(w, "\nskipped tests, by reason:")
		reasons := make([]string, 0, len(skips))
		for r := range skips {
			reasons = append(reasons, r)
		}
		sort.Strings(reasons)
		for _, r := range reasons {
			fmt.Fprintf(w, "  %4d %s\n", skips[r], r)
		}
	}

	var failed []*pkg
	for _, p := range pkgs {
		if p.result == "fail" {
			failed = append(failed, p)
		}
	}
	took = took.Round(time.Second)
	if len(failed) == 0 {
		fmt.Fprintf(w, "\nall tests passed: %d packages in %v (whole log: %s)\n", len(pkgs), took, logPath)
		return 0
	}

	fmt.Fprintf(w, "\nFAILED in %v (whole log: %s):\n", took, logPath)
	for _, p := range failed {
		tests := p.failed()
		if len(tests) == 0 {
			fmt.Fprintf(w, "  %s: the package (a build failure, a panic or timeout outside a test, TestMain)\n", short(p.path))
		}
		for _, t := range tests {
			fmt.Fprintf(w, "  %s: %s\n", short(p.path), t)
		}
	}
	for _, p := range failed {
		tests := p.failed()
		if own := p.output[""]; own != nil && (len(tests) == 0 || strings.Contains(own.String(), "panic:")) {
			fmt.Fprintf(w, "\n=== %s, outside its tests:\n", short(p.path))
			printLines(w, own.String())
		}
		for _, t := range tests {
			if b := p.output[t]; b != nil && said(b.String()) {
				fmt.Fprintf(w, "\n=== %s: %s\n", short(p.path), t)
				printLines(w, b.String())
			}
		}
	}
	return 1
}

// said reports whether a test's output holds more than go test's own
// lines: a parent test whose subtests failed says only "--- FAIL".
func said(text string) bool {
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "---") && !strings.HasPrefix(l, "===") {
			return true
		}
	}
	return false
}

// printLines prints a test's output without go test's progress lines, at
// most maxLines of it.
func printLines(w io.Writer, text string) {
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		switch {
		case strings.HasPrefix(l, "=== RUN"), strings.HasPrefix(l, "=== PAUSE"),
			strings.HasPrefix(l, "=== CONT"), strings.HasPrefix(l, "=== NAME"):
			continue
		}
		lines = append(lines, l)
	}
	if n := len(lines) - maxLines; n > 0 {
		lines = append(lines[:maxLines], fmt.Sprintf("… %d more lines in the log", n))
	}
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

// short returns a package path without the module's own prefix.
func short(path string) string {
	const module = "github.com/lanes-dev/lanes/"
	if s := strings.TrimPrefix(path, module); s != path {
		return s
	}
	return path
}
