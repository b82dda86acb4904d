package redislane_test

// A differential fuzzer of the lean steps against the general path, on a
// real Redis of its own: a private redis-server it starts (RealRedis;
// skipped without redis-server), or LEAN_FUZZ_URL, a server it may load a
// second library into (never a shared one). LEAN_FUZZ_RUNS sequences of 60
// steps (6 by default, every other one with fresh ids, LEAN_FUZZ_CLEAN
// for all), from LEAN_FUZZ_SEED. Each step
// starts from one state, copied to a second namespace; the real library
// runs it on the first, a library whose enqueue.lua and release.lua skip
// the lean steps on the second; replies, hints and the resulting state are
// compared (times within a tolerance, epochs and clock tokens by class).

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/internal/redisproc"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
	"github.com/lanes-dev/lanes/scripts/lua"
)

// fuzzClient is a client of LEAN_FUZZ_URL, or of a private redis-server
// that ends with t.
func fuzzClient(t *testing.T) *redis.Client {
	url := os.Getenv("LEAN_FUZZ_URL")
	if url == "" {
		url = fmt.Sprintf("redis://127.0.0.1:%d", redisproc.StartServer(t, redisproc.ServerOptions{}).Port)
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("LEAN_FUZZ_URL: %v", err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// fuzzLibs loads two copies of the library beside each other (the real
// one is not needed: the copies differ from it only as said): lean, whose
// lean steps check every parse they put in their caches against a parse of
// the bytes they wrote (SEEDS_CHECKED: an error "lean seed differs" on a
// difference), and gen, without lean steps, whose general path writes
// every record with cjson (not plain_json's lean form): the general path
// as it was before either.
func fuzzLibs(t *testing.T, c *redis.Client) (lean, gen string) {
	ctx := context.Background()
	name, code := lua.Library()
	rename := func(code, to string) string {
		code = strings.Replace(code, "#!lua name="+name, "#!lua name="+to, 1)
		return strings.ReplaceAll(code, "redis.register_function('"+name+"_", "redis.register_function('"+to+"_")
	}
	const unchecked = "local SEEDS_CHECKED = false"
	if strings.Count(code, unchecked) != 1 {
		t.Fatalf("no %q", unchecked)
	}
	lean = "chk_" + name
	checked := rename(strings.Replace(code, unchecked, "local SEEDS_CHECKED = true", 1), lean)
	if err := c.FunctionLoad(ctx, checked).Err(); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	code = rename(code, "gen_"+name)
	const plain = "local raw = plain_json(e) or json(e)"
	if strings.Count(code, plain) != 1 {
		t.Fatalf("no %q", plain)
	}
	code = strings.Replace(code, plain, "local raw = json(e)", 1)
	for old, skip := range map[string]string{
		"local lean = lean_enqueue(KEYS, ARGV)": "local lean = nil",
		"local lean = lean_release(KEYS, ARGV)": "local lean = nil",
	} {
		if !strings.Contains(code, old) {
			t.Fatalf("no %q", old)
		}
		code = strings.ReplaceAll(code, old, skip)
	}
	if err := c.FunctionLoad(ctx, code).Err(); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	return lean, "gen_" + name
}

func nsKeys(ns string) []string {
	p := "lanes:{" + ns + "}:"
	return []string{p + "entries", p + "lanes", p + "queue", p + "deadlines", p + "nested", p + "meta", p + "tombs"}
}

type fz struct {
	t          *testing.T
	c          *redis.Client
	lean, gen  string
	a, b       string // namespaces
	subA, subB *redis.PubSub
	r          *rand.Rand
	ids        []string
	keys       []string
	limits     map[string]int
	owners     []string
	log        []string
	leanSteps  int
	skipped    int // steps not compared: the clock moved past a deadline between the two calls (unreliable)
	scores     map[string]float64
	clean      bool
}

func (f *fz) call(lib, ns, script string, args []any) (any, error) {
	ctx := context.Background()
	keys := nsKeys(ns)
	prefix := "lanes:{" + ns + "}:wake:"
	all := append([]any{redislane.Protocol, prefix}, args...)
	return f.c.FCall(ctx, lib+"_"+script, keys, all...).Result()
}

func (f *fz) clone() {
	ctx := context.Background()
	ka, kb := nsKeys(f.a), nsKeys(f.b)
	f.c.Del(ctx, kb...)
	for i := range ka {
		d, err := f.c.Dump(ctx, ka[i]).Result()
		if err == redis.Nil {
			continue
		}
		if err != nil {
			f.t.Fatal(err)
		}
		if err := f.c.Restore(ctx, kb[i], 0, d).Err(); err != nil {
			f.t.Fatal(err)
		}
	}
}

// drain returns the hints ps received on the channels of namespace ns
// ("channel payload", without the channel prefix lanes:{ns}:wake:) since
// the last drain: every one a script published before the call, as it
// publishes a fence on a channel of ps's pattern and reads up to it (Redis
// delivers a connection's messages in the order it published them; a
// fixed wait missed hints on a loaded machine).
func (f *fz) drain(ps *redis.PubSub, ns string) []string {
	prefix := "lanes:{" + ns + "}:wake:"
	fence := prefix + "\x01fence"
	if err := f.c.Publish(context.Background(), fence, "").Err(); err != nil {
		f.t.Fatalf("PUBLISH %q: %v", fence, err)
	}
	var out []string
	ch := ps.Channel()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case m := <-ch:
			if m.Channel == fence {
				return out
			}
			out = append(out, strings.TrimPrefix(m.Channel, prefix)+" "+m.Payload)
		case <-timeout:
			f.t.Fatalf("the fence published on %q did not arrive in 30s", fence)
		}
	}
}

// norm classes: epochs of the state the step started in "EP", others "NEW";
// tokens below 4e15 "CLK"; times near now "T".
type normer struct {
	ep  string
	now int64 // ms
}

func (n normer) str(s string) string {
	if s == n.ep {
		return "EP"
	}
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		if v > 1_000_000_000_000_000 && v < 4_000_000_000_000_000 {
			return "CLK"
		}
		if v > 1_500_000_000_000_000 && v < 2_500_000_000_000_000 {
			return "NEW"
		}
		if v > n.now-7_200_000 && v < n.now+7_200_000 {
			return "T"
		}
	}
	return s
}

func (n normer) val(v any) any {
	switch x := v.(type) {
	case string:
		return n.str(x)
	case int64:
		return n.str(strconv.FormatInt(x, 10))
	case float64:
		if x == math.Trunc(x) {
			return n.str(strconv.FormatInt(int64(x), 10))
		}
		return x
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = n.val(x[i])
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, y := range x {
			out[k] = n.val(y)
		}
		return out
	case error:
		return "ERR " + x.Error()
	}
	return v
}

func (n normer) jsonS(s string) string {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return "RAW " + s
	}
	b, _ := json.Marshal(n.val(v))
	return string(b)
}

func (n normer) words(s string) string {
	parts := strings.Split(s, " ")
	for i := range parts {
		parts[i] = n.str(parts[i])
	}
	return strings.Join(parts, " ")
}

