// Command mutate is `make mutate`: it plants each mutation of a curated list
// (mutations.go) in a temporary copy of the repository, one at a time, runs
// the fast tests that must catch it, and prints each mutation with the
// tests that caught it. It exits 1 if any mutation survives (no test
// failed), is broken (its old text is not in its file exactly once, or the
// mutated code does not build), or if the tests fail before any mutation.
// The working tree is never written.
//
//	go run ./scripts/mutate [-run REGEXP] [-list] [-race] [-v]
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// Mutation is one planted bug.
type Mutation struct {
	Name  string   // "package/what", unique
	What  string   // the bug, in words
	Edits []Edit   // applied together
	Pkgs  []string // packages whose tests must catch it, as "./sched"
	Run   string   // go test -run pattern; "" runs every test of Pkgs
}

// Edit replaces Old, which must occur exactly once in File (a path from the
// repository root), with New.
type Edit struct {
	File, Old, New string
}

// verdicts of a mutation
const (
	killed   = "KILLED"
	survived = "SURVIVED"
	broken   = "BROKEN"
)

func main() {
	only := flag.String("run", "", "only the mutations whose name matches this regexp")
	list := flag.Bool("list", false, "list the mutations and exit")
	race := flag.Bool("race", false, "run the tests with -race (slower)")
	verbose := flag.Bool("v", false, "print the output of every test run")
	timeout := flag.Duration("timeout", 5*time.Minute, "go test -timeout of each run: a hang counts as caught, and is shown")
	flag.Parse()
	if err := run(*only, *list, *race, *verbose, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(1)
	}
}

func run(only string, list, race, verbose bool, timeout time.Duration) error {
	ms, err := selected(only)
	if err != nil {
		return err
	}
	if list {
		for _, m := range ms {
			fmt.Printf("%-32s %s\n", m.Name, m.What)
		}
		return nil
	}
	root, err := gitRoot()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "lanes-mutate-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := copyRepo(root, tmp); err != nil {
		return err
	}
	goTest := []string{"test", "-count=1", "-json", "-timeout", timeout.String()}
	if race {
		goTest = append(goTest, "-race")
	}
	start := time.Now()
	fmt.Printf("make mutate: %d mutations, each on a copy of %s (in %s); tests: go %s\n", len(ms), root, tmp, strings.Join(slices.DeleteFunc(slices.Clone(goTest), func(a string) bool { return a == "-json" }), " "))

	// Baseline: the tests must pass before anything is planted.
	base := baseline(ms)
	for _, pkg := range sortedKeys(base) {
		t0 := time.Now()
		res := goTestRun(tmp, goTest, []string{pkg}, strings.Join(base[pkg], "|"), verbose)
		if !res.ok() {
			return fmt.Errorf("the tests fail before any mutation (%s -run %q): %s; fix them first", pkg, strings.Join(base[pkg], "|"), res.describe())
		}
		fmt.Printf("baseline  %-30s passes (%v)\n", pkg, time.Since(t0).Round(100*time.Millisecond))
	}

	count := map[string]int{}
	for _, m := range ms {
		t0 := time.Now()
		verdict, detail := try(tmp, goTest, m, verbose)
		count[verdict]++
		fmt.Printf("%-9s %-32s %s\n          %s (%v)\n", verdict, m.Name, m.What, detail, time.Since(t0).Round(100*time.Millisecond))
	}
	fmt.Printf("summary: %d mutations: %d killed, %d survived, %d broken (%v)\n", len(ms), count[killed], count[survived], count[broken], time.Since(start).Round(time.Second))
	if count[survived]+count[broken] > 0 {
		return fmt.Errorf("%d survived, %d broken", count[survived], count[broken])
	}
	return nil
}

