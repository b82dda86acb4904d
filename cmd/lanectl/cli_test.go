package main

import (
	"encoding/json"
	"net"
	"os/exec"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

// assertJSONError fails t unless stderr is one line holding the JSON
// error object of --json: a message without the "lanectl: " prefix, code
// and exit.
func assertJSONError(t *testing.T, stderr, code string, exit int) {
	t.Helper()
	if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") {
		t.Errorf("stderr = %q; want one line", stderr)
	}
	var got map[string]any
	dec := json.NewDecoder(strings.NewReader(stderr))
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("stderr = %q: not a JSON object: %v", stderr, err)
	}
	msg, _ := got["error"].(string)
	if len(got) != 3 || msg == "" || strings.HasPrefix(msg, "lanectl:") || got["code"] != code || got["exit"] != float64(exit) {
		t.Errorf(`stderr = %s; want {"error": "<message>", "code": %q, "exit": %d}`, stderr, code, exit)
	}
}

// TestJSONErrors: under --json every error is one JSON object on stderr,
// wherever --json stands before "--", and the exit status is unchanged.
func TestJSONErrors(t *testing.T) {
	s := newMiniredis(t)
	for _, tt := range []struct {
		name string
		args []string
		code string
		exit int
	}{
		{"unknown flag after --json", []string{"--json", "status", "--bogus"}, "usage", exitUsage},
		{"unknown command", []string{"--json", "stauts"}, "usage", exitUsage},
		{"bad URL", []string{"--json", "--redis", "127.0.0.1:6379", "keys"}, "usage", exitUsage},
		{"unreachable", []string{"--redis", "redis://127.0.0.1:1", "keys", "--json"}, "unavailable", exitUnavailable},
		{"command not found", s.args("--json", "lock", "k", "--", "lanectl-test-no-such-command"), "command_not_found", exitCommandNotFound},
		{"limit mismatch", s.args("--json", "lock", "--limit", "3", "held", "--", "true"), "usage", exitUsage},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "limit mismatch" {
				s.hold(t, "held")
			}
			code, stdout, stderr := runInProcess(t, tt.args...)
			if code != tt.exit || stdout != "" {
				t.Errorf("lanectl %q = %d, stdout %q; want %d and nothing", tt.args, code, stdout, tt.exit)
			}
			assertJSONError(t, stderr, tt.code, tt.exit)
		})
	}
	// A command's own status prints nothing, with or without --json; an
	// argument "--json" of the command is the command's.
	code, _, stderr := runInProcess(t, s.args("lock", "k", "--", "sh", "-c", "exit 3", "--json")...)
	if code != 3 || stderr != "" {
		t.Errorf("lock -- sh -c 'exit 3' --json = %d, stderr %q; want 3 and nothing", code, stderr)
	}
	if !jsonAsked([]string{"status", "--json"}) || jsonAsked([]string{"lock", "k", "--", "cmd", "--json"}) {
		t.Errorf("jsonAsked: want --json seen before --, not after")
	}
}

// TestLimitMismatchSaysTheFix: a lock naming another limit than the one a
// key is held with is refused in one line that says which --limit to
// pass; a process of its own holds the key (miniredis and real Redis).
func TestLimitMismatchSaysTheFix(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		holder := startBin(t, s.args("lock", "--limit", "2", "k", "--", "sleep", "60")...)
		eventually(t, "the first lock holds k", func() bool { return len(s.inspect(t).Keys) == 1 })
		code, _, stderr := runBin(t, s.args("lock", "k", "--", "true")...)
		want := `lanectl: key "k" is held or awaited with limit 2; this request names 1 (pass --limit 2)` + "\n"
		if code != exitUsage || stderr != want {
			t.Errorf("lock k (limit 1) while held with limit 2 = %d, %q; want %d, %q", code, stderr, exitUsage, want)
		}
		if code, _, stderr := runBin(t, s.args("lock", "--limit", "2", "k", "--", "true")...); code != 0 {
			t.Errorf("lock --limit 2 k, as told = %d, %q; want 0", code, stderr)
		}
		holder.signal(t, 15)
		holder.wait(t)
		s.assertEmpty(t)
	})
}

// TestURLWithoutScheme: a host:port given as the URL is refused with the
// URL it probably meant; anything else gets no guess.
func TestURLWithoutScheme(t *testing.T) {
	for _, tt := range []struct{ url, hint string }{
		{"127.0.0.1:6379", "; did you mean redis://127.0.0.1:6379?"},
		{"localhost:6380", "; did you mean redis://localhost:6380?"},
		{"[::1]:6379", "; did you mean redis://[::1]:6379?"},
		{"localhost", "; did you mean redis://localhost:6379?"},
		{"10.0.0.7", "; did you mean redis://10.0.0.7:6379?"},
		{"redis-1.internal", ""}, // a bare word may be a password: never echoed
		{"hunter2", ""},
		{"::1", ""},
		{"host name", ""},
		{"user:pw@host:6379", ""},
		{"http://127.0.0.1:6379", ""},
		{"host:port", ""},
	} {
		code, _, stderr := runInProcess(t, "--redis", tt.url, "keys")
		if code != exitUsage {
			t.Errorf("--redis %q = %d; want %d", tt.url, code, exitUsage)
		}
		assertOneLine(t, stderr)
		if got := strings.Contains(stderr, "did you mean"); got != (tt.hint != "") || !strings.HasSuffix(stderr, tt.hint+"\n") {
			t.Errorf("--redis %q: stderr %q; want it to end with %q", tt.url, stderr, tt.hint)
		}
		if strings.Contains(stderr, "pw") {
			t.Errorf("--redis %q: stderr %q shows the password", tt.url, stderr)
		}
	}
}

