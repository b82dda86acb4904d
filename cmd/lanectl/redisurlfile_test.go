package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
)

// runWithEnv runs lanectl in process with env as its environment.
func runWithEnv(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	code = run(ctx, nil, args, strings.NewReader(""), &out, &errb, func(k string) string { return env[k] })
	return code, out.String(), errb.String()
}

// passwordServer is a miniredis that requires password, and a namespace
// on it.
func passwordServer(t *testing.T, password string) (*miniredis.Miniredis, *server) {
	t.Helper()
	m := miniredis.RunT(t)
	m.RequireAuth(password)
	return m, newServer(t, "miniredis", "redis://:"+password+"@"+m.Addr())
}

func TestRedisURLFile(t *testing.T) {
	const password = "hunter2-in-a-file"
	_, s := passwordServer(t, password)
	populate(t, s)
	file := filepath.Join(t.TempDir(), "url")
	writeFile(t, file, "\n  "+s.url+"  \n\n", 0o600)

	code, out, stderr := runInProcess(t, "--redis-url-file", file, "--namespace", s.ns, "keys", "--json")
	if code != 0 || !strings.Contains(out, `"k1"`) {
		t.Errorf("keys with --redis-url-file = %d, %q, %q; want 0 and k1", code, out, stderr)
	}
	env := map[string]string{"LANES_REDIS_URL_FILE": file, "LANES_NAMESPACE": s.ns}
	code, out, stderr = runWithEnv(t, env, "status")
	if code != 0 || !strings.Contains(out, "h1") {
		t.Errorf("status with LANES_REDIS_URL_FILE = %d, %q, %q; want 0 and h1", code, out, stderr)
	}
	// A flag beats the environment: --redis-url-file over LANES_REDIS_URL,
	// --redis over LANES_REDIS_URL_FILE.
	env = map[string]string{"LANES_REDIS_URL": "redis://127.0.0.1:1", "LANES_NAMESPACE": s.ns}
	if code, _, stderr := runWithEnv(t, env, "--redis-url-file", file, "keys"); code != 0 {
		t.Errorf("--redis-url-file with LANES_REDIS_URL set = %d (%s); want 0, the flag first", code, stderr)
	}
	env = map[string]string{"LANES_REDIS_URL_FILE": "/nonexistent", "LANES_NAMESPACE": s.ns}
	if code, _, stderr := runWithEnv(t, env, "--redis", s.url, "keys"); code != 0 {
		t.Errorf("--redis with LANES_REDIS_URL_FILE set = %d (%s); want 0, the flag first", code, stderr)
	}
	// A command that does not talk to Redis does not read the file.
	env = map[string]string{"LANES_REDIS_URL_FILE": "/nonexistent"}
	if code, _, stderr := runWithEnv(t, env, "demo-tool", "--help"); code != 0 {
		t.Errorf("demo-tool --help with an unreadable LANES_REDIS_URL_FILE = %d (%s); want 0", code, stderr)
	}
}

// TestRedisURLFileErrors: each mistake is a usage error (64) in one line
// that names the file and never shows what the file holds.
func TestRedisURLFileErrors(t *testing.T) {
	const secret = "hunter2"
	m, s := passwordServer(t, "right-password")
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		writeFile(t, p, content, 0o600)
		return p
	}
	good := file("good", s.url)
	tests := []struct {
		name string
		env  map[string]string
		args []string
		code int
	}{
		{"missing", nil, []string{"--redis-url-file", filepath.Join(dir, "missing"), "keys"}, exitUsage},
		{"directory", nil, []string{"--redis-url-file", dir, "keys"}, exitUsage},
		{"empty", nil, []string{"--redis-url-file", file("empty", " \n\t\n"), "keys"}, exitUsage},
		{"two lines", nil, []string{"--redis-url-file", file("two", s.url+"\nredis://:"+secret+"@h\n"), "keys"}, exitUsage},
		{"a bare password", nil, []string{"--redis-url-file", file("bare", secret+"\n"), "keys"}, exitUsage},
		{"bad scheme", nil, []string{"--redis-url-file", file("scheme", "http://u:"+secret+"@h:1"), "status"}, exitUsage},
		{"malformed", nil, []string{"--redis-url-file", file("malformed", "redis://:"+secret+":y@["), "status"}, exitUsage},
		{"empty flag", nil, []string{"--redis-url-file", "", "keys"}, exitUsage},
		{"both flags", nil, []string{"--redis", s.url, "--redis-url-file", good, "keys"}, exitUsage},
		{"both variables", map[string]string{"LANES_REDIS_URL": s.url, "LANES_REDIS_URL_FILE": good}, []string{"keys"}, exitUsage},
		{"wrong password", nil, []string{"--redis-url-file", file("wrong", "redis://:"+secret+"@"+m.Addr()), "keys"}, exitNoPerm},
		{"unreachable", nil, []string{"--redis-url-file", file("closed", "redis://:"+secret+"@127.0.0.1:1"), "status"}, exitUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, stderr := runWithEnv(t, tt.env, tt.args...)
			if code != tt.code || out != "" {
				t.Errorf("lanectl %q = %d, stdout %q; want %d and nothing", tt.args, code, out, tt.code)
			}
			assertOneLine(t, stderr)
			if strings.Contains(stderr, secret) || strings.Contains(stderr, "right-password") {
				t.Errorf("stderr = %q; it shows a password", stderr)
			}
		})
	}
}

