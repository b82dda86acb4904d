package integration_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lanes-dev/lanes/internal/redistest"
	"github.com/lanes-dev/lanes/redislane"
)

// These tests start redis-server instances of their own, on free loopback
// ports, configured as a hardened deployment would be: TLS with a CA of the
// test's, and an ACL user limited to what lanes needs. They skip, saying
// so, when redis-server is not installed or cannot do TLS (they fail under
// LANES_REQUIRE_REDIS=1).

// secNoLeaks checks, when t ends, that t left no goroutine running.
func secNoLeaks(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// secBuffer is a bytes.Buffer safe to read while a process writes it.
type secBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *secBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *secBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// secNoTLS is the skip reason of a redis-server built without TLS.
const secNoTLS = "redis-server was built without TLS"

// secRedisServer starts redis-server on a free loopback port with the
// arguments args returns for that port, and stops it when t ends. It
// returns the port the server listens on. It skips t when redis-server is
// not installed, or (tls) cannot do TLS.
func secRedisServer(t *testing.T, tls bool, args func(port int) []string) int {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		redistest.Unavailable(t, "no redis-server on PATH; install it (Debian: apt-get install redis-server) to run the TLS and ACL tests")
	}
	dir := t.TempDir()
	for attempt := 0; ; attempt++ {
		port := secFreePort(t)
		all := append([]string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir, "--logfile", "", "--daemonize", "no"}, args(port)...)
		cmd := exec.Command(bin, all...)
		log := &secBuffer{}
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting redis-server: %v", err)
		}
		exited := make(chan struct{})
		go func() {
			_ = cmd.Wait()
			close(exited)
		}()
		stop := func() {
			select {
			case <-exited:
			default:
				_ = cmd.Process.Kill()
				<-exited
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			select {
			case <-exited:
				out := log.String()
				switch {
				case strings.Contains(out, "Address already in use") && attempt < 3:
				case tls && strings.Contains(out, "Bad directive") && strings.Contains(out, "tls"):
					redistest.Unavailable(t, "%s (it refused --tls-port): %s", secNoTLS, secLastLine(out))
				default:
					t.Fatalf("redis-server %q exited: %s", all, out)
				}
			default:
				if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second); err == nil {
					c.Close()
					t.Cleanup(stop)
					return port
				}
				if time.Now().After(deadline) {
					stop()
					t.Fatalf("redis-server did not listen on %d within 10s: %s", port, log)
				}
				time.Sleep(10 * time.Millisecond)
				continue
			}
			break // the server exited on a port in use: another one
		}
	}
}

func secLastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// secFreePort returns a loopback TCP port that was free a moment ago.
func secFreePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// secRandomHex returns n random bytes in hex: passwords and namespaces.
func secRandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// secRun runs the lanectl binary with args and env (LANES_* of the test's
// own environment left out) to its end, within a minute.
func secRun(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := secStart(t, env, args...)
	return p.wait(t), p.stdout.String(), p.stderr.String()
}

type secProc struct {
	cmd            *exec.Cmd
	stdout, stderr *secBuffer
	done           chan struct{}
}

func secStart(t *testing.T, env []string, args ...string) *secProc {
	t.Helper()
	p := &secProc{cmd: exec.Command(lanectl, args...), stdout: &secBuffer{}, stderr: &secBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LANES_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(p.cmd.Env, env...)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *secProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("lanectl %q did not exit within a minute; stderr %s", p.cmd.Args[1:], p.stderr)
	}
	return p.cmd.ProcessState.ExitCode()
}

// secOneLine fails t unless stderr is one line starting with "lanectl: ".
func secOneLine(t *testing.T, stderr string) {
	t.Helper()
	if !strings.HasPrefix(stderr, "lanectl: ") || strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") {
		t.Errorf("stderr = %q; want one line starting with %q", stderr, "lanectl: ")
	}
}

// secCA is a certificate authority made for one test, and a server
// certificate it signed for 127.0.0.1.
type secCA struct {
	caFile, certFile, keyFile string
}

