package redisproc

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of masters on loopback ports, without
// replicas, built by hand: CLUSTER ADDSLOTSRANGE on each node, then CLUSTER
// MEET.
type Cluster struct {
	Nodes []*Server
	// Ranges[i] is the first and last slot of node i.
	Ranges [][2]int
}

// StartCluster starts n cluster-enabled servers, splits the 16384 slots
// evenly among them and waits until every node sees the cluster as ok. It
// skips tb when redis-server is missing.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	return StartClusterWith(tb, n, ServerOptions{})
}

// StartClusterWith is StartCluster with every node started with opts
// (TLS...), cluster-enabled.
func StartClusterWith(tb testing.TB, n int, opts ServerOptions) *Cluster {
	tb.Helper()
	opts.Cluster = true
	cl := &Cluster{}
	for range n {
		cl.Nodes = append(cl.Nodes, StartServer(tb, opts))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	per := 16384 / n
	for i, s := range cl.Nodes {
		lo, hi := i*per, (i+1)*per-1
		if i == n-1 {
			hi = 16383
		}
		cl.Ranges = append(cl.Ranges, [2]int{lo, hi})
		c := s.Client()
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			tb.Fatalf("node %d: CLUSTER ADDSLOTSRANGE %d %d: %v", i, lo, hi, err)
		}
		if i > 0 {
			if err := c.ClusterMeet(ctx, "127.0.0.1", fmt.Sprint(cl.Nodes[0].Port)).Err(); err != nil {
				tb.Fatalf("node %d: CLUSTER MEET: %v", i, err)
			}
		}
	}
	for i, s := range cl.Nodes {
		c := s.Client()
		for {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", n)) &&
				strings.Contains(info, "cluster_slots_ok:16384") {
				shards, err := c.ClusterShards(ctx).Result()
				if err == nil && len(shards) == n {
					break
				}
			}
			if ctx.Err() != nil {
				tb.Fatalf("cluster node %d never got ready: %v %q", i, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return cl
}

// Addrs returns every node's host:port.
func (cl *Cluster) Addrs() []string {
	var out []string
	for _, s := range cl.Nodes {
		out = append(out, s.Addr())
	}
	return out
}

// Client returns a cluster client of every node, closed when tb ends.
func (cl *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), TLSConfig: cl.Nodes[0].opts.TLS.Config()})
	tb.Cleanup(func() { c.Close() })
	return c
}

// NamespacesOnEveryNode returns one namespace per node, prefixed by prefix,
// whose keys ("lanes:{ns}:...") hash to a slot of that node.
func (cl *Cluster) NamespacesOnEveryNode(ctx context.Context, prefix string) ([]string, error) {
	c := cl.Nodes[0].Client()
	out := make([]string, len(cl.Nodes))
	found := 0
	for i := 0; found < len(cl.Nodes) && i < 10000; i++ {
		ns := fmt.Sprintf("%s%d", prefix, i)
		slot, err := c.ClusterKeySlot(ctx, "lanes:{"+ns+"}:entries").Result()
		if err != nil {
			return nil, err
		}
		for j, r := range cl.Ranges {
			if int(slot) >= r[0] && int(slot) <= r[1] && out[j] == "" {
				out[j] = ns
				found++
			}
		}
	}
	if found < len(cl.Nodes) {
		return nil, fmt.Errorf("no namespace found for every node")
	}
	return out, nil
}