// selected returns the mutations whose name matches only, checking that
// names are unique and every mutation is complete.
func selected(only string) ([]Mutation, error) {
	re, err := regexp.Compile(only)
	if err != nil {
		return nil, fmt.Errorf("-run: %w", err)
	}
	seen := map[string]bool{}
	var out []Mutation
	for _, m := range mutations {
		if m.Name == "" || seen[m.Name] || len(m.Edits) == 0 || len(m.Pkgs) == 0 {
			return nil, fmt.Errorf("mutation %q: a unique name, edits and packages are required", m.Name)
		}
		seen[m.Name] = true
		if re.MatchString(m.Name) {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no mutation matches %q", only)
	}
	return out, nil
}

// baseline maps each package to the -run patterns of the mutations on it.
func baseline(ms []Mutation) map[string][]string {
	out := map[string][]string{}
	for _, m := range ms {
		pat := m.Run
		if pat == "" {
			pat = "."
		}
		for _, p := range m.Pkgs {
			if !slices.Contains(out[p], pat) {
				out[p] = append(out[p], pat)
			}
		}
	}
	return out
}

// try plants m in the copy at dir, runs its tests and restores the files.
func try(dir string, goTest []string, m Mutation, verbose bool) (verdict, detail string) {
	files, err := planted(dir, m)
	if err != nil {
		return broken, err.Error()
	}
	saved := map[string][]byte{}
	defer func() {
		for f, b := range saved {
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
				panic(fmt.Sprintf("restoring %s in the copy: %v", f, err))
			}
		}
	}()
	for _, f := range sortedKeys(files) {
		p := filepath.Join(dir, f)
		b, err := os.ReadFile(p)
		if err != nil {
			return broken, err.Error()
		}
		saved[f] = b
		if err := os.WriteFile(p, files[f], 0o644); err != nil {
			return broken, err.Error()
		}
	}
	res := goTestRun(dir, goTest, m.Pkgs, m.Run, verbose)
	switch {
	case res.buildFailed:
		return broken, "the mutated code does not build: " + res.describe()
	case res.ok():
		where := strings.Join(m.Pkgs, " ")
		if m.Run != "" {
			where += " -run " + m.Run
		}
		return survived, "no test failed in " + where
	}
	return killed, "caught by: " + res.describe()
}

// planted returns the files m changes, read from the tree at root, as they
// are with m planted: its edits applied in order, each to the file as the
// edits before it left it. It fails, naming every edit at fault, when an
// edit's old text is not in its file exactly once or an edit changes
// nothing.
func planted(root string, m Mutation) (map[string][]byte, error) {
	files := map[string][]byte{}
	var errs []error
	for _, e := range m.Edits {
		cur, ok := files[e.File]
		if !ok {
			var err error
			if cur, err = os.ReadFile(filepath.Join(root, e.File)); err != nil {
				errs = append(errs, err)
				continue
			}
			files[e.File] = cur
		}
		if e.Old == e.New {
			errs = append(errs, fmt.Errorf("an edit of %s changes nothing: its new text is its old text", e.File))
			continue
		}
		if n := bytes.Count(cur, []byte(e.Old)); n != 1 {
			errs = append(errs, fmt.Errorf("its old text is in %s %d times, not once: the code changed; update the mutation:\n%s", e.File, n, indent(e.Old)))
			continue
		}
		files[e.File] = bytes.Replace(cur, []byte(e.Old), []byte(e.New), 1)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return files, nil
}

// result is what one go test -json run reported.
type result struct {
	failed      []string // failing tests, "pkg.Test/sub"
	pkgFailed   []string // packages that failed without a failing test (a panic, a timeout)
	buildFailed bool
	output      string // the last lines of output, for a failure without a test
	err         error  // go test could not run
}

func (r result) ok() bool {
	return r.err == nil && !r.buildFailed && len(r.failed) == 0 && len(r.pkgFailed) == 0
}

// describe names the failing tests, leaves only: subtests of one test are
// listed in parentheses.
func (r result) describe() string {
	if r.err != nil {
		return r.err.Error()
	}
	var parts []string
	leaves := leafTests(r.failed)
	byParent := map[string][]string{}
	var parents []string
	for _, t := range leaves {
		parent, sub, _ := strings.Cut(t, "/")
		if _, ok := byParent[parent]; !ok {
			parents = append(parents, parent)
		}
		if sub != "" {
			byParent[parent] = append(byParent[parent], sub)
		} else {
			byParent[parent] = byParent[parent][:0:0]
		}
	}
	for _, p := range parents {
		if subs := byParent[p]; len(subs) > 0 {
			parts = append(parts, fmt.Sprintf("%s (%s)", p, strings.Join(subs, ", ")))
		} else {
			parts = append(parts, p)
		}
	}
	for _, p := range r.pkgFailed {
		parts = append(parts, p+" failed: "+r.output)
	}
	if r.buildFailed && len(parts) == 0 {
		parts = append(parts, r.output)
	}
	return strings.Join(parts, "; ")
}

// leafTests drops every test that has a failing subtest in failed.
func leafTests(failed []string) []string {
	var out []string
	for _, t := range failed {
		leaf := true
		for _, u := range failed {
			if strings.HasPrefix(u, t+"/") {
				leaf = false
				break
			}
		}
		if leaf {
			out = append(out, t)
		}
	}
	return out
}

// event is one line of go test -json.
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	FailedBuild string
}