// state renders the namespace's keys normalized; deadlines and tombs with
// their scores rounded to 100 ms relative to now.
func (f *fz) state(ns string, n normer) []string {
	ctx := context.Background()
	k := nsKeys(ns)
	var out []string
	ents, _ := f.c.HGetAll(ctx, k[0]).Result()
	for id, raw := range ents {
		out = append(out, fmt.Sprintf("entries %q %s", id, n.jsonS(raw)))
	}
	lns, _ := f.c.HGetAll(ctx, k[1]).Result()
	for key, raw := range lns {
		out = append(out, fmt.Sprintf("lanes %q %s", key, n.words(raw)))
	}
	for _, i := range []int{2, 3, 4, 6} {
		zs, _ := f.c.ZRangeWithScores(ctx, k[i], 0, -1).Result()
		for _, z := range zs {
			sc := ""
			if i == 3 || i == 6 {
				if math.IsInf(z.Score, -1) {
					sc = "-inf"
				} else {
					sc = "scored"
					f.scores[ns+fmt.Sprint(i)+"\x00"+fmt.Sprint(z.Member)] = z.Score
				}
			} else {
				sc = fmt.Sprint(z.Score)
			}
			out = append(out, fmt.Sprintf("z%d %q %s", i, z.Member, sc))
		}
		if ex, _ := f.c.Exists(ctx, k[i]).Result(); ex == 0 {
			out = append(out, fmt.Sprintf("z%d absent", i))
		}
	}
	meta, _ := f.c.HGetAll(ctx, k[5]).Result()
	for fld, v := range meta {
		out = append(out, fmt.Sprintf("meta %q %s", fld, n.str(v)))
	}
	for i := range 2 {
		if ex, _ := f.c.Exists(ctx, k[i]).Result(); ex == 0 {
			out = append(out, fmt.Sprintf("h%d absent", i))
		}
	}
	sort.Strings(out)
	return out
}

func (f *fz) epoch(ns string) string {
	m, _ := f.c.HGet(context.Background(), nsKeys(ns)[1], "\x00").Result()
	p := strings.Split(m, " ")
	if len(p) > 1 {
		return p[1]
	}
	return "-"
}

type fop struct {
	desc   string
	script string
	args   []any
	raw    func(ns string) // a damage op, run on both
	sleep  time.Duration
}

func (f *fz) pick(list []string) string { return list[f.r.IntN(len(list))] }

func (f *fz) genOp() fop {
	r := f.r
	switch x := r.IntN(100); {
	case x < 45:
		n := 1 + r.IntN(4)
		if r.IntN(20) == 0 {
			n = 1 + r.IntN(12)
		}
		var reqs []lanes.Request
		used := map[string]bool{}
		for len(reqs) < n {
			id := f.pick(f.ids)
			if used[id] && r.IntN(10) != 0 {
				continue
			}
			used[id] = true
			nl := 1 + r.IntN(2)
			if r.IntN(6) == 0 {
				nl = 3
			}
			var ls []lanes.Lane
			ku := map[string]bool{}
			for len(ls) < nl {
				k := f.pick(f.keys)
				if ku[k] {
					continue
				}
				ku[k] = true
				lim := f.limits[k]
				if !f.clean && r.IntN(25) == 0 {
					lim = 1 + r.IntN(3)
				}
				l := lanes.Lane{Key: k, Limit: lim}
				if !f.clean && r.IntN(40) == 0 {
					l.Rate = lanes.Rate{Limit: 3, Per: time.Second}
				}
				ls = append(ls, l)
			}
			req := lanes.Request{ID: id, Lanes: ls}
			if r.IntN(3) == 0 {
				req.CallID = f.pick([]string{"c1", "call/2", "é", "x y", "<&>", ""})
			}
			if r.IntN(3) == 0 {
				req.Tool = f.pick([]string{"t", "tool", "日本", "a\u2028b"})
			}
			if r.IntN(4) == 0 {
				req.Tenant = f.pick([]string{"n", "ten"})
			}
			if !f.clean && r.IntN(12) == 0 {
				req.Lineage = []string{f.pick(f.ids)}
				if req.Lineage[0] == id {
					req.Lineage = nil
				}
			}
			reqs = append(reqs, req)
		}
		js := string(redislane.AppendRequests(nil, reqs))
		if r.IntN(30) == 0 {
			js = strings.Replace(js, `,"k":`, `, "k":`, 1)
		}
		ttl := f.pick([]string{"60000", "2000", "2000", "300", "3000"})
		o := f.pick(f.owners)
		host := "h"
		if r.IntN(20) == 0 {
			host = "hé/x"
		}
		return fop{desc: fmt.Sprintf("enq %s ttl=%s %s", o, ttl, js), script: "enqueue", args: []any{ttl, o, host, "7", js}}
	case x < 80:
		n := 1 + r.IntN(3)
		var ids []any
		var ds []string
		o := f.pick(f.owners)
		ents, _ := f.c.HGetAll(context.Background(), nsKeys(f.a)[0]).Result()
		var mine []string
		state := `"s":"h"` // the owner's holders, or now and then its waiters (lean_leave)
		if r.IntN(4) == 0 {
			state = `"s":"w"`
		}
		for id, raw := range ents {
			if strings.Contains(raw, `"o":"`+o+`"`) && strings.Contains(raw, state) {
				mine = append(mine, id)
			}
		}
		sort.Strings(mine)
		for range n {
			id := f.pick(f.ids)
			if len(mine) > 0 && r.IntN(10) < 8 {
				id = f.pick(mine)
			}
			ids = append(ids, id)
			ds = append(ds, id)
		}
		if r.IntN(30) == 0 {
			o = ""
		}
		tomb := "0"
		if r.IntN(30) == 0 {
			tomb = "1000"
		}
		return fop{desc: fmt.Sprintf("rel %q tomb=%s %v", o, tomb, ds), script: "release", args: append([]any{o, tomb}, ids...)}
	case x < 92:
		o := f.pick(f.owners)
		var ids []any
		var ds []string
		for range 1 + r.IntN(4) {
			id := f.pick(f.ids)
			ids = append(ids, id)
			ds = append(ds, id)
		}
		return fop{desc: fmt.Sprintf("hb %s %v", o, ds), script: "heartbeat", args: append([]any{"2000", o}, ids...)}
	case x < 99 || r.IntN(5) != 0 || f.clean:
		return fop{desc: "sleep 350ms", sleep: 350 * time.Millisecond}
	default:
		which := r.IntN(10)
		id := f.pick(f.ids)
		switch {
		case which < 5:
			k := r.IntN(7)
			return fop{desc: fmt.Sprintf("DEL key %d", k), raw: func(ns string) { f.c.Del(context.Background(), nsKeys(ns)[k]) }}
		case which < 8:
			return fop{desc: "ZREM deadline " + id, raw: func(ns string) { f.c.ZRem(context.Background(), nsKeys(ns)[3], id) }}
		default:
			return fop{desc: "HDEL entry " + id, raw: func(ns string) { f.c.HDel(context.Background(), nsKeys(ns)[0], id) }}
		}
	}
}