// secNewCA writes, under dir, a CA (ECDSA P-256) and a server certificate
// with the IP SAN 127.0.0.1 and its key, in PEM.
func secNewCA(t *testing.T, dir, name string) secCA {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "lanes test CA " + name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	c := secCA{
		caFile:   filepath.Join(dir, name+"-ca.pem"),
		certFile: filepath.Join(dir, name+"-server.pem"),
		keyFile:  filepath.Join(dir, name+"-server.key"),
	}
	for path, block := range map[string]*pem.Block{
		c.caFile:   {Type: "CERTIFICATE", Bytes: caDER},
		c.certFile: {Type: "CERTIFICATE", Bytes: srvDER},
		c.keyFile:  {Type: "PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// TestTLSRealRedis: lanectl talks to a TLS-only redis-server through
// rediss:// once it trusts the server's CA (--redis-ca-file or
// LANES_REDIS_CA_FILE), and refuses, with 69 in one line, a server whose
// certificate it cannot verify.
func TestTLSRealRedis(t *testing.T) {
	secNoLeaks(t)
	dir := t.TempDir()
	ca := secNewCA(t, dir, "good")
	other := secNewCA(t, dir, "other")
	const password = "tls-pa55word"
	port := secRedisServer(t, true, func(port int) []string {
		return []string{"--port", "0", "--tls-port", strconv.Itoa(port),
			"--tls-cert-file", ca.certFile, "--tls-key-file", ca.keyFile, "--tls-ca-cert-file", ca.caFile,
			"--tls-auth-clients", "no", "--requirepass", password}
	})
	url := fmt.Sprintf("rediss://:%s@127.0.0.1:%d", password, port)
	ns := "it-tls-" + secRandomHex(6)
	t.Cleanup(func() { secDeleteNamespace(t, url, ca.caFile, ns) })

	code, out, stderr := secRun(t, nil, "--redis", url, "--redis-ca-file", ca.caFile, "--namespace", ns, "lock", "k", "--", "sh", "-c", `echo "token $LANES_TOKEN"`)
	if code != 0 || !strings.HasPrefix(out, "token ") {
		t.Fatalf("lock over TLS = %d, %q, %q; want 0 and the token", code, out, stderr)
	}
	holder := secStart(t, nil, "--redis", url, "--redis-ca-file", ca.caFile, "--namespace", ns, "lock", "--id", "tls-holder", "k", "--", "sleep", "30")
	env := []string{"LANES_REDIS_URL=" + url, "LANES_REDIS_CA_FILE=" + ca.caFile, "LANES_NAMESPACE=" + ns}
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, out, stderr = secRun(t, env, "status", "--json")
		if code != 0 {
			t.Fatalf("status over TLS with LANES_REDIS_CA_FILE = %d, %q", code, stderr)
		}
		if strings.Contains(out, `"tls-holder"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed tls-holder: %s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, out, stderr := secRun(t, env, "release", "--force", "tls-holder"); code != 0 || !strings.Contains(out, "released tls-holder (holder of k)") {
		t.Errorf("release over TLS = %d, %q, %q; want 0 and the holder released", code, out, stderr)
	}
	if code := holder.wait(t); code != 79 {
		t.Errorf("the evicted lock = %d; want 79 (lease lost)", code)
	}

	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"no CA", []string{"--redis", url}, "certificate"},
		{"another CA", []string{"--redis", url, "--redis-ca-file", other.caFile}, "certificate"},
		{"plain text to the TLS port", []string{"--redis", strings.Replace(url, "rediss://", "redis://", 1)}, "cannot reach Redis"},
	} {
		code, out, stderr := secRun(t, nil, append(tt.args, "--namespace", ns, "keys")...)
		if code != 69 || out != "" || !strings.Contains(stderr, tt.want) {
			t.Errorf("%s: keys = %d, %q, %q; want 69 and a line about the %s", tt.name, code, out, stderr, tt.want)
		}
		secOneLine(t, stderr)
		if strings.Contains(stderr, password) {
			t.Errorf("%s: stderr %q shows the password", tt.name, stderr)
		}
	}
}

// secDeleteNamespace deletes the keys of namespace ns on the server at url.
func secDeleteNamespace(t *testing.T, url, caFile, ns string) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Error(err)
		return
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			t.Error(err)
			return
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		opt.TLSConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	keys, _ := c.Keys(ctx, "lanes:{"+ns+"}:*").Result()
	if len(keys) > 0 {
		c.Del(ctx, keys...)
	}
}

// readmeACL returns the ACL SETUSER line of the README's lanectl section,
// as its words.
func readmeACL(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^ACL SETUSER lanes .*$`).Find(readme)
	if line == nil {
		t.Fatal("README.md documents no `ACL SETUSER lanes ...` line")
	}
	return strings.Fields(string(line))
}

// aclWithPassword returns the ACL words with the documented placeholder
// password (>...) replaced by password.
func aclWithPassword(words []string, password string) []string {
	out := slices.Clone(words)
	for i, w := range out {
		if strings.HasPrefix(w, ">") {
			out[i] = ">" + password
		}
	}
	return out
}

// aclPackages are the packages whose Go code talks to Redis: the library
// (redislane), the fencing guard and lanectl.
var aclPackages = []string{"github.com/lanes-dev/lanes/redislane", "github.com/lanes-dev/lanes/fencing", "github.com/lanes-dev/lanes/cmd/lanectl"}

// aclNotCommands are go-redis methods that send no command of their own
// (masterforkey reads the cluster client's slot map).
var aclNotCommands = map[string]bool{"close": true, "foreachmaster": true, "foreachshard": true, "foreachslave": true, "masterforkey": true,
	"channel": true, "channelwithsubscriptions": true, "receive": true, "receivemessage": true, "receivetimeout": true,
	"options": true, "poolstats": true, "addhook": true, "string": true, "hash": true}

// aclClientCommands returns the commands lanes sends outside its scripts,
// derived from the Go sources of aclPackages, type-checked against the
// export data of their dependencies: every call of a go-redis method that
// sends a command (HGet: HGET, Subscribe: SUBSCRIBE...), EVALSHA and EVAL
// for each script run (Script.Run), and PING, which go-redis also sends on
// a subscription's connection to check its health. HELLO and AUTH run
// before the user is known.
func aclClientCommands(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-export", "-deps", "-json=ImportPath,Dir,GoFiles,Export"}, aclPackages...)...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	type listed struct {
		ImportPath, Dir, Export string
		GoFiles                 []string
	}
	exports := map[string]string{}
	var targets []listed
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		var p listed
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		exports[p.ImportPath] = p.Export
		if slices.Contains(aclPackages, p.ImportPath) {
			targets = append(targets, p)
		}
	}
	if len(targets) != len(aclPackages) {
		t.Fatalf("go list found %d of the packages %q", len(targets), aclPackages)
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if exports[path] == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(exports[path])
	})
	const goredis = "github.com/redis/go-redis/v9"
	var cmds []string
	for _, p := range targets {
		var files []*ast.File
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}}
		if _, err := (&types.Config{Importer: imp}).Check(p.ImportPath, fset, files, info); err != nil {
			t.Fatalf("type-checking %s: %v", p.ImportPath, err)
		}
		for sel, s := range info.Selections {
			fn, ok := s.Obj().(*types.Func)
			if s.Kind() != types.MethodVal || !ok || fn.Pkg() == nil || fn.Pkg().Path() != goredis {
				continue
			}
			recv := fn.Type().(*types.Signature).Recv().Type()
			if ptr, ok := recv.(*types.Pointer); ok {
				recv = ptr.Elem()
			}
			typ := ""
			if named, ok := recv.(*types.Named); ok {
				typ = named.Obj().Name()
			}
			name := strings.ToLower(fn.Name())
			switch {
			case strings.HasSuffix(typ, "Cmd") || typ == "Cmder" || aclNotCommands[name]:
			case typ == "Script" && (name == "run" || name == "runro"):
				cmds = append(cmds, "evalsha", "eval")
			case typ == "Script" || name == "do" || name == "process" || strings.Contains(name, "pipeline") || !regexp.MustCompile(`^[a-z]+$`).MatchString(name):
				t.Fatalf("%s: %s.%s: the test does not know which commands it sends: update aclClientCommands", fset.Position(sel.Pos()), typ, fn.Name())
			case strings.HasPrefix(name, "function") && name != "function":
				cmds = append(cmds, "function|"+strings.TrimPrefix(name, "function")) // FunctionLoad: FUNCTION LOAD
			default:
				cmds = append(cmds, name)
			}
		}
	}
	if slices.Contains(cmds, "subscribe") {
		cmds = append(cmds, "ping")
	}
	slices.Sort(cmds)
	return slices.Compact(cmds)
}

