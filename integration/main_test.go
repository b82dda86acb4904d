package integration_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/internal/redistest"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

// lanectl is the path of the binary built for this run.
var lanectl string

// runDir is this run's own directory, for the binaries it builds (lanectl,
// the chaos worker); TestMain removes it at the end.
var runDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lanes-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	runDir = dir
	lanectl = filepath.Join(dir, "lanectl")
	build := exec.Command("go", "build", "-o", lanectl, "github.com/lanes-dev/lanes/cmd/lanectl")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building lanectl:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func redisURL() string { return redistest.URL() }

// namespace is a fresh namespace on the real Redis server and a Backend to
// inspect it; its keys are deleted when the test ends. It skips the test,
// visibly, when no server answers.
func namespace(t *testing.T) (string, *redislane.Backend, redis.UniversalClient) {
	t.Helper()
	c := redistest.Client(t)
	b := redistest.Backend(t, c, "it-")
	return b.Namespace(), b, c
}

// snapshot returns key's state.
func snapshot(t *testing.T, b lanes.Backend, key string) lanes.KeyState {
	t.Helper()
	snap, err := b.Inspect(context.Background(), []string{key})
	if err != nil {
		t.Fatalf("Inspect(%q) = %v", key, err)
	}
	for _, ks := range snap.Keys {
		if ks.Key == key {
			return ks
		}
	}
	return lanes.KeyState{Key: key}
}

func has(ks lanes.KeyState, entry string) (holder, waiter bool) {
	for _, h := range ks.Holders {
		holder = holder || h.ID == entry
	}
	for _, w := range ks.Waiters {
		waiter = waiter || w.ID == entry
	}
	return
}

// until polls cond every 5ms until it holds, failing the test after limit.
func until(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not true after %v", what, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// assertNamespaceEmpty checks that no holder, waiter or entry is left: only
// the fencing counters and the sequence number, which never expire.
func assertNamespaceEmpty(t *testing.T, b *redislane.Backend, c redis.UniversalClient) {
	t.Helper()
	snap, err := b.Inspect(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Keys) != 0 {
		t.Fatalf("namespace still has keys with holders or waiters: %+v", snap.Keys)
	}
	// The state keys stay while the namespace is in use, holding only their
	// markers, idle key records (fencing tokens) and tombstones.
	left, err := b.Leftovers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("the namespace still holds %q", left)
	}
}

// lockCmd is one `lanectl lock` process in its own process group, so a
// SIGKILL of the group takes its child along, as a crashed machine would.
//
// The process, and its whole group, is killed when t ends or two minutes
// after it started, so that a Wait on it always returns: a test that fails
// early, or a lanectl that hangs, leaves no process behind and no test hung.
func lockCmd(t *testing.T, ns string, args ...string) *exec.Cmd {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, lanectl, append([]string{"--redis", redisURL(), "--namespace", ns, "lock"}, args...)...)
	cmd.SysProcAttr = groupAttr()
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.Stderr = os.Stderr
	return cmd
}