// deadlineGuard is how long before a deadline a step waits for it to
// pass: the two compared calls run one after the other, and an entry
// whose deadline falls between them expires for one only.
const deadlineGuard = 200 * time.Millisecond

// redisMS is the Redis clock, in ms.
func (f *fz) redisMS() int64 {
	now, err := f.c.Time(context.Background()).Result()
	if err != nil {
		f.t.Fatal(err)
	}
	return now.UnixMilli()
}

// times are the deadlines and tombstone lapses of the first namespace's
// state, ms.
func (f *fz) times() []float64 {
	var out []float64
	for _, k := range []int{3, 6} {
		zs, _ := f.c.ZRangeWithScores(context.Background(), nsKeys(f.a)[k], 0, -1).Result()
		for _, z := range zs {
			out = append(out, z.Score)
		}
	}
	return out
}

// unreliable says why the two calls of a step, run between the Redis
// clock's t0 and t1 (ms), may rightly differ: a deadline or a tombstone's
// lapse of times between them (one call saw it passed, the other not), or
// a gap beyond the tolerance of the scores compared (50 ms); "" when none.
func unreliable(times []float64, t0, t1 int64) string {
	if t1-t0 > 40 {
		return fmt.Sprintf("the two calls were %d ms apart", t1-t0)
	}
	for _, ms := range times {
		if ms >= float64(t0-1) && ms <= float64(t1+1) {
			return fmt.Sprintf("a deadline or lapse at %.0f, between the calls at %d and %d", ms, t0, t1)
		}
	}
	return ""
}

// clearDeadlines waits, when a deadline of the state falls within
// deadlineGuard of the Redis clock, until it has passed by as much.
func (f *fz) clearDeadlines() {
	ctx := context.Background()
	now, err := f.c.Time(ctx).Result()
	if err != nil {
		f.t.Fatal(err)
	}
	ms := now.UnixMilli()
	ds, err := f.c.ZRangeByScoreWithScores(ctx, nsKeys(f.a)[3], &redis.ZRangeBy{
		Min: fmt.Sprint(ms - deadlineGuard.Milliseconds()), Max: fmt.Sprint(ms + deadlineGuard.Milliseconds())}).Result()
	if err != nil {
		f.t.Fatal(err)
	}
	last := int64(0)
	for _, d := range ds {
		last = max(last, int64(d.Score))
	}
	if last > 0 {
		time.Sleep(time.Duration(last+deadlineGuard.Milliseconds()-ms) * time.Millisecond)
	}
}

func (f *fz) step(op fop) bool {
	ctx := context.Background()
	f.log = append(f.log, op.desc)
	if op.sleep > 0 {
		time.Sleep(op.sleep)
		return true
	}
	if op.raw != nil {
		op.raw(f.a)
		return true
	}
	f.clearDeadlines()
	f.clone()
	ep := f.epoch(f.a)
	before, _ := f.c.HGetAll(ctx, nsKeys(f.a)[0]).Result()
	times := f.times()
	t0 := f.redisMS()
	ra, ea := f.call(f.lean, f.a, op.script, op.args)
	rb, eb := f.call(f.gen, f.b, op.script, op.args)
	t1 := f.redisMS()
	if reason := unreliable(times, t0, t1); reason != "" {
		// The two calls saw the clock on either side of a deadline, or
		// too far apart for the scores' tolerance: on a loaded machine
		// deadlineGuard is not always enough. Not compared; the next
		// step copies the first namespace again.
		f.skipped++
		f.t.Logf("step %d (%s) not compared: %s", len(f.log), op.desc, reason)
		f.drain(f.subA, f.a)
		f.drain(f.subB, f.b)
		return true
	}
	now := time.Now().UnixMilli()
	na := normer{ep: ep, now: now}
	ha := f.drain(f.subA, f.a)
	hb := f.drain(f.subB, f.b)
	var ra2, rb2 any = ra, rb
	if ea != nil {
		ra2 = "ERR " + ea.Error()
	}
	if eb != nil {
		rb2 = "ERR " + eb.Error()
	}
	var diffs []string
	if op.script != "release" {
		// The holder TTLs of the waiting statuses count from each call's
		// own clock: compared within the scores' tolerance, then as a class.
		var ta, tb []int64
		ra2, ta = holderTTLs(ra2)
		rb2, tb = holderTTLs(rb2)
		if len(ta) != len(tb) {
			diffs = append(diffs, fmt.Sprintf("holder TTLs lean %v gen %v", ta, tb))
		}
		for i := range min(len(ta), len(tb)) {
			if (ta[i] == 0) != (tb[i] == 0) || math.Abs(float64(ta[i]-tb[i])) > 50 {
				diffs = append(diffs, fmt.Sprintf("holder TTL of status %d lean %d gen %d", i, ta[i], tb[i]))
			}
		}
	}
	sa := fmt.Sprint(na.val(ra2))
	sb := fmt.Sprint(na.val(rb2))
	if sa != sb {
		diffs = append(diffs, "reply lean  "+sa, "reply gen   "+sb)
	}
	for i := range ha {
		p := strings.SplitN(ha[i], " ", 2)
		ha[i] = p[0] + " " + na.jsonS(p[1])
	}
	for i := range hb {
		p := strings.SplitN(hb[i], " ", 2)
		hb[i] = p[0] + " " + na.jsonS(p[1])
	}
	if strings.Join(ha, "\n") != strings.Join(hb, "\n") {
		diffs = append(diffs, "hints lean "+strings.Join(ha, " | "), "hints gen  "+strings.Join(hb, " | "))
	}
	f.scores = map[string]float64{}
	stA, stB := f.state(f.a, na), f.state(f.b, na)
	for k, v := range f.scores {
		if !strings.HasPrefix(k, f.a) {
			continue
		}
		w, ok := f.scores[f.b+strings.TrimPrefix(k, f.a)]
		if ok && math.Abs(v-w) > 50 {
			diffs = append(diffs, fmt.Sprintf("score %q lean %v gen %v", k, v, w))
		}
	}
	ma := map[string]bool{}
	for _, s := range stA {
		ma[s] = true
	}
	mb := map[string]bool{}
	for _, s := range stB {
		mb[s] = true
	}
	for _, s := range stA {
		if !mb[s] {
			diffs = append(diffs, "state lean only: "+s)
		}
	}
	for _, s := range stB {
		if !ma[s] {
			diffs = append(diffs, "state gen only:  "+s)
		}
	}
	// did lean take it: a record it wrote is in the lean form and new
	after, _ := f.c.HGetAll(ctx, nsKeys(f.a)[0]).Result()
	for id, raw := range after {
		if before[id] != raw && strings.HasPrefix(raw, `{"o":`) {
			f.leanSteps++
			break
		}
	}
	if len(diffs) > 0 {
		f.t.Errorf("divergence at step %d: %s\n%s\nhistory:\n  %s", len(f.log), op.desc, strings.Join(diffs, "\n"), strings.Join(f.log, "\n  "))
		return false
	}
	return true
}

