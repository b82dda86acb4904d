package mcptools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lanes-dev/lanes/internal/redistest"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched"
	"github.com/lanes-dev/lanes/sched/batch"
	"github.com/lanes-dev/lanes/sched/mcptools"
)

// What the proxy costs a call: the same tools/call (the test server's
// slow tool, 0 ms) made straight to the server, and through a Proxy whose
// lanes (a concurrency key of limit 1) are in memory or in real Redis.
// Run with: go test -run '^$' -bench . ./sched/mcptools

func BenchmarkCallDirect(b *testing.B) {
	r := benchResolved(b)
	body := r.Config.Tools["slow"].Run
	b.ResetTimer()
	for range b.N {
		if _, err := body(context.Background(), benchInvocation()); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCallProxyMemory(b *testing.B) {
	benchProxy(b, lanes.NewMemory())
}

// On real Redis (LANES_REDIS_URL or 127.0.0.1:6379; skipped, saying so,
// when none answers).
func BenchmarkCallProxyRealRedis(b *testing.B) {
	benchProxy(b, redistest.Backend(b, redistest.Client(b), "mcp-bench-"))
}

func benchProxy(b *testing.B, backend lanes.Backend) {
	r := benchResolved(b)
	sess, err := lanes.NewSession(context.Background(), mcptools.WithoutRecords(backend))
	if err != nil {
		b.Fatal(err)
	}
	defer sess.Close()
	p, err := mcptools.NewProxy(r, sess, mcptools.ProxyOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Wait()
	cs := connect(b, p)
	params := &mcp.CallToolParams{Name: "slow", Arguments: json.RawMessage(`{"label":"b","ms":0}`)}
	b.ResetTimer()
	for range b.N {
		res, err := cs.CallTool(context.Background(), params)
		if err != nil || res.IsError {
			b.Fatalf("CallTool() = %v %+v", err, res)
		}
	}
}

func benchInvocation() sched.Invocation {
	return sched.Invocation{Tool: "slow", Args: json.RawMessage(`{"label":"b","ms":0}`)}
}

// benchResolved is the test server, with slow on concurrency key x.
func benchResolved(b *testing.B) *batch.Resolved {
	b.Helper()
	dir := b.TempDir()
	src := fmt.Sprintf("[mcp_servers.files]\ncommand = [%q, \"--root\", %q]\n[tools.slow]\nconcurrency = { key = \"x\" }\n", serverBin, dir)
	path := filepath.Join(dir, "tools.toml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		b.Fatal(err)
	}
	f, err := batch.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	r, err := f.Resolve(context.Background(), mcptools.Connect)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	return r
}
