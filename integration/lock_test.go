package integration_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// event is one line a child wrote: "start ENTRY TOKEN" or "end ENTRY TOKEN".
type event struct {
	kind, entry string
	token       uint64
}

func readEvents(t *testing.T, path string) []event {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []event
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 {
			t.Fatalf("malformed line %q", sc.Text())
		}
		tok, err := strconv.ParseUint(fs[2], 10, 64)
		if err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, event{fs[0], fs[1], tok})
	}
	return out
}

// Real Redis: twenty `lanectl lock --limit 2` processes, started one after
// another so their enqueue order is known. Never more than two children run
// at once, grants (tokens) follow enqueue order, and nothing is left.
func TestTwentyLockProcessesRealRedis(t *testing.T) {
	ns, b, c := namespace(t)
	const n, limit = 20, 2
	log := filepath.Join(t.TempDir(), "events")
	child := `echo "start $LANES_ENTRY $LANES_TOKEN" >>"$1"; sleep 0.15; echo "end $LANES_ENTRY $LANES_TOKEN" >>"$1"`

	var procs []*os.Process
	var waits []func() error
	for i := range n {
		id := fmt.Sprintf("p%02d", i)
		cmd := lockCmd(t, ns, "--limit", strconv.Itoa(limit), "--ttl", "5s", "--id", id, "K", "--", "sh", "-c", child, "sh", log)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, cmd.Process)
		waits = append(waits, cmd.Wait)
		// The next process starts once this one holds or waits, or is done.
		until(t, 10*time.Second, id+" enqueued", func() bool {
			h, w := has(snapshot(t, b, "K"), id)
			done := false
			if data, err := os.ReadFile(log); err == nil {
				done = strings.Contains(string(data), "start "+id+" ")
			}
			return h || w || done
		})
	}
	for i, w := range waits {
		if err := w(); err != nil {
			t.Fatalf("process p%02d: %v", i, err)
		}
	}
	_ = procs

	events := readEvents(t, log)
	if len(events) != 2*n {
		t.Fatalf("%d events; want %d", len(events), 2*n)
	}
	running := map[string]bool{}
	tokenOf := map[string]uint64{}
	most := 0
	for _, e := range events {
		switch e.kind {
		case "start":
			running[e.entry] = true
			tokenOf[e.entry] = e.token
			most = max(most, len(running))
			// FIFO: when e.entry was granted, at most limit-1 of the entries
			// enqueued before it still held the key (each ends before it
			// releases, so "still running" here means "still held" then).
			idx, _ := strconv.Atoi(e.entry[1:])
			var earlier []string
			for other := range running {
				if j, _ := strconv.Atoi(other[1:]); j < idx {
					earlier = append(earlier, other)
				}
			}
			if len(earlier) > limit-1 {
				t.Errorf("%s started while %v, enqueued before it, still ran", e.entry, earlier)
			}
		case "end":
			delete(running, e.entry)
		}
	}
	if most > limit {
		t.Fatalf("%d children ran at once; limit %d", most, limit)
	}
	for i := 1; i < n; i++ {
		prev, cur := fmt.Sprintf("p%02d", i-1), fmt.Sprintf("p%02d", i)
		if tokenOf[cur] <= tokenOf[prev] {
			t.Fatalf("token of %s (%d) not above %s's (%d): grants out of enqueue order", cur, tokenOf[cur], prev, tokenOf[prev])
		}
	}
	assertNamespaceEmpty(t, b, c)
}

// Real Redis: a SIGKILLed holder's slot passes to the next waiter within its
// TTL plus one heartbeat.
func TestKilledHolderSlotPassesRealRedis(t *testing.T) {
	ns, b, c := namespace(t)
	// 3s, not 1s: holder and waiter must keep their entries until the
	// waiter is seen queued, though a loaded machine may starve them.
	const ttl = 3 * time.Second
	holder := lockCmd(t, ns, "--ttl", ttl.String(), "--id", "holder", "K", "--", "sleep", "60")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	until(t, 10*time.Second, "holder granted", func() bool { h, _ := has(snapshot(t, b, "K"), "holder"); return h })
	waiter := lockCmd(t, ns, "--ttl", ttl.String(), "--id", "waiter", "K", "--", "true")
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	until(t, 10*time.Second, "waiter queued", func() bool { _, w := has(snapshot(t, b, "K"), "waiter"); return w })

	if err := killGroup(holder); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	killed := time.Now()
	if err := waiter.Wait(); err != nil {
		t.Fatalf("waiter: %v", err)
	}
	// The waiter's child ran, so the waiter was granted: at the TTL plus a
	// poll (TTL/3) at most. The bound is generous, for -race on busy cores:
	// only a slot that never expired, or waited out more than a TTL again,
	// passes it.
	took := time.Since(killed)
	bound := 2*ttl + 2*time.Second
	t.Logf("slot passed %v after the SIGKILL (TTL %v)", took.Round(time.Millisecond), ttl)
	if took > bound {
		t.Fatalf("slot passed %v after the holder died; want within TTL + one heartbeat (%v with slack)", took, bound)
	}
	assertNamespaceEmpty(t, b, c)
}

// Real Redis: a SIGKILLed waiter is purged from the queue and blocks no one.
func TestKilledWaiterBlocksNoOneRealRedis(t *testing.T) {
	ns, b, c := namespace(t)
	dir := t.TempDir()
	goFile := filepath.Join(dir, "go")
	// The live ones renew a 3s TTL (room for a starved process under
	// -race); the one killed has 1s, so it is purged soon.
	holder := lockCmd(t, ns, "--ttl", "3s", "--id", "holder", "K", "--", "sh", "-c", `while [ ! -e "$1" ]; do sleep 0.02; done`, "sh", goFile)
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	until(t, 10*time.Second, "holder granted", func() bool { h, _ := has(snapshot(t, b, "K"), "holder"); return h })
	dead := lockCmd(t, ns, "--ttl", "1s", "--id", "dead", "K", "--", "true")
	if err := dead.Start(); err != nil {
		t.Fatal(err)
	}
	until(t, 10*time.Second, "dead queued", func() bool { _, w := has(snapshot(t, b, "K"), "dead"); return w })
	next := lockCmd(t, ns, "--ttl", "3s", "--id", "next", "K", "--", "true")
	if err := next.Start(); err != nil {
		t.Fatal(err)
	}
	until(t, 10*time.Second, "next queued", func() bool { _, w := has(snapshot(t, b, "K"), "next"); return w })

	if err := killGroup(dead); err != nil {
		t.Fatal(err)
	}
	_ = dead.Wait()
	took := until(t, 10*time.Second, "the dead waiter purged", func() bool { _, w := has(snapshot(t, b, "K"), "dead"); return !w })
	t.Logf("dead waiter purged %v after the SIGKILL", took.Round(time.Millisecond))
	if _, w := has(snapshot(t, b, "K"), "next"); !w {
		t.Fatal("the live waiter was evicted with the dead one")
	}
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := holder.Wait(); err != nil {
		t.Fatalf("holder: %v", err)
	}
	if err := next.Wait(); err != nil {
		t.Fatalf("next: %v", err)
	}
	assertNamespaceEmpty(t, b, c)
}