// holderTTLs returns a flat reply of enqueue.lua or heartbeat.lua
// (protocol 4) with each status's holder TTL replaced by "TTL" when it is
// set, and the TTLs in order (0 for none); anything else as it is.
func holderTTLs(v any) (any, []int64) {
	r, ok := v.([]any)
	if !ok {
		return v, nil
	}
	out := slices.Clone(r)
	var ttls []int64
	for at := 2; at+6 <= len(out); {
		ttl, _ := out[at+4].(int64)
		n, ok := out[at+5].(int64)
		if !ok {
			break
		}
		ttls = append(ttls, ttl)
		if ttl > 0 {
			out[at+4] = "TTL"
		}
		at += 6 + int(n)
	}
	return out, ttls
}

func TestLeanFuzzRealRedis(t *testing.T) {
	c := fuzzClient(t)
	lean, gen := fuzzLibs(t, c)
	iters := 6
	if s := os.Getenv("LEAN_FUZZ_RUNS"); s != "" {
		var err error
		if iters, err = strconv.Atoi(s); err != nil {
			t.Fatalf("LEAN_FUZZ_RUNS: %v", err)
		}
	}
	steps := 60
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("LEAN_FUZZ_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("LEAN_FUZZ_SEED: %v", err)
		}
	}
	t.Logf("LEAN_FUZZ_SEED=%d", seed)
	total, leanTotal, skipped := 0, 0, 0
	for it := range iters {
		s := seed + uint64(it)
		f := &fz{t: t, c: c, lean: lean, gen: gen, r: rand.New(rand.NewPCG(s, 1)),
			a: fmt.Sprintf("fzA%d", s), b: fmt.Sprintf("fzB%d", s)}
		f.ids = []string{"a", "b", "c", "d", "e", "f", "g", "h"}
		if os.Getenv("LEAN_FUZZ_CLEAN") != "" || it%2 == 1 { // fresh ids: more lean steps
			f.clean = true
			for i := range 24 {
				f.ids = append(f.ids, fmt.Sprintf("i%d", i))
			}
		}
		f.keys = []string{"K1", "K2", "K3", "K/4", "é5"}
		f.limits = map[string]int{"K1": 1, "K2": 2, "K3": 1, "K/4": 3, "é5": 1}
		f.owners = []string{"o1", "o2"}
		f.begin(f.keys...)
		ctx := context.Background()
		ok := true
		for range steps {
			if !f.step(f.genOp()) {
				ok = false
				break
			}
		}
		total += len(f.log)
		leanTotal += f.leanSteps
		skipped += f.skipped
		f.subA.Close()
		f.subB.Close()
		c.Del(ctx, nsKeys(f.a)...)
		c.Del(ctx, nsKeys(f.b)...)
		if !ok {
			t.Logf("seed %d", s)
			if os.Getenv("LEAN_FUZZ_ALL") == "" {
				break
			}
		}
	}
	t.Logf("steps %d, lean-written steps %d, not compared %d", total, leanTotal, skipped)
	if skipped*4 > total {
		t.Errorf("%d of %d steps not compared (the clock passed a deadline between the two calls): a machine too loaded for this fuzzer", skipped, total)
	}
}

