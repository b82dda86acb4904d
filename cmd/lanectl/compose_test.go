package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/lanes-dev/lanes/sched/batch"
)

// The parts of docker-compose.yml the tests read.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
	Configs  map[string]struct {
		Content string `yaml:"content"`
	} `yaml:"configs"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       any               `yaml:"build"`
	Entrypoint  any               `yaml:"entrypoint"`
	Command     any               `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	DependsOn   map[string]any    `yaml:"depends_on"`
	Volumes     []string          `yaml:"volumes"`
	Configs     []struct {
		Source string `yaml:"source"`
		Target string `yaml:"target"`
	} `yaml:"configs"`
}

// words returns an entrypoint or command, a string or a list, as a list.
func words(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		out := make([]string, len(v))
		for i, w := range v {
			out[i] = fmt.Sprint(w)
		}
		return out
	}
	return nil
}

// config returns where s mounts the config whose target ends in
// name, and the config's source.
func (s composeService) config(name string) (target, source string) {
	for _, c := range s.Configs {
		if filepath.Base(c.Target) == name {
			return c.Target, c.Source
		}
	}
	return "", ""
}

// mount returns the path where s mounts the named volume.
func (s composeService) mount(volume string) string {
	for _, v := range s.Volumes {
		if name, path, ok := strings.Cut(v, ":"); ok && name == volume {
			path, _, _ = strings.Cut(path, ":")
			return path
		}
	}
	return ""
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	data, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return f
}

var replicas = []string{"replica-a", "replica-b", "replica-c"}

