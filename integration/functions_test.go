package integration_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/integration/chaos"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
	"github.com/lanes-dev/lanes/scripts/lua"
)

// Where the lanes Functions library is loaded: on the node that runs the
// namespace's steps (a Cluster's slot owner, a Sentinel's new master), and
// again after a load that failed for a passing reason. Each test starts
// redis-server processes of its own.

// commandCalls returns the calls of each command INFO commandstats counts
// on c ("fcall", "evalsha", "function|load"...).
func commandCalls(ctx context.Context, t *testing.T, c *redis.Client) map[string]int {
	t.Helper()
	text, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for _, line := range strings.Split(text, "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
		calls[name] = n
	}
	return calls
}

// hasLibrary reports whether c's server has lanes' Functions library.
func hasLibrary(ctx context.Context, t *testing.T, c *redis.Client) bool {
	t.Helper()
	name, _ := lua.Library()
	libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: name}).Result()
	if err != nil {
		t.Fatal(err)
	}
	return len(libs) == 1
}

// acquireRelease takes key k in b's namespace and gives it back.
func acquireRelease(ctx context.Context, t *testing.T, b lanes.Backend) {
	t.Helper()
	s := newSession(t, b)
	l, err := s.Acquire(ctx, lanes.Request{Lanes: []lanes.Lane{{Key: "k", Limit: 1}}})
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
}

// Real Redis Cluster, three masters: whichever node owns a namespace's
// slot, its steps run as functions there (FCALL), the library loaded on
// that node, never as scripts (EVALSHA). With go-redis's routing policies
// a keyless FUNCTION LOAD reaches every master; without them (an older
// client, or COMMAND refused) it reaches one node, which the library's
// loader must not rely on.
func TestFunctionsOnTheSlotOwnerCluster(t *testing.T) {
	cl := chaos.StartCluster(t, 3)
	ctx := bounded(t, time.Minute)
	nss, err := cl.NamespacesOnEveryNode(ctx, fmt.Sprintf("it-fn-%d-", time.Now().UnixNano()%1e6))
	if err != nil {
		t.Fatal(err)
	}
	nodes := make([]*redis.Client, len(cl.Nodes))
	for i, n := range cl.Nodes {
		nodes[i] = n.Client()
	}
	for _, routing := range []bool{true, false} {
		t.Run(fmt.Sprintf("routing=%v", routing), func(t *testing.T) {
			for _, n := range nodes {
				if err := n.FunctionFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				if err := n.ConfigResetStat(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), DisableRoutingPolicies: !routing})
			t.Cleanup(func() { cc.Close() })
			for i, ns := range nss {
				b, err := redislane.New(cc, ns)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Close() })
				acquireRelease(ctx, t, b)
				calls := commandCalls(ctx, t, nodes[i])
				if !hasLibrary(ctx, t, nodes[i]) || calls["fcall"] == 0 || calls["evalsha"]+calls["eval"] != 0 {
					t.Errorf("node %d, owner of namespace %s: library loaded %v, calls %v; want the library, FCALL, no EVALSHA or EVAL",
						i, ns, hasLibrary(ctx, t, nodes[i]), calls)
				}
			}
		})
	}
}

// Real Sentinel (a master, its replica, one Sentinel): after SENTINEL
// FAILOVER, a new master without the library (FUNCTION FLUSH stands for
// one that never had it) gets it loaded at the next step, which runs as a
// function there; no step falls back to EVALSHA.
func TestFunctionsOnTheNewMasterSentinel(t *testing.T) {
	st := chaos.StartSentinel(t, "lanes-fn")
	ctx := bounded(t, time.Minute)
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: st.Name, SentinelAddrs: []string{st.Sentinel.Addr()}})
	t.Cleanup(func() { fc.Close() })
	b, err := redislane.New(fc, fmt.Sprintf("it-fn-sentinel-%d", time.Now().UnixNano()%1e6))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	acquireRelease(ctx, t, b)
	if !hasLibrary(ctx, t, st.Master.Client()) {
		t.Fatal("the master has no library after a step")
	}
	if err := st.Failover(ctx); err != nil {
		t.Fatal(err)
	}
	nm := st.Master.Client()
	if err := nm.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := nm.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The client learns of the new master from the Sentinel; until then a
	// step may meet the old one, now a replica (READONLY).
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := newSession(t, b)
		l, err := s.Acquire(bounded(t, 5*time.Second), lanes.Request{Lanes: []lanes.Lane{{Key: "k", Limit: 1}}})
		if err == nil {
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release() = %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Acquire() after the failover = %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	calls := commandCalls(ctx, t, nm)
	if !hasLibrary(ctx, t, nm) || calls["fcall"] == 0 || calls["evalsha"]+calls["eval"] != 0 {
		t.Errorf("new master: library loaded %v, calls %v; want the library, FCALL, no EVALSHA or EVAL", hasLibrary(ctx, t, nm), calls)
	}
}

// failLoads fails the first n FUNCTION LOADs sent through it with a
// connection error, as a failover or a network cut would.
type failLoads struct{ n atomic.Int32 }

func (f *failLoads) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f *failLoads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (f *failLoads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 1 && cmd.Name() == "function" && strings.EqualFold(fmt.Sprint(a[1]), "load") && f.n.Add(-1) >= 0 {
			err := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// Real Redis (a redis-server of the test's own, without the library): a
// FUNCTION LOAD lost to a connection error runs that step as a script;
// the next step loads the library and runs as a function, instead of
// falling back to scripts for good.
func TestFunctionsLoadRetriedAfterPassingFailure(t *testing.T) {
	srv := chaos.StartServer(t, chaos.ServerOptions{})
	ctx := bounded(t, time.Minute)
	admin := srv.Client()
	c := srv.Client()
	f := &failLoads{}
	f.n.Store(1)
	c.AddHook(f)
	b, err := redislane.New(c, "it-fn-retry")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if _, err := b.Inspect(ctx, nil); err != nil {
		t.Fatalf("Inspect() with FUNCTION LOAD failing = %v; want it run as a script", err)
	}
	if calls := commandCalls(ctx, t, admin); hasLibrary(ctx, t, admin) || calls["evalsha"]+calls["eval"] == 0 {
		t.Fatalf("after the failed load: library %v, calls %v; want no library and the step run by EVALSHA", hasLibrary(ctx, t, admin), calls)
	}
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	acquireRelease(ctx, t, b)
	if calls := commandCalls(ctx, t, admin); !hasLibrary(ctx, t, admin) || calls["fcall"] == 0 || calls["evalsha"]+calls["eval"] != 0 {
		t.Errorf("the steps after: library %v, calls %v; want the library loaded, FCALL, no EVALSHA", hasLibrary(ctx, t, admin), calls)
	}
}