// TestRedisCAFileErrors: --redis-ca-file on a server without TLS, or a
// CA file that cannot be used, is a usage error; LANES_REDIS_CA_FILE, set
// for other servers, does not stop a redis:// one.
func TestRedisCAFileErrors(t *testing.T) {
	s := newMiniredis(t)
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not-pem")
	writeFile(t, notPEM, "not a certificate\n", 0o600)
	tls := "rediss://127.0.0.1:1"
	for _, args := range [][]string{
		{"--redis", s.url, "--redis-ca-file", notPEM, "keys"},
		{"--redis", tls, "--redis-ca-file", filepath.Join(dir, "missing"), "keys"},
		{"--redis", tls, "--redis-ca-file", notPEM, "keys"},
		{"--redis", tls, "--redis-ca-file", "", "keys"},
	} {
		code, _, stderr := runInProcess(t, args...)
		if code != exitUsage {
			t.Errorf("lanectl %q = %d; want %d", args, code, exitUsage)
		}
		assertOneLine(t, stderr)
	}
	code, _, stderr := runWithEnv(t, map[string]string{"LANES_REDIS_CA_FILE": notPEM}, s.args("keys")...)
	if code != 0 {
		t.Errorf("keys on redis:// with LANES_REDIS_CA_FILE set = %d (%s); want 0", code, stderr)
	}
	code, _, stderr = runWithEnv(t, map[string]string{"LANES_REDIS_CA_FILE": notPEM}, "--redis", tls, "keys")
	if code != exitUsage || !strings.Contains(stderr, "LANES_REDIS_CA_FILE") {
		t.Errorf("keys on rediss:// with a bad LANES_REDIS_CA_FILE = %d (%s); want %d naming the variable", code, stderr, exitUsage)
	}
}

// TestCredentialsNeverPrinted runs every reporting command against a
// server with a password, with outcomes good and bad: the password shows
// nowhere.
func TestCredentialsNeverPrinted(t *testing.T) {
	const password = "pa55-W0rd"
	m, s := passwordServer(t, password)
	populate(t, s)
	file := filepath.Join(t.TempDir(), "url")
	writeFile(t, file, s.url, 0o600)
	wrong := "redis://default:" + password + "x@" + m.Addr()
	runs := [][]string{
		s.args("status"), s.args("status", "--json"), s.args("keys"), s.args("keys", "--json"),
		s.args("release", "--force", "nosuch"), s.args("release", "--force", "--json", "w3"),
		s.args("lock", "--wait", "1ms", "k1", "--", "true"),
		{"--redis-url-file", file, "--namespace", s.ns, "status", "nosuch"},
		{"--redis", wrong, "status"}, {"--redis", wrong, "watch", "--json"},
		{"--redis", "redis://:" + password + "@127.0.0.1:1", "keys"},
		{"--redis", "redis://:" + password + "@127.0.0.1:99999", "keys"},
		{"--redis", "redis://:" + password + "@[", "keys"},
		{"--redis", s.url, "--namespace", "bad namespace", "keys"},
	}
	for _, args := range runs {
		_, out, stderr := runInProcess(t, args...)
		if strings.Contains(out+stderr, password) {
			t.Errorf("lanectl %q printed the password:\n%s%s", redactSecret(strings.Join(args, " "), s.url), out, stderr)
		}
	}
}