// TestComposeFile checks the structure of docker-compose.yml, which cannot
// run here: Redis, an init service that prepares the shared volume, three
// replicas running `lanectl batch` in a loop against the redis service, one
// `lanectl watch`; volumes declared and mounted; the configs they mount
// valid tools and model responses.
func TestComposeFile(t *testing.T) {
	f := readCompose(t)
	for _, name := range append([]string{"redis", "init", "watch"}, replicas...) {
		if _, ok := f.Services[name]; !ok {
			t.Fatalf("docker-compose.yml has no service %q", name)
		}
	}
	if img := f.Services["redis"].Image; !strings.HasPrefix(img, "redis:") {
		t.Errorf("redis service image = %q; want redis:...", img)
	}
	dockerfile, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(dockerfile), "go build -C cmd/lanectl") || !strings.Contains(string(dockerfile), `ENTRYPOINT ["lanectl"]`) {
		t.Errorf("Dockerfile does not build cmd/lanectl into an image whose entrypoint is lanectl:\n%s", dockerfile)
	}

	// Every named volume a service mounts is declared, and shared is.
	if _, ok := f.Volumes["shared"]; !ok {
		t.Errorf("volumes = %v; want shared declared", f.Volumes)
	}
	for name, s := range f.Services {
		for _, v := range s.Volumes {
			vol, _, _ := strings.Cut(v, ":")
			if _, ok := f.Volumes[vol]; !ok && !strings.HasPrefix(vol, ".") && !strings.HasPrefix(vol, "/") {
				t.Errorf("service %s mounts volume %q, which is not declared", name, vol)
			}
		}
		for _, c := range s.Configs {
			if _, ok := f.Configs[c.Source]; !ok {
				t.Errorf("service %s mounts config %q, which is not declared", name, c.Source)
			}
		}
	}

	initSvc := f.Services["init"]
	initDir := initSvc.mount("shared")
	if initDir == "" || initSvc.Build == nil || initSvc.Image == "" {
		t.Errorf("init service: build %v, image %q, shared mounted at %q; want it to build the lanectl image, and the shared volume", initSvc.Build, initSvc.Image, initDir)
	}
	// One image, built once: init builds it, every other lanectl service
	// runs it by name.
	for name, s := range f.Services {
		if name != "init" && s.Build != nil {
			t.Errorf("%s builds an image too; want init's alone", name)
		}
		if name != "redis" && s.Image != initSvc.Image {
			t.Errorf("%s runs image %q; want init's %q", name, s.Image, initSvc.Image)
		}
	}
	ns := ""
	formats := map[batch.Format]string{}
	for _, name := range replicas {
		s := f.Services[name]
		env := s.Environment
		u, err := url.Parse(env["LANES_REDIS_URL"])
		if err != nil || u.Scheme != "redis" || u.Port() != "6379" {
			t.Errorf("%s: LANES_REDIS_URL = %q; want redis://SERVICE:6379", name, env["LANES_REDIS_URL"])
		} else if _, ok := f.Services[u.Hostname()]; !ok || u.Hostname() != "redis" {
			t.Errorf("%s: LANES_REDIS_URL names host %q; want the redis service", name, u.Hostname())
		}
		if ns == "" {
			ns = env["LANES_NAMESPACE"]
		}
		if env["LANES_NAMESPACE"] == "" || env["LANES_NAMESPACE"] != ns {
			t.Errorf("%s: LANES_NAMESPACE = %q; want one namespace, set, for every replica", name, env["LANES_NAMESPACE"])
		}
		if env["LANES_DEMO_REPLICA"] == "" || env["LANES_DEMO_DIR"] == "" {
			t.Errorf("%s: LANES_DEMO_REPLICA %q, LANES_DEMO_DIR %q; want both set, for lanectl demo-tool", name, env["LANES_DEMO_REPLICA"], env["LANES_DEMO_DIR"])
		}
		if dir := s.mount("shared"); dir == "" || dir != env["LANES_DEMO_DIR"] || dir != initDir {
			t.Errorf("%s mounts shared at %q, LANES_DEMO_DIR %q, init at %q; want one directory", name, dir, env["LANES_DEMO_DIR"], initDir)
		}
		for _, dep := range []string{"redis", "init"} {
			if _, ok := s.DependsOn[dep]; !ok {
				t.Errorf("%s: depends_on = %v; want %s", name, s.DependsOn, dep)
			}
		}
		script := strings.Join(append(words(s.Entrypoint), words(s.Command)...), " ")
		loop := regexp.MustCompile(`while true; do (.*lanectl batch .*) done`).FindStringSubmatch(script)
		if loop == nil {
			t.Errorf("%s runs %q; want `while true; do lanectl batch ...; done`", name, script)
			continue
		}
		tools, toolsSrc := s.config("tools.toml")
		calls, callsSrc := s.config("response.json")
		if !strings.Contains(loop[1], "--tools "+tools) || !strings.Contains(loop[1], "--calls "+calls) || tools == "" || calls == "" {
			t.Errorf("%s: batch runs %q; want --tools and --calls on the configs it mounts (%q, %q)", name, loop[1], tools, calls)
		}
		cfg, err := batch.ParseConfig([]byte(f.Configs[toolsSrc].Content), "")
		if err != nil {
			t.Errorf("config %s: %v", toolsSrc, err)
		}
		for _, tool := range []string{"rfd_draft", "partner_api"} {
			if _, ok := cfg.Tools[tool]; !ok {
				t.Errorf("config %s declares no tool %s", toolsSrc, tool)
			}
		}
		calls2, format, err := batch.ReadCalls([]byte(f.Configs[callsSrc].Content))
		if err != nil || len(calls2) == 0 {
			t.Errorf("config %s: %d calls, %v; want a model response with tool calls", callsSrc, len(calls2), err)
		}
		if other, ok := formats[format]; ok {
			t.Errorf("%s and %s run the same format %s; want one of each", other, name, format)
		}
		formats[format] = name
	}

	w := f.Services["watch"]
	if cmd := words(w.Command); len(cmd) == 0 || cmd[0] != "watch" || w.Entrypoint != nil {
		t.Errorf("watch service: entrypoint %v, command %q; want the lanectl image running watch", w.Entrypoint, cmd)
	}
	if w.Environment["LANES_REDIS_URL"] != f.Services["replica-a"].Environment["LANES_REDIS_URL"] || w.Environment["LANES_NAMESPACE"] != ns {
		t.Errorf("watch service environment = %v; want the replicas' server and namespace", w.Environment)
	}
	if _, ok := w.DependsOn["redis"]; !ok {
		t.Errorf("watch service depends_on = %v; want redis", w.DependsOn)
	}
}

