package redisproc

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel is a master, one replica of it and one Sentinel that watches
// them, each a redis-server on a loopback port that the test owns.
type Sentinel struct {
	Name     string // the master's name at the Sentinel (master_name=)
	Master   *Server
	Replica  *Server
	Sentinel *Server
	sc       *redis.SentinelClient
}

// StartSentinel starts a master, its replica and a Sentinel (quorum 1)
// that monitors the master as name, and waits until the replica is in
// sync and the Sentinel knows both, so that a failover can promote the
// replica. It skips tb when redis-server is missing.
func StartSentinel(tb testing.TB, name string) *Sentinel {
	tb.Helper()
	st := &Sentinel{Name: name}
	// Either may be master: no delay before a replica's first sync.
	fast := []string{"--repl-diskless-sync-delay", "0"}
	st.Master = StartServer(tb, ServerOptions{Extra: fast})
	st.Replica = StartServer(tb, ServerOptions{ReplicaOf: st.Master.Addr(), Extra: fast})
	st.Sentinel = StartServer(tb, ServerOptions{Sentinel: true, Config: fmt.Sprintf(
		"sentinel monitor %[1]s 127.0.0.1 %[2]d 1\n"+
			"sentinel down-after-milliseconds %[1]s 2000\n"+
			"sentinel failover-timeout %[1]s 10000\n", name, st.Master.Port)})
	st.sc = redis.NewSentinelClient(&redis.Options{Addr: st.Sentinel.Addr(), DialTimeout: time.Second})
	tb.Cleanup(func() { st.sc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := WaitReplicaSynced(ctx, st.Master.Client(), st.Replica.Client()); err != nil {
		tb.Fatalf("sentinel setup: %v", err)
	}
	if err := st.waitReplicaKnown(ctx, st.Replica.Addr()); err != nil {
		tb.Fatalf("sentinel setup: %v", err)
	}
	return st
}

// URL returns the go-redis failover URL of the setup: the Sentinel's
// address and master_name.
func (st *Sentinel) URL() string {
	return "redis://" + st.Sentinel.Addr() + "?master_name=" + st.Name
}

// MasterAddr returns the address the Sentinel gives for the master now.
func (st *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	a, err := st.sc.GetMasterAddrByName(ctx, st.Name).Result()
	if err != nil {
		return "", err
	}
	if len(a) != 2 {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME %s = %q", st.Name, a)
	}
	return net.JoinHostPort(a[0], a[1]), nil
}

// Failover asks the Sentinel to promote the replica (SENTINEL FAILOVER)
// once it is in sync, waits until the Sentinel names it as the master and
// it says it is one (ROLE), then makes the old master its replica
// (REPLICAOF), as the Sentinel would at its next look at it, seconds
// later: from then on, a client that writes to the old master is refused
// (READONLY) and must turn to the new one. Master and Replica are then
// swapped.
func (st *Sentinel) Failover(ctx context.Context) error {
	mc, rc := st.Master.Client(), st.Replica.Client()
	if err := WaitReplicaSynced(ctx, mc, rc); err != nil {
		return fmt.Errorf("before the failover: %w", err)
	}
	if err := st.waitReplicaKnown(ctx, st.Replica.Addr()); err != nil {
		return fmt.Errorf("before the failover: %w", err)
	}
	if err := st.sc.Failover(ctx, st.Name).Err(); err != nil {
		return fmt.Errorf("SENTINEL FAILOVER %s: %w", st.Name, err)
	}
	for {
		addr, err := st.MasterAddr(ctx)
		if err == nil && addr == st.Replica.Addr() {
			role, err := rc.Do(ctx, "ROLE").Slice()
			if err == nil && len(role) > 0 && role[0] == "master" {
				break
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the Sentinel never named %s as master (last %q, %v): %w", st.Replica.Addr(), addr, err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := mc.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(st.Replica.Port)).Err(); err != nil {
		return fmt.Errorf("the old master: REPLICAOF the new one: %w", err)
	}
	st.Master, st.Replica = st.Replica, st.Master
	return nil
}

// waitReplicaKnown waits until the Sentinel lists addr as a replica of
// the master that is up, so it can promote it.
func (st *Sentinel) waitReplicaKnown(ctx context.Context, addr string) error {
	for {
		rs, err := st.sc.Replicas(ctx, st.Name).Result()
		for _, r := range rs {
			if net.JoinHostPort(r["ip"], r["port"]) == addr && r["flags"] == "slave" && r["master-link-status"] == "ok" {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the Sentinel does not list %s as a replica in sync (%v, %v): %w", addr, rs, err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
