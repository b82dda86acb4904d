package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/internal/redisproc"
	"github.com/lanes-dev/lanes/internal/ui"
	"github.com/lanes-dev/lanes/redislane"
)

// The tests of this file run lanectl against a real Redis Cluster (three
// masters, no replicas: redisproc.StartCluster) and a real Sentinel setup (a
// master, its replica and one Sentinel: redisproc.StartSentinel), each made of
// redis-server processes of the test's own, started on free loopback ports
// and stopped when the test ends. They skip, saying so, without
// redis-server on PATH (and fail under LANES_REQUIRE_REDIS=1).

// newUniversalServer is newServer on a client of the test's own (a cluster
// or Sentinel client): lanectl is pointed at url, the test holds and
// inspects its lanes through c, in a fresh namespace, deleted at the end.
func newUniversalServer(t *testing.T, name, url string, c redis.UniversalClient, ns string) *server {
	t.Helper()
	s := &server{name: name, url: url, ns: ns, c: c}
	var err error
	if s.b, err = redislane.New(c, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.close(true) })
	return s
}

// everyCommand runs every lanectl command that talks to Redis against s,
// with the global flags args (a URL and the namespace), and checks each
// one's result: lock, status, keys, ui, watch, release --force, doctor, gc,
// batch and mcp serve. It leaves s's namespace empty.
func everyCommand(t *testing.T, s *server, args []string) {
	t.Helper()
	run := func(a ...string) (int, string, string) {
		t.Helper()
		return runInProcess(t, append(slices.Clone(args), a...)...)
	}
	if code, out, stderr := run("lock", "--limit", "2", "k", "--", "sh", "-c", `echo "token $LANES_TOKEN"`); code != 0 || !strings.HasPrefix(out, "token ") || out == "token \n" {
		t.Fatalf("lock = %d, %q, %q; want 0 and the token", code, out, stderr)
	}
	tok1, _ := populate(t, s)
	code, out, stderr := run("status", "--json")
	var st statusJSON
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || len(st.Keys) != 3 || st.Keys[0].Holders[0].Token != tok1 {
		t.Fatalf("status --json = %d, %q, %q (%v); want k1 to k3, k1 held with token %d", code, out, stderr, err, tok1)
	}
	if code, out, stderr := run("keys"); code != 0 || !strings.Contains(out, "k1") || !strings.Contains(out, "k3") {
		t.Fatalf("keys = %d, %q, %q; want k1 to k3", code, out, stderr)
	}
	uiShows(t, s, args, "k1", "k2", "k3")
	// watch prints a view on each change: k1 held by h1, then by w1 after
	// release --force h1.
	w := startInProcess(t, append(slices.Clone(args), "watch", "--json", "--interval", "50ms")...)
	holds := func(entry string) func() bool {
		return func() bool {
			vs := views(t, w.stdout.String())
			if len(vs) == 0 {
				return false
			}
			hs, _ := holdersOf(vs[len(vs)-1].statusView, "k1")
			return slices.Equal(hs, []string{entry})
		}
	}
	eventually(t, "watch shows h1 holding k1", holds("h1"))
	if code, out, stderr := run("release", "--force", "--yes", "--json", "h1"); code != 0 || !strings.Contains(out, `"w1"`) {
		t.Fatalf("release --force h1 = %d, %q, %q; want w1 granted next", code, out, stderr)
	}
	eventually(t, "watch shows w1 holding k1", holds("w1"))
	if code := w.stop(t); code != 0 {
		t.Fatalf("watch = %d, %q; want 0", code, w.stderr)
	}
	if code, out, stderr := run("doctor"); code != 0 || !strings.Contains(out, "no problem found") {
		t.Fatalf("doctor = %d, %q, %q; want no problem", code, out, stderr)
	}
	if code, out, stderr := run("gc", "--json"); code != 0 || !strings.Contains(out, `"reaped"`) {
		t.Fatalf("gc = %d, %q, %q; want a report", code, out, stderr)
	}
	d := newBatchDir(t, "")
	calls := d.calls(t, "openai-responses", toolCall{"call_1", "echo", `{"a": 1}`}, toolCall{"call_2", "rfd_renumber", `{}`})
	code, out, stderr = runBin(t, append(slices.Clone(args), "batch", "--json", "--tools", d.tools, "--calls", calls)...)
	if code != 0 || stderr != "" {
		t.Fatalf("batch = %d, %q, %q; want 0 and nothing on stderr", code, out, stderr)
	}
	checkOutcomes(t, decodeBatch(t, out), []want{{"call_1", "echo", "ok", ""}, {"call_2", "rfd_renumber", "ok", ""}})
	mcpServeCalls(t, args, d)
	if code, out, stderr := run("release", "--force", "--yes", "h2", "w1", "w2", "w3"); code != 0 {
		t.Fatalf("release --force of the rest = %d, %q, %q; want 0", code, out, stderr)
	}
	s.assertEmpty(t)
}