func TestLeanFuzzScenariosRealRedis(t *testing.T) {
	c := fuzzClient(t)
	lean, gen := fuzzLibs(t, c)
	enq := func(o, ttl, js string) fop {
		return fop{desc: "enq " + js, script: "enqueue", args: []any{ttl, o, "h", "7", js}}
	}
	rel := relOp
	reqs := func(prefix string, n int, key func(i int) string, lim int) string {
		var rs []lanes.Request
		for i := range n {
			rs = append(rs, lanes.Request{ID: fmt.Sprintf("%s%d", prefix, i), Lanes: []lanes.Lane{{Key: key(i), Limit: lim}}})
		}
		return string(redislane.AppendRequests(nil, rs))
	}
	ids := func(prefix string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("%s%d", prefix, i))
		}
		return out
	}
	same := func(int) string { return "S" }
	own := func(i int) string { return fmt.Sprintf("k%d", i) }
	enqAs := func(o, host, pid, js string) fop {
		return fop{desc: "enq " + o + " pid " + pid + " " + js, script: "enqueue", args: []any{"60000", o, host, pid, js}}
	}
	settle := func(o string, ids ...string) fop { // tombstones for a minute
		return fop{desc: fmt.Sprintf("settle %s %v", o, ids), script: "release", args: append([]any{o, "60000"}, anys(ids)...)}
	}
	del := func(i int) fop {
		return fop{desc: "DEL " + nsKeys("")[i], raw: func(ns string) { c.Del(context.Background(), nsKeys(ns)[i]) }}
	}
	scen := map[string][]fop{
		"100 on one key":     {enq("o1", "60000", reqs("r", 100, same, 1)), rel("o1", "r0"), rel("o1", "r1"), enq("o2", "60000", reqs("q", 100, same, 1))},
		"101 on one key":     {enq("o1", "60000", reqs("r", 101, same, 1)), rel("o1", "r0")},
		"100 keys":           {enq("o1", "60000", reqs("h", 100, own, 1)), enq("o2", "60000", reqs("w", 100, own, 1)), rel("o1", ids("h", 100)...)},
		"room 50 and 51":     {enq("o1", "60000", reqs("h", 60, same, 60)), enq("o2", "60000", reqs("w", 60, same, 60)), rel("o1", ids("h", 50)...), rel("o1", "h50", "h51"), rel("o1", ids("h", 60)[52:]...)},
		"mixed ttl":          {enq("o1", "300", reqs("h", 2, same, 1)), enq("o2", "60000", reqs("w", 2, same, 1)), {desc: "sleep", sleep: 400 * time.Millisecond}, rel("o1", "h0")},
		"weird json":         {enq("o1", "60000", `[{"id":"a","k":[["S",1]],"c":"","t":"","n":""}]`), enq("o1", "60000", `[{"id":"b","k":[["S",1]],"c":"x"}]`), rel("o1", "a"), enq("o1", "60000", `[{"id":"c","k":[["S",1e0]]}]`), enq("o1", "60000", `[{"id":"d","k":[["S",1]],"id":"e"}]`), rel("o1", "b")},
		"del nested handoff": {enq("o1", "60000", reqs("h", 1, same, 1)), enq("o2", "60000", reqs("w", 1, same, 1)), {desc: "DEL nested", raw: func(ns string) { c.Del(context.Background(), nsKeys(ns)[4]) }}, rel("o1", "h0")},
		"del meta handoff":   {enq("o1", "60000", reqs("h", 1, same, 1)), enq("o2", "60000", reqs("w", 1, same, 1)), {desc: "DEL meta", raw: func(ns string) { c.Del(context.Background(), nsKeys(ns)[5]) }}, rel("o1", "h0")},
		"owner other":        {enq("o1", "60000", reqs("h", 1, same, 1)), enq("o2", "60000", reqs("w", 3, same, 1)), rel("o2", "h0"), rel("o1", "h0"), rel("o2", "w0")},
		// records edited by hand into forms the lean steps' writes would
		// not parse back: nothing of them goes in the caches, and the
		// step after decides as the general path (review of 122c80a)
		"waiters undercounted": {
			enq("o1", "60000", reqs("h", 2, same, 2)), enq("o2", "60000", reqs("w", 2, same, 2)),
			{desc: "waiters of S 1", raw: func(ns string) { setField(c, ns, "S", 3, "1") }},
			rel("o1", "h0", "h1"), rel("o2", "w0"), enq("o1", "60000", reqs("x", 1, same, 2)),
		},
		// numbers with a leading zero, white space in the holders, and a
		// waiter naming another limit than its key's: the general path
		// rewrites them, so the lean steps leave them to it (third review)
		"limit 001": {
			enq("o1", "60000", reqs("h", 1, same, 1)), enq("o2", "60000", reqs("w", 1, same, 1)),
			{desc: "limit of S 001", raw: func(ns string) { setField(c, ns, "S", 1, "001") }},
			rel("o1", "h0"), rel("o2", "w0"),
		},
		"token 0-prefixed": {
			enq("o1", "60000", reqs("h", 1, same, 1)),
			{desc: "token of S 0…", raw: func(ns string) {
				line, _ := c.HGet(context.Background(), nsKeys(ns)[1], "S").Result()
				setField(c, ns, "S", 2, "0"+strings.Split(line, " ")[2])
			}},
			enq("o2", "60000", reqs("w", 1, same, 1)), rel("o1", "h0"),
		},
		"holders with a tab": {
			enq("o1", "60000", reqs("h", 2, same, 2)),
			{desc: "holders of S h0\th1", raw: func(ns string) {
				line, _ := c.HGet(context.Background(), nsKeys(ns)[1], "S").Result()
				c.HSet(context.Background(), nsKeys(ns)[1], "S", strings.Replace(line, " h1", "\th1", 1))
			}},
			enq("o2", "60000", reqs("x", 1, same, 2)), rel("o1", "h0"),
		},
		"waiter q 01": {
			enq("o1", "60000", reqs("h", 1, same, 1)), enq("o2", "60000", reqs("w", 1, same, 1)),
			{desc: "q of w0 01", raw: func(ns string) { editRecord(c, ns, "w0", `"q":1,`, `"q":01,`) }},
			rel("o1", "h0"),
		},
		"waiter of another limit": {
			enq("o1", "60000", reqs("h", 1, same, 1)), enq("o2", "60000", reqs("w", 1, same, 1)),
			{desc: "w0 names limit 2", raw: func(ns string) { editRecord(c, ns, "w0", `["S",1]`, `["S",2]`) }},
			rel("o1", "h0"), rel("o2", "w0"),
		},
		"waiters past 2^63": {
			enq("o1", "60000", reqs("h", 1, same, 1)), enq("o2", "60000", reqs("w", 1, same, 1)),
			{desc: "waiters of S 1e19", raw: func(ns string) { setField(c, ns, "S", 3, "10000000000000000000") }},
			enq("o2", "60000", `[{"id":"w1","k":[["S",1]]}]`), rel("o1", "h0"),
		},
		"token past 2^63": {
			{desc: "token of T 1e20", raw: func(ns string) { c.HSet(context.Background(), nsKeys(ns)[1], "T", "x 0 99999999999999999999 0") }},
			enq("o1", "60000", `[{"id":"t1","k":[["T",1]]}]`), rel("o1", "t1"), enq("o1", "60000", `[{"id":"t2","k":[["T",1]]}]`),
		},
		"seq a fraction": {
			enq("o1", "60000", reqs("h", 1, same, 1)),
			{desc: "meta seq 1.5", raw: func(ns string) { c.HSet(context.Background(), nsKeys(ns)[5], "seq", "1.5") }},
			enq("o2", "60000", reqs("w", 1, same, 1)), rel("o1", "h0"), rel("o2", "w0"),
		},
		"waiter renamed with a space": {
			enq("o1", "60000", reqs("h", 1, same, 1)), enq("o2", "60000", reqs("w", 1, same, 1)),
			{desc: "w0 renamed a b", raw: func(ns string) { rename(c, ns, "S", "w0", "a b") }},
			rel("o1", "h0"), enq("o1", "60000", reqs("x", 1, same, 1)),
		},
		// a request the lean library read before but for its id (its cache of
		// requests by the bytes after the id), with fields, queued, handed
		// off, on two keys
		"same request again": {
			enq("o1", "60000", `[{"id":"a","k":[["S",1]],"c":"x","t":"y","n":"z"}]`), rel("o1", "a"),
			enq("o1", "60000", `[{"id":"b","k":[["S",1]],"c":"x","t":"y","n":"z"}]`),
			enq("o2", "60000", `[{"id":"c","k":[["S",1]],"c":"x","t":"y","n":"z"}]`), rel("o1", "b"),
			enq("o1", "60000", `[{"id":"d","k":[["S",1],["T",2]],"t":"y"}]`), rel("o2", "c"),
			enq("o2", "60000", `[{"id":"e","k":[["S",1],["T",2]],"t":"y"}]`), rel("o1", "d"), rel("o2", "e"),
			enq("o1", "60000", `[{"id":"f","k":[["S",1],["T",2]],"t":"y"}]`), rel("o1", "f"),
			enq("o1", "60000", `[{"id":"g\\","k":[["S",1]],"c":"x","t":"y","n":"z"}]`),
			enq("o1", "60000", `[{"id":"h","k":[["S",1]],"c":"x","t":"y","n":"z"},{"id":"i","k":[["S",1]],"c":"x","t":"y","n":"z"}]`),
		},
		// records the general path wrote in the lean form (plain_json),
		// read by lean steps after it: a waiter taken over by another
		// owner, hand-offs by the general path, one by a heartbeat (review
		// of 498ac6d)
		"take over then lean hand-off": {
			enq("o1", "60000", `[{"id":"h","k":[["S",1]]}]`), enq("o2", "60000", `[{"id":"w","k":[["S",1]],"t":"a/b"}]`),
			enqAs("o/3", "hé/x", "4294967295", `[{"id":"w","k":[["S",1]],"t":"a/b"}]`),
			rel("o1", "h"), rel("o/3", "w"),
		},
		"general hand-off chain": {
			enq("o1", "60000", `[{"id":"h","k":[["S",1]]}]`),
			enq("o2", "60000", `[{"id":"w1","k":[["S",1]],"c":"é"}, {"id":"w2","k":[["S",1]]}]`),
			enq("o2", "60000", `[{"id":"w3","k":[["S",1]],"n":""}]`),
			rel("o1", "h"), rel("o2", "w1"), rel("o2", "w2"), rel("o2", "w3"),
		},
		"heartbeat hand-off then lean": {
			enq("o1", "60000", `[{"id":"h","k":[["S",1]]}]`), enq("o2", "60000", `[{"id":"w","k":[["S",1]]}]`),
			{desc: "ZREM deadline h", raw: func(ns string) { c.ZRem(context.Background(), nsKeys(ns)[3], "h") }},
			{desc: "hb o2 w", script: "heartbeat", args: []any{"60000", "o2", "w"}},
			enq("o1", "60000", `[{"id":"x","k":[["S",1]]}]`), rel("o2", "w"), rel("o1", "x"),
		},
		// a pid of -0 (cjson writes it so; plain_json leaves it to cjson),
		// shown by the refusal of another owner's enqueue of its id
		"pid -0": {enqAs("o1", "h", "-0", `[{"id":"a","k":[["S",1]]}]`), enq("o2", "60000", `[{"id":"a","k":[["S",1]]}]`)},
		// tombstones of other ids alive: both lean paths take an enqueue
		// on an idle key as when none lives, without the markers of queue,
		// nested and meta or the sequence numbers (review of bfa77be)
		"settle, lost queue, enqueue idle":  {settle("o1", "z"), del(2), enq("o1", "60000", `[{"id":"a","k":[["S",1]]}]`)},
		"settle, lost nested, enqueue idle": {settle("o1", "z"), del(4), enq("o1", "60000", `[{"id":"a","k":[["S",1]]}]`)},
		"settle, lost meta, enqueue idle":   {settle("o1", "z"), del(5), enq("o1", "60000", `[{"id":"a","k":[["S",1]]}]`)},
		"holder, settle, lost queue, enqueue idle": {
			enq("o2", "60000", `[{"id":"h","k":[["T",1]]}]`), settle("o1", "z"), del(2), enq("o1", "60000", `[{"id":"a","k":[["S",1]]}]`),
		},
		"seq at its end, a waiter, a settle": {
			enq("o1", "60000", `[{"id":"h","k":[["T",1]]}]`), enq("o2", "60000", `[{"id":"w","k":[["T",1]]}]`),
			{desc: "meta seq MAX", raw: func(ns string) { c.HSet(context.Background(), nsKeys(ns)[5], "seq", "99999999999999") }},
			settle("o1", "z"), enq("o1", "60000", `[{"id":"a","k":[["S",1]]}]`),
		},
		"seq at its end, a settle": {
			{desc: "meta seq MAX", raw: func(ns string) { c.HSet(context.Background(), nsKeys(ns)[5], "seq", "99999999999999") }},
			settle("o1", "z"), enq("o1", "60000", `[{"id":"a","k":[["S",1]]}]`),
		},
		// a retry of an existing entry while a tombstone may live reads
		// no tombstone, as on the general path: a tombs key of another type
		// (by hand) fails only a step that looks one up (second review)
		"retry existing, tombs a string": {
			enq("o1", "60000", `[{"id":"a","k":[["S",1]]}]`), settle("o1", "z"),
			{desc: "tombs a string", raw: func(ns string) {
				c.Del(context.Background(), nsKeys(ns)[6])
				c.Set(context.Background(), nsKeys(ns)[6], "x", 0)
			}},
			enq("o1", "60000", `[{"k":[["S",1]],"id":"a"}]`), enq("o1", "60000", `[{"id":"a","k":[["S",1]]}]`),
		},
		// releases of waiters alone (lean_leave): on a full key, of many
		// ids, and where the general path decides (room a waiter behind
		// takes, a holder that lost its deadline, records edited by hand,
		// a marker lost, holders and waiters together, another owner's)
		"waiters leave a full key": {
			enq("o2", "60000", `[{"id":"h","k":[["S",1]]}]`), enq("o1", "60000", reqs("w", 5, same, 1)),
			rel("o1", "w1", "w3"), rel("o1", "w0"), enq("o1", "60000", reqs("x", 1, same, 1)), rel("o2", "h"), rel("o1", "w2", "w4"),
		},
		"300 waiters leave": {
			enq("o2", "60000", `[{"id":"h","k":[["S",1]]}]`),
			enq("o1", "60000", reqs("a", 100, same, 1)), enq("o1", "60000", reqs("b", 100, same, 1)), enq("o1", "60000", reqs("c", 100, same, 1)),
			rel("o1", append(append(ids("c", 100), ids("a", 100)...), ids("b", 100)...)...), rel("o2", "h"),
		},
		"waiters on two keys leave": {
			enq("o2", "60000", `[{"id":"h","k":[["S",1],["T",2]]},{"id":"i","k":[["T",2]]}]`),
			enq("o1", "60000", `[{"id":"w","k":[["S",1],["T",2]]},{"id":"v","k":[["T",2]]}]`),
			rel("o1", "w", "v"), rel("o2", "h"),
		},
		"a waiter leaves, the one behind takes the room": {
			enq("o2", "60000", `[{"id":"h","k":[["S",1]]},{"id":"i","k":[["T",2]]}]`),
			enq("o1", "60000", `[{"id":"w","k":[["S",1],["T",2]]}]`), enq("o2", "60000", `[{"id":"v","k":[["T",2]]}]`),
			rel("o1", "w"), rel("o2", "v"),
		},
		"a waiter leaves, the holder lost its deadline": {
			enq("o2", "60000", `[{"id":"h","k":[["S",1]]}]`), enq("o1", "60000", reqs("w", 3, same, 1)),
			{desc: "ZREM deadline h", raw: func(ns string) { c.ZRem(context.Background(), nsKeys(ns)[3], "h") }},
			rel("o1", "w1"),
		},
		"the last waiter leaves, the holder lost its deadline": {
			enq("o2", "60000", `[{"id":"h","k":[["S",1]]}]`), enq("o1", "60000", reqs("w", 1, same, 1)),
			{desc: "ZREM deadline h", raw: func(ns string) { c.ZRem(context.Background(), nsKeys(ns)[3], "h") }},
			rel("o1", "w0"), enq("o1", "60000", reqs("x", 1, same, 1)),
		},
		"waiters leave, undercounted": {
			enq("o2", "60000", `[{"id":"h","k":[["S",1]]}]`), enq("o1", "60000", reqs("w", 3, same, 1)),
			{desc: "waiters of S 1", raw: func(ns string) { setField(c, ns, "S", 3, "1") }},
			rel("o1", "w0", "w1"), rel("o1", "w2"),
		},
		"a waiter of another limit leaves": {
			enq("o2", "60000", `[{"id":"h","k":[["S",1]]}]`), enq("o1", "60000", reqs("w", 2, same, 1)),
			{desc: "w0 names limit 2", raw: func(ns string) { editRecord(c, ns, "w0", `["S",1]`, `["S",2]`) }},
			rel("o1", "w0"),
		},
		"a waiter leaves, its queue member gone": {
			enq("o2", "60000", `[{"id":"h","k":[["S",1]]}]`), enq("o1", "60000", reqs("w", 2, same, 1)),
			{desc: "ZREM queue w0", raw: func(ns string) {
				ms, _ := c.ZRangeByLex(context.Background(), nsKeys(ns)[2], &redis.ZRangeBy{Min: "[S\x00", Max: "(S\x01"}).Result()
				for _, m := range ms {
					if strings.HasSuffix(m, "\x00w0") {
						c.ZRem(context.Background(), nsKeys(ns)[2], m)
					}
				}
			}},
			rel("o1", "w0"), rel("o2", "h"),
		},
		"waiters leave after meta was lost": {
			enq("o2", "60000", `[{"id":"h","k":[["S",1]]}]`), enq("o1", "60000", reqs("w", 2, same, 1)), del(5), rel("o1", "w0"),
		},
		"waiters leave after queue was lost": {
			enq("o2", "60000", `[{"id":"h","k":[["S",1]]}]`), enq("o1", "60000", reqs("w", 2, same, 1)), del(2), rel("o1", "w0"),
		},
		"a holder and a waiter leave together": {
			enq("o1", "60000", `[{"id":"h","k":[["S",1]]}]`), enq("o1", "60000", reqs("w", 2, same, 1)), rel("o1", "w1", "h"),
		},
		"another owner's waiter in the step": {
			enq("o2", "60000", `[{"id":"h","k":[["S",1]]}]`), enq("o1", "60000", reqs("w", 2, same, 1)),
			enq("o2", "60000", reqs("v", 1, same, 1)), rel("o1", "w0", "v0"), rel("o1", "w1"),
		},
		"a waiter's record in cjson's form leaves": {
			enq("o2", "60000", `[{"id":"h","k":[["S",1]]}]`), enq("o1", "60000", reqs("w", 2, same, 1)),
			{desc: "w0 in cjson's order", raw: func(ns string) { editRecord(c, ns, "w0", `{"o":"o1","h":"h","p":7,`, `{"h":"h","p":7,"o":"o1",`) }},
			rel("o1", "w0"), rel("o1", "w1"),
		},
		// from a review of lean_leave (792587c): a key record naming a
		// leaving waiter as its holder (the general path's purge, after
		// the removals, frees the slot), a NUL in a record (cjson reads no
		// record there), and states where lean and general agree
		"a leaving waiter named as the holder": {
			enq("o2", "60000", `[{"id":"h","k":[["S",1]]}]`), enq("o1", "60000", reqs("w", 2, same, 1)),
			{desc: "holders of S w0", raw: func(ns string) { setField(c, ns, "S", 4, "w0") }},
			rel("o1", "w0"), rel("o1", "w1"),
		},
		"a leaving waiter named as a holder beside h": {
			enq("o2", "60000", `[{"id":"h","k":[["S",1]]}]`), enq("o1", "60000", reqs("w", 2, same, 1)),
			{desc: "holders of S h w0", raw: func(ns string) { setField(c, ns, "S", 4, "h w0") }},
			rel("o1", "w0"),
		},
		"a leaving waiter named as the holder of its other key": {
			enq("o2", "60000", `[{"id":"h","k":[["S",1]]},{"id":"i","k":[["T",1]]}]`), enq("o1", "60000", `[{"id":"w","k":[["S",1]]},{"id":"v","k":[["T",1]]},{"id":"u","k":[["T",1]]}]`),
			{desc: "holders of T w", raw: func(ns string) { setField(c, ns, "T", 4, "w") }},
			rel("o1", "w", "v"),
		},
		"a NUL in a leaving waiter's host": {
			enq("o2", "60000", `[{"id":"h","k":[["S",1]]}]`), enq("o1", "60000", reqs("w", 2, same, 1)),
			{desc: "host of w0 h NUL", raw: func(ns string) { editRecord(c, ns, "w0", `"h":"h"`, "\"h\":\"h\x00\"") }},
			rel("o1", "w0"), rel("o1", "w1"),
		},
		"a NUL in a releasing holder's host": {
			enq("o2", "60000", `[{"id":"h","k":[["S",1]]}]`), enq("o1", "60000", reqs("w", 2, same, 1)),
			{desc: "host of h h NUL", raw: func(ns string) { editRecord(c, ns, "h", `"h":"h"`, "\"h\":\"h\x00\"") }},
			rel("o2", "h"),
		},
		// bytes between the end of the lanes and the first '],"s":"' (the
		// lean parse splits a record there): cjson reads no record
		"bytes after a releasing holder's lanes": {
			enq("o2", "60000", `[{"id":"h","k":[["S",1]]}]`), enq("o1", "60000", reqs("w", 2, same, 1)),
			{desc: "h's lanes end, then x]", raw: func(ns string) { editRecord(c, ns, "h", `]],"s":"`, `]]x],"s":"`) }},
			rel("o2", "h"),
		},
		"bytes after a leaving waiter's lanes": {
			enq("o2", "60000", `[{"id":"h","k":[["S",1]]}]`), enq("o1", "60000", reqs("w", 2, same, 1)),
			{desc: "w0's lanes end, then x]", raw: func(ns string) { editRecord(c, ns, "w0", `]],"s":"`, `]]x],"s":"`) }},
			rel("o1", "w0"), rel("o1", "w1"),
		},
		"a leaving waiter naming its key twice": {
			enq("o2", "60000", `[{"id":"h","k":[["S",1]]}]`), enq("o1", "60000", reqs("w", 3, same, 1)),
			{desc: "w0 names S twice", raw: func(ns string) {
				editRecord(c, ns, "w0", `["S",1]`, `["S",1],["S",1]`)
				setField(c, ns, "S", 3, "4")
			}},
			rel("o1", "w0"),
		},
		"waiters leave a key of 1,001 holders": {
			enq("o2", "60000", reqs("h", 1, same, 1)), enq("o1", "60000", reqs("w", 2, same, 1)),
			{desc: "1001 holders of S", raw: func(ns string) {
				var hs []string
				for i := range 1001 {
					hs = append(hs, fmt.Sprintf("z%d", i))
				}
				setField(c, ns, "S", 4, strings.Join(hs, " "))
			}},
			rel("o1", "w0"),
		},
		"waiters leave a frozen namespace": {
			enq("o2", "60000", `[{"id":"h","k":[["S",1]]}]`), enq("o1", "60000", reqs("w", 3, same, 1)),
			{desc: "frozen for an hour", raw: func(ns string) {
				m, _ := c.HGet(context.Background(), nsKeys(ns)[1], "\x00").Result()
				p := strings.Split(m, " ")
				p[2] = fmt.Sprint(time.Now().UnixMilli() + 3600000)
				c.HSet(context.Background(), nsKeys(ns)[1], "\x00", strings.Join(p, " "))
			}},
			rel("o1", "w1"), rel("o1", "w0", "w2"),
		},
		"a waiter leaves a key record of another epoch": {
			enq("o2", "60000", `[{"id":"h","k":[["S",1]]}]`), enq("o1", "60000", reqs("w", 2, same, 1)),
			{desc: "S epoch x", raw: func(ns string) { setField(c, ns, "S", 0, "x") }},
			rel("o1", "w0"),
		},
		"a waiter leaves, its key's holder a waiter elsewhere": {
			enq("o2", "60000", `[{"id":"h","k":[["S",1]]}]`), enq("o1", "60000", reqs("w", 3, same, 1)), enq("o2", "60000", `[{"id":"v","k":[["T",1]]}]`),
			{desc: "holders of S v", raw: func(ns string) { setField(c, ns, "S", 4, "v") }},
			rel("o1", "w1"),
		},
		// from a second review (29bc35a): a holder named "\0", the id of
		// deadlines' marker (scored -inf: the general path's purge finds
		// it expired), and an invalid id where entries is a string (the
		// ids are checked before any command)
		"a waiter leaves a key whose holder is named NUL": {
			enq("o2", "60000", `[{"id":"h","k":[["S",1]]}]`), enq("o1", "60000", reqs("w", 2, same, 1)),
			{desc: "holders of S NUL", raw: func(ns string) { setField(c, ns, "S", 4, "\x00") }},
			rel("o1", "w0"),
		},
		"a hand-off beside a holder named NUL": {
			enq("o2", "60000", `[{"id":"h","k":[["S",2]]}]`), enq("o2", "60000", `[{"id":"h2","k":[["S",2]]}]`), enq("o1", "60000", reqs("w", 2, same, 2)),
			{desc: "holders of S h NUL", raw: func(ns string) { setField(c, ns, "S", 5, "\x00") }},
			rel("o2", "h"),
		},
		"an enqueue beside a holder named NUL": {
			enq("o2", "60000", `[{"id":"h","k":[["S",3]]}]`), enq("o2", "60000", `[{"id":"h2","k":[["S",3]]}]`),
			{desc: "holders of S h NUL", raw: func(ns string) { setField(c, ns, "S", 5, "\x00") }},
			enq("o1", "60000", reqs("w", 1, same, 3)),
		},
		"an invalid id, entries a string": {
			{desc: "entries a string", raw: func(ns string) {
				c.Del(context.Background(), nsKeys(ns)[0])
				c.Set(context.Background(), nsKeys(ns)[0], "x", 0)
			}},
			rel("o1", "a b"),
		},
		"settled id, lapsed, again": {
			settle("o1", "z"), {desc: "settle z 1 ms", script: "release", args: []any{"o1", "1", "y"}},
			{desc: "sleep", sleep: 20 * time.Millisecond}, enq("o1", "60000", `[{"id":"y","k":[["S",1]]}]`), enq("o1", "60000", `[{"id":"z","k":[["S",1]]}]`),
		},
	}
	for name, ops := range scen {
		t.Run(name, func(t *testing.T) {
			runScenario(t, c, lean, gen, ops, func(ns string) {
				for i := range 100 {
					c.HSet(context.Background(), nsKeys(ns)[1], fmt.Sprintf("k%d", i), "1 1 5000000000000000 0")
				}
			})
		})
	}
}