// TestComposeReplicasRun runs what the compose file's services run, without
// Docker: the init command on a directory standing for the shared volume,
// then one pass of each replica's loop at once, with its configs, `lanectl`
// on the PATH and Redis an embedded server. Every call succeeds, the drafts
// get distinct numbers and the partner never sees more than two calls.
func TestComposeReplicasRun(t *testing.T) {
	f := readCompose(t)
	s := newMiniredis(t)
	root := t.TempDir()
	bin := filepath.Join(root, "bin")
	shared := filepath.Join(root, "shared")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(lanectlBin, filepath.Join(bin, "lanectl")); err != nil {
		t.Fatal(err)
	}
	// Every script is killed, at the latest, when the test's time is up.
	shCtx, shCancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer shCancel()
	sh := func(script string, env ...string) *exec.Cmd {
		c := exec.CommandContext(shCtx, "/bin/sh", "-c", script)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "LANES_") && !strings.HasPrefix(kv, "PATH=") {
				c.Env = append(c.Env, kv)
			}
		}
		c.Env = append(c.Env, append(env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))...)
		return c
	}

	initSvc := f.Services["init"]
	initScript := strings.Join(words(initSvc.Command), " ")
	initScript = strings.ReplaceAll(initScript, initSvc.mount("shared"), shared)
	if out, err := sh(initScript).CombinedOutput(); err != nil {
		t.Fatalf("init service's command %q: %v: %s", initScript, err, out)
	}

	var wg sync.WaitGroup
	outs := make([]string, len(replicas))
	errs := make([]error, len(replicas))
	for i, name := range replicas {
		svc := f.Services[name]
		script := strings.Join(append(words(svc.Entrypoint), words(svc.Command)...), " ")
		loop := regexp.MustCompile(`while true; do (.*) done`).FindStringSubmatch(script)
		if loop == nil {
			t.Fatalf("%s runs no loop: %q", name, script)
		}
		body := loop[1]
		for _, c := range svc.Configs {
			local := filepath.Join(root, name+"-"+filepath.Base(c.Target))
			writeFile(t, local, f.Configs[c.Source].Content, 0o644)
			body = strings.ReplaceAll(body, c.Target, local)
		}
		env := []string{"LANES_REDIS_URL=" + s.url, "LANES_NAMESPACE=" + s.ns}
		for k, v := range svc.Environment {
			switch k {
			case "LANES_REDIS_URL", "LANES_NAMESPACE":
			case "LANES_DEMO_DIR":
				env = append(env, k+"="+shared)
			default:
				env = append(env, k+"="+v)
			}
		}
		wg.Go(func() {
			out, err := sh(body, env...).CombinedOutput()
			outs[i], errs[i] = string(out), err
		})
	}
	wg.Wait()
	for i, name := range replicas {
		if errs[i] != nil {
			t.Errorf("%s's loop body: %v:\n%s", name, errs[i], outs[i])
		}
	}
	timeline, err := os.ReadFile(filepath.Join(shared, "timeline"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(timeline), "\tfail\t") {
		t.Errorf("a tool failed:\n%s\n%s", timeline, strings.Join(outs, "\n"))
	}
	nums := draftNumbers(filepath.Join(shared, "drafts"))
	if len(nums) != 4 || len(slices.Compact(slices.Clone(nums))) != 4 {
		t.Errorf("draft numbers = %v; want four distinct ones", nums)
	}
	if most := readInt(filepath.Join(shared, "partner.most")); most < 1 || most > partnerQuota {
		t.Errorf("the partner saw at most %d calls at once; want 1 to %d", most, partnerQuota)
	}
	s.assertEmpty(t)
}