// uiShows runs `lanectl ui` in this process with the global flags args,
// and waits until its GET /api/state shows s's namespace, looked at
// without error, with exactly keys.
func uiShows(t *testing.T, s *server, args []string, keys ...string) {
	t.Helper()
	u := startInProcess(t, append(slices.Clone(args), "ui", "--addr", "127.0.0.1:0", "--interval", "20ms")...)
	var base string
	eventually(t, "ui prints its URL", func() bool {
		select {
		case code := <-u.done:
			u.done <- code // for the cleanup
			t.Fatalf("ui exited %d: %s", code, u.stderr)
		default:
		}
		line, ok := strings.CutSuffix(u.stdout.String(), "\n")
		base = line
		return ok
	})
	var f ui.Frame
	eventually(t, "ui's /api/state shows "+strings.Join(keys, ", "), func() bool {
		f = ui.Frame{}
		if code := uiCall(t, "GET", base, "/api/state", "", nil, &f); code != 200 || len(f.Namespaces) != 1 || !f.Namespaces[0].OK {
			return false
		}
		var got []string
		for _, k := range f.Namespaces[0].Keys {
			got = append(got, k.Key)
		}
		slices.Sort(got)
		return f.Namespaces[0].Namespace == s.ns && slices.Equal(got, keys)
	})
	if code := u.stop(t); code != 0 {
		t.Fatalf("ui = %d, %q; want 0", code, u.stderr)
	}
}

// mcpServeCalls starts `lanectl mcp serve` with the global flags args and
// the tools of d, and makes one tools/call of rfd_renumber through it: the
// tool answers with its arguments and logs a fencing token of its
// concurrency key.
func mcpServeCalls(t *testing.T, args []string, d *batchDir) {
	t.Helper()
	var stderr syncBuffer
	cs := proxyClient(t, &stderr, append(slices.Clone(args), "--tools", d.tools)...)
	if out := startCall(cs, "rfd_renumber", map[string]any{"via": "mcp"}).result(t); out != `{"via":"mcp"}` {
		t.Errorf("mcp serve tools/call rfd_renumber = %q; want its arguments back", out)
	}
	lines := logLines(t, d.log)
	if last := lines[len(lines)-1]; !regexp.MustCompile(`^[0-9]+ concurrency:rfd=[1-9][0-9]*$`).MatchString(last) {
		t.Errorf("rfd log after the tools/call = %q; want the MCP request id and a token of concurrency:rfd", lines)
	}
}