// begin subscribes to the hints of both namespaces and warms the first
// (its steps may be lean), with the tokens of keys far above the clock's.
func (f *fz) begin(keys ...string) {
	ctx := context.Background()
	f.subA = f.c.PSubscribe(ctx, "lanes:{"+f.a+"}:wake:*")
	f.subB = f.c.PSubscribe(ctx, "lanes:{"+f.b+"}:wake:*")
	f.subA.Receive(ctx)
	f.subB.Receive(ctx)
	f.call(f.lean, f.a, "enqueue", []any{"120000", "o1", "h", "7", `[{"id":"warm","k":[["warm",1]]}]`})
	f.call(f.lean, f.a, "release", []any{"o1", "0", "warm"})
	for _, k := range keys {
		f.c.HSet(ctx, nsKeys(f.a)[1], k, "1 1 5000000000000000 0")
	}
	f.drain(f.subA, f.a)
}

// enqOp is an enqueue step of owner o (TTL 60 s) of the requests js (the
// script's JSON).
func enqOp(o, js string) fop {
	return fop{desc: o + " enq " + js, script: "enqueue", args: []any{"60000", o, "h", "7", js}}
}

// hbOp is a heartbeat of owner o for ids, with ttl (ms).
func hbOp(o, ttl string, ids ...string) fop {
	return fop{desc: "hb " + o + " " + strings.Join(ids, " "), script: "heartbeat", args: append([]any{ttl, o}, anys(ids)...)}
}

