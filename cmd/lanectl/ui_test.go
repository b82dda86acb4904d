package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanes-dev/lanes/internal/ui"
)

func TestUIBadInputIsOneLine(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	writeFile(t, empty, "\n", 0o600)
	token := filepath.Join(dir, "token")
	writeFile(t, token, "0123456789abcdef0123\n", 0o600)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ui", "--addr", "0.0.0.0:0"}, "listens beyond this machine: give --token"},
		{[]string{"ui", "--token", "short"}, "at least 16 characters"},
		{[]string{"ui", "--token", "0123456789abcdef", "--token-file", token}, "--token and --token-file both"},
		{[]string{"ui", "--token-file", filepath.Join(dir, "missing")}, "--token-file: open"},
		{[]string{"ui", "--token-file", empty}, "is empty"},
		{[]string{"ui", "--interval", "1ms"}, "--interval 1ms is under 10ms"},
		{[]string{"ui", "--history", "0s"}, "--history must be positive"},
		{[]string{"ui", "--addr", "nonsense"}, `bad --addr "nonsense"`},
		{[]string{"ui", "--namespace", "a b"}, `namespace "a b" must be`},
		{[]string{"ui", "extra"}, "takes no arguments"},
	} {
		code, stdout, stderr := runInProcess(t, c.args...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("lanectl %q = %d, stdout %q, stderr %q; want %d and %q", c.args, code, stdout, stderr, exitUsage, c.want)
		}
		assertOneLine(t, stderr)
	}
}

func TestUIUnreachableRedisExits69(t *testing.T) {
	code, _, stderr := runInProcess(t, "--redis", "redis://127.0.0.1:1", "ui", "--addr", "127.0.0.1:0")
	if code != exitUnavailable || !strings.Contains(stderr, "cannot reach Redis at redis://127.0.0.1:1") {
		t.Errorf("lanectl ui on a closed port = %d, %q; want %d and the server named", code, stderr, exitUnavailable)
	}
	assertOneLine(t, stderr)
}