// TestLanectlOnRedisCluster: a real Redis Cluster of three masters. Every
// command works given any one node, the namespace's own or another (the
// node says cluster_enabled:1 and becomes a seed), and given seeds with
// addr=.
func TestLanectlOnRedisCluster(t *testing.T) {
	cl := redisproc.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nss, err := cl.NamespacesOnEveryNode(ctx, fmt.Sprintf("lanectl-cl-%d-", time.Now().UnixNano()%1e6))
	if err != nil {
		t.Fatal(err)
	}
	for i, node := range cl.Nodes {
		// nss[2] lives on node 2: nodes 0 and 1 answer MOVED for it.
		t.Run(fmt.Sprintf("node%d", i), func(t *testing.T) {
			s := newUniversalServer(t, "cluster", node.URL(), cl.Client(t), nss[2])
			everyCommand(t, s, s.args())
		})
	}
	// A user INFO is refused to cannot tell lanectl that node 0 is a
	// cluster node: lanectl speaks to it as to one server, and node 0
	// answers MOVED for a namespace of node 2: a configuration error.
	t.Run("MOVED", func(t *testing.T) {
		admin := cl.Nodes[0].Client()
		if err := admin.ACLSetUser(ctx, "noinfo", "on", ">noinfo-pw", "~*", "&*", "+@all", "-info").Err(); err != nil {
			t.Fatal(err)
		}
		url := "redis://noinfo:noinfo-pw@" + cl.Nodes[0].Addr()
		for _, cmd := range [][]string{{"status"}, {"keys"}, {"lock", "k", "--", "true"}, {"release", "--force", "x"}} {
			code, _, stderr := runInProcess(t, append([]string{"--redis", url, "--namespace", nss[2]}, cmd...)...)
			if code != exitConfig || !strings.Contains(stderr, "MOVED") || !strings.Contains(stderr, "addr=") || strings.Contains(stderr, "noinfo-pw") {
				t.Errorf("%s as a user without INFO = %d, %q; want %d, MOVED and the addr= hint, no password", cmd[0], code, stderr, exitConfig)
			}
			assertOneLine(t, stderr)
		}
	})
	// The README's ACL user, with what it says a cluster needs more
	// (+cluster|slots: go-redis reads the slot map), on every node: every
	// command works; without it, lanectl exits 77 naming the command.
	t.Run("ACL", func(t *testing.T) {
		readme, err := os.ReadFile("../../README.md")
		if err != nil {
			t.Fatal(err)
		}
		line := regexp.MustCompile(`(?m)^ACL SETUSER lanes .*$`).Find(readme)
		if line == nil || !strings.Contains(string(readme), "`+cluster|slots`") {
			t.Fatal("README.md has no `ACL SETUSER lanes ...` line, or does not name +cluster|slots for a cluster")
		}
		setUser := func(extra ...string) {
			var args []any
			for _, w := range append(strings.Fields(string(line)), extra...) {
				if strings.HasPrefix(w, ">") {
					w = ">acl-pw"
				}
				args = append(args, w)
			}
			for _, n := range cl.Nodes {
				if err := n.Client().Do(ctx, args...).Err(); err != nil {
					t.Fatalf("%q: %v", args, err)
				}
			}
		}
		url := "redis://lanes:acl-pw@" + cl.Nodes[0].Addr()
		setUser()
		code, _, stderr := runInProcess(t, "--redis", url, "--namespace", nss[1], "status")
		if code != exitNoPerm || !strings.Contains(stderr, "cluster|slots") {
			t.Errorf("status as the README's user without +cluster|slots = %d, %q; want %d naming cluster|slots", code, stderr, exitNoPerm)
		}
		setUser("+cluster|slots")
		s := newUniversalServer(t, "cluster", url, cl.Client(t), nss[1])
		everyCommand(t, s, s.args())
	})
	// Seeds given with addr=, read from a --redis-url-file.
	t.Run("addr", func(t *testing.T) {
		url := fmt.Sprintf("redis://%s?addr=%s&addr=%s", cl.Nodes[1].Addr(), cl.Nodes[2].Addr(), cl.Nodes[0].Addr())
		file := filepath.Join(t.TempDir(), "url")
		writeFile(t, file, url+"\n", 0o600)
		s := newUniversalServer(t, "cluster", url, cl.Client(t), nss[0])
		everyCommand(t, s, []string{"--redis-url-file", file, "--namespace", s.ns})
	})
}