// aclScriptCommands returns the commands scripts/lua/*.lua call.
func aclScriptCommands(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../scripts/lua/*.lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts in ../scripts/lua: %v", err)
	}
	var cmds []string
	re := regexp.MustCompile(`(?:redis\.(?:p?call)|mcall)\(\s*['"]([A-Za-z]+)['"]`) // mcall: lib.lua's pieces
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllSubmatch(src, -1) {
			cmds = append(cmds, strings.ToLower(string(m[1])))
		}
	}
	slices.Sort(cmds)
	return slices.Compact(cmds)
}

// TestACLLineMatchesScripts: the README's ACL line allows exactly the
// commands lanes sends (read from its Go sources) and its scripts call, on
// the lanes:* keys and channels only.
func TestACLLineMatchesScripts(t *testing.T) {
	words := readmeACL(t)
	var allowed []string
	var keys, channels []string
	for _, w := range words[3:] {
		switch {
		case strings.HasPrefix(w, "+"):
			allowed = append(allowed, strings.ToLower(w[1:]))
		case strings.HasPrefix(w, "~"), strings.HasPrefix(w, "%"):
			keys = append(keys, w)
		case strings.HasPrefix(w, "&"):
			channels = append(channels, w)
		case strings.HasPrefix(w, "-"), w == "allkeys", w == "allchannels", w == "allcommands", w == "nopass":
			t.Errorf("ACL line has %q; want only reset, on, a password, ~lanes:*, &lanes:* and +commands", w)
		}
	}
	if words[3] != "reset" || !slices.Contains(words, "on") {
		t.Errorf("ACL line %q; want it to start with reset (nothing else allowed) and to have on", words)
	}
	if !slices.Equal(keys, []string{"~lanes:*"}) || !slices.Equal(channels, []string{"&lanes:*"}) {
		t.Errorf("ACL line keys %q, channels %q; want ~lanes:* and &lanes:*", keys, channels)
	}
	client := aclClientCommands(t)
	for _, c := range []string{"ping", "evalsha", "eval", "subscribe", "unsubscribe", "hscan", "info"} {
		if !slices.Contains(client, c) {
			t.Errorf("the commands read from the Go sources, %q, lack %s: the derivation is broken", client, strings.ToUpper(c))
		}
	}
	need := append(client, aclScriptCommands(t)...)
	slices.Sort(need)
	need = slices.Compact(need)
	slices.Sort(allowed)
	for _, c := range need {
		if !slices.Contains(allowed, c) {
			t.Errorf("the ACL line does not allow %s, which lanes needs", strings.ToUpper(c))
		}
	}
	for _, c := range allowed {
		if !slices.Contains(need, c) {
			t.Errorf("the ACL line allows %s, which lanes does not need", strings.ToUpper(c))
		}
	}
}

// aclServer starts a redis-server whose default user has a password, and
// makes the user lanes with the README's line and password. It returns the
// server's address and an admin client.
func aclServer(t *testing.T, words []string, password string) (addr string, admin *redis.Client) {
	t.Helper()
	const adminPassword = "admin-pa55"
	port := secRedisServer(t, false, func(port int) []string {
		return []string{"--port", strconv.Itoa(port), "--requirepass", adminPassword}
	})
	addr = "127.0.0.1:" + strconv.Itoa(port)
	admin = redis.NewClient(&redis.Options{Addr: addr, Password: adminPassword})
	t.Cleanup(func() { admin.Close() })
	args := []any{}
	for _, w := range aclWithPassword(words, password) {
		args = append(args, w)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("%q: %v", words, err)
	}
	return addr, admin
}

// TestACLRealRedis runs lanectl as the README's ACL user: lock (waiting
// and woken by a hint), status, keys, release --force, batch and watch all
// work; a command outside the line is refused with NOPERM; a wrong or
// missing password, or a user short of one script command, exits 77 in one
// line without the password.
func TestACLRealRedis(t *testing.T) {
	secNoLeaks(t)
	words := readmeACL(t)
	password := "lanes-" + secRandomHex(8)
	addr, admin := aclServer(t, words, password)
	url := "redis://lanes:" + password + "@" + addr
	ns := "it-acl-" + secRandomHex(6)
	g := []string{"--redis", url, "--namespace", ns}
	lanectlAs := func(args ...string) (int, string, string) { return secRun(t, nil, append(slices.Clone(g), args...)...) }

	if code, out, stderr := lanectlAs("lock", "k", "--", "echo", "ran"); code != 0 || out != "ran\n" {
		t.Fatalf("lock as the ACL user = %d, %q, %q; want 0", code, out, stderr)
	}
	holder := secStart(t, nil, append(slices.Clone(g), "lock", "--id", "acl-holder", "k", "--", "sleep", "30")...)
	waitStatus := func(want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			code, out, stderr := lanectlAs("status", "--json")
			if code != 0 {
				t.Fatalf("status as the ACL user = %d, %q", code, stderr)
			}
			if strings.Contains(out, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("status never showed %s: %s", want, out)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitStatus(`"acl-holder"`)
	waiter := secStart(t, nil, append(slices.Clone(g), "lock", "--id", "acl-waiter", "k", "--", "echo", "waited")...)
	waitStatus(`"acl-waiter"`)
	watch := secStart(t, nil, append(slices.Clone(g), "watch", "--json", "--interval", "20ms")...)
	if code, out, stderr := lanectlAs("keys", "--json"); code != 0 || !strings.Contains(out, `"waiters": 1`) {
		t.Errorf("keys as the ACL user = %d, %q, %q; want 0, k with a waiter", code, out, stderr)
	}
	code, out, stderr := lanectlAs("release", "--force", "acl-holder")
	if code != 0 || !strings.HasPrefix(out, "released acl-holder (holder of k)\ngranted next: acl-waiter (holder of k, owner ") || !strings.HasSuffix(out, ", command echo)\n") {
		t.Errorf("release --force as the ACL user = %d, %q, %q; want the holder released and the waiter granted", code, out, stderr)
	}
	if code := holder.wait(t); code != 79 {
		t.Errorf("the evicted holder = %d; want 79", code)
	}
	if code := waiter.wait(t); code != 0 || waiter.stdout.String() != "waited\n" {
		t.Errorf("the waiter = %d, %q; want 0 once granted (woken by the release's hint)", code, waiter.stdout)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(watch.stdout.String(), `"acl-waiter"`) || !strings.HasSuffix(watch.stdout.String(), `"keys":[]}`+"\n") {
		if time.Now().After(deadline) {
			t.Fatalf("watch as the ACL user never showed the hand-off and the end: %s %s", watch.stdout, watch.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = watch.cmd.Process.Signal(syscall.SIGINT)
	if code := watch.wait(t); code != 0 || watch.stderr.String() != "" {
		t.Errorf("watch as the ACL user after SIGINT = %d, %q; want 0", code, watch.stderr)
	}

	// batch: a tool on one concurrency key, three calls.
	dir := t.TempDir()
	tools := filepath.Join(dir, "tools.toml")
	calls := filepath.Join(dir, "calls.json")
	if err := os.WriteFile(tools, []byte("[tools.echo]\ncommand = [\"sh\", \"-c\", \"cat\"]\nconcurrency = { key = \"echo\" }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(calls, []byte(`{"content":[`+
		`{"type":"tool_use","id":"c1","name":"echo","input":{"n":1}},`+
		`{"type":"tool_use","id":"c2","name":"echo","input":{"n":2}},`+
		`{"type":"tool_use","id":"c3","name":"echo","input":{"n":3}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = lanectlAs("batch", "--tools", tools, "--calls", calls, "--json")
	var outcomes []struct{ ID, Status, Output string }
	if err := json.Unmarshal([]byte(out), &outcomes); code != 0 || err != nil || len(outcomes) != 3 {
		t.Fatalf("batch as the ACL user = %d, %q, %q; want 0 and three outcomes", code, out, stderr)
	}
	for _, o := range outcomes {
		if o.Status != "ok" {
			t.Errorf("batch call %s = %s (%s); want ok", o.ID, o.Status, o.Output)
		}
	}

	// doctor and gc; a repair that deletes protocol 1's keys where no
	// state is (EXISTS, TIME, ZCOUNT and DEL outside the script).
	if code, out, stderr := lanectlAs("doctor"); code != 0 || !strings.Contains(out, "no problem found") {
		t.Errorf("doctor as the ACL user = %d, %q, %q; want 0, no problem", code, out, stderr)
	}
	if code, out, stderr := lanectlAs("gc"); code != 0 {
		t.Errorf("gc as the ACL user = %d, %q, %q; want 0", code, out, stderr)
	}
	user := redis.NewClient(&redis.Options{Addr: addr, Username: "lanes", Password: password})
	defer user.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	old := "it-acl-old-" + secRandomHex(6)
	if err := admin.ZAdd(ctx, "lanes:{"+old+"}:holds", redis.Z{Score: 0, Member: "k\x00e"}).Err(); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := secRun(t, nil, "--redis", url, "--namespace", old, "doctor", "--repair"); code != 1 || !strings.Contains(out, "deleted protocol 1's keys") {
		t.Errorf("doctor --repair of protocol 1's keys as the ACL user = %d, %q, %q; want 1 and the keys deleted", code, out, stderr)
	}
	if n, _ := admin.Exists(ctx, "lanes:{"+old+"}:holds").Result(); n != 0 {
		t.Errorf("protocol 1's key is still there after doctor --repair")
	}
	// The library's reads outside scripts: Leftovers and Records.
	b, err := redislane.New(user, ns)
	if err != nil {
		t.Fatal(err)
	}
	if left, err := b.Leftovers(ctx); err != nil || len(left) != 0 {
		t.Errorf("Leftovers as the ACL user = %q, %v; want nothing", left, err)
	}
	if _, err := b.Records(ctx, "run-1"); err != nil {
		t.Errorf("Records as the ACL user: %v", err)
	}

	// Anything else is refused.
	for _, cmd := range [][]any{
		{"HVALS", "lanes:{" + ns + "}:meta"},
		{"RENAME", "lanes:{" + ns + "}:meta", "lanes:{" + ns + "}:other"},
		{"KEYS", "*"},
		{"FLUSHALL"},
		{"CONFIG", "GET", "requirepass"},
		{"HGET", "other:{x}:entries", "e"},
		{"PUBLISH", "other:channel", "hello"},
	} {
		if err := user.Do(ctx, cmd...).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%v as the ACL user = %v; want NOPERM", cmd, err)
		}
	}
	// A script may only touch lanes:* keys, with the commands allowed.
	err = user.Eval(ctx, "return redis.call('HGET', KEYS[1], 'x')", []string{"other:{x}:entries"}).Err()
	if err == nil || !aclRefusal(err) {
		t.Errorf("EVAL on another key as the ACL user = %v; want an ACL refusal", err)
	}
	err = user.Eval(ctx, "return redis.call('SET', KEYS[1], 'x')", []string{"lanes:{" + ns + "}:meta"}).Err()
	if err == nil || !aclRefusal(err) {
		t.Errorf("EVAL of SET as the ACL user = %v; want an ACL refusal", err)
	}

	// Refusals exit 77 in one line, without the password.
	short := slices.DeleteFunc(slices.Clone(words), func(w string) bool { return strings.EqualFold(w, "+time") })
	short[2] = "lanes-short"
	ctxs, cancels := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancels()
	args := []any{}
	for _, w := range aclWithPassword(short, password) {
		args = append(args, w)
	}
	if err := admin.Do(ctxs, args...).Err(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, url, want string }{
		{"wrong password", "redis://lanes:not-" + password + "@" + addr, "WRONGPASS"},
		{"no password", "redis://" + addr, "NOAUTH"},
		{"a user without TIME", "redis://lanes-short:" + password + "@" + addr, "refused access"},
	} {
		code, out, stderr := secRun(t, nil, "--redis", tt.url, "--namespace", ns, "lock", "k", "--", "true")
		if code != 77 || out != "" || !strings.Contains(stderr, tt.want) {
			t.Errorf("%s: lock = %d, %q, %q; want 77 and %s", tt.name, code, out, stderr, tt.want)
		}
		secOneLine(t, stderr)
		if strings.Contains(stderr, password) {
			t.Errorf("%s: stderr %q shows the password", tt.name, stderr)
		}
	}
	if code, _, stderr := secRun(t, nil, "--redis", "redis://lanes:wrong-"+password+"@"+addr, "status"); code != 77 {
		t.Errorf("status with a wrong password = %d, %q; want 77", code, stderr)
	}
}

// aclRefusal reports whether err is Redis refusing a command by its ACL:
// NOPERM, or inside a script "The user executing the script can't ..."
// (Redis 7.0) or "ACL failure in script" (7.2 on).
func aclRefusal(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "NOPERM") || strings.Contains(msg, "The user executing the script can't") || strings.Contains(msg, "ACL failure in script")
}