// relOp is the release by owner o of ids (no tombstone).
func relOp(o string, ids ...string) fop {
	return fop{desc: fmt.Sprint("rel ", ids), script: "release", args: append([]any{o, "0"}, anys(ids)...)}
}

// anys is ids as arguments.
func anys(ids []string) []any {
	a := make([]any, len(ids))
	for i, id := range ids {
		a[i] = id
	}
	return a
}

// runScenario runs ops on a fresh namespace, warmed (its steps may be
// lean) with the tokens of key S far above the clock's, and more(ns) when
// given, comparing each step of the two libraries (fz.step).
func runScenario(t *testing.T, c *redis.Client, lean, gen string, ops []fop, more func(ns string)) {
	s := uint64(time.Now().UnixNano())
	f := &fz{t: t, c: c, lean: lean, gen: gen, a: fmt.Sprintf("scA%d", s), b: fmt.Sprintf("scB%d", s)}
	ctx := context.Background()
	f.begin("S")
	if more != nil {
		more(f.a)
	}
	for _, op := range ops {
		if !f.step(op) {
			break
		}
	}
	t.Logf("lean-written steps %d of %d, not compared %d", f.leanSteps, len(ops), f.skipped)
	f.subA.Close()
	f.subB.Close()
	c.Del(ctx, nsKeys(f.a)...)
	c.Del(ctx, nsKeys(f.b)...)
}