// TestLanectlOnSentinel: a real Sentinel setup (a master, its replica, one
// redis-server --sentinel). Every command works through the Sentinel URL
// (master_name=); a `lanectl lock` holds its key across SENTINEL FAILOVER
// (its renewals reach the new master), and a new lock works afterwards; a
// master name no Sentinel knows is a configuration error.
func TestLanectlOnSentinel(t *testing.T) {
	st := redisproc.StartSentinel(t, "lanes-cli")
	newClient := func(t *testing.T) redis.UniversalClient {
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: st.Name, SentinelAddrs: []string{st.Sentinel.Addr()}})
		t.Cleanup(func() { c.Close() })
		return c
	}
	ns := func() string { return fmt.Sprintf("lanectl-sentinel-%d", time.Now().UnixNano()) }
	t.Run("commands", func(t *testing.T) {
		s := newUniversalServer(t, "sentinel", st.URL(), newClient(t), ns())
		everyCommand(t, s, s.args())
	})
	t.Run("failover", func(t *testing.T) {
		s := newUniversalServer(t, "sentinel", st.URL(), newClient(t), ns())
		release := filepath.Join(t.TempDir(), "release")
		const ttl = 3 * time.Second
		holder := startBin(t, s.args("lock", "--ttl", ttl.String(), "--id", "across", "k", "--",
			"sh", "-c", `while [ ! -e "$0" ]; do sleep 0.02; done; echo "held $LANES_TOKEN"`, release)...)
		held := func() (ms int64, ok bool) {
			code, out, _ := runInProcess(t, s.args("status", "--json", "k")...)
			var st statusJSON
			if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st.Keys) != 1 || len(st.Keys[0].Holders) != 1 {
				return 0, false
			}
			return st.Keys[0].Holders[0].HeldMS, st.Keys[0].Holders[0].Entry == "across"
		}
		eventually(t, "the lock holds k", func() bool { _, ok := held(); return ok })
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := st.Failover(ctx); err != nil {
			t.Fatal(err)
		}
		// The lease outlives a TTL after the failover only if its renewals
		// reached the new master.
		after, _ := held()
		eventually(t, "the lock still holds k a TTL after the failover", func() bool {
			ms, ok := held()
			return ok && ms > after+ttl.Milliseconds()
		})
		writeFile(t, release, "", 0o600)
		if code := holder.wait(t); code != 0 || !strings.HasPrefix(holder.stdout.String(), "held ") {
			t.Fatalf("lock across the failover = %d, %q, %q; want 0 and its command's output", code, holder.stdout, holder.stderr)
		}
		if code, out, stderr := runInProcess(t, s.args("lock", "k", "--", "echo", "after")...); code != 0 || out != "after\n" {
			t.Fatalf("lock after the failover = %d, %q, %q; want 0", code, out, stderr)
		}
		s.assertEmpty(t)
	})
	t.Run("url file", func(t *testing.T) {
		s := newUniversalServer(t, "sentinel", st.URL(), newClient(t), ns())
		populate(t, s)
		file := filepath.Join(t.TempDir(), "url")
		writeFile(t, file, st.URL(), 0o600)
		env := map[string]string{"LANES_REDIS_URL_FILE": file, "LANES_NAMESPACE": s.ns}
		if code, out, stderr := runWithEnv(t, env, "keys"); code != 0 || !strings.Contains(out, "k1") {
			t.Errorf("keys with LANES_REDIS_URL_FILE = %d, %q, %q; want 0 and k1", code, out, stderr)
		}
	})
	t.Run("unknown master", func(t *testing.T) {
		url := "redis://" + st.Sentinel.Addr() + "?master_name=nosuch"
		code, _, stderr := runInProcess(t, "--redis", url, "--namespace", "x", "status")
		if code != exitConfig || !strings.Contains(stderr, `"nosuch"`) {
			t.Errorf("status with master_name=nosuch = %d, %q; want %d naming the master", code, stderr, exitConfig)
		}
		assertOneLine(t, stderr)
	})
}

// TestLanectlOnRedisClusterTLS: a real Redis Cluster of three masters that
// speak TLS only (clients, cluster bus), with a CA of the test's own.
// Every command works through one node's rediss:// URL (its seed found
// by cluster_enabled:1, the CA of --redis-ca-file kept for every node) and
// through addr= seeds; without the CA, the certificate is refused.
func TestLanectlOnRedisClusterTLS(t *testing.T) {
	tf := redisproc.NewTLSFiles(t)
	cl := redisproc.StartClusterWith(t, 3, redisproc.ServerOptions{TLS: tf})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nss, err := cl.NamespacesOnEveryNode(ctx, fmt.Sprintf("lanectl-cltls-%d-", time.Now().UnixNano()%1e6))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("node", func(t *testing.T) {
		s := newUniversalServer(t, "cluster-tls", cl.Nodes[0].URL(), cl.Client(t), nss[2])
		everyCommand(t, s, s.args("--redis-ca-file", tf.CA))
	})
	t.Run("addr", func(t *testing.T) {
		url := fmt.Sprintf("rediss://%s?addr=%s", cl.Nodes[1].Addr(), cl.Nodes[2].Addr())
		s := newUniversalServer(t, "cluster-tls", url, cl.Client(t), nss[0])
		everyCommand(t, s, s.args("--redis-ca-file", tf.CA))
	})
	t.Run("no CA", func(t *testing.T) {
		code, _, stderr := runInProcess(t, "--redis", cl.Nodes[0].URL(), "--namespace", nss[0], "status")
		if code != exitUnavailable || !strings.Contains(stderr, "certificate") {
			t.Errorf("status without the CA = %d, %q; want %d and the certificate refused", code, stderr, exitUnavailable)
		}
		assertOneLine(t, stderr)
	})
}