// uiCall sends method path to a running lanectl ui with the token and the
// page's headers, and decodes its JSON answer into v.
func uiCall(t *testing.T, method, base, path, token string, body any, v any) int {
	t.Helper()
	var r io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		r = strings.NewReader(string(raw))
	}
	req, err := http.NewRequest(method, strings.TrimSuffix(base, "/")+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Lanes-UI", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if v != nil && json.Unmarshal(raw, v) != nil {
		t.Fatalf("%s %s = %d, not JSON: %q", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode
}

// TestUIReleasesAsReleaseForceDoesRealRedis runs lanectl ui on the real Redis
// server (shared: namespaces of its own, only their keys deleted) with a
// token from a file, two namespaces and --allow-release: the preview asks
// release's question and names the waiter to be granted next; the release
// takes the lease of one lanectl lock and grants the other's; the token
// appears in no output.
func TestUIReleasesAsReleaseForceDoesRealRedis(t *testing.T) {
	s := newRealRedis(t)
	other := newServer(t, "redis", s.url) // a second namespace, empty; startUI names the first
	const token = "tok-0123456789abcdef-tok"
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeFile(t, tokenFile, token+"\n", 0o600)
	proc, base := startUI(t, s, s.url, "--namespace", other.ns, "--token-file", tokenFile, "--allow-release", "--interval", "20ms")

	const key = "lock:draft"
	first, _ := startLockOnStdin(t, s, "first", key)
	eventually(t, "first holds", func() bool { k := keyState(s.inspect(t), key); return k != nil && len(k.Holders) == 1 })
	second, secondIn := startLockOnStdin(t, s, "second", key)
	defer secondIn.Close()
	eventually(t, "second waits", func() bool { k := keyState(s.inspect(t), key); return k != nil && len(k.Waiters) == 1 })
	h := keyState(s.inspect(t), key).Holders[0]

	var f ui.Frame
	if code := uiCall(t, "GET", base, "/api/state", "", nil, nil); code != http.StatusUnauthorized {
		t.Errorf("GET /api/state without the token = %d; want 401", code)
	}
	if code := uiCall(t, "GET", base, "/api/state", token, nil, &f); code != 200 || len(f.Namespaces) != 2 ||
		f.Namespaces[0].Namespace != s.ns || f.Namespaces[1].Namespace != other.ns || !f.AllowRelease {
		t.Fatalf("GET /api/state = %d %+v; want both namespaces, in order, release allowed", code, f)
	}

	var p ui.Preview
	q := "/api/release?ns=" + url.QueryEscape(s.ns) + "&entry=first"
	if code := uiCall(t, "GET", base, q, token, nil, &p); code != 200 {
		t.Fatalf("GET %s = %d", q, code)
	}
	wantQ := fmt.Sprintf("evict first (holder of %s) of %s:%d?", key, h.Owner.Host, h.Owner.PID)
	if !p.Found || !p.Held || p.Question != wantQ || len(p.Next) != 1 || p.Next[0].Entry != "second" || p.Next[0].Tool != "lanectl lock" {
		t.Errorf("preview = %+v; want found, held, question %q, second next", p, wantQ)
	}

	var rel ui.Released
	if code := uiCall(t, "POST", base, "/api/release", token, map[string]string{"namespace": s.ns, "entry": "first"}, &rel); code != 200 ||
		rel.Was != "held" || strings.Join(rel.Keys, ",") != key || strings.Join(rel.Granted, ",") != "second" {
		t.Fatalf("POST /api/release = %d %+v; want held on %s, second granted", code, rel, key)
	}
	if code := first.wait(t); code != exitLeaseLost {
		t.Errorf("first lanectl lock exited %d; want %d (lease lost)", code, exitLeaseLost)
	}
	eventually(t, "second holds", func() bool {
		k := keyState(s.inspect(t), key)
		return k != nil && len(k.Holders) == 1 && k.Holders[0].ID == "second"
	})
	if code := uiCall(t, "POST", base, "/api/release", token, map[string]string{"namespace": s.ns, "entry": "first"}, &rel); code != 404 || rel.Was != "gone" {
		t.Errorf("POST /api/release of a gone entry = %d %+v; want 404, gone", code, rel)
	}
	secondIn.Close()
	if code := second.wait(t); code != 0 {
		t.Errorf("second lanectl lock exited %d; want 0", code)
	}

	proc.signal(t, 15)
	if code := proc.wait(t); code != 0 {
		t.Errorf("lanectl ui exited %d after SIGTERM; want 0; stderr %s", code, proc.stderr)
	}
	for name, out := range map[string]string{"stdout": proc.stdout.String(), "stderr": proc.stderr.String()} {
		if strings.Contains(out, token) {
			t.Errorf("lanectl ui's %s holds the token: %q", name, out)
		}
	}
	if !strings.Contains(proc.stderr.String(), "token required") {
		t.Errorf("lanectl ui's stderr = %q; want it to say a token is required", proc.stderr)
	}
}

// TestUIWithoutAllowReleaseRefusesRealRedis: the release routes answer 403
// unless --allow-release (real Redis, a namespace of its own).
func TestUIWithoutAllowReleaseRefusesRealRedis(t *testing.T) {
	s := newRealRedis(t)
	proc, base := startUI(t, s, s.url)
	var e struct{ Error string }
	if code := uiCall(t, "POST", base, "/api/release", "", map[string]string{"namespace": s.ns, "entry": "x"}, &e); code != 403 || !strings.Contains(e.Error, "--allow-release") {
		t.Errorf("POST /api/release = %d %q; want 403 naming --allow-release", code, e.Error)
	}
	var f ui.Frame
	if code := uiCall(t, "GET", base, "/api/state", "", nil, &f); code != 200 || f.AllowRelease || len(f.Namespaces) != 1 || f.Namespaces[0].Namespace != s.ns || f.IntervalMS != 250 {
		t.Errorf("GET /api/state = %d %+v; want the one namespace of --namespace, no release, the default 250ms", code, f)
	}
	proc.signal(t, 2)
	if code := proc.wait(t); code != 0 {
		t.Errorf("lanectl ui exited %d after SIGINT; want 0", code)
	}
}

// The page is announced at the address the listener got, with the host
// --addr named when it names every address (README trial: 0.0.0.0 was
// announced as [::]).
func TestUIAnnouncedAddress(t *testing.T) {
	for _, tc := range []struct{ asked, got, want string }{
		{"127.0.0.1:0", "127.0.0.1:40123", "127.0.0.1:40123"},
		{"0.0.0.0:8097", "[::]:8097", "0.0.0.0:8097"},
		{":8097", "[::]:8097", "0.0.0.0:8097"},
		{"[::]:8097", "[::]:8097", "[::]:8097"},
		{"localhost:0", "127.0.0.1:40124", "127.0.0.1:40124"},
	} {
		addr, err := net.ResolveTCPAddr("tcp", tc.got)
		if err != nil {
			t.Fatal(err)
		}
		if got := announced(tc.asked, addr); got != tc.want {
			t.Errorf("announced(%q, %s) = %q; want %q", tc.asked, tc.got, got, tc.want)
		}
	}
}
