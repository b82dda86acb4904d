package deps_test

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// forbidden are module path prefixes a library user must not inherit:
// what bench/ compares against (redsync with its old go-redis and redigo
// clients, redislock), what the chaos harness and lanectl's tests use
// (porcupine, pty), lanectl's own (cobra, the OTLP exporters and gRPC), the
// providers' SDKs of sched/batch's oracle tests.
var forbidden = []string{
	"github.com/go-redsync/",
	"github.com/bsm/redislock",
	"github.com/go-redis/redis",
	"github.com/gomodule/redigo",
	"github.com/redis/rueidis",
	"github.com/anishathalye/porcupine",
	"github.com/creack/pty",
	"github.com/spf13/cobra",
	"go.opentelemetry.io/contrib/exporters/autoexport",
	"go.opentelemetry.io/otel/exporters/otlp/",
	"google.golang.org/grpc",
	"github.com/anthropics/",
	"github.com/openai/",
}

// archived are modules no module of lanes may require, nor any package a
// user builds import. gopkg.in/yaml.v3 still is in every OpenTelemetry
// user's graph (go.opentelemetry.io/auto/sdk v1.2.1, the latest, requires
// it for its tests); its maintained successor is go.yaml.in/yaml/v3.
var archived = []string{"gopkg.in/yaml.v3"}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatalf("no go.work at %s: %v", root, err)
	}
	return root
}

// TestConsumerGraph makes, in a temporary directory, the module of a user
// of lanes, redislane, sched and fencing (the checkout stands in for the
// published module through a replace directive), tidies it, and reads its
// go mod graph: what `go get github.com/lanes-dev/lanes` brings.
func TestConsumerGraph(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("SKIP: no go command to build a consumer module")
	}
	root := repoRoot(t)
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/consumer\n\ngo 1.26.0\n\n" +
			"require github.com/lanes-dev/lanes v0.0.0-00010101000000-000000000000\n\n" +
			"replace github.com/lanes-dev/lanes => " + root + "\n",
		"main.go": `package main

import (
	_ "github.com/lanes-dev/lanes/fencing"
	_ "github.com/lanes-dev/lanes/lanes"
	_ "github.com/lanes-dev/lanes/redislane"
	_ "github.com/lanes-dev/lanes/sched"
)

func main() {}
`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(goCmd, args...)
		cmd.Dir = dir
		// The consumer alone, as a user has it: no workspace of ours.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr)
		}
		return string(out)
	}
	run("mod", "tidy")
	graph := run("mod", "graph")

	modules := map[string]bool{} // path@version of every node
	for _, line := range strings.Split(strings.TrimSpace(graph), "\n") {
		for _, node := range strings.Fields(line) {
			modules[node] = true
		}
	}
	for node := range modules {
		for _, f := range forbidden {
			if strings.HasPrefix(node, f) {
				t.Errorf("a user of the library inherits %s (go mod graph holds it; `go mod why -m` in the consumer tells who asks for it)", node)
			}
		}
	}
	for _, m := range archived {
		for _, line := range strings.Split(graph, "\n") {
			if from, to, _ := strings.Cut(line, " "); strings.HasPrefix(from, "github.com/lanes-dev/") && strings.HasPrefix(to, m+"@") {
				t.Errorf("lanes requires %s, which is archived", to)
			}
		}
		if why := run("mod", "why", "-m", m); !strings.Contains(why, "does not need") {
			t.Errorf("a user of the library builds a package of %s, which is archived:\n%s", m, why)
		}
	}
	// Not vacuous: the graph has what the four packages do import, at one
	// version of go-redis.
	var redis []string
	for node := range modules {
		if strings.HasPrefix(node, "github.com/redis/go-redis/v9@") {
			redis = append(redis, node)
		}
	}
	if len(redis) != 1 || !modules["github.com/lanes-dev/lanes@v0.0.0-00010101000000-000000000000"] {
		t.Errorf("the graph holds go-redis %q and lanes %v; want one go-redis/v9 and lanes:\n%s", redis, modules["github.com/lanes-dev/lanes@v0.0.0-00010101000000-000000000000"], graph)
	}
	for _, m := range []string{"go.opentelemetry.io/otel/trace@", "github.com/redis/go-redis/v9@"} {
		found := false
		for node := range modules {
			found = found || strings.HasPrefix(node, m)
		}
		if !found {
			t.Errorf("the graph holds no %s...: the consumer was not built as expected:\n%s", m, graph)
		}
	}
	t.Logf("a consumer's module graph: %d modules", len(modules))
}

// TestGoDirectives: every go.mod and the go.work ask for a Go release
// (1.26 or 1.26.0), not a patch release that would force the toolchain of
// every user, and none requires an archived module. ("go 1.26" itself sorts below the "go 1.26.0" that go-redis
// and OpenTelemetry declare, so go mod tidy writes 1.26.0.)
func TestGoDirectives(t *testing.T) {
	root := repoRoot(t)
	directive := regexp.MustCompile(`(?m)^go (\S+)$`)
	release := regexp.MustCompile(`^1\.\d+(\.0)?$`)
	seen := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".cache" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || (d.Name() != "go.mod" && d.Name() != "go.work") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		seen++
		rel, _ := filepath.Rel(root, path)
		m := directive.FindSubmatch(data)
		if m == nil || !release.Match(m[1]) {
			t.Errorf("%s: go directive %q; want a release such as 1.26.0, not a patch", rel, m)
		}
		if d.Name() == "go.mod" && regexp.MustCompile(`(?m)^toolchain `).Match(data) {
			t.Errorf("%s names a toolchain; users would have to fetch it", rel)
		}
		for _, a := range archived {
			if strings.Contains(string(data), a+" ") {
				t.Errorf("%s requires %s, which is archived", rel, a)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 5 {
		t.Errorf("found %d go.mod and go.work files; want the root's, bench's, integration's, cmd/lanectl's and go.work", seen)
	}
}
