package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDockerfile checks the image Dockerfile describes, which cannot be
// built here (no Docker engine): its runtime stage has CA certificates and
// runs as a user that is not root; it copies the library's and lanectl's
// go.mod and go.sum before downloading; .dockerignore keeps the history and
// build outputs out. Then it runs the
// Dockerfile's own go build command with VERSION set, under -n, and checks
// that it links lanectl with that version stamped.
func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	dockerfile := string(data)
	stages := regexp.MustCompile(`(?m)^FROM `).Split(dockerfile, -1)
	runtime := stages[len(stages)-1]
	if !strings.Contains(runtime, "ca-certificates") {
		t.Errorf("the runtime stage installs no ca-certificates (rediss:// needs them):\n%s", runtime)
	}
	users := regexp.MustCompile(`(?m)^USER\s+(\S+)`).FindAllStringSubmatch(runtime, -1)
	if len(users) == 0 {
		t.Errorf("the runtime stage sets no USER: the image runs as root")
	} else if u, _, _ := strings.Cut(users[len(users)-1][1], ":"); u == "root" || u == "0" {
		t.Errorf("the runtime stage runs as USER %s; want a user that is not root", u)
	}
	if !strings.Contains(runtime, `ENTRYPOINT ["lanectl"]`) {
		t.Errorf("the image's entrypoint is not lanectl:\n%s", runtime)
	}

	// What the build needs of the module files: the library's and
	// lanectl's, copied before the download.
	download := strings.Index(dockerfile, "go mod download")
	if download < 0 {
		t.Errorf("the Dockerfile does not download the modules before copying the sources")
	}
	for _, f := range []string{"go.mod", "go.sum", "cmd/lanectl/go.mod", "cmd/lanectl/go.sum"} {
		copyMod := regexp.MustCompile(`(?m)^COPY\s(?:[^\n]*\s)?` + regexp.QuoteMeta(f) + `\s`)
		if loc := copyMod.FindStringIndex(dockerfile); loc == nil || loc[0] > download {
			t.Errorf("the Dockerfile does not COPY %s before go mod download", f)
		}
	}

	ignore, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	ignored := map[string]bool{}
	for _, line := range strings.Split(string(ignore), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			ignored[line] = true
		}
	}
	for _, p := range []string{".git", "bin", ".cache"} {
		if !ignored[p] {
			t.Errorf(".dockerignore does not leave out %s", p)
		}
	}
	for p := range ignored {
		if strings.Contains(p, "go.") || strings.HasSuffix(p, ".go") || strings.Contains(p, "lua") || strings.Contains(p, "assets") {
			t.Errorf(".dockerignore leaves out %q, which the build needs", p)
		}
	}

	build := regexp.MustCompile(`(?m)^RUN (.*\bgo build\b.*)$`).FindStringSubmatch(dockerfile)
	if build == nil || !strings.Contains(build[1], "${VERSION}") || !strings.Contains(build[1], "cmd/lanectl") || !strings.Contains(build[1], "GOWORK=off") {
		t.Fatalf("the Dockerfile's go build = %q; want it to build cmd/lanectl's module alone (GOWORK=off) and stamp ${VERSION}", build)
	}
	out := regexp.MustCompile(`-o (\S+)`).FindStringSubmatch(build[1])
	if out == nil {
		t.Fatalf("the Dockerfile's go build %q names no -o", build[1])
	}
	// go build -n: lanectl's module alone (GOWORK=off), its packages, flags
	// and stamp resolve as in the image's build, without the minutes of a build with other flags than the tests'
	// (TestVersion checks that -X main.version reaches --version).
	bin := filepath.Join(t.TempDir(), "lanectl")
	script := strings.Replace(build[1], out[0], "-n -o "+bin, 1)
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "VERSION=v0.0.0-image-test")
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the Dockerfile's build, as %q: %v\n%s", script, err, b)
	}
	if !strings.Contains(string(b), "-X main.version=v0.0.0-image-test") || !strings.Contains(string(b), bin) {
		t.Errorf("the Dockerfile's build, as %q, does not link %s with -X main.version=v0.0.0-image-test:\n%s", script, bin, b)
	}
}