// TestDatabaseOutOfRange: a URL naming a database the server does not
// have is a mistake in the URL (64), said as such, not an unreachable
// server (69). Real Redis only: miniredis has every database.
func TestDatabaseOutOfRangeRealRedis(t *testing.T) {
	s := newRealRedis(t)
	u := strings.TrimRight(s.url, "/")
	if i := strings.LastIndex(u, "/"); i > len("rediss://") {
		u = u[:i] // drop a database the URL names
	}
	code, _, stderr := runInProcess(t, "--redis", u+"/100000", "--namespace", s.ns, "status")
	if code != exitUsage {
		t.Errorf("status on database 100000 = %d (%s); want %d", code, stderr, exitUsage)
	}
	assertOneLine(t, stderr)
	if !strings.Contains(stderr, "has no such database") || strings.Contains(stderr, "cannot reach") {
		t.Errorf("stderr = %q; want it to say the database does not exist", stderr)
	}
}

// TestDevServerCannotListen: dev-server on an address in use exits with
// the table's "cannot listen" status, in one line.
func TestDevServerCannotListen(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	code, _, stderr := runInProcess(t, "dev-server", "--addr", l.Addr().String())
	if code != exitCannotListen {
		t.Errorf("dev-server --addr %s (in use) = %d; want %d", l.Addr(), code, exitCannotListen)
	}
	assertOneLine(t, stderr)
	if !strings.Contains(stderr, "cannot listen on "+l.Addr().String()) {
		t.Errorf("stderr = %q; want it to say it cannot listen", stderr)
	}
	code, _, stderr = runInProcess(t, "--json", "dev-server", "--addr", l.Addr().String())
	assertJSONError(t, stderr, "cannot_listen", exitCannotListen)
	if code != exitCannotListen {
		t.Errorf("--json dev-server = %d; want %d", code, exitCannotListen)
	}
}

// TestVersion: --version prints the name and the version, -ldflags
// stamps it, and without a stamp it comes from the build information.
func TestVersion(t *testing.T) {
	code, out, stderr := runInProcess(t, "--version")
	if code != 0 || stderr != "" || !regexp.MustCompile(`^lanectl \S+.*\n$`).MatchString(out) {
		t.Errorf("--version = %d, %q, stderr %q; want 0 and \"lanectl VERSION...\"", code, out, stderr)
	}
	bin := t.TempDir() + "/lanectl"
	build := exec.Command("go", "build", "-ldflags", "-X main.version=v9.8.7-test", "-o", bin, ".")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -ldflags: %v\n%s", err, b)
	}
	b, err := exec.Command(bin, "--version").Output()
	if err != nil || !strings.HasPrefix(string(b), "lanectl v9.8.7-test (") {
		t.Errorf("a stamped lanectl --version = %q, %v; want \"lanectl v9.8.7-test (...)\"", b, err)
	}

	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tt := range []struct {
		stamped string
		main    string
		want    string
	}{
		{"", "v1.2.3", "v1.2.3 (commit 0123456789ab, modified, go1.26.8)"},
		{"v2.0.0", "v1.2.3", "v2.0.0 (commit 0123456789ab, modified, go1.26.8)"},
		{"", "(devel)", "devel (commit 0123456789ab, modified, go1.26.8)"},
	} {
		bi.Main.Version = tt.main
		if got := describeBuild(tt.stamped, bi); got != tt.want {
			t.Errorf("describeBuild(%q, main %q) = %q; want %q", tt.stamped, tt.main, got, tt.want)
		}
	}
}

// TestCompletion: cobra's completion scripts for bash, zsh and fish.
func TestCompletion(t *testing.T) {
	for shell, want := range map[string]string{"bash": "complete -o default -F __start_lanectl lanectl", "zsh": "#compdef lanectl", "fish": "complete -c lanectl"} {
		code, out, stderr := runInProcess(t, "completion", shell)
		if code != 0 || stderr != "" || !strings.Contains(out, want) {
			t.Errorf("completion %s = %d, stderr %q, %d bytes; want 0 and a script with %q", shell, code, stderr, len(out), want)
		}
	}
	// The completion command asks lanectl for the commands: they are there.
	code, out, _ := runInProcess(t, "__complete", "")
	for _, c := range []string{"lock", "status", "keys", "watch", "batch", "dev-server"} {
		if code != 0 || !regexp.MustCompile(`(?m)^`+c+`\t`).MatchString(out) {
			t.Errorf("__complete '' = %d, %q; want the command %s offered", code, out, c)
		}
	}
	if code, _, stderr := runInProcess(t, "completion", "tcsh"); code != exitUsage {
		t.Errorf("completion tcsh = %d (%s); want %d", code, stderr, exitUsage)
	}
}