// setField sets field i (from 0: epoch, limit, token, waiters, holders…)
// of key's record in namespace ns, by hand.
func setField(c *redis.Client, ns, key string, i int, v string) {
	ctx := context.Background()
	line, _ := c.HGet(ctx, nsKeys(ns)[1], key).Result()
	p := strings.Split(line, " ")
	p[i] = v
	c.HSet(ctx, nsKeys(ns)[1], key, strings.Join(p, " "))
}

// rename gives the waiter id of key, by hand, the id to: its entry
// record, its deadline and its queue member.
func rename(c *redis.Client, ns, key, id, to string) {
	ctx := context.Background()
	k := nsKeys(ns)
	rec, _ := c.HGet(ctx, k[0], id).Result()
	dl, _ := c.ZScore(ctx, k[3], id).Result()
	ms, _ := c.ZRangeByLex(ctx, k[2], &redis.ZRangeBy{Min: "[" + key + "\x00", Max: "(" + key + "\x01"}).Result()
	c.HDel(ctx, k[0], id)
	c.ZRem(ctx, k[3], id)
	c.HSet(ctx, k[0], to, rec)
	c.ZAdd(ctx, k[3], redis.Z{Score: dl, Member: to})
	for _, m := range ms {
		if strings.HasSuffix(m, "\x00"+id) {
			c.ZRem(ctx, k[2], m)
			c.ZAdd(ctx, k[2], redis.Z{Score: 0, Member: strings.TrimSuffix(m, id) + to})
		}
	}
}

// editRecord replaces old by new in the entry record of id in namespace
// ns, by hand.
func editRecord(c *redis.Client, ns, id, old, new string) {
	ctx := context.Background()
	rec, _ := c.HGet(ctx, nsKeys(ns)[0], id).Result()
	c.HSet(ctx, nsKeys(ns)[0], id, strings.Replace(rec, old, new, 1))
}