func goTestRun(dir string, goTest, pkgs []string, pattern string, verbose bool) result {
	args := slices.Clone(goTest)
	if pattern != "" {
		args = append(args, "-run", pattern)
	}
	var skips []string
	for _, p := range pkgs {
		if s := slow[p]; s != "" {
			skips = append(skips, s)
		}
	}
	if len(skips) > 0 {
		args = append(args, "-skip", strings.Join(skips, "|"))
	}
	args = append(args, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return result{err: err}
	}
	if err := cmd.Start(); err != nil {
		return result{err: err}
	}
	var r result
	var tail []string
	testFailed := map[string]bool{} // packages with a failing test
	var pkgFailed []string
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		if e.Output != "" {
			if verbose {
				fmt.Print(e.Output)
			}
			if line := strings.TrimSpace(e.Output); line != "" && !strings.HasPrefix(line, "=== ") {
				tail = append(tail, line)
				if len(tail) > 3 {
					tail = tail[1:]
				}
			}
		}
		switch {
		case e.Action == "build-fail" || e.FailedBuild != "":
			r.buildFailed = true
		case e.Action == "fail" && e.Test != "":
			r.failed = append(r.failed, e.Test)
			testFailed[e.Package] = true
		case e.Action == "fail":
			pkgFailed = append(pkgFailed, e.Package)
		}
	}
	_, _ = io.Copy(io.Discard, out)
	werr := cmd.Wait()
	for _, p := range pkgFailed {
		if !testFailed[p] { // a panic or a timeout outside any test's report
			r.pkgFailed = append(r.pkgFailed, p)
		}
	}
	r.output = strings.Join(tail, " | ")
	msg := strings.TrimSpace(stderr.String())
	if msg != "" && (r.buildFailed || strings.Contains(msg, "build failed") || strings.Contains(msg, "setup failed")) {
		r.buildFailed = true
		r.output = lastLines(msg, 3)
	}
	var ee *exec.ExitError
	switch {
	case werr == nil:
	case !errors.As(werr, &ee):
		r.err = werr
	case !r.buildFailed && len(r.failed)+len(r.pkgFailed) == 0:
		r.err = fmt.Errorf("go test: %v: %s", werr, lastLines(msg, 3))
	}
	return r
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

func indent(s string) string {
	return "            | " + strings.ReplaceAll(s, "\n", "\n            | ")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// gitRoot returns the top of the working tree the command runs in.
func gitRoot() (string, error) {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse --show-toplevel: %w (run make mutate inside the repository)", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// copyRepo copies the working tree's files (tracked ones, and untracked
// ones not ignored, as they are now) from root to dst.
func copyRepo(root, dst string) error {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("git ls-files: %w", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if f == "" {
			continue
		}
		src := filepath.Join(root, f)
		fi, err := os.Lstat(src)
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the working tree, not yet committed
		}
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(f)), 0o755); err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, filepath.Join(dst, f)); err != nil {
				return err
			}
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, f), b, fi.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}
