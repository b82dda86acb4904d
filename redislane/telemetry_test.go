package redislane_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/lanes-dev/lanes/internal/redistest"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

func spanAttr(s tracetest.SpanStub, k attribute.Key) string {
	for _, a := range s.Attributes {
		if a.Key == k {
			return a.Value.String()
		}
	}
	return ""
}

// tracedSession is a Session on a Backend of the real Redis server (a fresh
// namespace, deleted at the end) whose spans go to an in-memory exporter.
func tracedSession(t *testing.T, c redis.UniversalClient) (*lanes.Session, *redislane.Backend, *tracetest.InMemoryExporter) {
	t.Helper()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	b, err := redislane.New(c, redistest.Namespace("otel-"), redislane.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.Close()
		redistest.Delete(c, b)
	})
	s, err := lanes.NewSession(context.Background(), b, lanes.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, b, spans
}

// On the real Redis server (LANES_REDIS_URL, else 127.0.0.1:6379), a step's
// span is named after the command that ran it (FCALL on Redis 7, EVALSHA on
// a server without Functions), carries the server, the database index and
// the namespace, and the enqueue step's is a child of its lanes.wait.
func TestRealRedisStepSpans(t *testing.T) {
	c := realClient(t)
	s, b, spans := tracedSession(t, c)
	ctx := context.Background()
	l, err := s.Acquire(ctx, lanes.Request{Lanes: []lanes.Lane{{Key: "gpu", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	byID := map[string]tracetest.SpanStub{}
	for _, sp := range spans.GetSpans() {
		byID[sp.SpanContext.SpanID().String()] = sp
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	want := "FCALL"
	if strings.Contains(info, "redis_version:6.") {
		want = "EVALSHA"
	}
	host, port, _ := strings.Cut(c.Options().Addr, ":")
	var enqueue *tracetest.SpanStub
	for _, sp := range spans.GetSpans() {
		if spanAttr(sp, "lanes.script") == "enqueue" {
			enqueue = &sp
			break
		}
	}
	if enqueue == nil {
		t.Fatalf("no span of the enqueue step among %d", len(spans.GetSpans()))
	}
	for k, v := range map[attribute.Key]string{
		"db.system.name": "redis", "db.operation.name": want, "db.namespace": strconv.Itoa(c.Options().DB),
		"server.address": host, "server.port": port, lanes.AttrNamespace: b.Namespace(),
	} {
		if got := spanAttr(*enqueue, k); got != v {
			t.Errorf("enqueue span's %s = %q; want %q", k, got, v)
		}
	}
	if enqueue.Name != want {
		t.Errorf("enqueue span's name = %q; want %q", enqueue.Name, want)
	}
	if p, ok := byID[enqueue.Parent.SpanID().String()]; !ok || p.Name != "lanes.wait" {
		t.Errorf("enqueue span's parent = %q; want lanes.wait", p.Name)
	}
}

// A step Redis refuses ends its span in error, with the reply's code as
// error.type and db.response.status_code; the wait's span has the lanes
// error's class.
func TestRealRedisStepSpanError(t *testing.T) {
	c := realClient(t)
	s, _, spans := tracedSession(t, c)
	ctx := context.Background()
	if _, err := s.Acquire(ctx, lanes.Request{Lanes: []lanes.Lane{{Key: "gpu", Limit: 1}}}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Acquire(ctx, lanes.Request{Lanes: []lanes.Lane{{Key: "gpu", Limit: 2}}})
	if !errors.Is(err, lanes.ErrLimitMismatch) {
		t.Fatalf("Acquire(limit 2) = %v; want ErrLimitMismatch", err)
	}
	var step, wait bool
	for _, sp := range spans.GetSpans() {
		if sp.Status.Code != codes.Error {
			continue
		}
		switch {
		case sp.SpanKind.String() == "client":
			step = true
			if spanAttr(sp, "error.type") != "LANES_LIMIT" || spanAttr(sp, "db.response.status_code") != "LANES_LIMIT" {
				t.Errorf("failed step's span attributes %v; want error.type and db.response.status_code LANES_LIMIT", sp.Attributes)
			}
		case sp.Name == "lanes.wait":
			wait = true
			if got := spanAttr(sp, "error.type"); got != "limit_mismatch" {
				t.Errorf("failed wait's error.type = %q; want limit_mismatch", got)
			}
		}
	}
	if !step || !wait {
		t.Errorf("failed step span %v, failed wait span %v; want both", step, wait)
	}
}

// commands records the commands a client sends.
type commands struct {
	mu   sync.Mutex
	cmds []redis.Cmder
}

func (c *commands) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.mu.Lock()
		c.cmds = append(c.cmds, cmd)
		c.mu.Unlock()
		return next(ctx, cmd)
	}
}
func (c *commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// IsCommand tells the steps of a Backend from the other commands of its
// client, on the real Redis server.
func TestRealRedisIsCommand(t *testing.T) {
	c := realClient(t)
	rec := &commands{}
	c.AddHook(rec)
	s, b, _ := tracedSession(t, c)
	ctx := context.Background()
	l, err := s.Acquire(ctx, lanes.Request{Lanes: []lanes.Lane{{Key: "gpu", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Inspect(ctx, []string{"gpu"}); err != nil {
		t.Fatal(err)
	}
	c.Ping(ctx)
	c.Get(ctx, "lanes-test-nothing")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	steps := 0
	for _, cmd := range rec.cmds {
		name := strings.ToLower(cmd.Name())
		script := name == "fcall" || name == "evalsha" || name == "eval" || (name == "function" && len(cmd.Args()) > 1 && cmd.Args()[1] == "load")
		if got := redislane.IsCommand(cmd); got != script {
			t.Errorf("IsCommand(%v) = %v; want %v", cmd.Args()[:min(2, len(cmd.Args()))], got, script)
		}
		if script {
			steps++
		}
	}
	if steps < 3 {
		t.Errorf("%d steps among %d commands; want enqueue, release and inspect", steps, len(rec.cmds))
	}
	other := redis.NewCmd(ctx, "fcall", "someone_elses_function", 0)
	if redislane.IsCommand(other) {
		t.Error("IsCommand(FCALL someone_elses_function) = true")
	}
}

// Beside go-redis's redisotel, with IsCommand as its filter, each step is
// traced once (the Backend's span), and the client's other commands still
// by redisotel; without the filter, each step would have two spans. On the
// real Redis server.
func TestRealRedisBesideRedisotel(t *testing.T) {
	for _, filtered := range []bool{false, true} {
		t.Run("filtered="+strconv.FormatBool(filtered), func(t *testing.T) {
			c := realClient(t)
			spans := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
			defer tp.Shutdown(context.Background())
			opts := []redisotel.TracingOption{redisotel.WithTracerProvider(tp)}
			if filtered {
				opts = append(opts, redisotel.WithCommandFilter(func(cmd redis.Cmder) bool {
					return redislane.IsCommand(cmd) || redisotel.DefaultCommandFilter(cmd)
				}))
			}
			if err := redisotel.InstrumentTracing(c, opts...); err != nil {
				t.Fatal(err)
			}
			b, err := redislane.New(c, redistest.Namespace("otel-"), redislane.WithTracerProvider(tp))
			if err != nil {
				t.Fatal(err)
			}
			defer redistest.Delete(c, b)
			defer b.Close()
			ctx := context.Background()
			if _, err := b.Inspect(ctx, []string{"gpu"}); err != nil {
				t.Fatal(err)
			}
			c.Ping(ctx)
			theirs := map[string]int{}
			ours := 0
			for _, sp := range spans.GetSpans() {
				if sp.InstrumentationScope.Name == lanes.ScopeName {
					ours++
				} else {
					theirs[strings.ToLower(sp.Name)]++
				}
			}
			steps := theirs["fcall"] + theirs["evalsha"] + theirs["eval"]
			if ours != 1 || theirs["ping"] != 1 {
				t.Errorf("lanes' spans %d, redisotel's %v; want one of lanes and redisotel's ping", ours, theirs)
			}
			if filtered && steps != 0 {
				t.Errorf("filtered: redisotel traced %d steps too (%v); want 0", steps, theirs)
			}
			if !filtered && steps == 0 {
				t.Errorf("unfiltered: redisotel traced no step (%v); the test shows nothing", theirs)
			}
		})
	}
}

// On a cluster client, a step's span names the node that owns the
// namespace's slot. miniredis fakes a one-node cluster (every slot its
// own), so the node is its address; it has no Functions: EVALSHA.
func TestClusterStepSpanNamesItsNode(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{m.Addr()}})
	defer c.Close()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer tp.Shutdown(context.Background())
	b, err := redislane.New(c, "cluster", redislane.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := lanes.NewSession(context.Background(), b, lanes.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Acquire(context.Background(), lanes.Request{Lanes: []lanes.Lane{{Key: "gpu", Limit: 1}}}); err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(m.Addr(), ":")
	found := false
	for _, sp := range spans.GetSpans() {
		if spanAttr(sp, "lanes.script") != "enqueue" {
			continue
		}
		found = true
		if sp.Name != "EVALSHA" || spanAttr(sp, "server.address") != host || spanAttr(sp, "server.port") != port || spanAttr(sp, "db.namespace") != "0" {
			t.Errorf("enqueue span %q with %v; want EVALSHA on %s:%s, database 0", sp.Name, sp.Attributes, host, port)
		}
	}
	if !found {
		t.Error("no span of the enqueue step")
	}
}
