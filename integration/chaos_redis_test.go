package integration_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/integration/chaos"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

// Redis paused past the TTL, twice: SIGSTOP of redis-server, then CLIENT
// PAUSE ALL. Nothing is answered meanwhile, and Redis's clock goes on:
// every lease granted before a pause must end with it (the holder learns it
// is lost; no release after the pause finds it held), waits end with a
// grant or an error, and every checker passes.
func TestChaosRedisPaused(t *testing.T) {
	s := chaosStart(t, "Redis paused past the TTL (SIGSTOP, CLIENT PAUSE)")
	srv := chaos.StartServer(t, chaos.ServerOptions{})
	admin := srv.Client()
	b := s.namespace(admin, "chaos-pause-")
	cycles := chaosSize(1, 4)
	pause := 2 * s.ttl
	hold := pause + 4*time.Second // a margin for a late look at the acquire (a loaded machine)
	f := s.h.RunFleet("r", chaosSize(4, 8), func(i, inc int) []string {
		if inc > 0 {
			return nil
		}
		return s.args(srv.URL(), b.Namespace(), uint64(800+i), "-clients", "2", "-ops", "1000000",
			"-for", (time.Duration(cycles) * 2 * (hold + time.Second)).String())
	})
	// A long holder on its own key holds across each pause: its leases
	// must be lost.
	long := s.h.Start("h0.0", s.args(srv.URL(), b.Namespace(), 850, "-lanes", "l0:1", "-multi", "0", "-cancel", "0",
		"-clients", "1", "-ops", "1000000", "-hold-min", hold.String(), "-hold", hold.String(),
		"-for", (time.Duration(cycles)*2*(hold+time.Second)).String())...)
	// held waits for a grant of the long holder after after, then until it
	// holds by its history's tail (granted, its release not invoked, no
	// loss noticed), so that the pause that follows finds a lease held
	// however late a loaded machine looked (a grant seen late may have
	// been released already).
	held := func(after time.Time) {
		chaosWaitEvent(s, time.Minute, "the long holder was granted", func(e chaos.Event) bool {
			return e.Proc == "h0.0" && e.Op == chaos.OpAcquire && e.Phase == chaos.Ok && e.Time > after.UnixNano()
		})
		s.h.Until(time.Minute, "the long holder holds", func() bool { return s.h.Holding("h0.0") })
	}
	type window struct{ from, to time.Time }
	var windows []window
	last := time.Time{}
	for range cycles {
		time.Sleep(time.Second)
		held(last)
		from := s.h.Fault("SIGSTOP redis-server", chaos.Invoke)
		srv.Pause()
		time.Sleep(pause)
		srv.Resume()
		windows = append(windows, window{from, s.h.Fault("SIGCONT redis-server", chaos.Ok)})

		time.Sleep(time.Second)
		held(windows[len(windows)-1].to)
		from = s.h.Fault("CLIENT PAUSE ALL", chaos.Invoke)
		if err := admin.Do(context.Background(), "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(pause + 100*time.Millisecond)
		windows = append(windows, window{from, s.h.Fault("CLIENT PAUSE over", chaos.Ok)})
		last = windows[len(windows)-1].to
	}
	f.Wait(chaosSize(2*time.Minute, 10*time.Minute))
	s.h.Wait(long, time.Minute)
	hist := s.h.History()
	for _, w := range windows {
		s.extra = append(s.extra, chaos.CheckLostAcross(hist, w.from, w.to)...)
		// The pause must find leases held: each is then either lost
		// during it (its holder told at its local deadline, as the
		// scenario counts below) or released after it, which
		// CheckLostAcross requires to find it gone.
		held := 0
		for _, a := range hist.Attempts {
			if a.Outcome == chaos.Granted && a.Return < w.from.UnixNano() && (a.RelInvoke == 0 || a.RelInvoke > w.from.UnixNano()) {
				held++
			}
		}
		if held == 0 {
			s.violation("scenario", "no lease was held when the pause from %v began: the check had nothing to check", w.from.Format(time.StampMilli))
		}
	}
	lost := 0
	for _, a := range hist.Attempts {
		if a.Lost > 0 {
			lost++
		}
	}
	s.fault(fmt.Sprintf("%d x (SIGSTOP of redis-server for %v; CLIENT PAUSE ALL for %v), TTL %v: %d leases lost", cycles, pause, pause, s.ttl, lost))
	s.finish(chaos.Options{})
}

// kill -9 of a Redis that runs with --appendonly yes --appendfsync always,
// then a restart on the same port: the state survives. The harness's own
// lease (TTL 10s) is still held with the same token, its waiter still
// waits and is granted next with a higher token, the sequence number and
// the fencing counters did not go back, and the replicas working through
// the restart pass every checker.
func TestChaosRedisRestartAOF(t *testing.T) {
	s := chaosStart(t, "Redis kill -9 and restart with AOF (appendfsync always)")
	srv := chaos.StartServer(t, chaos.ServerOptions{AOF: true})
	c := srv.Client()
	b := s.namespace(c, "chaos-aof-")
	ctx := chaos.Context(t, 5*time.Minute)
	restarts := chaosSize(1, 5)
	f := s.h.RunFleet("r", chaosSize(3, 8), func(i, inc int) []string {
		if inc > 0 {
			return nil
		}
		return s.args(srv.URL(), b.Namespace(), uint64(900+i), "-clients", "2", "-ops", "1000000",
			"-for", (time.Duration(restarts)*2*time.Second + 2*time.Second).String())
	})
	sess, err := lanes.NewSession(ctx, b, lanes.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	for r := range restarts {
		time.Sleep(time.Second)
		probe, err := sess.Acquire(ctx, lanes.Request{ID: fmt.Sprintf("probe-%d", r), Lanes: []lanes.Lane{{Key: "probe", Limit: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		ts, err := sess.Enqueue(ctx, lanes.Request{ID: fmt.Sprintf("probe-w-%d", r), Lanes: []lanes.Lane{{Key: "probe", Limit: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		seq0 := chaosSeq(ctx, t, c, b)
		tok0 := chaosTokens(ctx, t, c, b)
		s.h.Fault("kill -9 redis-server (AOF)", chaos.Invoke)
		srv.Kill()
		srv.Restart()
		s.h.Fault("redis-server restarted from its AOF", chaos.Ok)

		snap, err := b.Inspect(ctx, []string{"probe"})
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Keys) != 1 || len(snap.Keys[0].Holders) != 1 || snap.Keys[0].Holders[0].ID != probe.ID() ||
			snap.Keys[0].Holders[0].Token != probe.Token("probe") || len(snap.Keys[0].Waiters) != 1 || snap.Keys[0].Waiters[0].ID != ts[0].ID() {
			s.violation("state", "after the restart, key probe is %+v; want holder %s (token %d) and waiter %s", snap.Keys, probe.ID(), probe.Token("probe"), ts[0].ID())
		}
		if seq1 := chaosSeq(ctx, t, c, b); seq1 < seq0 {
			s.violation("state", "the sequence number went back from %d to %d", seq0, seq1)
		}
		tok1 := chaosTokens(ctx, t, c, b)
		for k, v := range tok0 {
			if strings.HasPrefix(k, "\x00") {
				continue // not a counter (\0maxttl)
			}
			if len(tok1[k]) < len(v) || len(tok1[k]) == len(v) && tok1[k] < v {
				s.violation("state", "the fencing counter of %s went back from %s to %s", k, v, tok1[k])
			}
		}
		if err := probe.Err(); err != nil {
			s.violation("lease", "the harness's lease (TTL 10s) was lost across a restart that kept the data: %v", err)
		}
		if err := probe.Release(ctx); err != nil {
			s.violation("lease", "releasing the harness's lease after the restart: %v", err)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		next, err := ts[0].Wait(wctx)
		cancel()
		if err != nil {
			s.violation("state", "the waiter queued before the restart was not granted: %v", err)
			continue
		}
		if next.Token("probe") <= probe.Token("probe") {
			s.violation("fencing", "token %d after the restart is not above %d", next.Token("probe"), probe.Token("probe"))
		}
		_ = next.Release(ctx)
	}
	f.Wait(chaosSize(2*time.Minute, 10*time.Minute))
	s.fault(fmt.Sprintf("%d x kill -9 and restart of redis-server with AOF", restarts))
	s.finish(chaos.Options{})
}

// kill -9 of a Redis without persistence, then a restart: all state is
// gone. Every holder of a lease from before must learn it is lost (no
// release after the restart finds it held), tokens keep growing (Redis
// time in ms x 1024 is above every token minted before), and a holder
// stopped across the restart has its late write refused by the guard.
func TestChaosRedisRestartWithoutPersistence(t *testing.T) {
	s := chaosStart(t, "Redis kill -9 and restart without persistence")
	srv := chaos.StartServer(t, chaos.ServerOptions{})
	b := s.namespace(srv.Client(), "chaos-nopersist-")
	ns := b.Namespace()
	restarts := chaosSize(1, 4)
	f := s.h.RunFleet("r", chaosSize(3, 8), func(i, inc int) []string {
		if inc > 0 {
			return nil
		}
		return s.args(srv.URL(), ns, uint64(1000+i), "-clients", "2", "-ops", "1000000",
			"-for", (time.Duration(restarts)*4*time.Second + time.Second).String())
	})
	// Two slow holders take turns on l0 (one holds, the other waits), so
	// that each restart has a holder running through it whose notice of
	// the loss, and the next holder's overlap with it, are measured.
	slow := s.h.RunFleet("h", 2, func(i, inc int) []string {
		if inc > 0 {
			return nil
		}
		return s.args(srv.URL(), ns, uint64(1050+i), "-lanes", "l0:1", "-multi", "0", "-cancel", "0", "-clients", "1",
			"-ops", "1000000", "-hold-min", "2s", "-hold", "2500ms", "-for", (time.Duration(restarts)*8*time.Second + 5*time.Second).String())
	})
	type window struct{ from, to time.Time }
	var windows []window
	var victims []string
	for r := range restarts {
		name := fmt.Sprintf("v%d.0", r)
		victims = append(victims, name)
		v := s.h.Start(name, s.args(srv.URL(), ns, uint64(1100+r), "-lanes", "m0:1", "-multi", "0", "-cancel", "0",
			"-clients", "1", "-ops", "1", "-victim", "1s", "-hold", "0")...)
		chaosWaitEvent(s, time.Minute, name+" read the counter", func(e chaos.Event) bool {
			return e.Proc == name && e.Op == chaos.OpRead && e.Phase == chaos.Ok
		})
		s.h.Stop(v)
		// Kill Redis just after a slow holder's grant: its hold (2s at
		// least) runs through the kill and the restart. The holder has
		// seen its grant (its acquire returned, in its history), and Redis
		// says it was granted less than 1.5s ago: a grant this harness saw
		// late (a loaded machine starves it) makes it wait for a later one.
		s.h.Until(time.Minute, "a slow holder granted l0 less than 1.5s ago, and told", func() bool {
			ictx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			snap, err := b.Inspect(ictx, []string{"l0"})
			if err != nil || len(snap.Keys) != 1 || len(snap.Keys[0].Holders) != 1 {
				return false
			}
			h := snap.Keys[0].Holders[0]
			if snap.Time.Sub(h.Granted) >= 1500*time.Millisecond {
				return false
			}
			return s.h.Seen(func(e chaos.Event) bool {
				return e.ID == h.ID && e.Op == chaos.OpAcquire && e.Phase == chaos.Ok
			})
		})
		from := s.h.Fault("kill -9 redis-server (no persistence)", chaos.Invoke)
		srv.Kill()
		srv.Restart()
		to := s.h.Fault("redis-server restarted empty", chaos.Ok)
		windows = append(windows, window{from, to})
		chaosWaitEvent(s, time.Minute, "a write on m0 after the restart", func(e chaos.Event) bool {
			return e.Proc != name && e.Op == chaos.OpWrite && e.Phase == chaos.Ok && e.Time > to.UnixNano() &&
				len(e.Keys) == 1 && e.Keys[0] == "m0"
		})
		s.h.Cont(v)
		s.h.Wait(v, time.Minute)
	}
	f.Wait(chaosSize(2*time.Minute, 10*time.Minute))
	slow.Wait(time.Minute)
	hist := s.h.History()
	var notices []chaos.LossNotice
	for _, w := range windows {
		s.extra = append(s.extra, chaos.CheckLostAcross(hist, w.from, w.to)...)
		chaosTokensAbove(s, hist, w.from, w.to, "the restart")
		// The holders that ran through the restart (not the stopped
		// victim) hear of the loss: at the latest when a heartbeat finds
		// their entries gone, within a heartbeat interval of Redis's
		// return (plus the restart itself).
		notices = append(notices, chaos.NoticeOfLoss(hist, w.from, w.to, func(p string) bool { return slices.Contains(victims, p) }))
	}
	for _, name := range victims {
		chaosCheckVictim(s, hist, name)
	}
	told, overlap := chaosCheckNotices(s, notices, "restart", s.ttl, true)
	s.fault(fmt.Sprintf("%d x kill -9 and empty restart of redis-server, each with a holder SIGSTOPped across it; the other holders (%d) told %s after Redis was back, the next holder overlapping an old one %s at most",
		restarts, len(told), chaosP50Max(told), chaosP50Max(overlap)))
	s.finish(chaos.Options{DataLoss: true})
}

// FLUSHALL of the server while the replicas work: every state key and the
// fencing counters vanish at once. That looks like a namespace never used
// (docs/PROTOCOL.md, known limits): the next enqueue makes a new state,
// grants at once, and publishes {"reset": epoch} on the namespace's
// channel, on which every Session polls at once. So every holder hears of
// the loss promptly (its Lease.Lost closes well before its next heartbeat),
// no release after the flush finds a lease from before it held, tokens
// after the flush are above every token before (Redis time x 1024), and
// the window during which a new holder may overlap an old one that has not
// heard yet (the known limit) is measured: it must stay within one
// heartbeat interval (TTL/3), about a round trip in practice.
func TestChaosRedisFlushAll(t *testing.T) {
	s := chaosStart(t, "FLUSHALL while holders hold")
	s.ttl = 3 * time.Second // heartbeats every second: a prompt notice is not a heartbeat's
	srv := chaos.StartServer(t, chaos.ServerOptions{})
	admin := srv.Client()
	b := s.namespace(admin, "chaos-flushall-")
	rounds := chaosSize(3, 12)
	f := s.h.RunFleet("r", chaosSize(3, 6), func(i, inc int) []string {
		if inc > 0 {
			return nil
		}
		return s.args(srv.URL(), b.Namespace(), uint64(1600+i), "-clients", "2", "-ops", "1000000",
			"-hold-min", "30ms", "-hold", "150ms", "-for", (time.Duration(rounds)*time.Second + 2*time.Second).String())
	})
	type window struct{ from, to time.Time }
	var windows []window
	last := time.Now()
	for range rounds {
		// A holder holds: the flush has someone to tell.
		chaosWaitEvent(s, time.Minute, "a grant before the flush", func(e chaos.Event) bool {
			return e.Op == chaos.OpAcquire && e.Phase == chaos.Ok && e.Time > last.UnixNano()+int64(500*time.Millisecond)
		})
		from := s.h.Fault("FLUSHALL", chaos.Invoke)
		if err := admin.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		last = s.h.Fault("FLUSHALL done", chaos.Ok)
		windows = append(windows, window{from, last})
	}
	f.Wait(chaosSize(2*time.Minute, 10*time.Minute))
	// A holder whose first step after the flush is its release must be
	// told its lease was lost (the release meets another epoch), never
	// that the release succeeded.
	var lied []string
	hist := s.h.History()
	for _, a := range hist.Attempts {
		for _, w := range windows {
			if a.Outcome == chaos.Granted && a.Return < w.from.UnixNano() && a.Release == chaos.Released && a.RelInvoke > w.to.UnixNano() {
				lied = append(lied, a.ID)
				s.violation("release", "%s (%s): its release %v after the flush returned nil; want ErrLeaseLost", a.ID, a.Proc,
					time.Duration(a.RelInvoke-w.to.UnixNano()).Round(time.Microsecond))
			}
		}
	}
	var notices []chaos.LossNotice
	for _, w := range windows {
		s.extra = append(s.extra, chaos.CheckLostAcross(hist, w.from, w.to)...)
		chaosTokensAbove(s, hist, w.from, w.to, "the flush")
		notices = append(notices, chaos.NoticeOfLoss(hist, w.from, w.to, func(string) bool { return false }))
	}
	told, overlap := chaosCheckNotices(s, notices, "FLUSHALL", s.ttl/3, true)
	resets := 0
	if snap, err := b.Inspect(chaos.Context(t, time.Minute), nil); err == nil {
		resets = int(snap.Stats.Resets)
	}
	s.fault(fmt.Sprintf("%d x FLUSHALL, TTL %v (heartbeat %v): %d holders across them, told %s after the flush; the next holder overlapping an old one %s at most; %d releases after a flush reported success; %d resets counted",
		rounds, s.ttl, s.ttl/3, len(told), chaosP50Max(told), chaosP50Max(overlap), len(lied), resets))
	s.finish(chaos.Options{DataLoss: true})
}

// chaosTokensAbove checks that every token granted after a fault that lost
// the fencing counters (to) is above every token of its key from before
// (from).
func chaosTokensAbove(s *chaosScenario, hist *chaos.History, from, to time.Time, what string) {
	before := map[string]uint64{}
	for _, a := range hist.Granted() {
		if a.Return < from.UnixNano() {
			for k, tok := range a.Tokens {
				before[k] = max(before[k], tok)
			}
		}
	}
	for _, a := range hist.Granted() {
		if a.Invoke > to.UnixNano() {
			for k, tok := range a.Tokens {
				if tok <= before[k] {
					s.violation("fencing", "%s got token %d for %s after %s, not above %d from before", a.ID, tok, k, what, before[k])
				}
			}
		}
	}
}

// chaosCheckNotices checks how the holders heard of losses: each loss had
// a holder to tell (with need), every holder was told, within bound of the
// fault's end, and the next holder overlapped old ones for at most bound.
// It returns every notice and overlap.
func chaosCheckNotices(s *chaosScenario, ns []chaos.LossNotice, what string, bound time.Duration, need bool) (told, overlap []time.Duration) {
	for i, n := range ns {
		if n.Holders == 0 && need {
			s.violation("scenario", "%s %d: no lease was held across it: nothing to tell", what, i+1)
		}
		for _, u := range n.Untold {
			s.violation("lease", "%s %d: %s", what, i+1, u)
		}
		for _, d := range n.Told {
			if d > bound {
				s.violation("lease", "%s %d: a holder heard of the loss %v after it, more than %v", what, i+1, d, bound)
			}
		}
		if m := chaos.Percentile(n.Overlap, 100); m > bound {
			s.violation("lease", "%s %d: the next holder may have overlapped an old one for %v, more than %v: %s", what, i+1, m, bound, n.Worst)
		}
		s.t.Logf("%s %d: %d holders, told after %s, overlap %s; worst: %s", what, i+1, n.Holders, chaosP50Max(n.Told), chaosP50Max(n.Overlap), n.Worst)
		told = append(told, n.Told...)
		overlap = append(overlap, n.Overlap...)
	}
	return told, overlap
}

// chaosP50Max prints the median and the maximum of ds.
func chaosP50Max(ds []time.Duration) string {
	if len(ds) == 0 {
		return "n/a"
	}
	r := func(d time.Duration) time.Duration {
		if d < time.Millisecond {
			return d.Round(time.Microsecond)
		}
		return d.Round(100 * time.Microsecond)
	}
	return fmt.Sprintf("p50 %v / max %v (n=%d)", r(chaos.Percentile(ds, 50)), r(chaos.Percentile(ds, 100)), len(ds))
}

// chaosCheckVictim checks a holder that was stopped across a fault and
// continued after another holder wrote: it learned its lease was lost, and
// the guard refused its late write.
func chaosCheckVictim(s *chaosScenario, hist *chaos.History, name string) {
	for _, a := range hist.Attempts {
		if a.Proc != name {
			continue
		}
		if a.Outcome != chaos.Granted {
			s.t.Fatalf("victim %s was not granted: %+v", name, a)
		}
		if a.Lost == 0 {
			s.violation("lease", "stalled holder %s never learned that its lease was lost", a.ID)
		}
	}
	refused := false
	for _, r := range hist.Resources {
		if r.Proc == name && r.Op == chaos.OpWrite {
			refused = r.Phase == chaos.Fail && r.Class == chaos.ClassStale
		}
	}
	if !refused {
		s.violation("resource", "the late write of stalled holder %s was not refused by the guard", name)
	}
}

// Redis Cluster, three masters on loopback ports: one namespace on each
// master, requests naming two keys of a namespace (one slot, thanks to the
// hash tag, so no CROSSSLOT), through redis.NewClusterClient. Every
// checker passes in every namespace.
func TestChaosCluster(t *testing.T) {
	s := chaosStart(t, "Redis Cluster, 3 masters, a namespace on each")
	cl := chaos.StartCluster(t, 3)
	cc := cl.Client(t)
	ctx := chaos.Context(t, 5*time.Minute)
	nss, err := cl.NamespacesOnEveryNode(ctx, "chaos-cl-"+fmt.Sprint(time.Now().UnixNano()%100000)+"-")
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range nss {
		b, err := redislane.New(cc, ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		s.backends = append(s.backends, chaosNS{b, cc})
	}
	f := s.h.RunFleet("r", chaosSize(3, 8), func(i, inc int) []string {
		if inc > 0 {
			return nil
		}
		return s.args("", strings.Join(nss, ","), uint64(1200+i), "-cluster", strings.Join(cl.Addrs(), ","),
			"-multi", "0.5", "-clients", "2", "-ops", chaosSize("25", "150"))
	})
	f.Wait(chaosSize(2*time.Minute, 10*time.Minute))
	hist := s.h.History()
	multi := map[string]int{}
	for _, a := range hist.Granted() {
		if len(a.Keys) > 1 {
			multi[a.NS]++
		}
	}
	for _, ns := range nss {
		if multi[ns] == 0 {
			s.violation("scenario", "no two-key request was granted in namespace %s", ns)
		}
	}
	s.fault(fmt.Sprintf("none; namespaces %v on 3 masters, two-key requests %v", nss, multi))
	s.finish(chaos.Options{Forbidden: []string{"CROSSSLOT", "MOVED", "ASK "}})
}

// A failover to a lagging replica: a master with a replica whose
// replication link runs through a proxy. The proxy freezes the link, a
// holder is granted m0 on the master only and stopped inside its critical
// section; the master is killed, the replica promoted (REPLICAOF NO ONE)
// and the clients' proxy pointed at it. The replica never saw the grant,
// so it grants m0 again (the known limit of asynchronous replication), with
// a higher token (Redis time x 1024): the fencing guard refuses the stale
// holder's late write, and the stale holder learns its lease is lost.
func TestChaosFailoverToLaggingReplica(t *testing.T) {
	s := chaosStart(t, "failover to a lagging replica")
	s.lanes = "m0:1"
	ctx := chaos.Context(t, 5*time.Minute)
	master := chaos.StartServer(t, chaos.ServerOptions{})
	link := chaos.StartProxy(t, master.Addr(), 51)
	replica := chaos.StartServer(t, chaos.ServerOptions{ReplicaOf: link.Addr()})
	front := chaos.StartProxy(t, master.Addr(), 52)
	mc, rc := master.Client(), replica.Client()
	b := s.namespace(rc, "chaos-failover-")
	ns := b.Namespace()
	quiet := []string{"-multi", "0", "-cancel", "0", "-clients", "1"}
	if err := chaos.WaitReplicaSynced(ctx, mc, rc); err != nil {
		t.Fatal(err)
	}
	warm := s.h.RunFleet("a", 2, func(i, inc int) []string {
		if inc > 0 {
			return nil
		}
		return s.args(front.URL(), ns, uint64(1300+i), append(quiet, "-ops", chaosSize("10", "100"))...)
	})
	warm.Wait(2 * time.Minute)
	if err := chaos.WaitReplicaSynced(ctx, mc, rc); err != nil {
		t.Fatal(err)
	}

	s.h.Fault("replication link frozen", chaos.Invoke)
	link.Freeze()
	v := s.h.Start("v0.0", s.args(front.URL(), ns, 1310, append(quiet, "-ops", "1", "-victim", "1s", "-hold", "0")...)...)
	chaosWaitEvent(s, time.Minute, "the victim read the counter", func(e chaos.Event) bool {
		return e.Proc == "v0.0" && e.Op == chaos.OpRead && e.Phase == chaos.Ok
	})
	s.h.Stop(v)
	s.h.Fault("failover: kill -9 the master, promote the lagging replica, move the clients", chaos.Invoke)
	master.Kill()
	link.Close()
	if err := rc.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	front.SetUpstream(replica.Addr())
	front.CutAll()
	s.h.Fault("failover done", chaos.Ok)
	if snap, err := b.Inspect(ctx, []string{"m0"}); err != nil {
		t.Fatal(err)
	} else if len(snap.Keys) != 0 {
		t.Fatalf("the promoted replica knows the victim's grant (%+v): it was not lagging", snap.Keys)
	}

	after := s.h.RunFleet("w", 2, func(i, inc int) []string {
		if inc > 0 {
			return nil
		}
		return s.args(front.URL(), ns, uint64(1320+i), append(quiet, "-ops", chaosSize("5", "50"))...)
	})
	chaosWaitEvent(s, time.Minute, "a holder wrote on the promoted replica", func(e chaos.Event) bool {
		return strings.HasPrefix(e.Proc, "w") && e.Op == chaos.OpWrite && e.Phase == chaos.Ok
	})
	s.h.Cont(v)
	s.h.Wait(v, time.Minute)
	after.Wait(2 * time.Minute)

	hist := s.h.History()
	chaosCheckVictim(s, hist, "v0.0")
	var vt uint64
	for _, a := range hist.Granted() {
		if a.Proc == "v0.0" {
			vt = a.Tokens["m0"]
		}
	}
	for _, a := range hist.Granted() {
		if strings.HasPrefix(a.Proc, "w") && a.Tokens["m0"] <= vt {
			s.violation("fencing", "%s got token %d on the promoted replica, not above the lost grant's %d", a.ID, a.Tokens["m0"], vt)
		}
	}
	s.fault("replication frozen, holder SIGSTOPped, master kill -9, REPLICAOF NO ONE on the replica, clients moved")
	s.finish(chaos.Options{DataLoss: true})
}

// maxmemory with volatile-lru under cache pressure: the server is capped
// (16 MB) and evicts keys that carry a TTL, least recently used first,
// while another client fills it with cache keys that carry one, several
// times past the cap, as the replicas work. lanes' keys carry no TTL
// (docs/PROTOCOL.md), so volatile-lru never picks them, and a Session
// accepts that policy: nothing of the namespace may vanish (every key the
// server evicted or expired was a cache key: their count is exactly the
// cache keys written less those left; no reset counted; no key of the
// namespace with a TTL, checked every half second), no step may fail with
// OOM, and every checker passes. The scenario fails if the server evicted
// nothing (no pressure, nothing tested).
func TestChaosMaxmemoryVolatileLRU(t *testing.T) {
	s := chaosStart(t, "maxmemory 16mb, volatile-lru, cache keys filling the server")
	srv := chaos.StartServer(t, chaos.ServerOptions{Extra: []string{"--maxmemory", "16mb", "--maxmemory-policy", "volatile-lru"}})
	admin := srv.Client()
	b := s.namespace(admin, "chaos-maxmem-")
	ctx := chaos.Context(t, 10*time.Minute)
	run := chaosSize(6*time.Second, 30*time.Second)
	f := s.h.RunFleet("r", chaosSize(3, 8), func(i, inc int) []string {
		if inc > 0 {
			return nil
		}
		return s.args(srv.URL(), b.Namespace(), uint64(1700+i), "-clients", "2", "-ops", "1000000", "-for", run.String())
	})
	done := f.Done()
	var wg sync.WaitGroup
	var written, batches, cacheKeys int64
	var fillErr error
	wg.Go(func() { // the cache: 1 KB values with a TTL, 100 per pipeline, every 10 ms
		value := strings.Repeat("x", 1024)
		for n := 0; ; n++ {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			p := admin.Pipeline()
			for i := range 100 {
				p.Set(ctx, fmt.Sprintf("cache:%d:%d", n, i), value, time.Hour)
			}
			if _, err := p.Exec(ctx); err != nil && fillErr == nil {
				fillErr = err
			}
			written += 100 * 1024
			batches++
			cacheKeys += 100
		}
	})
	var ttlSeen []string
	wg.Go(func() { // lanes' keys: all there once used, none with a TTL
		for {
			select {
			case <-done:
				return
			case <-time.After(500 * time.Millisecond):
			}
			for _, k := range b.Keys() {
				if d, err := admin.PTTL(ctx, k).Result(); err == nil && d >= 0 { // -1: no TTL, -2: no key
					ttlSeen = append(ttlSeen, fmt.Sprintf("%s has a TTL of %v", k, d))
				}
			}
		}
	})
	f.Wait(chaosSize(2*time.Minute, 10*time.Minute))
	wg.Wait()
	if fillErr != nil {
		t.Fatalf("filling the cache: %v", fillErr)
	}
	for _, x := range ttlSeen {
		s.violation("state", "%s", x)
	}
	evicted, err := chaos.InfoField(ctx, admin, "stats", "evicted_keys")
	if err != nil {
		t.Fatal(err)
	}
	expired, err := chaos.InfoField(ctx, admin, "stats", "expired_keys")
	if err != nil {
		t.Fatal(err)
	}
	var left int64
	for it := admin.Scan(ctx, 0, "cache:*", 1000).Iterator(); it.Next(ctx); {
		left++
	}
	ev, _ := strconv.ParseInt(evicted, 10, 64)
	ex, _ := strconv.ParseInt(expired, 10, 64)
	// The counts are read before the scan: every key evicted or expired by
	// then that was a cache key is missing from it, so more evicted and
	// expired keys than cache keys gone means other keys went. Fewer is
	// the writer's last evictions, after the counts were read.
	if gone := cacheKeys - left; ev+ex > gone {
		s.violation("state", "the server evicted %d keys and expired %d, but only %d cache keys are gone (%d written, %d left): it evicted or expired %d other keys",
			ev, ex, gone, cacheKeys, left, ev+ex-gone)
	}
	used, err := chaos.InfoField(ctx, admin, "memory", "used_memory_human")
	if err != nil {
		t.Fatal(err)
	}
	if evicted == "" || evicted == "0" {
		s.violation("scenario", "the server evicted no key (%d MB written, used memory %s): no pressure, nothing tested", written>>20, used)
	}
	snap, err := b.Inspect(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Stats.Resets != 0 {
		s.violation("state", "the namespace was reset %d times: part of its state vanished under memory pressure", snap.Stats.Resets)
	}
	t.Logf("cache: %d MB in %d pipelines; the server evicted %s keys, used memory %s", written>>20, batches, evicted, used)
	s.fault(fmt.Sprintf("maxmemory 16mb, volatile-lru; %d MB of cache keys with a TTL written meanwhile, %s of them evicted; %d resets of the namespace",
		written>>20, evicted, snap.Stats.Resets))
	s.finish(chaos.Options{Forbidden: []string{"OOM"}})
}
