package integration_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/internal/redistest"
	"github.com/lanes-dev/lanes/scripts/lua"
)

// The tests of docs/PROTOCOL.md run the scripts as a runner in another
// language would: the sources of package lua, EVALSHA and on NOSCRIPT EVAL
// over a plain RESP2 connection, with KEYS and ARGV built from what the
// document says (its keyspace table, its key record and marker formats and
// its script table, parsed here, so that the document cannot drift from
// the scripts silently), and check the replies, errors, hints and keys
// against the document. Each test works in a namespace of its own and
// deletes its keys when it ends.

// protoDoc is what the tests read from docs/PROTOCOL.md.
type protoDoc struct {
	keys     []protoKey          // the keyspace table, in order
	state    int                 // keys 1 to state are the namespace's state
	extra    int                 // the number of KEYS record.lua takes
	protocol string              // ARGV[1]
	keyspace string              // the first field of the lanes marker
	flat     bool                // replies travel flat (protocol 3: "Flat replies")
	wake     string              // ARGV[2], the hint channel prefix, with {ns}
	fence    string              // the key of fence.lua, with {ns}
	run      string              // the key of a run's records, with {ns}, without the run id
	argv     map[string][]string // script -> the names of its ARGV, in order
	replies  map[string]string   // script -> its reply cell
	codes    map[string][]string // error code -> its documented fields
	badarg   []string            // the fields LANES_BADARG names
	record   []string            // the fields of the entry record
	keyRec   []string            // the fields of a key record, in order; the last one repeats
	marker   []string            // the fields of the lanes marker, in order
	pad      string              // the value of the field "\x02" of lanes
	walks    []string            // the state keys doctor.lua walks
	bounds   map[string]int64    // the bounds table
	text     string
}

type protoKey struct {
	name   string // with {ns}
	typ    string // hash or zset
	zero   bool   // "scores 0"
	marker bool   // it holds a marker "\0"
	mark   string // the marker's value (hash) or score (sorted set), or its format
}

var numberWords = map[string]int{"six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11,
	"sixth": 6, "seventh": 7, "eighth": 8, "ninth": 9}

// fieldNames returns the names of a format written `<a> <b> <c d> ...`:
// a, b, c d; variadic when it ends in "...".
func fieldNames(format string) (names []string, variadic bool) {
	for _, m := range regexp.MustCompile(`<([a-z ]+)>`).FindAllStringSubmatch(format, -1) {
		names = append(names, strings.TrimSuffix(m[1], " ms"))
	}
	return names, strings.HasSuffix(strings.TrimSpace(format), "...")
}

func readProtocol(t *testing.T) protoDoc {
	t.Helper()
	b, err := os.ReadFile("../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	d := protoDoc{text: string(b), argv: map[string][]string{}, replies: map[string]string{},
		codes: map[string][]string{}, bounds: map[string]int64{}}
	flat := strings.Join(strings.Fields(d.text), " ")
	for _, m := range regexp.MustCompile("(?m)^\\| (\\d+) \\| `([^`]+)` \\| ([^|]+) \\| ([^|]+) \\|$").FindAllStringSubmatch(d.text, -1) {
		typ := strings.TrimSpace(m[3])
		k := protoKey{name: m[2], zero: strings.Contains(typ, "scores 0")}
		switch {
		case typ == "hash":
			k.typ = typ
		case strings.HasPrefix(typ, "sorted set"):
			k.typ = "zset"
		default:
			t.Fatalf("PROTOCOL.md: key %s has type %q, which the test does not know", m[2], typ)
		}
		if mk := regexp.MustCompile("marker (?:field|member) `\\\\0` (?:=|scored) `([^`]*)`").FindStringSubmatch(m[4]); mk != nil {
			k.marker, k.mark = true, strings.Trim(mk[1], `"`)
		}
		if rec := regexp.MustCompile("key record `([^`]+)`").FindStringSubmatch(m[4]); rec != nil {
			names, variadic := fieldNames(rec[1])
			if !variadic {
				t.Fatalf("PROTOCOL.md: the key record %q does not end in a list of holders", rec[1])
			}
			d.keyRec = names
		}
		if n, _ := strconv.Atoi(m[1]); n != len(d.keys)+1 {
			t.Fatalf("PROTOCOL.md: keyspace row %s comes after %d rows", m[1], len(d.keys))
		}
		d.keys = append(d.keys, k)
	}
	if len(d.keys) == 0 {
		t.Fatal("PROTOCOL.md: no keyspace table")
	}
	if !slices.Equal(d.keyRec, []string{"epoch", "limit", "token", "waiters", "holder id"}) {
		t.Fatalf("PROTOCOL.md documents the key record %q; the test reads epoch, limit, token, waiters, holder ids: update the test", d.keyRec)
	}
	for _, k := range d.keys {
		if strings.Contains(k.mark, "<") {
			d.marker, _ = fieldNames(k.mark)
		}
	}
	if !slices.Equal(d.marker, []string{"keyspace", "epoch", "frozen", "maxttl", "tombs"}) {
		t.Fatalf("PROTOCOL.md documents the marker %q; the test reads keyspace, epoch, frozen, maxttl, tombs: update the test", d.marker)
	}
	if m := regexp.MustCompile("`keyspace` is the version of the keyspace, `([0-9]+)`").FindStringSubmatch(strings.Join(strings.Fields(d.text), " ")); m != nil {
		d.keyspace = m[1]
	} else {
		t.Fatal("PROTOCOL.md: no sentence \"`keyspace` is the version of the keyspace, `N`\"")
	}
	// The flat form of the replies the test reads in the table's nested
	// form (protoRunner.unflat).
	for _, sentence := range []string{
		"The replies of `enqueue.lua`, `heartbeat.lua`, `release.lua` and `record.lua` travel as flat lists",
		"`[epoch, [status, ...], more]` travels as `epoch`, `more`, then each status",
		"a status `[id, state, [value, ...], seq, wait, ttl]` travels as its six elements `id`, `state`, `seq`, `wait`, `ttl`, `n`, then its `n` values",
		"`[epoch, [state per id], [granted ids]]` travels as `epoch`, the state of each id named, in order, then the granted ids",
	} {
		if !strings.Contains(strings.Join(strings.Fields(d.text), " "), sentence) {
			t.Fatalf("PROTOCOL.md: no sentence %q (Flat replies)", sentence)
		}
	}
	d.flat = true
	pad := regexp.MustCompile("The field `\\\\2` of `lanes`, written with its marker, holds a value of (\\d+) bytes that means nothing \\(`([^`]+)`\\)").FindStringSubmatch(strings.Join(strings.Fields(d.text), " "))
	if pad == nil {
		t.Fatal("PROTOCOL.md: no sentence \"The field `\\2` of `lanes`, written with its marker, holds a value of N bytes that means nothing (`...`)\"")
	}
	if n, _ := strconv.Atoi(pad[1]); n != len(pad[2]) || n <= 64 {
		t.Fatalf("PROTOCOL.md: the pad %q is %d bytes, documented as %s; it must be longer than 64", pad[2], len(pad[2]), pad[1])
	}
	d.pad = pad[2]
	for _, re := range []string{"A namespace `ns` is (\\w+) keys", "All take the (\\w+) keys above as `KEYS`"} {
		m := regexp.MustCompile(re).FindStringSubmatch(flat)
		if m == nil || numberWords[m[1]] != len(d.keys) {
			t.Errorf("PROTOCOL.md says %q; its keyspace table has %d keys", m, len(d.keys))
		}
	}
	m := regexp.MustCompile("`record.lua` takes an (\\w+) key").FindStringSubmatch(flat)
	if m == nil || numberWords[m[1]] == 0 {
		t.Fatal("PROTOCOL.md: no sentence \"`record.lua` takes an Nth key\"")
	}
	d.extra = numberWords[m[1]]
	m = regexp.MustCompile(`Keys 1 to (\d+) are the namespace's state`).FindStringSubmatch(flat)
	if m == nil {
		t.Fatal("PROTOCOL.md: no sentence \"Keys 1 to N are the namespace's state\"")
	}
	d.state, _ = strconv.Atoi(m[1])
	m = regexp.MustCompile("`ARGV\\[1\\]` is the protocol version `([^`]+)`, and `ARGV\\[2\\]` the hint channel prefix `([^`]+)`").FindStringSubmatch(flat)
	if m == nil {
		t.Fatal("PROTOCOL.md: no ARGV[1] (protocol version) and ARGV[2] (hint channel prefix)")
	}
	d.protocol, d.wake = m[1], m[2]
	m = regexp.MustCompile("`(lanes:fence:\\{ns\\})`").FindStringSubmatch(flat)
	if m == nil {
		t.Fatal("PROTOCOL.md: no key of fence.lua")
	}
	d.fence = m[1]
	m = regexp.MustCompile("`(lanes:\\{ns\\}:run:)<run id>`").FindStringSubmatch(flat)
	if m == nil {
		t.Fatal("PROTOCOL.md: no key of a run's records")
	}
	d.run = m[1]
	for _, m := range regexp.MustCompile("(?m)^\\| `(\\w+\\.lua)` \\| ([^|]*) \\| (.*) \\|$").FindAllStringSubmatch(d.text, -1) {
		cell := regexp.MustCompile(`\([^)]*\)`).ReplaceAllString(m[2], "")
		var names []string
		for _, n := range strings.Split(cell, ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
		d.argv[m[1]], d.replies[m[1]] = names, m[3]
	}
	for _, s := range protoScripts {
		if _, ok := d.argv[s]; !ok {
			t.Fatalf("PROTOCOL.md: the script table has no row for %s", s)
		}
	}
	for _, m := range regexp.MustCompile("(?m)^\\| `(LANES_[A-Z]+)([^`]*)` \\|").FindAllStringSubmatch(d.text, -1) {
		d.codes[m[1]] = strings.Fields(strings.NewReplacer("<", "", ">", "").Replace(m[2]))
	}
	m = regexp.MustCompile("The fields `LANES_BADARG` names are (.*?)\\. The checks").FindStringSubmatch(flat)
	if m == nil {
		t.Fatal("PROTOCOL.md: no list of the fields LANES_BADARG names")
	}
	for _, f := range regexp.MustCompile("`([a-z]+)`").FindAllStringSubmatch(m[1], -1) {
		d.badarg = append(d.badarg, f[1])
	}
	rec := regexp.MustCompile(`(?s)The entry record is a JSON object(.*?)\n\n`).FindStringSubmatch(d.text)
	if rec == nil {
		t.Fatal("PROTOCOL.md: no entry record paragraph")
	}
	for _, f := range regexp.MustCompile("`([a-z]+)`").FindAllStringSubmatch(rec[1], -1) {
		d.record = append(d.record, f[1])
	}
	m = regexp.MustCompile("one state key \\(`what`: ([^)]*)\\)").FindStringSubmatch(flat)
	if m == nil {
		t.Fatal("PROTOCOL.md: no list of the state keys doctor.lua walks")
	}
	for _, f := range regexp.MustCompile("`([a-z]+)`").FindAllStringSubmatch(m[1], -1) {
		d.walks = append(d.walks, f[1])
	}
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Z_]+)` \\| (\\d+) \\|").FindAllStringSubmatch(d.text, -1) {
		d.bounds[m[1]], _ = strconv.ParseInt(m[2], 10, 64)
	}
	for _, b := range []string{"MAX_ID_LEN", "MAX_KEY_LEN", "MAX_TTL", "MAX_SEQ", "MAX_LANES", "MAX_LIMIT", "MAX_STEP_LANES", "MAX_FIELD_LEN", "MAX_STEP_REQUESTS", "MAX_BORROWERS"} {
		if d.bounds[b] == 0 {
			t.Fatalf("PROTOCOL.md: the bounds table has no %s", b)
		}
	}
	return d
}

// protoScripts are the scripts the document describes: the lanes scripts
// (lib.lua in front), then fence.lua.
var protoScripts = []string{"enqueue.lua", "heartbeat.lua", "release.lua", "inspect.lua", "doctor.lua", "record.lua", "fence.lua"}

// tuple is a documented per-entry reply: [id, "state", [detail], extra].
type tuple struct {
	detail string // what the detail list holds, as written
	extra  string // the name of a fourth element, or ""
}

// tuples returns the documented tuples of a reply cell, by state.
func tuples(t *testing.T, cell string) map[string]tuple {
	t.Helper()
	out := map[string]tuple{}
	for _, m := range regexp.MustCompile(`\[id, "(\w)", \[([^\]]*)\](?:, ([a-z ]+))?\]`).FindAllStringSubmatch(cell, -1) {
		out[m[1]] = tuple{detail: m[2], extra: m[3]}
	}
	if len(out) == 0 {
		t.Fatalf("PROTOCOL.md: no [id, \"state\", [...]] tuple in %q", cell)
	}
	return out
}

// protoRunner runs the scripts as a runner in another language does.
type protoRunner struct {
	t        *testing.T
	doc      protoDoc
	c        *redis.Client // RESP2
	ns       string
	keys     []string
	fence    string
	wake     string
	run      string // the run id record.lua's eighth key names
	runs     map[string]bool
	src, sha map[string]string
	noscript map[string]int
	nonce    string
	ttls     []int64 // the holder TTLs of the statuses of every reply so far (unflatStatuses)
}

func newProtoRunner(t *testing.T) *protoRunner {
	t.Helper()
	redistest.Client(t) // skips, visibly, without a real Redis
	opt, err := redis.ParseURL(redistest.URL())
	if err != nil {
		t.Fatal(err)
	}
	opt.Protocol = 2
	d := readProtocol(t)
	r := &protoRunner{t: t, doc: d, c: redis.NewClient(opt), ns: redistest.Namespace("it-proto-"), run: "run-1",
		runs: map[string]bool{}, src: map[string]string{}, sha: map[string]string{}, noscript: map[string]int{}, nonce: secRandomHex(8)}
	tag := "{" + r.ns + "}"
	for _, k := range d.keys {
		r.keys = append(r.keys, strings.Replace(k.name, "{ns}", tag, 1))
	}
	r.wake = strings.Replace(d.wake, "{ns}", tag, 1)
	r.fence = strings.Replace(d.fence, "{ns}", tag, 1)
	t.Cleanup(func() {
		del := append(slices.Clone(r.keys), r.fence)
		for run := range r.runs {
			del = append(del, r.runKey(run))
		}
		r.c.Del(context.Background(), del...)
		r.c.Close()
	})
	return r
}

// runKey returns the key of run's records.
func (r *protoRunner) runKey(run string) string {
	return strings.Replace(r.doc.run, "{ns}", "{"+r.ns+"}", 1) + run
}

// source returns the source of script: lib.lua and the script, as package
// lua gives them, with a comment of this run at the end, so that the first
// EVALSHA meets NOSCRIPT whatever the server's script cache holds.
func (r *protoRunner) source(script string) string {
	if s, ok := r.src[script]; ok {
		return s
	}
	s := lua.Source(script) + "\n-- protocol test " + r.nonce + "\n"
	sum := sha1.Sum([]byte(s))
	r.src[script], r.sha[script] = s, hex.EncodeToString(sum[:])
	return s
}

// eval runs script with keys and argv: EVALSHA, and EVAL on NOSCRIPT.
func (r *protoRunner) eval(script string, keys []string, argv []any) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	src := r.source(script)
	args := []any{"EVALSHA", r.sha[script], len(keys)}
	for _, k := range keys {
		args = append(args, k)
	}
	args = append(args, argv...)
	v, err := r.c.Do(ctx, args...).Result()
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		r.noscript[script]++
		args[0], args[1] = "EVAL", src
		v, err = r.c.Do(ctx, args...).Result()
	}
	return v, err
}

// scriptKeys returns the documented KEYS of script: the namespace's keys;
// for record.lua, then the run's records; for fence.lua, its own key.
func (r *protoRunner) scriptKeys(script string) []string {
	switch script {
	case "fence.lua":
		return []string{r.fence}
	case "record.lua":
		r.runs[r.run] = true
		keys := append(slices.Clone(r.keys), r.runKey(r.run))
		if len(keys) != r.doc.extra {
			r.t.Fatalf("PROTOCOL.md: record.lua takes %d keys; the keyspace has %d and the run's records", r.doc.extra, len(r.keys))
		}
		return keys
	}
	return r.keys
}

// call runs script with the documented KEYS, and ARGV built from the
// document's list: each documented argument from vals (a name ending in
// "..." takes a []string); "protocol" and "prefix", when vals leaves them
// out, are the documented version and this namespace's prefix.
func (r *protoRunner) call(script string, vals map[string]any) (any, error) {
	r.t.Helper()
	var argv []any
	for _, name := range r.doc.argv[script] {
		v, ok := vals[name]
		switch {
		case ok:
		case name == "protocol":
			v = r.doc.protocol
		case name == "prefix":
			v = r.wake
		default:
			r.t.Fatalf("PROTOCOL.md documents ARGV %q of %s, which the test does not give: update the test", name, script)
		}
		if strings.HasSuffix(name, "...") {
			for _, s := range v.([]string) {
				argv = append(argv, s)
			}
		} else {
			argv = append(argv, v)
		}
	}
	for name := range vals {
		if !slices.Contains(r.doc.argv[script], name) {
			r.t.Fatalf("the test gives ARGV %q to %s, which PROTOCOL.md does not document", name, script)
		}
	}
	v, err := r.eval(script, r.scriptKeys(script), argv)
	if err == nil && r.doc.flat {
		switch script {
		case "enqueue.lua", "heartbeat.lua":
			v = r.unflatStatuses(script, v)
		case "release.lua", "record.lua":
			ids, _ := vals["entry ids..."].([]string)
			v = r.unflatReleased(script, v, len(ids))
		}
	}
	return v, err
}

// unflatStatuses reads the flat reply v of enqueue.lua or heartbeat.lua
// as PROTOCOL.md says it travels (Flat replies: epoch, more, then per
// status id, state, seq, wait, ttl, n and n values) and returns it in the
// table's form, [epoch, [[id, state, [values], seq(, wait)], ...], more]:
// seq only where the table writes one (0 travels for none), wait only
// when above 0. The holder TTLs go to r.ttls, in order (Holder TTL: 0
// for none; a status other than "w" travels 0).
func (r *protoRunner) unflatStatuses(script string, v any) any {
	r.t.Helper()
	f, ok := v.([]any)
	if !ok || len(f) < 2 {
		r.t.Fatalf("%s reply %#v; want a flat list, epoch and more first", script, v)
	}
	list := []any{}
	for at := 2; at < len(f); {
		if at+6 > len(f) {
			r.t.Fatalf("%s reply %#v: a status of fewer than six elements at %d", script, v, at)
		}
		seq, ok1 := f[at+2].(int64)
		wait, ok2 := f[at+3].(int64)
		ttl, ok4 := f[at+4].(int64)
		n, ok3 := f[at+5].(int64)
		if !ok1 || !ok2 || !ok3 || !ok4 || n < 0 || ttl < 0 || at+6+int(n) > len(f) {
			r.t.Fatalf("%s reply %#v: the status at %d has no integer seq, wait, ttl and count of its values", script, v, at)
		}
		if state, _ := f[at+1].(string); state != "w" && ttl != 0 {
			r.t.Fatalf("%s reply %#v: a status %q travels ttl %d; want 0 (Holder TTL: waiting statuses only)", script, v, state, ttl)
		}
		r.ttls = append(r.ttls, ttl)
		st := []any{f[at], f[at+1], slices.Clone(f[at+6 : at+6+int(n)])}
		if state, _ := f[at+1].(string); tuples(r.t, r.doc.replies[script])[state].extra != "" {
			st = append(st, seq)
		} else if seq != 0 {
			r.t.Fatalf("%s reply %#v: a status %q that the table gives no seq travels seq %d; want 0", script, v, state, seq)
		}
		if wait > 0 {
			st = append(st, wait)
		}
		list = append(list, st)
		at += 6 + int(n)
	}
	return []any{f[0], list, f[1]}
}

// unflatReleased reads the flat reply v of release.lua or record.lua for
// n ids (epoch, n states, the granted ids) and returns it in the table's
// form, [epoch, [state per id], [granted ids]].
func (r *protoRunner) unflatReleased(script string, v any, n int) any {
	r.t.Helper()
	f, ok := v.([]any)
	if !ok || len(f) < 1+n {
		r.t.Fatalf("%s reply %#v; want a flat list of the epoch and a state per id (%d)", script, v, n)
	}
	return []any{f[0], slices.Clone(f[1 : 1+n]), slices.Clone(f[1+n:])}
}

func (r *protoRunner) mustCall(script string, vals map[string]any) any {
	r.t.Helper()
	v, err := r.call(script, vals)
	if err != nil {
		r.t.Fatalf("%s: %v", script, err)
	}
	return v
}

// enqueue runs enqueue.lua for owner with the requests.
func (r *protoRunner) enqueue(owner string, ttlMS int, reqs ...map[string]any) (any, error) {
	r.t.Helper()
	js, err := json.Marshal(reqs)
	if err != nil {
		r.t.Fatal(err)
	}
	return r.call("enqueue.lua", map[string]any{"TTL ms": ttlMS, "owner id": owner, "host": "proto-host", "pid": 4343, "requests JSON": string(js)})
}

// mustEnqueue runs enqueue.lua and checks its reply: the epoch, then one
// status per request, with the documented shape for the states want gives
// (id, state, id, state...). It returns the epoch and the statuses.
func (r *protoRunner) mustEnqueue(owner string, ttlMS int, want []string, reqs ...map[string]any) (string, []any) {
	r.t.Helper()
	v, err := r.enqueue(owner, ttlMS, reqs...)
	if err != nil {
		r.t.Fatalf("enqueue.lua: %v", err)
	}
	return r.statuses("enqueue.lua", v, want...)
}

func (r *protoRunner) heartbeat(owner string, ttlMS int, want []string, ids ...string) (string, []any) {
	r.t.Helper()
	v := r.mustCall("heartbeat.lua", map[string]any{"TTL ms": ttlMS, "owner id": owner, "entry ids...": ids})
	return r.statuses("heartbeat.lua", v, want...)
}

func (r *protoRunner) release(owner string, tombMS int, ids ...string) any {
	r.t.Helper()
	return r.mustCall("release.lua", map[string]any{"owner id": owner, "tombstone ms": tombMS, "entry ids...": ids})
}

func (r *protoRunner) inspect(budget int, pairs ...string) any {
	r.t.Helper()
	return r.mustCall("inspect.lua", map[string]any{"budget": budget, "key and cursor...": pairs})
}

// key returns the name of the documented key whose name ends in :suffix.
func (r *protoRunner) key(suffix string) string {
	for _, k := range r.keys {
		if strings.HasSuffix(k, ":"+suffix) {
			return k
		}
	}
	r.t.Fatalf("PROTOCOL.md documents no key %s", suffix)
	return ""
}

// record returns the entry record of id, as stored.
func (r *protoRunner) record(id string) map[string]any {
	r.t.Helper()
	raw, err := r.c.HGet(context.Background(), r.key("entries"), id).Result()
	if err != nil {
		r.t.Fatalf("HGET entries %s: %v", id, err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		r.t.Fatalf("entry record %q: %v", raw, err)
	}
	return m
}

// exists reports whether the entry id is in entries.
func (r *protoRunner) exists(id string) bool {
	ok, err := r.c.HExists(context.Background(), r.key("entries"), id).Result()
	if err != nil {
		r.t.Fatal(err)
	}
	return ok
}

// now returns the Redis clock, in ms.
func (r *protoRunner) now() int64 {
	r.t.Helper()
	tm, err := r.c.Time(context.Background()).Result()
	if err != nil {
		r.t.Fatal(err)
	}
	return tm.UnixMilli()
}

// hash returns every field of the hash key.
func (r *protoRunner) hash(suffix string) map[string]string {
	r.t.Helper()
	m, err := r.c.HGetAll(context.Background(), r.key(suffix)).Result()
	if err != nil {
		r.t.Fatal(err)
	}
	return m
}

// zset returns the members of the sorted set key, with their scores, in
// order.
func (r *protoRunner) zset(suffix string) []redis.Z {
	r.t.Helper()
	zs, err := r.c.ZRangeWithScores(context.Background(), r.key(suffix), 0, -1).Result()
	if err != nil {
		r.t.Fatal(err)
	}
	return zs
}

// marker returns the fields of the lanes marker, by their documented names
// (nil when there is none). It fails the test when the marker does not
// have the documented form.
func (r *protoRunner) marker() map[string]string {
	r.t.Helper()
	raw, err := r.c.HGet(context.Background(), r.key("lanes"), "\x00").Result()
	if err == redis.Nil {
		return nil
	}
	if err != nil {
		r.t.Fatal(err)
	}
	f := strings.Split(raw, " ")
	if len(f) != len(r.doc.marker) {
		r.t.Fatalf("lanes marker %q; PROTOCOL.md documents %q", raw, r.doc.marker)
	}
	out := map[string]string{}
	for i, name := range r.doc.marker {
		if !regexp.MustCompile(`^[0-9]+$`).MatchString(f[i]) {
			r.t.Fatalf("lanes marker %q: %s is not decimal", raw, name)
		}
		out[name] = f[i]
	}
	if out["keyspace"] != r.doc.keyspace {
		r.t.Fatalf("lanes marker %q; want the keyspace %s first", raw, r.doc.keyspace)
	}
	return out
}

// keyRec is a key record, read by the documented format.
type keyRec struct {
	raw            string
	epoch, token   string
	limit, waiters int64
	holders        []string
}

// parseKeyRec reads a key record by the documented format: its fields one
// space apart, then the holder ids.
func (r *protoRunner) parseKeyRec(raw string) keyRec {
	r.t.Helper()
	f := strings.Split(raw, " ")
	fixed := len(r.doc.keyRec) - 1
	if len(f) < fixed {
		r.t.Fatalf("key record %q; PROTOCOL.md documents %q", raw, r.doc.keyRec)
	}
	rec := keyRec{raw: raw, holders: f[fixed:]}
	for i, name := range r.doc.keyRec[:fixed] {
		if !regexp.MustCompile(`^[0-9]+$`).MatchString(f[i]) {
			r.t.Fatalf("key record %q: %s %q is not decimal", raw, name, f[i])
		}
		n, _ := strconv.ParseInt(f[i], 10, 64)
		switch name {
		case "epoch":
			rec.epoch = f[i]
		case "limit":
			rec.limit = n
		case "token":
			rec.token = f[i]
		case "waiters":
			rec.waiters = n
		}
	}
	for _, h := range rec.holders {
		if h == "" {
			r.t.Fatalf("key record %q: an empty holder id (two spaces, or a trailing one)", raw)
		}
	}
	if len(rec.holders) == 0 {
		rec.holders = nil
	}
	return rec
}

// keyRecord returns key's record, and whether it has one.
func (r *protoRunner) keyRecord(key string) (keyRec, bool) {
	r.t.Helper()
	raw, err := r.c.HGet(context.Background(), r.key("lanes"), key).Result()
	if err == redis.Nil {
		return keyRec{}, false
	}
	if err != nil {
		r.t.Fatal(err)
	}
	return r.parseKeyRec(raw), true
}

// wantKeyRec checks key's record: written in epoch, with limit, the
// waiters and holders given; it returns its token.
func (r *protoRunner) wantKeyRec(key, epoch string, limit, waiters int64, holders ...string) string {
	r.t.Helper()
	rec, ok := r.keyRecord(key)
	if !ok || rec.epoch != epoch || rec.limit != limit || rec.waiters != waiters || !slices.Equal(rec.holders, holders) || !regexp.MustCompile(`^[1-9][0-9]*$`).MatchString(rec.token) {
		r.t.Errorf("record of key %q = %q (there: %v); want epoch %s, limit %d, a token, %d waiters, holders %q", key, rec.raw, ok, epoch, limit, waiters, holders)
	}
	return rec.token
}

// checkTuple checks one per-entry reply v against the documented tuples:
// it must be [id, state, detail...] with the documented shape for state.
// It returns the detail list.
func (r *protoRunner) checkTuple(script string, v any, id, state string) []any {
	r.t.Helper()
	doc, ok := tuples(r.t, r.doc.replies[script])[state]
	if !ok {
		r.t.Fatalf("PROTOCOL.md documents no state %q for %s", state, script)
	}
	f, ok := v.([]any)
	want := 3
	if doc.extra != "" {
		want = 4
	}
	if !ok || len(f) != want {
		r.t.Fatalf("%s reply %#v; want %d elements, as PROTOCOL.md writes [id, %q, [%s]%s]", script, v, want, state, doc.detail, map[bool]string{true: ", " + doc.extra}[doc.extra != ""])
	}
	if f[0] != id || f[1] != state {
		r.t.Fatalf("%s reply %#v; want id %s, state %q", script, v, id, state)
	}
	detail, ok := f[2].([]any)
	if !ok {
		r.t.Fatalf("%s reply %#v: the third element is not a list", script, v)
	}
	switch doc.detail {
	case "key, token, ...":
		if len(detail) == 0 || len(detail)%2 != 0 {
			r.t.Fatalf("%s: detail %#v; want key, token pairs", script, detail)
		}
		for i := 0; i < len(detail); i += 2 {
			tok, _ := detail[i+1].(string)
			if _, ok := detail[i].(string); !ok || !regexp.MustCompile(`^[1-9][0-9]*$`).MatchString(tok) {
				r.t.Fatalf("%s: detail %#v; want keys and tokens as decimal strings", script, detail)
			}
		}
	case "key, position, ...":
		if len(detail)%2 != 0 {
			r.t.Fatalf("%s: detail %#v; want key, position pairs", script, detail)
		}
		for i := 0; i < len(detail); i += 2 {
			if p, ok := detail[i+1].(int64); !ok || p < 1 {
				r.t.Fatalf("%s: detail %#v; want positions from 1", script, detail)
			}
		}
	case "":
		if len(detail) != 0 {
			r.t.Fatalf("%s: detail %#v; want []", script, detail)
		}
	case "message":
		if len(detail) != 1 {
			r.t.Fatalf("%s: detail %#v; want [message]", script, detail)
		}
		if s, ok := detail[0].(string); !ok || s == "" {
			r.t.Fatalf("%s: detail %#v; want [message]", script, detail)
		}
	case `cycle in words, JSON {"entries", "keys"}`:
		if len(detail) != 2 {
			r.t.Fatalf("%s: detail %#v; want [words, JSON {entries, keys}]", script, detail)
		}
		words, _ := detail[0].(string)
		raw, _ := detail[1].(string)
		var who struct{ Entries, Keys []string }
		if words == "" || json.Unmarshal([]byte(raw), &who) != nil || len(who.Entries) == 0 {
			r.t.Fatalf("%s: detail %#v; want [words, JSON {entries, keys}]", script, detail)
		}
	default:
		r.t.Fatalf("PROTOCOL.md documents the detail [%s] of %s, which the test does not know: update the test", doc.detail, script)
	}
	switch doc.extra {
	case "":
	case "seq":
		q, ok := f[3].(int64)
		if want := r.record(id)["q"]; !ok || float64(q) != want {
			r.t.Fatalf("%s reply %#v: seq %v; want the entry's sequence number %v", script, v, f[3], want)
		}
	default:
		r.t.Fatalf("PROTOCOL.md documents a fourth element %q, which the test does not know: update the test", doc.extra)
	}
	return detail
}

// statuses checks a reply [epoch, [status...]]: one status per id, of the
// documented shape. want is id, state, id, state... It returns the epoch
// and the statuses.
func (r *protoRunner) statuses(script string, v any, want ...string) (string, []any) {
	r.t.Helper()
	if !strings.HasPrefix(r.doc.replies[script], "`[epoch, [status per ") {
		r.t.Fatalf("PROTOCOL.md writes the reply of %s as %s; the test reads [epoch, [status per ...]]", script, r.doc.replies[script])
	}
	if !strings.Contains(r.doc.replies[script], "], more]`") {
		r.t.Fatalf("PROTOCOL.md writes the reply of %s as %s; the test reads [epoch, [status per ...], more]", script, r.doc.replies[script])
	}
	top, ok := v.([]any)
	if !ok || len(top) != 3 {
		r.t.Fatalf("%s reply %#v; want [epoch, [statuses], more]", script, v)
	}
	epoch, ok1 := top[0].(string)
	list, ok2 := top[1].([]any)
	more, ok3 := top[2].(int64)
	if !ok1 || !ok2 || !ok3 || (more != 0 && more != 1) || len(list) != len(want)/2 {
		r.t.Fatalf("%s reply %#v; want an epoch, %d statuses and more (0 or 1)", script, v, len(want)/2)
	}
	for i := 0; i < len(want); i += 2 {
		r.checkTuple(script, list[i/2], want[i], want[i+1])
	}
	return epoch, list
}

// detail returns the detail list of status i.
func detail(list []any, i int) []any { return list[i].([]any)[2].([]any) }

// seqOf returns the sequence number of status i.
func seqOf(list []any, i int) int64 { return list[i].([]any)[3].(int64) }

// epochOf returns the epoch of a reply whose first element is it.
func epochOf(t *testing.T, v any) string {
	t.Helper()
	f, ok := v.([]any)
	if !ok || len(f) == 0 {
		t.Fatalf("reply %#v; want a list, epoch first", v)
	}
	e, ok := f[0].(string)
	if !ok {
		t.Fatalf("reply %#v: the epoch is not a string", v)
	}
	return e
}

// checkRelease checks the reply [epoch, [state per id], [granted ids]] of
// script (release.lua or record.lua) and returns the epoch.
func (r *protoRunner) checkReleaseOf(script string, v any, was, granted []string) string {
	r.t.Helper()
	if !strings.HasPrefix(r.doc.replies[script], "`[epoch, [state per id: ") {
		r.t.Fatalf("PROTOCOL.md writes the reply of %s as %s; the test reads [epoch, [state per id: ...], [granted ids]]", script, r.doc.replies[script])
	}
	f, ok := v.([]any)
	if !ok || len(f) != 3 {
		r.t.Fatalf("%s reply %#v; want [epoch, [state per id], [granted ids]]", script, v)
	}
	epoch, ok0 := f[0].(string)
	states, ok1 := f[1].([]any)
	ids, ok2 := f[2].([]any)
	if !ok0 || !ok1 || !ok2 {
		r.t.Fatalf("%s reply %#v; want a string and two lists", script, v)
	}
	got := func(l []any) []string {
		var out []string
		for _, x := range l {
			out = append(out, fmt.Sprint(x))
		}
		return out
	}
	for _, s := range got(states) {
		if !strings.Contains(r.doc.replies[script], `"`+s+`"`) {
			r.t.Errorf("%s state %q is not documented (%s)", script, s, r.doc.replies[script])
		}
	}
	if !slices.Equal(got(states), was) || !slices.Equal(got(ids), granted) {
		r.t.Errorf("%s reply %v; want states %q, granted %q", script, v, was, granted)
	}
	return epoch
}

func (r *protoRunner) checkRelease(v any, was, granted []string) string {
	r.t.Helper()
	return r.checkReleaseOf("release.lua", v, was, granted)
}

// pageKey is one key of an inspect.lua page.
type pageKey struct {
	key              string
	limit, nh, nw    int64
	holders, waiters []string // ids
	next             string
}

// page is one inspect.lua reply.
type page struct {
	now   int64
	epoch string
	keys  []pageKey
	stats []int64 // the counts PROTOCOL.md names: expired, evicted, revoked, resets, frozen, reset
}

// checkInspect checks inspect.lua's reply against PROTOCOL.md and returns
// it: [now, epoch, [[key, limit, holder count, waiter count, holders,
// waiters, next], ...], [counts...]], each holder and waiter [entry JSON,
// deadline, id] with the documented record fields.
func (r *protoRunner) checkInspect(v any) page {
	t := r.t
	t.Helper()
	cell := r.doc.replies["inspect.lua"]
	// The counts at the end, as written: [name, name, ...].
	counts := regexp.MustCompile(`\], \[([a-z, ]+)\]\]` + "`" + `$`).FindStringSubmatch(cell)
	if counts == nil || !strings.HasPrefix(cell, "`[now ms, epoch, [[key, limit, holder count, waiter count, ") {
		t.Fatalf("PROTOCOL.md writes the reply of inspect.lua as %s, which the test does not read: update the test", cell)
	}
	f, ok := v.([]any)
	if !ok || len(f) != 4 {
		t.Fatalf("inspect.lua reply %#v; want 4 elements as PROTOCOL.md writes %s", v, cell)
	}
	var p page
	p.now, ok = f[0].(int64)
	if now := r.now(); !ok || p.now <= 0 || p.now > now+1 {
		t.Errorf("inspect.lua now = %v; want ms of the Redis clock (%d)", f[0], now)
	}
	if p.epoch, ok = f[1].(string); !ok {
		t.Fatalf("inspect.lua epoch %#v; want a string", f[1])
	}
	em := regexp.MustCompile(`\[\[(entry JSON[^\]]*)\], \.\.\.holders\]`).FindStringSubmatch(cell)
	if em == nil {
		t.Fatalf("PROTOCOL.md: no [[entry JSON, ...], ...holders] in %s", cell)
	}
	elems := strings.Split(em[1], ", ")
	keys, ok := f[2].([]any)
	if !ok {
		t.Fatalf("inspect.lua keys %#v; want a list", f[2])
	}
	for _, kv := range keys {
		k, ok := kv.([]any)
		if !ok || len(k) != 7 {
			t.Fatalf("inspect.lua key %#v; want [key, limit, holder count, waiter count, holders, waiters, next]", kv)
		}
		var pk pageKey
		var ok0, ok1, ok2, ok3, ok6 bool
		pk.key, ok0 = k[0].(string)
		pk.limit, ok1 = k[1].(int64)
		pk.nh, ok2 = k[2].(int64)
		pk.nw, ok3 = k[3].(int64)
		pk.next, ok6 = k[6].(string)
		if !ok0 || !ok1 || !ok2 || !ok3 || !ok6 {
			t.Fatalf("inspect.lua key %#v; want a key, three integers, two lists and a cursor", kv)
		}
		for i, role := range []string{"holders", "waiters"} {
			list, ok := k[4+i].([]any)
			if !ok {
				t.Fatalf("inspect.lua %s %#v; want a list", role, k[4+i])
			}
			var ids []string
			for _, p := range list {
				pair, ok := p.([]any)
				if !ok || len(pair) != len(elems) {
					t.Fatalf("inspect.lua %s %#v; want [%s]", role, p, em[1])
				}
				var rec map[string]any
				id := ""
				for j, e := range elems {
					switch e {
					case "entry JSON":
						raw, _ := pair[j].(string)
						if err := json.Unmarshal([]byte(raw), &rec); err != nil {
							t.Fatalf("inspect.lua entry JSON %q: %v", raw, err)
						}
					case "deadline":
						if dl, err := strconv.ParseInt(fmt.Sprint(pair[j]), 10, 64); err != nil || dl <= f[0].(int64) {
							t.Errorf("inspect.lua deadline %v; want ms after now %v", pair[j], f[0])
						}
					case "id":
						id, _ = pair[j].(string)
					default:
						t.Fatalf("PROTOCOL.md documents %q in an inspect.lua entry, which the test does not know: update the test", e)
					}
				}
				r.checkRecord(rec)
				ids = append(ids, id)
			}
			if i == 0 {
				pk.holders = ids
			} else {
				pk.waiters = ids
			}
		}
		p.keys = append(p.keys, pk)
	}
	names := strings.Split(counts[1], ", ")
	c, ok := f[3].([]any)
	if !ok || len(c) != len(names) {
		t.Fatalf("inspect.lua counts %#v; want %d: %q", f[3], len(names), names)
	}
	for i, n := range c {
		x, ok := n.(int64)
		if !ok || x < 0 {
			t.Errorf("inspect.lua count %s = %#v; want a whole number", names[i], n)
		}
		p.stats = append(p.stats, x)
	}
	if i := slices.Index(names, "frozen"); i >= 0 && p.epoch != "" {
		if m := r.marker(); m != nil && m["frozen"] != strconv.FormatInt(p.stats[i], 10) {
			t.Errorf("inspect.lua frozen %d; the lanes marker says %s", p.stats[i], m["frozen"])
		}
	}
	if i := slices.Index(names, "reset"); i >= 0 && p.stats[i] > 1 {
		t.Errorf("inspect.lua reset %d; want 0 or 1", p.stats[i])
	}
	return p
}

// checkRecord checks an entry record's fields against the document.
func (r *protoRunner) checkRecord(rec map[string]any) {
	r.t.Helper()
	for field := range rec {
		if !slices.Contains(r.doc.record, field) {
			r.t.Errorf("entry record field %q is not documented (PROTOCOL.md: %q)", field, r.doc.record)
		}
	}
	optional := map[string]bool{"c": true, "t": true, "n": true, "l": true, "g": true, "x": true, "r": true, "b": true, "v": true, "z": true}
	for _, field := range r.doc.record {
		if _, ok := rec[field]; !optional[field] && !ok {
			r.t.Errorf("entry record %v lacks %q", rec, field)
		}
	}
}

func (p page) key(t *testing.T, key string) pageKey {
	t.Helper()
	for _, k := range p.keys {
		if k.key == key {
			return k
		}
	}
	t.Fatalf("inspect.lua reply has no key %q: %+v", key, p.keys)
	return pageKey{}
}

func req(id string, lanes [][]any, extra ...string) map[string]any {
	m := map[string]any{"id": id, "k": lanes}
	for i := 0; i+1 < len(extra); i += 2 {
		if extra[i] == "l" {
			m["l"] = strings.Fields(extra[i+1])
		} else {
			m[extra[i]] = extra[i+1]
		}
	}
	return m
}

func lane(key string, limit int) [][]any { return [][]any{{key, limit}} }

// channel collects the messages of one channel.
type channel struct {
	ps *redis.PubSub
}

func (r *protoRunner) subscribeChannel(name string) *channel {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ps := r.c.Subscribe(ctx, name)
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { ps.Close() })
	return &channel{ps: ps}
}

// subscribe subscribes to owner's hint channel, as a client does before
// its first enqueue.
func (r *protoRunner) subscribe(owner string) *channel { return r.subscribeChannel(r.wake + owner) }

// subscribeNamespace subscribes to the namespace's channel: the prefix
// alone.
func (r *protoRunner) subscribeNamespace() *channel { return r.subscribeChannel(r.wake) }

func (c *channel) next(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := c.ps.ReceiveMessage(ctx)
	if err != nil {
		t.Fatalf("no message: %v", err)
	}
	return m.Payload
}

// none checks that no message comes within d.
func (c *channel) none(t *testing.T, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if m, err := c.ps.ReceiveMessage(ctx); err == nil {
		t.Errorf("message %q on %s; want none", m.Payload, m.Channel)
	}
}

// hint returns the next hint, as the JSON list PROTOCOL.md describes:
// {"id", "q", "x", "g"} for a grant, {"id"} for another change.
func (c *channel) hint(t *testing.T) []map[string]any {
	t.Helper()
	payload := c.next(t)
	var items []map[string]any
	if err := json.Unmarshal([]byte(payload), &items); err != nil {
		t.Fatalf("hint %q is not the JSON list PROTOCOL.md describes: %v", payload, err)
	}
	for _, it := range items {
		for f := range it {
			if !slices.Contains([]string{"id", "q", "x", "g"}, f) {
				t.Errorf("hint %q has the field %q, which PROTOCOL.md does not document", payload, f)
			}
		}
	}
	return items
}

// reset returns the epoch of the next message on the namespace's channel:
// {"reset": epoch}.
func (c *channel) reset(t *testing.T) string {
	t.Helper()
	payload := c.next(t)
	var m map[string]string
	if err := json.Unmarshal([]byte(payload), &m); err != nil || len(m) != 1 || m["reset"] == "" {
		t.Fatalf("namespace message %q; want {\"reset\": epoch}", payload)
	}
	return m["reset"]
}

func hintFor(items []map[string]any, id string) map[string]any {
	for _, it := range items {
		if it["id"] == id {
			return it
		}
	}
	return nil
}

// luaHeader returns the comment lines that open a Lua file, without their
// "--", as one line of words.
func luaHeader(src []byte) string {
	var words []string
	for _, line := range strings.Split(string(src), "\n") {
		if !strings.HasPrefix(line, "--") {
			break
		}
		words = append(words, strings.Fields(strings.TrimPrefix(line, "--"))...)
	}
	return strings.Join(words, " ")
}

// goList returns the quoted strings of the first `<lhs> := []string{...}`
// in a Go source file of this module.
func goList(t *testing.T, file, lhs string) []string {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(regexp.QuoteMeta(lhs) + `\s*:?=\s*(?:append\()?\[\]string\{([^}]*)\}`).FindSubmatch(src)
	if m == nil {
		t.Fatalf("%s: no %s := []string{...}", file, lhs)
	}
	var out []string
	for _, q := range regexp.MustCompile(`"([^"]*)"`).FindAllSubmatch(m[1], -1) {
		out = append(out, string(q[1]))
	}
	return out
}

// TestProtocolDocMatchesScripts: what PROTOCOL.md says of the scripts'
// KEYS, markers, key records, ARGV, error codes, entry record and bounds
// is what their sources say, and what package redislane uses.
func TestProtocolDocMatchesScripts(t *testing.T) {
	d := readProtocol(t)
	lib, err := os.ReadFile("../scripts/lua/lib.lua")
	if err != nil {
		t.Fatal(err)
	}
	header := luaHeader(lib)

	// KEYS: seven, or eight for record.lua.
	m := regexp.MustCompile(`nkeys = nkeys or (\d+)`).FindSubmatch(lib)
	if m == nil {
		t.Fatal("lib.lua's begin checks no number of KEYS")
	}
	if n, _ := strconv.Atoi(string(m[1])); n != len(d.keys) {
		t.Errorf("lib.lua takes %d KEYS; PROTOCOL.md documents %d", n, len(d.keys))
	}
	rec, err := os.ReadFile("../scripts/lua/record.lua")
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`begin\(KEYS, ARGV, (\d+)\)`).FindSubmatch(rec); m == nil || string(m[1]) != strconv.Itoa(d.extra) {
		t.Errorf("record.lua checks %q KEYS; PROTOCOL.md says %d", m, d.extra)
	}
	if !strings.Contains(luaHeader(rec), fmt.Sprintf("[%d] the run's records", d.extra)) {
		t.Errorf("record.lua's header does not name KEYS[%d], the run's records", d.extra)
	}
	for i, k := range d.keys {
		name := k.name[strings.LastIndex(k.name, ":")+1:]
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^--\s+%d %s\s`, i+1, name)).Match(lib) {
			t.Errorf("PROTOCOL.md has key %d %s; lib.lua's header does not", i+1, name)
		}
	}
	var names []string
	for _, k := range d.keys {
		names = append(names, k.name[strings.LastIndex(k.name, ":")+1:])
	}
	if got := goList(t, "../redislane/redislane.go", "names"); !slices.Equal(got, names) {
		t.Errorf("redislane's keys are %q; PROTOCOL.md documents %q", got, names)
	}
	if !strings.Contains(header, fmt.Sprintf("Keys 1 to %d are the namespace's state", d.state)) {
		t.Errorf("lib.lua's header does not say keys 1 to %d are the state", d.state)
	}
	st := regexp.MustCompile(`STATE = \{([^}]*)\}`).FindSubmatch(lib)
	if st == nil {
		t.Fatal("lib.lua has no STATE")
	}
	var state []string
	for _, s := range strings.Split(string(st[1]), ",") {
		state = append(state, strings.ToLower(strings.TrimPrefix(strings.TrimSpace(s), "K_")))
	}
	if !slices.Equal(state, names[:d.state]) {
		t.Errorf("lib.lua's STATE is %q; PROTOCOL.md says keys 1 to %d, %q", state, d.state, names[:d.state])
	}
	if p := regexp.MustCompile(`local PROTOCOL = '([^']*)'`).FindSubmatch(lib); p == nil || string(p[1]) != d.protocol {
		t.Errorf("lib.lua's PROTOCOL is %q; PROTOCOL.md says %q", p, d.protocol)
	}

	// The markers: one on every state key, as lib.lua's mark() writes them.
	body := regexp.MustCompile(`(?s)local function mark\(\)\n(.*?)\nend`).FindSubmatch(lib)
	if body == nil {
		t.Fatal("lib.lua has no mark()")
	}
	marks := map[string]string{}
	padded := false
	for _, m := range regexp.MustCompile(`redis\.call\('HSET', K_(\w+), '\\0', (?:'([^']*)'|(mark_line)\(\))(, '\\2', HASHTABLE_PAD)?\)`).FindAllSubmatch(body[1], -1) {
		marks[strings.ToLower(string(m[1]))] = string(m[2]) + string(m[3])
		if len(m[4]) > 0 {
			padded = string(m[1]) == "LANES"
		}
	}
	if lit := regexp.MustCompile(`local HASHTABLE_PAD = '([^']*)'`).FindSubmatch(lib); !padded || lit == nil || string(lit[1]) != d.pad {
		t.Errorf("lib.lua's mark() writes the pad of lanes: %v, as %q; PROTOCOL.md documents %q", padded, lit, d.pad)
	}
	for _, m := range regexp.MustCompile(`redis\.call\('ZADD', K_(\w+), '?([^',]+)'?, '\\0'\)`).FindAllSubmatch(body[1], -1) {
		marks[strings.ToLower(string(m[1]))] = string(m[2])
	}
	for i, k := range d.keys {
		name := names[i]
		want, ok := marks[name]
		switch {
		case i < d.state && !k.marker:
			t.Errorf("PROTOCOL.md: state key %s has no marker", k.name)
		case i >= d.state && k.marker:
			t.Errorf("PROTOCOL.md: key %s, not a state key, has a marker", k.name)
		case ok != k.marker:
			t.Errorf("lib.lua's mark() marks %s: %v; PROTOCOL.md: %v", name, ok, k.marker)
		case want == "mark_line":
			if !strings.Contains(k.mark, "<") {
				t.Errorf("PROTOCOL.md: the marker of %s is %q; lib.lua writes mark_line() there", k.name, k.mark)
			}
		case ok && want != k.mark:
			t.Errorf("lib.lua's mark() writes %q as the marker of %s; PROTOCOL.md %q", want, name, k.mark)
		}
	}
	if len(marks) != d.state {
		t.Errorf("lib.lua's mark() marks %v; PROTOCOL.md documents %d state keys", marks, d.state)
	}
	// The key record and the marker of lanes: lib.lua's header says the
	// same fields in the same order.
	for _, f := range []struct {
		what, re string
		doc      []string
	}{
		{"key record", `key record, "([^"]+)"`, d.keyRec},
		{"marker", `The marker "\\0" holds "([^"]+)"`, d.marker},
	} {
		m := regexp.MustCompile(f.re).FindStringSubmatch(header)
		if m == nil {
			t.Errorf("lib.lua's header describes no %s", f.what)
			continue
		}
		if got, _ := fieldNames(m[1]); !slices.Equal(got, f.doc) {
			t.Errorf("lib.lua's header writes the %s %q; PROTOCOL.md %q", f.what, got, f.doc)
		}
	}
	if m := regexp.MustCompile(`mark_line = function\(\)\n\s*return KEYSPACE \.\. ' ' \.\. EPOCH \.\. ' ' \.\. dec\(FROZEN\) \.\. ' ' \.\. dec\(MAXTTL\) \.\. ' ' \.\. dec\(TOMBS\)`).Find(lib); m == nil {
		t.Errorf("lib.lua's mark_line no longer writes keyspace, epoch, frozen, maxttl, tombs: compare it with PROTOCOL.md")
	}
	if m := regexp.MustCompile(`string\.format\('%s %d %d %d', EPOCH, r\.l, r\.t, r\.w\)\s*\n\s*\.\. \(#r\.h > 0 and ' ' \.\. table\.concat\(r\.h, ' '\) or ''\)`).Find(lib); m == nil {
		t.Errorf("lib.lua's flush no longer writes epoch, limit, token, waiters, holders: compare it with PROTOCOL.md")
	}

	// The state keys doctor walks: doctor.lua's, Go's, the document's.
	doc, err := os.ReadFile("../scripts/lua/doctor.lua")
	if err != nil {
		t.Fatal(err)
	}
	var luaWalks []string
	if w := regexp.MustCompile(`(?s)local walks = \{(.*?)\}`).FindSubmatch(doc); w != nil {
		for _, m := range regexp.MustCompile(`(\w+) = K_`).FindAllSubmatch(w[1], -1) {
			luaWalks = append(luaWalks, string(m[1]))
		}
	}
	goWalks := goList(t, "../redislane/doctor.go", "walks")
	for _, w := range [][]string{luaWalks, goWalks} {
		if a, b := slices.Sorted(slices.Values(w)), slices.Sorted(slices.Values(d.walks)); !slices.Equal(a, b) {
			t.Errorf("doctor walks %q (doctor.lua %q, redislane %q); PROTOCOL.md %q", w, luaWalks, goWalks, d.walks)
		}
	}

	// Every script has a row, and its header the same ARGV.
	files, err := filepath.Glob("../scripts/lua/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if s := filepath.Base(f); s != "lib.lua" && d.argv[s] == nil {
			t.Errorf("PROTOCOL.md's script table has no row for %s", s)
		}
	}
	all := string(lib)
	for script, names := range d.argv {
		b, err := os.ReadFile("../scripts/lua/" + script)
		if err != nil {
			t.Errorf("PROTOCOL.md documents %s: %v", script, err)
			continue
		}
		body := string(b)
		all += body
		fixed, variadic := 0, false
		if script == "fence.lua" {
			if lua.Source(script) != body {
				t.Errorf("lua.Source(%q) is not fence.lua alone", script)
			}
			fixed = len(regexp.MustCompile(`(?m)^-- ARGV\[\d+\]`).FindAllString(body, -1))
		} else {
			if src := lua.Source(script); src != string(lib)+"\n"+body {
				t.Errorf("lua.Source(%q) is not lib.lua, a newline and %s", script, script)
			}
			header := regexp.MustCompile(`(?s)-- ARGV:(.*?)\n-- [A-Z]`).FindStringSubmatch(body)
			if header == nil {
				t.Errorf("%s: no ARGV in its header", script)
				continue
			}
			for _, m := range regexp.MustCompile(`\[(\d+)(\.\.\.)?\]`).FindAllStringSubmatch(header[1], -1) {
				if m[2] != "" {
					variadic = true
				} else {
					fixed++
				}
			}
			if names[0] != "protocol" || names[1] != "prefix" {
				t.Errorf("PROTOCOL.md: the ARGV of %s start %q; want protocol, prefix", script, names)
			}
			if !strings.Contains(luaHeader(b), "KEYS: the seven of lib.lua") {
				t.Errorf("%s: its header does not say it takes lib.lua's seven KEYS", script)
			}
		}
		docFixed, docVariadic := 0, false
		for _, n := range names {
			if strings.HasSuffix(n, "...") {
				docVariadic = true
			} else {
				docFixed++
			}
		}
		if fixed != docFixed || variadic != docVariadic {
			t.Errorf("%s: its header has %d fixed ARGV, variadic %v; PROTOCOL.md documents %q", script, fixed, variadic, names)
		}
	}

	// The error codes: the same set, and the fields the headers name.
	codes := regexp.MustCompile(`LANES_[A-Z]+`).FindAllString(all, -1)
	slices.Sort(codes)
	codes = slices.Compact(codes)
	var docCodes []string
	for c := range d.codes {
		docCodes = append(docCodes, c)
	}
	slices.Sort(docCodes)
	if !slices.Equal(codes, docCodes) {
		t.Errorf("the scripts use the codes %q; PROTOCOL.md documents %q", codes, docCodes)
	}
	for _, m := range regexp.MustCompile(`(LANES_[A-Z]+)((?: <[a-z]+>)+)`).FindAllStringSubmatch(all, -1) {
		if got := strings.Fields(strings.NewReplacer("<", "", ">", "").Replace(m[2])); !slices.Equal(got, d.codes[m[1]]) {
			t.Errorf("a header writes %s%s; PROTOCOL.md documents the fields %q", m[1], m[2], d.codes[m[1]])
		}
	}
	// The fields of LANES_BADARG: those the scripts name, no more.
	var fields []string
	for _, m := range regexp.MustCompile(`badarg\('(\w+)'|LANES_BADARG (\w+) `).FindAllStringSubmatch(all, -1) {
		fields = append(fields, m[1]+m[2])
	}
	slices.Sort(fields)
	fields = slices.Compact(fields)
	docFields := slices.Clone(d.badarg)
	slices.Sort(docFields)
	if docFields = slices.Compact(docFields); !slices.Equal(fields, docFields) {
		t.Errorf("LANES_BADARG fields: the scripts name %q; PROTOCOL.md %q", fields, docFields)
	}

	// The entry record: the fields of lib.lua's header.
	recm := regexp.MustCompile(`(?s)-- Entry record(.*?)\n\n`).FindSubmatch(lib)
	if recm == nil {
		t.Fatal("lib.lua's header describes no entry record")
	}
	var libFields []string
	for _, m := range regexp.MustCompile(`\b([a-z]) = `).FindAllSubmatch(recm[1], -1) {
		libFields = append(libFields, string(m[1]))
	}
	slices.Sort(libFields)
	docRec := slices.Clone(d.record)
	slices.Sort(docRec)
	if !slices.Equal(libFields, docRec) {
		t.Errorf("entry record: lib.lua has the fields %q; PROTOCOL.md %q", libFields, docRec)
	}

	// The bounds: lib.lua's constants, the same values.
	libBounds := map[string]int64{}
	for _, m := range regexp.MustCompile(`(?m)^local ([A-Z_]+) = (\d+)`).FindAllSubmatch(lib, -1) {
		libBounds[string(m[1])], _ = strconv.ParseInt(string(m[2]), 10, 64)
	}
	for name, v := range libBounds {
		if d.bounds[name] != v {
			t.Errorf("lib.lua: %s = %d; PROTOCOL.md's bounds table says %d", name, v, d.bounds[name])
		}
	}
	for name := range d.bounds {
		if _, ok := libBounds[name]; !ok {
			t.Errorf("PROTOCOL.md documents the bound %s, which lib.lua does not define", name)
		}
	}
	// The expiry query reads REAP_MAX + 1, as the document writes it.
	if !strings.Contains(all, "REAP_LIMIT = REAP_LIMIT or dec(REAP_MAX + 1)") || !strings.Contains(all, "'LIMIT', '0', REAP_LIMIT") || !strings.Contains(strings.Join(strings.Fields(d.text), " "), fmt.Sprintf("`ZRANGEBYSCORE deadlines -inf <now> LIMIT 0 %d` (`REAP_MAX` + 1)", d.bounds["REAP_MAX"]+1)) {
		t.Errorf("the expiry query of lib.lua and PROTOCOL.md differ")
	}
}

// TestProtocolRealRedis runs the documented lanes scripts with the
// documented KEYS and ARGV and checks the replies' shapes (epoch first),
// the error codes, the hints and the keyspace against PROTOCOL.md.
func TestProtocolRealRedis(t *testing.T) {
	secNoLeaks(t)
	r := newProtoRunner(t)
	ownerA, ownerB := "owner-a-"+r.nonce, "owner-b-"+r.nonce
	r.subscribe(ownerA) // before the first enqueue, as a client does
	hintsB := r.subscribe(ownerB)
	nsch := r.subscribeNamespace()
	const ttl = 30000

	// enqueue: the first makes the state and announces its epoch; a grant
	// (sequence number 0), then two waiters of another owner.
	epoch, list := r.mustEnqueue(ownerA, ttl, []string{"e1", "h"}, req("e1", lane("k1", 1), "c", "call-1", "t", "tool-1", "n", "tenant-1"))
	if got := nsch.reset(t); epoch == "" || got != epoch {
		t.Errorf("enqueue epoch %q, namespace channel %q; want the same, not empty", epoch, got)
	}
	if m := r.marker(); m["epoch"] != epoch {
		t.Errorf("lanes marker %v; want the epoch %s", m, epoch)
	}
	if seqOf(list, 0) != 0 {
		t.Errorf("e1 granted by its enqueue has seq %d; want 0", seqOf(list, 0))
	}
	tok1 := detail(list, 0)[1].(string)
	if got := r.wantKeyRec("k1", epoch, 1, 0, "e1"); got != tok1 {
		t.Errorf("record of k1 has the token %s; want e1's, %s", got, tok1)
	}
	_, list = r.mustEnqueue(ownerB, ttl, []string{"e2", "w", "e3", "w"}, req("e2", lane("k1", 1)), req("e3", lane("k1", 1)))
	if p2, p3 := detail(list, 0)[1], detail(list, 1)[1]; p2 != int64(1) || p3 != int64(2) {
		t.Errorf("positions of e2, e3 = %v, %v; want 1, 2", p2, p3)
	}
	seq2 := seqOf(list, 0)
	if seq2 < 1 || seqOf(list, 1) != seq2+1 {
		t.Errorf("sequence numbers of e2, e3 = %d, %d; want consecutive from 1", seq2, seqOf(list, 1))
	}
	r.wantKeyRec("k1", epoch, 1, 2, "e1")
	// A retry by the same owner keeps the place; another owner cannot take
	// a held id.
	e, list := r.mustEnqueue(ownerB, ttl, []string{"e2", "w"}, req("e2", lane("k1", 1)))
	if e != epoch || seqOf(list, 0) != seq2 {
		t.Errorf("retry of e2: epoch %q seq %d; want %q, %d", e, seqOf(list, 0), epoch, seq2)
	}
	r.mustEnqueue(ownerB, ttl, []string{"e1", "e"}, req("e1", lane("k1", 1)))

	// LANES_LIMIT: its documented fields; nothing of the step enqueued.
	_, err := r.enqueue(ownerA, ttl, req("e8", lane("k8", 1)), req("e9", lane("k1", 2)))
	if f := r.doc.codes["LANES_LIMIT"]; err == nil || !strings.HasPrefix(err.Error(), "LANES_LIMIT ") || len(f) != 3 {
		t.Fatalf("enqueue with another limit = %v; want LANES_LIMIT with the fields %q", err, f)
	} else if got := strings.Fields(strings.TrimPrefix(err.Error(), "LANES_LIMIT ")); !slices.Equal(got, []string{"1", "2", "k1"}) {
		t.Errorf("LANES_LIMIT fields = %q; want %s = 1 2 k1", got, f)
	}
	if r.exists("e8") || r.exists("e9") {
		t.Errorf("after LANES_LIMIT, e8 or e9 was enqueued; want nothing of the step")
	}

	// heartbeat: held, waiting, gone (unknown, or another owner's).
	e, _ = r.heartbeat(ownerA, ttl, []string{"e1", "h", "nosuch", "g", "e2", "g"}, "e1", "nosuch", "e2")
	r.heartbeat(ownerB, ttl, []string{"e2", "w", "e3", "w"}, "e2", "e3")
	if e != epoch {
		t.Errorf("heartbeat epoch %q; want %q", e, epoch)
	}

	// inspect: the holders and waiters, entry records as documented.
	p := r.checkInspect(r.inspect(100, "k1", "", "nokey", ""))
	if k := p.key(t, "k1"); k.limit != 1 || k.nh != 1 || k.nw != 2 || !slices.Equal(k.holders, []string{"e1"}) || !slices.Equal(k.waiters, []string{"e2", "e3"}) || k.next != "" {
		t.Errorf("inspect k1 = %+v; want limit 1, holder e1, waiters e2 e3, done", k)
	}
	if k := p.key(t, "nokey"); k.limit != 0 || k.nh != 0 || len(k.holders)+len(k.waiters) != 0 || k.next != "" {
		t.Errorf("inspect nokey = %+v; want limit 0 and nothing", k)
	}
	if p.epoch != epoch {
		t.Errorf("inspect epoch %q; want %q", p.epoch, epoch)
	}
	rec := r.record("e1")
	if x, _ := rec["x"].(map[string]any); x["k1"] != tok1 || rec["c"] != "call-1" || rec["t"] != "tool-1" || rec["n"] != "tenant-1" || rec["s"] != "h" || rec["o"] != ownerA || rec["h"] != "proto-host" || rec["p"] != float64(4343) {
		t.Errorf("record of e1 = %v; want token %s, call, tool, tenant, state h, its owner", rec, tok1)
	}
	r.checkRecord(rec)

	// release by the owner: the hand-off, and the new holder's owner hears
	// of its grant on its channel.
	r.checkRelease(r.release(ownerA, 0, "e1", "nosuch"), []string{"h", "g"}, []string{"e2"})
	h := hintFor(hintsB.hint(t), "e2")
	if x, _ := h["x"].(map[string]any); h == nil || h["q"] != float64(seq2) || x["k1"] == nil || h["g"] == nil {
		t.Errorf("hint to e2's owner = %v; want {id: e2, q: %d, x: its token, g}", h, seq2)
	}
	r.wantKeyRec("k1", epoch, 1, 1, "e2")
	// A caller removes only its own entries; an operator ("") any, and
	// their owner is told; the owner's own release then answers "f".
	r.checkRelease(r.release(ownerA, 0, "e3"), []string{"g"}, nil)
	r.checkRelease(r.release("", 60000, "e2"), []string{"h"}, []string{"e3"})
	items := hintsB.hint(t)
	if hintFor(items, "e2") == nil || hintFor(items, "e2")["x"] != nil || hintFor(items, "e3") == nil || hintFor(items, "e3")["q"] == nil {
		t.Errorf("hint after a release by force = %v; want e2 ({id}) and e3 (granted, with q)", items)
	}
	r.checkRelease(r.release(ownerB, 0, "e2"), []string{"f"}, nil)

	// A lock cycle through nested calls: P holds a, Q holds b, R (under Q)
	// waits for a; C (under P) asking for b would wait for its ancestor.
	r.mustEnqueue(ownerA, ttl, []string{"P", "h", "Q", "h"}, req("P", lane("a", 1)), req("Q", lane("b", 1)))
	r.mustEnqueue(ownerA, ttl, []string{"R", "w"}, req("R", lane("a", 1), "l", "Q"))
	_, list = r.mustEnqueue(ownerA, ttl, []string{"C", "c"}, req("C", lane("b", 1), "l", "P"))
	var who struct{ Entries, Keys []string }
	_ = json.Unmarshal([]byte(detail(list, 0)[1].(string)), &who)
	if !slices.Equal(who.Entries, []string{"C", "Q", "R", "P"}) || !slices.Equal(who.Keys, []string{"b", "a"}) {
		t.Errorf("cycle = %q %+v; want entries C Q R P, keys b a", detail(list, 0)[0], who)
	}
	if r.exists("C") {
		t.Errorf("the refused C is in entries")
	}

	// An entry that expires: inspect (which renews nothing) reaps it, the
	// counts say so, and its owner's heartbeat finds it gone.
	r.mustEnqueue(ownerA, 1, []string{"short", "h"}, req("short", lane("k9", 1)))
	deadline := time.Now().Add(10 * time.Second)
	for {
		p = r.checkInspect(r.inspect(10, "k9", ""))
		if p.key(t, "k9").limit == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the entry with a 1ms TTL never expired: %+v", p)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if p.stats[0] != 1 {
		t.Errorf("inspect counts %v; want expired 1", p.stats)
	}
	r.heartbeat(ownerA, ttl, []string{"short", "g"}, "short")

	r.checkKeyspace(t, epoch)
	for _, s := range []string{"enqueue.lua", "heartbeat.lua", "release.lua", "inspect.lua"} {
		if r.noscript[s] != 1 {
			t.Errorf("NOSCRIPT met for %v; want once per script (the EVALSHA then EVAL path)", r.noscript)
		}
	}
}

// checkKeyspace checks the keys against the keyspace table after
// TestProtocolRealRedis: their names and types, the markers, the members'
// forms, the key records, scores 0 where documented, and no TTL.
func (r *protoRunner) checkKeyspace(t *testing.T, epoch string) {
	t.Helper()
	ctx := context.Background()
	r.checkMarkers(t)
	for i, k := range r.doc.keys {
		name := r.keys[i]
		if k.zero {
			zs, _ := r.c.ZRangeWithScores(ctx, name, 0, -1).Result()
			for _, z := range zs {
				if z.Score != 0 {
					t.Errorf("%s member %q has score %v; want 0", name, z.Member, z.Score)
				}
			}
		}
	}
	for key, re := range map[string]string{
		"queue":     `^(\x00|a\x00\d{16}\x00R)$`,
		"nested":    `^(\x00|Q\x00R)$`,
		"deadlines": `^(\x00|P|Q|R|e3)$`,
		"tombs":     `^f\x00e2$`,
	} {
		zs := r.zset(key)
		if len(zs) < 2 && key != "tombs" {
			t.Errorf("%s holds %v; want its marker and members", r.key(key), zs)
		}
		for _, z := range zs {
			if !regexp.MustCompile(re).MatchString(z.Member.(string)) {
				t.Errorf("%s member %q; want the documented form %s", r.key(key), z.Member, re)
			}
		}
	}
	// The key records: those of the keys used (k8 and e9's k1 of the
	// refused step, and nokey, which inspect only read, have none of
	// their own).
	recs := r.hash("lanes")
	var fields []string
	for f := range recs {
		fields = append(fields, f)
	}
	slices.Sort(fields)
	if !slices.Equal(fields, []string{"\x00", "\x02", "a", "b", "k1", "k9"}) || recs["\x02"] != r.doc.pad {
		t.Errorf("lanes has the fields %q; want the marker, the pad, a, b, k1, k9", fields)
	}
	r.wantKeyRec("k1", epoch, 1, 0, "e3")
	r.wantKeyRec("a", epoch, 1, 1, "P")
	r.wantKeyRec("b", epoch, 1, 0, "Q")
	r.wantKeyRec("k9", epoch, 1, 0) // idle: it keeps its token
	meta := r.hash("meta")
	if want := map[string]string{"\x00": "", "seq": "3", "maxttl": "30000", "expired": "1"}; !mapsEqual(meta, want) {
		t.Errorf("meta = %q; want %q (seq 3: e2, e3, R; grants at once and the refused C take none)", meta, want)
	}
	m := r.marker()
	tomb, _ := r.c.ZScore(ctx, r.key("tombs"), "f\x00e2").Result()
	if m["epoch"] != epoch || m["frozen"] != "0" || m["maxttl"] != "30000" || m["tombs"] != strconv.FormatFloat(tomb, 'f', 0, 64) {
		t.Errorf("lanes marker %v; want epoch %s, frozen 0, maxttl 30000, tombs %v (when f\\0e2 lapses)", m, epoch, tomb)
	}
	if dl, _ := r.c.ZScore(ctx, r.key("deadlines"), "P").Result(); dl <= float64(r.now()) {
		t.Errorf("deadline of P = %v; want ms of the Redis clock in the future", dl)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// checkMarkers checks that every documented key exists with its type and
// no TTL, and that each state key holds its documented marker.
func (r *protoRunner) checkMarkers(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for i, k := range r.doc.keys {
		name := r.keys[i]
		typ, err := r.c.Type(ctx, name).Result()
		if typ == "none" && i >= r.doc.state {
			continue // keys past the state may be absent
		}
		if err != nil || typ != k.typ {
			t.Errorf("TYPE %s = %q, %v; want %s", name, typ, err, k.typ)
			continue
		}
		if pttl, err := r.c.PTTL(ctx, name).Result(); err != nil || pttl != -1 {
			t.Errorf("%s has TTL %v, %v; PROTOCOL.md says no key carries one", name, pttl, err)
		}
		if !k.marker {
			continue
		}
		if strings.Contains(k.mark, "<") {
			if r.marker() == nil {
				t.Errorf("%s has no marker", name)
			}
			continue
		}
		var got string
		if k.typ == "hash" {
			got, err = r.c.HGet(ctx, name, "\x00").Result()
		} else {
			var s float64
			s, err = r.c.ZScore(ctx, name, "\x00").Result()
			got = strconv.FormatFloat(s, 'f', -1, 64)
			if math.IsInf(s, 1) {
				got = "+inf"
			} else if math.IsInf(s, -1) {
				got = "-inf"
			}
		}
		if err != nil || got != k.mark {
			t.Errorf("%s marker \\0 = %q, %v; want %q", name, got, err, k.mark)
		}
	}
}

// TestProtocolLeanPathRealRedis: an uncontended acquire and release leave
// exactly the documented keys and records, and a step takes the lean path
// (which checks neither queue nor nested nor meta) exactly when
// PROTOCOL.md says: with nested deleted, a lean step goes on in the same
// epoch, and a step on the full path resets the namespace.
func TestProtocolLeanPathRealRedis(t *testing.T) {
	secNoLeaks(t)
	t.Run("keys", func(t *testing.T) {
		r := newProtoRunner(t)
		owner := "owner-" + r.nonce
		hints := r.subscribe(owner)
		nsch := r.subscribeNamespace()
		const ttl = 30000
		ctx := context.Background()
		before := r.now()
		epoch, list := r.mustEnqueue(owner, ttl, []string{"A", "h"}, req("A", [][]any{{"a", 2}, {"b", 1}}, "c", "call-A"))
		if got := nsch.reset(t); got != epoch {
			t.Errorf("namespace message %q; want the new state's epoch %q", got, epoch)
		}
		tokA, tokB := detail(list, 0)[1].(string), detail(list, 0)[3].(string)
		if seqOf(list, 0) != 0 || detail(list, 0)[0] != "a" || detail(list, 0)[2] != "b" {
			t.Errorf("A's status %v; want tokens for a and b, seq 0", list[0])
		}
		rec := r.record("A")
		g, _ := rec["g"].(float64)
		var fields []string
		for f := range rec {
			fields = append(fields, f)
		}
		slices.Sort(fields)
		if x, _ := rec["x"].(map[string]any); !slices.Equal(fields, []string{"c", "e", "g", "h", "k", "o", "p", "q", "s", "x"}) || rec["s"] != "h" || rec["q"] != float64(0) ||
			rec["e"] != rec["g"] || int64(g) < before || x["a"] != tokA || x["b"] != tokB || fmt.Sprint(rec["k"]) != "[[a 2] [b 1]]" {
			t.Errorf("A's record = %v; want o h p c k s=h q=0 e=g x", rec)
		}
		r.checkRecord(rec)
		if got := r.hash("entries"); len(got) != 2 || got["\x00"] != "" {
			t.Errorf("entries = %q; want its marker and A", got)
		}
		marker := strings.Join([]string{r.doc.keyspace, epoch, "0", "30000", "0"}, " ")
		if got := r.hash("lanes"); !mapsEqual(got, map[string]string{"\x00": marker, "\x02": r.doc.pad, "a": epoch + " 2 " + tokA + " 0 A", "b": epoch + " 1 " + tokB + " 0 A"}) {
			t.Errorf("lanes = %q; want the marker %q, the pad and a record of a and of b naming A", got, marker)
		}
		// The pad keeps lanes in Redis's hashtable encoding, though it
		// has four fields (a listpack is searched field by field).
		if enc, err := r.c.ObjectEncoding(ctx, r.key("lanes")).Result(); err != nil || enc != "hashtable" {
			t.Errorf("OBJECT ENCODING of lanes = %q, %v; want hashtable", enc, err)
		}
		for _, key := range []string{"queue", "nested"} {
			if zs := r.zset(key); len(zs) != 1 || zs[0].Member != "\x00" || zs[0].Score != 0 {
				t.Errorf("%s = %v; want its marker alone", key, zs)
			}
		}
		if zs := r.zset("deadlines"); len(zs) != 2 || zs[0].Member != "\x00" || !math.IsInf(zs[0].Score, -1) || zs[1].Member != "A" || zs[1].Score != g+ttl {
			t.Errorf("deadlines = %v; want the marker at -inf, then A at its grant plus the TTL", zs)
		}
		if got := r.hash("meta"); !mapsEqual(got, map[string]string{"\x00": "", "maxttl": "30000"}) {
			t.Errorf("meta = %q; want its marker and maxttl", got)
		}
		if n, _ := r.c.Exists(ctx, r.key("tombs")).Result(); n != 0 {
			t.Errorf("tombs exists; want it absent")
		}
		r.checkMarkers(t)

		// The release: A leaves its records, its entry and its deadline.
		r.checkRelease(r.release(owner, 0, "A"), []string{"h"}, nil)
		hints.none(t, 100*time.Millisecond)
		if got := r.hash("lanes"); !mapsEqual(got, map[string]string{"\x00": marker, "\x02": r.doc.pad, "a": epoch + " 2 " + tokA + " 0", "b": epoch + " 1 " + tokB + " 0"}) {
			t.Errorf("lanes after the release = %q; want idle records keeping their tokens", got)
		}
		for _, key := range []string{"queue", "nested", "deadlines"} {
			if zs := r.zset(key); len(zs) != 1 || zs[0].Member != "\x00" {
				t.Errorf("%s = %v; want its marker alone", key, zs)
			}
		}
		if got := r.hash("entries"); !mapsEqual(got, map[string]string{"\x00": ""}) {
			t.Errorf("entries = %q; want its marker alone", got)
		}
		if got := r.hash("meta"); !mapsEqual(got, map[string]string{"\x00": "", "maxttl": "30000"}) {
			t.Errorf("meta = %q; want it unchanged", got)
		}
		// Acquired again: a token above the one the idle record kept.
		_, list = r.mustEnqueue(owner, ttl, []string{"A2", "h"}, req("A2", lane("a", 3)))
		if tok := detail(list, 0)[1].(string); mustUint(t, tok) <= mustUint(t, tokA) || r.wantKeyRec("a", epoch, 3, 0, "A2") != tok {
			t.Errorf("A2's token %s; want it above %s, in a's record", tok, tokA)
		}
		nsch.none(t, 50*time.Millisecond)
	})

	const ttl = 30000
	o, other := "owner-o", "owner-p"
	enq := func(r *protoRunner, ttl int, want []string, reqs ...map[string]any) func() any {
		return func() any {
			v, err := r.enqueue(o, ttl, reqs...)
			if err != nil {
				r.t.Fatal(err)
			}
			if want != nil {
				r.statuses("enqueue.lua", v, want...)
			}
			return v
		}
	}
	rel := func(r *protoRunner, by string, tomb int, ids ...string) func() any {
		return func() any { return r.release(by, tomb, ids...) }
	}
	for _, tt := range []struct {
		name  string
		setup func(r *protoRunner)
		step  func(r *protoRunner) func() any
		lean  bool
	}{
		{"enqueue: new requests on idle keys", func(r *protoRunner) {
			r.mustEnqueue(o, ttl, []string{"H", "h"}, req("H", lane("busy", 1)))
		}, func(r *protoRunner) func() any {
			return enq(r, ttl, []string{"A", "h", "B", "h"}, req("A", [][]any{{"a", 1}, {"c", 2}}), req("B", lane("b", 1)))
		}, true},
		{"enqueue: a key whose record is idle", func(r *protoRunner) {
			r.mustEnqueue(o, ttl, []string{"H", "h"}, req("H", lane("k", 1)))
			r.release(o, 0, "H")
		}, func(r *protoRunner) func() any { return enq(r, ttl, []string{"A", "h"}, req("A", lane("k", 1))) }, true},
		{"enqueue: a key whose record is stale", func(r *protoRunner) {
			r.mustEnqueue(o, 50, []string{"H", "h"}, req("H", lane("k", 1)))
			time.Sleep(80 * time.Millisecond)
			r.c.Del(context.Background(), r.key("queue"))
			r.heartbeat(o, ttl, []string{"H", "g"}, "H") // resets; H's deadline passed: no freeze
		}, func(r *protoRunner) func() any { return enq(r, ttl, []string{"A", "h"}, req("A", lane("k", 2))) }, true},
		{"enqueue: a held key", func(r *protoRunner) {
			r.mustEnqueue(o, ttl, []string{"H", "h"}, req("H", lane("k", 2)))
		}, func(r *protoRunner) func() any { return enq(r, ttl, []string{"A", "w"}, req("A", lane("k", 2))) }, false},
		{"enqueue: a key named twice in the step", func(r *protoRunner) {
			r.mustEnqueue(o, ttl, []string{"H", "h"}, req("H", lane("busy", 1)))
		}, func(r *protoRunner) func() any {
			return enq(r, ttl, []string{"A", "w", "B", "w"}, req("A", lane("k", 2)), req("B", lane("k", 2)))
		}, false},
		{"enqueue: an existing id", func(r *protoRunner) {
			r.mustEnqueue(o, ttl, []string{"H", "h"}, req("H", lane("k", 1)))
		}, func(r *protoRunner) func() any { return enq(r, ttl, []string{"H", "w"}, req("H", lane("k", 1))) }, false}, // reset: a new entry, frozen
		{"enqueue: a lineage", func(r *protoRunner) {
			r.mustEnqueue(o, ttl, []string{"H", "h"}, req("H", lane("busy", 1)))
		}, func(r *protoRunner) func() any {
			return enq(r, ttl, []string{"A", "w"}, req("A", lane("k", 1), "l", "H"))
		}, false},
		{"enqueue: an expired entry elsewhere", func(r *protoRunner) {
			r.mustEnqueue(o, 1, []string{"X", "h"}, req("X", lane("x", 1)))
			time.Sleep(20 * time.Millisecond)
		}, func(r *protoRunner) func() any { return enq(r, ttl, []string{"A", "h"}, req("A", lane("k", 1))) }, false}, // no live deadline: no freeze
		{"enqueue: a live tombstone of another id", func(r *protoRunner) {
			r.mustEnqueue(o, ttl, []string{"H", "h"}, req("H", lane("busy", 1)))
			r.release(o, 60000, "gone")
		}, func(r *protoRunner) func() any { return enq(r, ttl, []string{"A", "h"}, req("A", lane("k", 1))) }, true},
		{"enqueue: a live tombstone of its id", func(r *protoRunner) {
			r.mustEnqueue(o, ttl, []string{"H", "h"}, req("H", lane("busy", 1)))
			r.release(o, 60000, "A")
		}, func(r *protoRunner) func() any { return enq(r, ttl, []string{"A", "t"}, req("A", lane("k", 1))) }, false},
		{"enqueue: a lapsed tombstone of its id", func(r *protoRunner) {
			r.mustEnqueue(o, ttl, []string{"H", "h"}, req("H", lane("busy", 1)))
			r.release(o, 60000, "gone")
			r.release(o, 1, "A")
			time.Sleep(20 * time.Millisecond)
		}, func(r *protoRunner) func() any { return enq(r, ttl, []string{"A", "w"}, req("A", lane("k", 1))) }, false}, // reset: frozen
		{"enqueue: frozen", func(r *protoRunner) {
			r.mustEnqueue(o, ttl, []string{"H", "h"}, req("H", lane("busy", 1)))
			r.c.Del(context.Background(), r.key("queue"))
			r.heartbeat(o, ttl, []string{"H", "g"}, "H") // resets, frozen until H's deadline
		}, func(r *protoRunner) func() any {
			// The step resets again, and that reset forgets the running
			// freeze (PROTOCOL.md, known limits): A's state is not checked.
			return enq(r, ttl, nil, req("A", lane("k", 1)))
		}, false},
		{"release: an owner's holders", func(r *protoRunner) {
			r.mustEnqueue(o, ttl, []string{"H", "h", "G", "h"}, req("H", lane("h", 1)), req("G", [][]any{{"g", 1}, {"g2", 3}}))
		}, func(r *protoRunner) func() any { return rel(r, o, 0, "H", "G") }, true},
		{"release: a key with a waiter", func(r *protoRunner) {
			r.mustEnqueue(o, ttl, []string{"H", "h", "W", "w"}, req("H", lane("k", 1)), req("W", lane("k", 1)))
		}, func(r *protoRunner) func() any { return rel(r, o, 0, "H") }, false},
		{"release: a waiting entry", func(r *protoRunner) {
			r.mustEnqueue(o, ttl, []string{"H", "h", "W", "w"}, req("H", lane("k", 1)), req("W", lane("k", 1)))
		}, func(r *protoRunner) func() any { return rel(r, o, 0, "W") }, false},
		{"release: by an operator", func(r *protoRunner) {
			r.mustEnqueue(o, ttl, []string{"H", "h"}, req("H", lane("k", 1)))
		}, func(r *protoRunner) func() any { return rel(r, "", 0, "H") }, false},
		{"release: a settle", func(r *protoRunner) {
			r.mustEnqueue(o, ttl, []string{"H", "h"}, req("H", lane("k", 1)))
		}, func(r *protoRunner) func() any { return rel(r, o, 1000, "H") }, false},
		{"release: another owner's", func(r *protoRunner) {
			r.mustEnqueue(o, ttl, []string{"H", "h"}, req("H", lane("k", 1)))
		}, func(r *protoRunner) func() any { return rel(r, other, 0, "H") }, false},
		{"release: an id listed twice", func(r *protoRunner) {
			r.mustEnqueue(o, ttl, []string{"H", "h"}, req("H", lane("k", 1)))
		}, func(r *protoRunner) func() any { return rel(r, o, 0, "H", "H") }, false},
		{"release: an unknown id", func(r *protoRunner) {
			r.mustEnqueue(o, ttl, []string{"H", "h"}, req("H", lane("k", 1)))
		}, func(r *protoRunner) func() any { return rel(r, o, 0, "H", "nosuch") }, false},
		{"release: a nested entry", func(r *protoRunner) {
			r.mustEnqueue(o, ttl, []string{"H", "h", "N", "h"}, req("H", lane("k", 1)), req("N", lane("j", 1), "l", "H"))
		}, func(r *protoRunner) func() any { return rel(r, o, 0, "N") }, false},
		{"release: a lender", func(r *protoRunner) {
			r.mustEnqueue(o, ttl, []string{"P", "h", "C", "h"}, req("P", lane("k", 1)), req("C", lane("k", 1), "l", "P"))
			r.release(o, 0, "C") // P lent once: it keeps b
		}, func(r *protoRunner) func() any { return rel(r, o, 0, "P") }, false},
		{"release: an expired entry elsewhere", func(r *protoRunner) {
			r.mustEnqueue(o, ttl, []string{"H", "h"}, req("H", lane("k", 1)))
			r.mustEnqueue(o, 1, []string{"X", "h"}, req("X", lane("x", 1)))
			time.Sleep(20 * time.Millisecond)
		}, func(r *protoRunner) func() any { return rel(r, o, 0, "H") }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newProtoRunner(t)
			tt.setup(r)
			epoch := r.marker()["epoch"]
			if err := r.c.Del(context.Background(), r.key("nested")).Err(); err != nil {
				t.Fatal(err)
			}
			r.t = t
			got := epochOf(t, tt.step(r)())
			nested, _ := r.c.Exists(context.Background(), r.key("nested")).Result()
			if tt.lean && (got != epoch || nested != 0) {
				t.Errorf("epoch %s → %s, nested there: %v; want the lean path: the same epoch, nested still missing", epoch, got, nested == 1)
			}
			if !tt.lean && (got == epoch || nested != 1) {
				t.Errorf("epoch %s → %s, nested there: %v; want the full path: a reset, nested marked again", epoch, got, nested == 1)
			}
		})
	}
}

// TestProtocolRefusalsRealRedis: the per-request refusals "x" (the id
// names another request), "e" (another owner holds it), "t" (settled
// since), "c" (a lock cycle) and "b" (the lender lends to MAX_BORROWERS
// already) refuse that request alone and change nothing of it; the step's
// other requests go on.
func TestProtocolRefusalsRealRedis(t *testing.T) {
	secNoLeaks(t)
	r := newProtoRunner(t)
	a, b := "owner-a-"+r.nonce, "owner-b-"+r.nonce
	const ttl = 30000
	ctx := context.Background()
	epoch, _ := r.mustEnqueue(a, ttl, []string{"x1", "h", "x2", "w"}, req("x1", lane("k", 1)), req("x2", [][]any{{"k", 1}, {"j", 2}}, "l", "x0"))
	rec1, rec2 := r.record("x1"), r.record("x2")
	// The same id with other lanes (key, limit), another lineage, or
	// another owner's held entry: refused; the same lanes in another order
	// is the same request (a retry); a fresh id in the step goes on.
	r.mustEnqueue(a, ttl, []string{"x1", "x", "x2", "x"}, req("x1", lane("other", 1)), req("x2", [][]any{{"k", 1}, {"j", 2}}, "l", "y0"))
	r.mustEnqueue(a, ttl, []string{"x1", "x"}, req("x1", lane("k", 2)))
	r.mustEnqueue(a, ttl, []string{"x2", "x"}, req("x2", [][]any{{"k", 1}, {"j", 2}}))
	_, list := r.mustEnqueue(a, ttl, []string{"x2", "w", "x3", "w"}, req("x2", [][]any{{"j", 2}, {"k", 1}}, "l", "x0"), req("x3", lane("k", 1)))
	if detail(list, 1)[1] != int64(2) {
		t.Errorf("x3 position %v; want 2, behind x2", detail(list, 1))
	}
	r.mustEnqueue(b, ttl, []string{"x1", "e", "x2", "x"}, req("x1", lane("k", 1)), req("x2", lane("k", 1), "l", "x0"))
	if got1, got2 := r.record("x1"), r.record("x2"); fmt.Sprint(got1) != fmt.Sprint(rec1) || got2["o"] != rec2["o"] || fmt.Sprint(got2["k"]) != fmt.Sprint(rec2["k"]) {
		t.Errorf("records after refusals: %v %v; want %v %v", got1, got2, rec1, rec2)
	}
	if _, ok := r.keyRecord("other"); ok {
		t.Errorf("the refused x1 left a record of key other")
	}

	// "t": a settle (a release by the owner with a tombstone lifetime)
	// removes what is there and tombstones every id, present or not; the
	// marker's tombs is when the last one lapses.
	r.checkRelease(r.release(a, 60000, "x3", "never"), []string{"w", "g"}, nil)
	zs := r.zset("tombs")
	if now := r.now(); len(zs) != 2 || zs[0].Member != "s\x00never" || zs[1].Member != "s\x00x3" || zs[0].Score < float64(now+59000) || zs[0].Score > float64(now+60001) {
		t.Errorf("tombs = %v; want s\\0never and s\\0x3 lapsing a minute from now", zs)
	}
	if m := r.marker(); len(zs) == 2 && m["tombs"] != strconv.FormatFloat(zs[1].Score, 'f', 0, 64) {
		t.Errorf("lanes marker %v; want tombs %v", m, zs[1].Score)
	}
	r.mustEnqueue(a, ttl, []string{"x3", "t", "never", "t", "x4", "w"}, req("x3", lane("k", 1)), req("never", lane("n", 1)), req("x4", lane("k", 1)))
	r.mustEnqueue(b, ttl, []string{"never", "t"}, req("never", lane("n", 1)))
	if r.exists("x3") || r.exists("never") {
		t.Errorf("a tombstoned id was enqueued")
	}

	// "c": the cycle refusal has no side effect: no entry, no sequence
	// number, no queue member, no nested member.
	r.mustEnqueue(a, ttl, []string{"P", "h", "Q", "h"}, req("P", lane("ca", 1)), req("Q", lane("cb", 1)))
	r.mustEnqueue(a, ttl, []string{"R", "w"}, req("R", lane("ca", 1), "l", "Q"))
	seq, _ := r.c.HGet(ctx, r.key("meta"), "seq").Result()
	nested, _ := r.c.ZCard(ctx, r.key("nested")).Result()
	r.mustEnqueue(a, ttl, []string{"C", "c", "D", "w"}, req("C", lane("cb", 1), "l", "P"), req("D", lane("cb", 1)))
	seq2, _ := r.c.HGet(ctx, r.key("meta"), "seq").Result()
	nested2, _ := r.c.ZCard(ctx, r.key("nested")).Result()
	if r.exists("C") || nested2 != nested || seq2 != strconv.Itoa(mustAtoi(t, seq)+1) {
		t.Errorf("after the cycle refusal: C there %v, nested %d→%d, seq %s→%s; want only D's sequence number", r.exists("C"), nested, nested2, seq, seq2)
	}
	r.wantKeyRec("cb", epoch, 1, 1, "Q") // D alone waits

	// "b": a lender lends to MAX_BORROWERS nested entries at most; the next
	// borrower is refused, the others are granted at once.
	max := int(r.doc.bounds["MAX_BORROWERS"])
	r.mustEnqueue(a, ttl, []string{"L", "h"}, req("L", lane("lent", 1)))
	var reqs []map[string]any
	var want []string
	for i := range max + 1 {
		id := fmt.Sprint("bw", i)
		reqs = append(reqs, req(id, lane("lent", 1), "l", "L"))
		want = append(want, id, map[bool]string{true: "b", false: "h"}[i == max])
	}
	r.mustEnqueue(a, ttl, want, reqs...)
	last := fmt.Sprint("bw", max)
	lends, _ := r.c.ZLexCount(ctx, r.key("nested"), "[ L\x00", "( L\x01").Result()
	if r.exists(last) || lends != int64(max) || r.record("L")["b"] != float64(1) {
		t.Errorf("after %d borrowers: %s there %v, L lends to %d, L's b %v; want the last refused, %d lent, b 1", max+1, last, r.exists(last), lends, r.record("L")["b"], max)
	}
	r.wantKeyRec("lent", epoch, 1, 0, "L") // borrowers take no slot
}

// TestProtocolTakeOverRealRedis: an enqueue of another owner's waiting
// entry, with the same lanes and lineage, takes it over with its place and
// sequence number; the old owner gets a {"id"} hint and finds it gone.
func TestProtocolTakeOverRealRedis(t *testing.T) {
	secNoLeaks(t)
	r := newProtoRunner(t)
	a, b := "owner-a-"+r.nonce, "owner-b-"+r.nonce
	hintsA := r.subscribe(a)
	const ttl = 30000
	r.mustEnqueue(a, ttl, []string{"H", "h", "W", "w"}, req("H", lane("k", 1)), req("W", lane("k", 1)))
	seq := r.record("W")["q"]
	v, err := r.call("enqueue.lua", map[string]any{"TTL ms": ttl, "owner id": b, "host": "other-host", "pid": 7, "requests JSON": `[{"id":"W","k":[["k",1]]}]`})
	if err != nil {
		t.Fatal(err)
	}
	_, sts := r.statuses("enqueue.lua", v, "W", "w")
	if rec := r.record("W"); rec["o"] != b || rec["h"] != "other-host" || rec["p"] != float64(7) || rec["q"] != seq || detail(sts, 0)[1] != int64(1) {
		t.Errorf("W after the take-over: %v, %v; want owner %s, its host and pid, the same seq %v, position 1", rec, sts, b, seq)
	}
	if h := hintFor(hintsA.hint(t), "W"); h == nil || h["x"] != nil {
		t.Errorf("hint to the old owner = %v; want {id: W}", h)
	}
	r.heartbeat(a, ttl, []string{"W", "g"}, "W")
	r.heartbeat(b, ttl, []string{"W", "w"}, "W")
}

// TestProtocolHolderTTLRealRedis: as PROTOCOL.md's Holder TTL says, a
// waiting status that a holder's end could grant carries the ms until the
// first lease of the holders before it runs out, on enqueue.lua (lean, and
// general with a lineage) and heartbeat.lua; a held status, a waiter
// behind another on a key of limit 1 and one whose key has room carry 0;
// and after that many ms, a heartbeat of the waiter reaps the holder that
// was not renewed (its runner died) and grants.
func TestProtocolHolderTTLRealRedis(t *testing.T) {
	secNoLeaks(t)
	r := newProtoRunner(t)
	dead, w := "owner-dead-"+r.nonce, "owner-w-"+r.nonce
	const short, long = 400, 60000
	r.mustEnqueue(dead, short, []string{"H", "h", "H2", "h"}, req("H", lane("k", 1)), req("H2", lane("n", 1)))
	r.ttls = nil
	r.mustEnqueue(w, long, []string{"W", "w", "X", "w"}, req("W", [][]any{{"k", 1}, {"b", 1}}), req("X", lane("b", 1)))
	if len(r.ttls) != 2 || r.ttls[0] <= 0 || r.ttls[0] > short || r.ttls[1] != 0 {
		t.Fatalf("enqueue.lua: holder TTLs %v; want W's in (0, %d] and X's 0 (b has a waiter and no holder)", r.ttls, short)
	}
	r.ttls = nil
	r.mustEnqueue(w, long, []string{"N", "w", "F", "w"}, req("N", lane("n", 1), "l", "outer-"+r.nonce), req("F", lane("k", 1), "l", "outer-"+r.nonce))
	if len(r.ttls) != 2 || r.ttls[0] <= 0 || r.ttls[0] > short || r.ttls[1] != 0 {
		t.Fatalf("enqueue.lua with a lineage (the general path): holder TTLs %v; want N's in (0, %d] and F's 0 (second waiter of a key of limit 1)", r.ttls, short)
	}
	r.ttls = nil
	r.heartbeat(w, long, []string{"W", "w"}, "W")
	if len(r.ttls) != 1 || r.ttls[0] <= 0 || r.ttls[0] > short {
		t.Fatalf("heartbeat.lua: holder TTLs %v; want one in (0, %d]", r.ttls, short)
	}
	for left := r.ttls[0]; ; {
		time.Sleep(time.Duration(left+1) * time.Millisecond)
		r.ttls = nil
		v := r.mustCall("heartbeat.lua", map[string]any{"TTL ms": long, "owner id": w, "entry ids...": []string{"W"}})
		st := v.([]any)[1].([]any)[0].([]any)
		if st[1] == "h" {
			break
		}
		if left = r.ttls[0]; left == 0 {
			t.Fatalf("heartbeat.lua after the holder TTL: W is %v with no holder TTL; want held", st)
		}
	}
	r.release(w, 0, "W", "X", "N", "F")
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestProtocolTombstonesRealRedis: a release by force leaves "f\0id" for
// the lifetime given, by which the owner's release answers "f"; "f" does
// not stop an enqueue; heartbeat.lua removes lapsed tombstones; an
// operator's release with lifetime 0 leaves none; the marker's tombs says
// when the last one lapses, and a settle on a namespace with no state
// makes one.
func TestProtocolTombstonesRealRedis(t *testing.T) {
	secNoLeaks(t)
	r := newProtoRunner(t)
	a := "owner-" + r.nonce
	hints := r.subscribe(a)
	nsch := r.subscribeNamespace()
	const ttl = 30000
	// A settle with no state makes one, announced, for its tombstones.
	epoch := r.checkRelease(r.release(a, 100, "s0"), []string{"g"}, nil)
	if got := nsch.reset(t); epoch == "" || got != epoch {
		t.Errorf("a settle with no state: epoch %q, announced %q; want a new state", epoch, got)
	}
	r.checkMarkers(t)
	r.mustEnqueue(a, ttl, []string{"f1", "h", "f2", "w", "f3", "h"}, req("f1", lane("k", 1)), req("f2", lane("k", 1)), req("f3", lane("j", 1)))
	r.checkRelease(r.release("", 200, "f1", "f3"), []string{"h", "h"}, []string{"f2"})
	items := hints.hint(t)
	if len(items) != 3 || hintFor(items, "f1") == nil || hintFor(items, "f3") == nil || hintFor(items, "f2")["x"] == nil {
		t.Errorf("hint %v; want f2 granted, f1 and f3 removed", items)
	}
	zs := r.zset("tombs")
	if m := r.marker(); len(zs) != 3 || m["tombs"] != strconv.FormatFloat(zs[len(zs)-1].Score, 'f', 0, 64) {
		t.Errorf("tombs %v, marker %v; want s\\0s0, f\\0f1, f\\0f3, and the marker's tombs the last lapse", zs, m)
	}
	r.checkRelease(r.release(a, 0, "f1", "f2"), []string{"f", "h"}, nil)
	r.checkRelease(r.release("", 0, "nosuch"), []string{"g"}, nil)
	// "f" does not stop an enqueue of the id, and the owner's release
	// then removes the new entry.
	r.mustEnqueue(a, ttl, []string{"f3", "h"}, req("f3", lane("j", 1)))
	r.checkRelease(r.release(a, 0, "f3"), []string{"h"}, nil)
	// An operator's release with lifetime 0 leaves no tombstone.
	r.mustEnqueue(a, ttl, []string{"f4", "h"}, req("f4", lane("j", 1)))
	r.checkRelease(r.release("", 0, "f4"), []string{"h"}, nil)
	r.checkRelease(r.release(a, 0, "f4"), []string{"g"}, nil)
	// Past its lifetime, a tombstone no longer answers, and the next
	// heartbeat removes it.
	time.Sleep(250 * time.Millisecond)
	r.checkRelease(r.release(a, 0, "f1"), []string{"g"}, nil)
	r.heartbeat(a, ttl, []string{"f1", "g"}, "f1")
	if n, _ := r.c.ZCard(context.Background(), r.key("tombs")).Result(); n != 0 {
		t.Errorf("tombs holds %d after a heartbeat past every lifetime; want 0", n)
	}
}

// TestProtocolResetRealRedis: a state key that vanished (DEL, as an
// eviction would) is seen by the next step that checks it (a heartbeat
// always does), which resets the namespace: the reset is announced on the
// namespace's channel with the new epoch, every entry of the old epoch is
// gone, its key records are stale but keep their tokens, and no grant
// happens until the freeze ends: the latest deadline the lost state knew,
// or, when the deadlines themselves were lost, now plus the longest TTL
// given.
func TestProtocolResetRealRedis(t *testing.T) {
	secNoLeaks(t)
	for _, lost := range []string{"queue", "deadlines", "lanes", "meta"} {
		t.Run(lost, func(t *testing.T) {
			r := newProtoRunner(t)
			owner := "owner-" + r.nonce
			hints := r.subscribe(owner)
			nsch := r.subscribeNamespace()
			// H and W: 3s, not 1.5s, so that their deadlines have not passed
			// at the reset (the freeze is the latest one) though a loaded
			// machine may starve this process. N: 30s, so that it outlives
			// such a stall between its heartbeats; the freeze, set by then,
			// does not depend on it.
			const short, long = 3000, 30000
			epoch1, list := r.mustEnqueue(owner, short, []string{"H", "h", "W", "w"}, req("H", lane("k", 1)), req("W", lane("k", 1)))
			tok1 := detail(list, 0)[1].(string)
			if got := nsch.reset(t); got != epoch1 {
				t.Fatalf("namespace message %q; want the first epoch %q", got, epoch1)
			}
			ctx := context.Background()
			last, _ := r.c.ZScore(ctx, r.key("deadlines"), "W").Result()
			if err := r.c.Del(ctx, r.key(lost)).Err(); err != nil {
				t.Fatal(err)
			}

			before := r.now()
			epoch2, _ := r.heartbeat(owner, short, []string{"H", "g", "W", "g"}, "H", "W")
			after := r.now()
			if epoch2 == epoch1 || epoch2 == "" {
				t.Errorf("epoch after the reset %q; want a new one (was %q)", epoch2, epoch1)
			}
			if got := nsch.reset(t); got != epoch2 {
				t.Errorf("namespace message after the reset: epoch %q; want %q", got, epoch2)
			}
			r.checkMarkers(t)
			if n, _ := r.c.HLen(ctx, r.key("entries")).Result(); n != 1 {
				t.Errorf("entries holds %d fields after the reset; want the marker alone", n)
			}
			// The key record of k: stale, with its token, unless lanes was lost.
			rec, ok := r.keyRecord("k")
			if lost == "lanes" {
				if ok {
					t.Errorf("record of k %q after lanes was lost; want none", rec.raw)
				}
			} else if !ok || rec.epoch != epoch1 || rec.token != tok1 {
				t.Errorf("record of k %q; want the stale record of epoch %s keeping the token %s", rec.raw, epoch1, tok1)
			}
			m := r.marker()
			p := r.checkInspect(r.inspect(10, "k", ""))
			frozen := p.stats[4]
			switch lost {
			case "deadlines": // now plus the longest TTL an enqueue gave
				if frozen < before+short || frozen > after+short {
					t.Errorf("frozen until %d; want now plus maxttl (%d to %d)", frozen, before+short, after+short)
				}
			default: // every deadline known: the latest one
				if frozen != int64(last) {
					t.Errorf("frozen until %d; want the latest deadline, %v", frozen, last)
				}
			}
			if m["epoch"] != epoch2 || m["maxttl"] != strconv.Itoa(short) {
				t.Errorf("lanes marker %v; want epoch %s, maxttl %d", m, epoch2, short)
			}
			if meta := r.hash("meta"); meta["resets"] != "1" || (lost != "meta" && meta["seq"] != "1") {
				t.Errorf("meta %q; want resets 1, and seq kept unless meta was lost", meta)
			}
			if k := p.key(t, "k"); p.stats[3] != 1 || k.limit != 0 || k.nh+k.nw != 0 {
				t.Errorf("after the reset: %+v; want resets 1, k with neither holders nor waiters", p)
			}
			// No grant before the freeze ends; the first heartbeat after it
			// grants, and hints; the new token is above the old.
			r.mustEnqueue(owner, long, []string{"N", "w"}, req("N", lane("k", 1)))
			for r.now() < frozen-100 {
				r.heartbeat(owner, long, []string{"N", "w"}, "N")
				time.Sleep(50 * time.Millisecond)
			}
			for r.now() <= frozen {
				time.Sleep(10 * time.Millisecond)
			}
			_, list = r.heartbeat(owner, long, []string{"N", "h"}, "N")
			if h := hintFor(hints.hint(t), "N"); h == nil || h["x"] == nil {
				t.Errorf("hint after the freeze = %v; want N's grant", h)
			}
			if tok := detail(list, 0)[1].(string); mustUint(t, tok) <= mustUint(t, tok1) || r.wantKeyRec("k", epoch2, 1, 0, "N") != tok {
				t.Errorf("N's token %s; want it above H's, %s, and in k's record", tok, tok1)
			}
		})
	}
}

// A state key that vanished, or lost only its marker, is seen by the next
// step that runs the full check, whatever lean steps ran in between and
// wrote to it again (real Redis). A lean enqueue that raised maxttl once
// made meta again without its marker; the loss then went unseen, seq
// started again from 1 under waiting entries, and a later waiter was
// granted first. A lanes hash without its marker field alone once made
// every step fail with a Lua error.
func TestProtocolLostKeyWrittenAgainRealRedis(t *testing.T) {
	secNoLeaks(t)
	for _, lost := range []string{"entries", "lanes", "queue", "deadlines", "nested", "meta"} {
		for _, how := range []string{"deleted", "marker removed"} {
			t.Run(lost+" "+how, func(t *testing.T) {
				r := newProtoRunner(t)
				owner := "owner-" + r.nonce
				ctx := context.Background()
				epoch1, _ := r.mustEnqueue(owner, 30000, []string{"H", "h", "W1", "w"}, req("H", lane("k", 1)), req("W1", lane("k", 1)))
				k := r.key(lost)
				var err error
				switch {
				case how == "deleted":
					err = r.c.Del(ctx, k).Err()
				case lost == "entries" || lost == "lanes" || lost == "meta":
					err = r.c.HDel(ctx, k, "\x00").Err()
				default:
					err = r.c.ZRem(ctx, k, "\x00").Err()
				}
				if err != nil {
					t.Fatal(err)
				}
				// Lean steps that write to the state keys: an enqueue on an
				// idle key with a longer TTL (raises maxttl), its release.
				if _, err := r.enqueue(owner, 40000, req("L", lane("other", 1))); err != nil {
					t.Fatalf("enqueue after %s %s: %v", lost, how, err)
				}
				if _, err := r.call("release.lua", map[string]any{"owner id": owner, "tombstone ms": 0, "entry ids...": []string{"L"}}); err != nil {
					t.Fatalf("release after %s %s: %v", lost, how, err)
				}
				// The next full check resets: H and W1 are gone, in a new
				// epoch, and A waits (frozen) instead of being granted.
				epoch2, _ := r.heartbeat(owner, 30000, []string{"H", "g", "W1", "g"}, "H", "W1")
				if epoch2 == epoch1 || epoch2 == "" {
					t.Errorf("epoch after %s %s %q; want a new one (was %q)", lost, how, epoch2, epoch1)
				}
				r.checkMarkers(t)
				r.mustEnqueue("other-"+r.nonce, 30000, []string{"A", "w"}, req("A", lane("k", 1)))
			})
		}
	}
}

// A second reset while the first one's freeze runs keeps that freeze: the
// leases of the first lost state may still be held until it ends (real
// Redis). A second reset once computed its freeze from its own, empty,
// deadlines and granted a key its old holder still held.
func TestProtocolSecondResetKeepsFreezeRealRedis(t *testing.T) {
	secNoLeaks(t)
	for _, second := range []string{"nested", "queue", "deadlines", "lanes", "meta", "lanes and meta"} {
		t.Run(second, func(t *testing.T) {
			r := newProtoRunner(t)
			owner := "owner-" + r.nonce
			ctx := context.Background()
			r.mustEnqueue(owner, 30000, []string{"H", "h"}, req("H", lane("busy", 1)))
			hdl, err := r.c.ZScore(ctx, r.key("deadlines"), "H").Result()
			if err != nil {
				t.Fatal(err)
			}
			if err := r.c.Del(ctx, r.key("queue")).Err(); err != nil {
				t.Fatal(err)
			}
			r.heartbeat(owner, 30000, []string{"H", "g"}, "H") // the first reset
			if m := r.marker(); m["frozen"] != strconv.FormatInt(int64(hdl), 10) {
				t.Fatalf("frozen %s after the first reset; want H's deadline %v", m["frozen"], int64(hdl))
			}
			for _, k := range strings.Split(second, " and ") {
				if err := r.c.Del(ctx, r.key(k)).Err(); err != nil {
					t.Fatal(err)
				}
			}
			before := r.now()
			r.mustEnqueue("other-"+r.nonce, 30000, []string{"B", "w"}, req("B", lane("busy", 1)))
			frozen, err := strconv.ParseInt(r.marker()["frozen"], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			want := int64(hdl)
			if second == "lanes and meta" {
				want = before + 30000 // both copies of the freeze lost: the longest TTL from now
			}
			if frozen < want {
				t.Errorf("after a second reset (%s lost), frozen until %d; want at least %d", second, frozen, want)
			}
		})
	}
}

// TestProtocolInspectPagingRealRedis: inspect.lua returns at most budget
// entries per page, holders (in grant order) then waiters, and a cursor to
// go on with: "h" or "w" and the member last returned, "w" (the waiters
// from the first), "\0" (the budget ran out before the key) or "" (done);
// a cursor of another key is refused, and with nothing to reap that
// changes nothing.
func TestProtocolInspectPagingRealRedis(t *testing.T) {
	secNoLeaks(t)
	r := newProtoRunner(t)
	owner := "owner-" + r.nonce
	const ttl = 30000
	r.mustEnqueue(owner, ttl, []string{"h2", "h", "h1", "h", "w1", "w", "w2", "w", "w3", "w", "w4", "w", "w5", "w", "q1", "h"},
		req("h2", lane("p", 2)), req("h1", lane("p", 2)), req("w1", lane("p", 2)), req("w2", lane("p", 2)),
		req("w3", lane("p", 2)), req("w4", lane("p", 2)), req("w5", lane("p", 2)), req("q1", lane("q", 1)))
	member := func(id string) string {
		t.Helper()
		ms, _ := r.c.ZRangeArgs(context.Background(), redis.ZRangeArgs{Key: r.key("queue"), Start: "[p\x00", Stop: "(p\x01", ByLex: true}).Result()
		for _, m := range ms {
			if strings.HasSuffix(m, "\x00"+id) {
				return m
			}
		}
		t.Fatalf("no queue member of %s", id)
		return ""
	}
	type want struct {
		holders, waiters []string
		next             string
	}
	check := func(p page, key string, w want) {
		t.Helper()
		k := p.key(t, key)
		if !slices.Equal(k.holders, w.holders) || !slices.Equal(k.waiters, w.waiters) || k.next != w.next {
			t.Errorf("inspect %s = holders %q waiters %q next %q; want %q %q %q", key, k.holders, k.waiters, k.next, w.holders, w.waiters, w.next)
		}
		if key == "p" && (k.nh != 2 || k.nw != 5 || k.limit != 2) {
			t.Errorf("inspect p counts %+v; want limit 2, 2 holders, 5 waiters", k)
		}
	}
	p := r.checkInspect(r.inspect(3, "p", "", "q", ""))
	check(p, "p", want{[]string{"h2", "h1"}, []string{"w1"}, "w" + member("w1")})
	check(p, "q", want{nil, nil, "\x00"})
	p = r.checkInspect(r.inspect(3, "p", "w"+member("w1"), "q", ""))
	check(p, "p", want{nil, []string{"w2", "w3", "w4"}, "w" + member("w4")})
	check(p, "q", want{nil, nil, "\x00"})
	p = r.checkInspect(r.inspect(3, "p", "w"+member("w4"), "q", ""))
	check(p, "p", want{nil, []string{"w5"}, ""})
	check(p, "q", want{[]string{"q1"}, nil, ""})
	// The holders fill the budget: go on with "w", the first waiter.
	p = r.checkInspect(r.inspect(2, "p", ""))
	check(p, "p", want{[]string{"h2", "h1"}, nil, "w"})
	p = r.checkInspect(r.inspect(2, "p", "w"))
	check(p, "p", want{nil, []string{"w1", "w2"}, "w" + member("w2")})
	// More holders than the budget: they come in pages too.
	p = r.checkInspect(r.inspect(1, "p", ""))
	check(p, "p", want{[]string{"h2"}, nil, "hp\x00h2"})
	p = r.checkInspect(r.inspect(1, "p", "hp\x00h2"))
	check(p, "p", want{[]string{"h1"}, nil, "w"})
	// A cursor that does not belong to the key is refused.
	before := r.hash("lanes")
	for _, cursor := range []string{"w" + member("w1"), "h", "x", "hq", "wq"} {
		if _, err := r.call("inspect.lua", map[string]any{"budget": 3, "key and cursor...": []string{"q", cursor}}); err == nil || !strings.HasPrefix(err.Error(), "LANES_BADARG cursor ") {
			t.Errorf("inspect q with the cursor %q = %v; want LANES_BADARG cursor", cursor, err)
		}
	}
	if after := r.hash("lanes"); !mapsEqual(before, after) {
		t.Errorf("lanes %q after refused cursors; want %q", after, before)
	}
	// The budget is at most MAX_STEP_REQUESTS.
	if _, err := r.call("inspect.lua", map[string]any{"budget": r.doc.bounds["MAX_STEP_REQUESTS"] + 1, "key and cursor...": []string{"p", ""}}); err == nil || !strings.HasPrefix(err.Error(), "LANES_BADARG budget ") {
		t.Errorf("inspect with a budget past MAX_STEP_REQUESTS = %v; want LANES_BADARG budget", err)
	}
}

// TestProtocolBadArgRealRedis: every kind of out-of-bounds input is refused
// with LANES_BADARG and the documented field, before any change (a fresh
// namespace stays without keys); a wrong protocol argument, a state of
// another version and protocol 1's keys with LANES_VERSION.
func TestProtocolBadArgRealRedis(t *testing.T) {
	secNoLeaks(t)
	r := newProtoRunner(t)
	owner := "owner-" + r.nonce
	b := r.doc.bounds
	ctx := context.Background()
	long := func(n int64) string { return strings.Repeat("i", int(n)) }
	reqs := func(rs ...map[string]any) string {
		js, err := json.Marshal(rs)
		if err != nil {
			t.Fatal(err)
		}
		return string(js)
	}
	enq := func(ttl any, own, host string, pid any, requests string) func() error {
		return func() error {
			_, err := r.call("enqueue.lua", map[string]any{"TTL ms": ttl, "owner id": own, "host": host, "pid": pid, "requests JSON": requests})
			return err
		}
	}
	ok := reqs(req("e", lane("k", 1)))
	manyLanes := func(n int) [][]any {
		var l [][]any
		for i := range n {
			l = append(l, []any{fmt.Sprint("k", i), 1})
		}
		return l
	}
	var bigStep []map[string]any
	for i := range int(b["MAX_STEP_LANES"]/b["MAX_LANES"]) + 1 {
		bigStep = append(bigStep, req(fmt.Sprint("r", i), manyLanes(int(b["MAX_LANES"]))))
	}
	var lineage, tooMany []string
	for i := range b["MAX_LINEAGE"] + 1 {
		lineage = append(lineage, fmt.Sprint("a", i))
	}
	for i := range b["MAX_STEP_REQUESTS"] + 1 {
		tooMany = append(tooMany, fmt.Sprint("i", i))
	}
	hb := func(ttl any, own string, ids ...string) func() error {
		return func() error {
			_, err := r.call("heartbeat.lua", map[string]any{"TTL ms": ttl, "owner id": own, "entry ids...": ids})
			return err
		}
	}
	rel := func(own string, tomb any, ids ...string) func() error {
		return func() error {
			_, err := r.call("release.lua", map[string]any{"owner id": own, "tombstone ms": tomb, "entry ids...": ids})
			return err
		}
	}
	insp := func(budget any, pairs ...string) func() error {
		return func() error {
			_, err := r.call("inspect.lua", map[string]any{"budget": budget, "key and cursor...": pairs})
			return err
		}
	}
	doc := func(what, mode string, cursor string, count any) func() error {
		return func() error {
			_, err := r.call("doctor.lua", map[string]any{"what": what, "mode": mode, "cursor": cursor, "count": count})
			return err
		}
	}
	rec := func(own, call, value string, retention any, ids ...string) func() error {
		return func() error {
			_, err := r.call("record.lua", map[string]any{"owner id": own, "call id": call, "value": value, "retention ms": retention, "entry ids...": ids})
			return err
		}
	}
	keys := func(script string, keys []string, argv ...any) func() error {
		return func() error {
			_, err := r.eval(script, keys, append([]any{r.doc.protocol, r.wake}, argv...))
			return err
		}
	}
	cases := []struct {
		name, field string
		run         func() error
	}{
		{"a key with a newline", "key", enq(30000, owner, "", 1, reqs(req("e", lane("a\nb", 1))))},
		{"a key of invalid UTF-8", "key", enq(30000, owner, "", 1, `[{"id":"e","k":[["a`+"\xff"+`b",1]]}]`)},
		{"a key with a C1 control", "key", enq(30000, owner, "", 1, reqs(req("e", lane("a\u0085b", 1))))},
		{"an empty key", "key", enq(30000, owner, "", 1, reqs(req("e", lane("", 1))))},
		{"a key past MAX_KEY_LEN", "key", enq(30000, owner, "", 1, reqs(req("e", lane(long(b["MAX_KEY_LEN"]+1), 1))))},
		{"a key named twice", "key", enq(30000, owner, "", 1, reqs(req("e", [][]any{{"k", 1}, {"k", 1}})))},
		{"a 5000-byte id", "id", enq(30000, owner, "", 1, reqs(req(long(5000), lane("k", 1))))},
		{"an id with a space", "id", enq(30000, owner, "", 1, reqs(req("a b", lane("k", 1))))},
		{"duplicate ids in one step", "id", enq(30000, owner, "", 1, reqs(req("e", lane("k", 1)), req("e", lane("k", 1))))},
		{"a fractional TTL", "ttl", enq("1500.5", owner, "", 1, ok)},
		{"TTL 0", "ttl", enq(0, owner, "", 1, ok)},
		{"a TTL past MAX_TTL", "ttl", enq(b["MAX_TTL"]+1, owner, "", 1, ok)},
		{"a TTL in exponent form", "ttl", enq("1e3", owner, "", 1, ok)},
		{"an empty owner", "owner", enq(30000, "", "", 1, ok)},
		{"a host with a control character", "host", enq(30000, owner, "h\x01", 1, ok)},
		{"a host past MAX_FIELD_LEN", "host", enq(30000, owner, long(b["MAX_FIELD_LEN"]+1), 1, ok)},
		{"a negative pid", "pid", enq(30000, owner, "", -1, ok)},
		{"requests not JSON", "requests", enq(30000, owner, "", 1, "not json")},
		{"no request", "requests", enq(30000, owner, "", 1, "[]")},
		{"no lane", "lanes", enq(30000, owner, "", 1, reqs(req("e", [][]any{})))},
		{"lanes past MAX_LANES", "lanes", enq(30000, owner, "", 1, reqs(req("e", manyLanes(int(b["MAX_LANES"])+1))))},
		{"limit 0", "limit", enq(30000, owner, "", 1, reqs(req("e", lane("k", 0))))},
		{"a limit past MAX_LIMIT", "limit", enq(30000, owner, "", 1, reqs(req("e", [][]any{{"k", b["MAX_LIMIT"] + 1}})))},
		{"a fractional limit", "limit", enq(30000, owner, "", 1, reqs(req("e", [][]any{{"k", 1.5}})))},
		{"a limit written as a string", "limit", enq(30000, owner, "", 1, `[{"id":"e","k":[["k","1"]]}]`)},
		{"a tool past MAX_FIELD_LEN", "field", enq(30000, owner, "", 1, reqs(req("e", lane("k", 1), "t", long(b["MAX_FIELD_LEN"]+1))))},
		{"a lineage naming the request", "lineage", enq(30000, owner, "", 1, reqs(req("e", lane("k", 1), "l", "x e")))},
		{"a lineage past MAX_LINEAGE", "lineage", enq(30000, owner, "", 1, reqs(req("e", lane("k", 1), "l", strings.Join(lineage, " "))))},
		{"a step past MAX_STEP_LANES", "step", enq(30000, owner, "", 1, reqs(bigStep...))},
		{"heartbeat: a fractional TTL", "ttl", hb("1500.5", owner, "e")},
		{"heartbeat: no ids", "ids", hb(30000, owner)},
		{"heartbeat: ids past MAX_STEP_REQUESTS", "ids", hb(30000, owner, tooMany...)},
		{"heartbeat: a 5000-byte id", "id", hb(30000, owner, long(5000))},
		{"heartbeat: an owner with a space", "owner", hb(30000, "a b", "e")},
		{"release: an owner with a space", "owner", rel("a b", 0, "e")},
		{"release: a tombstone past MAX_TTL", "tombstone", rel(owner, b["MAX_TTL"]+1, "e")},
		{"release: a fractional tombstone", "tombstone", rel(owner, "0.5", "e")},
		{"release: an id with a newline", "id", rel(owner, 0, "a\nb")},
		{"release: no ids", "ids", rel(owner, 0)},
		{"inspect: budget 0", "budget", insp(0, "k", "")},
		{"inspect: a fractional budget", "budget", insp("1.5", "k", "")},
		{"inspect: a key without its cursor", "keys", insp(10, "k")},
		{"inspect: keys past MAX_STEP_REQUESTS", "keys", insp(10, append(slices.Repeat([]string{"k", ""}, int(b["MAX_STEP_REQUESTS"])), "k", "")...)},
		{"inspect: a key with a newline", "key", insp(10, "a\nb", "")},
		{"inspect: a cursor of another key", "cursor", insp(10, "k", "wother\x00")},
		{"inspect: a cursor of neither kind", "cursor", insp(10, "k", "xbogus")},
		{"inspect: a bad cursor after a good key", "cursor", insp(10, "j", "", "k", "h")},
		{"doctor: what holds", "what", doc("holds", "check", "0", 10)},
		{"doctor: mode fix", "mode", doc("entries", "fix", "0", 10)},
		{"doctor: count 0", "count", doc("entries", "check", "0", 0)},
		{"doctor: count past MAX_STEP_REQUESTS", "count", doc("entries", "check", "0", b["MAX_STEP_REQUESTS"]+1)},
		{"doctor: a cursor not a number", "cursor", doc("entries", "check", "x", 10)},
		{"doctor: cursor checked before count", "cursor", doc("queue", "check", "x", 0)},
		{"doctor: reap in check mode", "mode", doc("reap", "check", "0", 10)},
		{"record: an operator", "owner", rec("", "call", "v", 1000)},
		{"record: no call id", "call", rec(owner, "", "v", 1000)},
		{"record: a call id with a newline", "call", rec(owner, "a\nb", "v", 1000)},
		{"record: a value past 1 MiB", "value", rec(owner, "call", strings.Repeat("v", 1<<20+1), 1000)},
		{"record: retention 0", "retention", rec(owner, "call", "v", 0)},
		{"record: retention past 30 days", "retention", rec(owner, "call", "v", int64(2592000001))},
		{"record: ids past MAX_STEP_REQUESTS", "ids", rec(owner, "call", "v", 1000, tooMany...)},
		{"record: an id with a space", "id", rec(owner, "call", "v", 1000, "a b")},
		{"six KEYS", "keys", keys("heartbeat.lua", r.keys[:len(r.keys)-1], 30000, owner, "e")},
		{"nine KEYS", "keys", keys("heartbeat.lua", append(slices.Clone(r.keys), r.runKey("x"), r.runKey("y")), 30000, owner, "e")},
		{"record.lua with seven KEYS", "keys", keys("record.lua", r.keys, owner, "call", "v", 1000)},
	}
	for _, tt := range cases {
		err := tt.run()
		want := "LANES_BADARG " + tt.field + " "
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s = %v; want %s<what>", tt.name, err, want)
		}
		if !slices.Contains(r.doc.badarg, tt.field) {
			t.Errorf("%s: PROTOCOL.md does not list the LANES_BADARG field %q", tt.name, tt.field)
		}
	}
	everything := append(slices.Clone(r.keys), r.runKey(r.run))
	if n, _ := r.c.Exists(ctx, everything...).Result(); n != 0 {
		t.Errorf("after refused steps, %d keys of the namespace exist; want none (refused before any change)", n)
	}

	// The same refusals on a state where a step would change something
	// before deciding: a holder past its deadline (a reap removes it and
	// grants its waiter) and a lapsed tombstone. Every key must stay
	// byte for byte what it was (a refused inspect cursor once reaped and
	// granted without writing the key records: two holders of a limit-1
	// key followed).
	r.mustEnqueue(owner, 200, []string{"H", "h"}, req("H", lane("k", 1)))
	r.mustEnqueue(owner, 30000, []string{"W", "w"}, req("W", lane("k", 1)))
	r.release(owner, 1, "never-enqueued") // a tombstone that lapses at once
	for {                                 // until the Redis clock is past H's deadline
		dl, err := r.c.ZScore(ctx, r.key("deadlines"), "H").Result()
		if err != nil {
			t.Fatal(err)
		}
		now, err := r.c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if float64(now.UnixMilli()) > dl+1 {
			break
		}
	}
	dump := func() map[string]string {
		out := map[string]string{}
		for _, k := range everything {
			v, err := r.c.Dump(ctx, k).Result()
			if err != nil && err != redis.Nil {
				t.Fatal(err)
			}
			out[k] = v
		}
		return out
	}
	before := dump()
	for _, tt := range cases {
		if err := tt.run(); err == nil || !strings.HasPrefix(err.Error(), "LANES_BADARG "+tt.field+" ") {
			t.Errorf("%s, with an expired holder = %v; want LANES_BADARG %s <what>", tt.name, err, tt.field)
		}
		after := dump()
		for _, k := range everything {
			if after[k] != before[k] {
				t.Errorf("%s, refused, changed %s (an expired holder, a waiter and a lapsed tombstone were there)", tt.name, k)
			}
		}
		before = after
	}
	if err := r.c.Del(ctx, everything...).Err(); err != nil {
		t.Fatal(err)
	}

	// LANES_VERSION: a caller of another version, to every lanes script,
	// and one that sends no ARGV.
	for script, vals := range map[string]map[string]any{
		"enqueue.lua":   {"protocol": "1", "TTL ms": 30000, "owner id": owner, "host": "", "pid": 1, "requests JSON": ok},
		"heartbeat.lua": {"protocol": "1", "TTL ms": 30000, "owner id": owner, "entry ids...": []string{"e"}},
		"release.lua":   {"protocol": "1", "owner id": owner, "tombstone ms": 0, "entry ids...": []string{"e"}},
		"inspect.lua":   {"protocol": "1", "budget": 10, "key and cursor...": []string{"k", ""}},
		"doctor.lua":    {"protocol": "1", "what": "entries", "mode": "check", "cursor": "0", "count": 10},
		"record.lua":    {"protocol": "1", "owner id": owner, "call id": "c", "value": "v", "retention ms": 1000, "entry ids...": []string{}},
	} {
		_, err := r.call(script, vals)
		if want := "LANES_VERSION " + r.doc.protocol + " 1"; err == nil || err.Error() != want {
			t.Errorf("%s with protocol 1 = %v; want %s", script, err, want)
		}
	}
	if _, err := r.eval("heartbeat.lua", r.keys, nil); err == nil || err.Error() != "LANES_VERSION "+r.doc.protocol+" nil" {
		t.Errorf("heartbeat.lua without ARGV = %v; want LANES_VERSION %s nil", err, r.doc.protocol)
	}
	if n, _ := r.c.Exists(ctx, everything...).Result(); n != 0 {
		t.Errorf("after LANES_VERSION, %d keys of the namespace exist; want none", n)
	}
	// ... a state made by another version (the first field of the lanes
	// marker), whole or not ...
	r.mustEnqueue(owner, 30000, []string{"e", "h"}, req("e", lane("k", 1)))
	m := r.marker()
	if err := r.c.HSet(ctx, r.key("lanes"), "\x00", strings.Join([]string{"3", m["epoch"], "0", "0", "0"}, " ")).Err(); err != nil {
		t.Fatal(err)
	}
	for _, lost := range []string{"", "queue"} {
		if lost != "" {
			r.c.Del(ctx, r.key(lost))
		}
		_, err := r.call("heartbeat.lua", map[string]any{"TTL ms": 30000, "owner id": owner, "entry ids...": []string{"e"}})
		if want := "LANES_VERSION " + r.doc.protocol + " data:3"; err == nil || err.Error() != want {
			t.Errorf("heartbeat on a state of version 3 (%s lost) = %v; want %s", lost, err, want)
		}
		_, err = r.enqueue(owner, 30000, req("f", lane("j", 1)))
		if want := "LANES_VERSION " + r.doc.protocol + " data:3"; err == nil || err.Error() != want {
			t.Errorf("enqueue on a state of version 3 (%s lost) = %v; want %s", lost, err, want)
		}
	}
	if n, _ := r.c.Exists(ctx, r.key("queue")).Result(); n != 0 || r.exists("f") {
		t.Errorf("a state of another version was changed (queue there: %d, f enqueued: %v)", n, r.exists("f"))
	}
	// ... and protocol 1's keys: state keys without markers, and no meta.
	r.c.Del(ctx, everything...)
	if err := r.c.ZAdd(ctx, r.key("queue"), redis.Z{Score: 0, Member: "k\x000000000000000001\x00old"}).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := r.enqueue(owner, 30000, req("e", lane("k", 1)))
	if want := "LANES_VERSION " + r.doc.protocol + " data:1 "; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("enqueue on protocol 1's keys = %v; want %s...", err, want)
	}
	if n, _ := r.c.Exists(ctx, everything...).Result(); n != 1 {
		t.Errorf("after LANES_VERSION data:1, %d keys exist; want protocol 1's alone", n)
	}
}

// TestProtocolNoTTLRealRedis: no key of a namespace carries a TTL, and the
// six state keys stay, holding their markers, once nothing is held or
// awaited (a namespace whose processes all died loses nothing that a
// later step relies on); lanes keeps an idle record, with its token, of
// every key used.
func TestProtocolNoTTLRealRedis(t *testing.T) {
	secNoLeaks(t)
	r := newProtoRunner(t)
	owner := "owner-" + r.nonce
	const ttl = 30000
	epoch, _ := r.mustEnqueue(owner, ttl, []string{"holder", "h", "waiter", "w", "child", "h"},
		req("holder", lane("k", 1)), req("waiter", lane("k", 1)), req("child", [][]any{{"k", 1}, {"j", 1}}, "l", "holder"))
	r.heartbeat(owner, ttl, []string{"holder", "h", "waiter", "w", "child", "h"}, "holder", "waiter", "child")
	r.checkRelease(r.release(owner, 60000, "gone"), []string{"g"}, nil) // a tombstone
	r.checkMarkers(t)
	r.checkRelease(r.release(owner, 0, "holder", "waiter"), []string{"h", "w"}, nil)
	r.heartbeat(owner, ttl, []string{"child", "g"}, "child")         // revoked with its lender, which keeps k for it
	r.checkRelease(r.release(owner, 0, "child"), []string{"l"}, nil) // its owner releases it: both go; "l": it had been revoked
	r.checkMarkers(t)
	ctx := context.Background()
	for i, k := range r.doc.keys[:r.doc.state] {
		var n int64
		if k.typ == "hash" {
			n, _ = r.c.HLen(ctx, r.keys[i]).Result()
		} else {
			n, _ = r.c.ZCard(ctx, r.keys[i]).Result()
		}
		switch name := r.keys[i][strings.LastIndex(r.keys[i], ":")+1:]; name {
		case "lanes":
			if n != 4 {
				t.Errorf("lanes holds %d; want its marker, its pad and the records of k and j", n)
			}
			r.wantKeyRec("k", epoch, 1, 0)
			r.wantKeyRec("j", epoch, 1, 0)
		case "meta":
			if meta := r.hash("meta"); !mapsEqual(meta, map[string]string{"\x00": "", "seq": "1", "maxttl": "30000", "revoked": "1"}) {
				t.Errorf("meta = %q; want its marker, seq, maxttl and revoked", meta)
			}
		default:
			if n != 1 {
				t.Errorf("%s holds %d after every entry left; want its marker alone", r.keys[i], n)
			}
		}
	}
	p := r.checkInspect(r.inspect(10, "k", "", "j", ""))
	if p.stats[2] != 1 || p.key(t, "k").limit != 0 || p.key(t, "j").limit != 0 {
		t.Errorf("after the releases: %+v; want revoked 1 and both keys empty", p)
	}
}

// TestProtocolBorrowersRealRedis: a request whose lineage holds a key
// borrows it (no queue, no slot, the lender's token, a " lender\0id"
// member of nested); when the lender's hold ends, a borrower that holds is
// revoked and its owner told, and one that waits joins the key's queue at
// its own sequence number.
func TestProtocolBorrowersRealRedis(t *testing.T) {
	secNoLeaks(t)
	r := newProtoRunner(t)
	owner := "owner-" + r.nonce
	hints := r.subscribe(owner)
	const ttl = 30000
	ctx := context.Background()
	epoch, list := r.mustEnqueue(owner, ttl, []string{"P", "h", "Q", "h"}, req("P", lane("a", 1)), req("Q", lane("b", 1)))
	tokA := detail(list, 0)[1]
	_, list = r.mustEnqueue(owner, ttl, []string{"C", "h", "D", "w"}, req("C", lane("a", 1), "l", "P"), req("D", [][]any{{"a", 1}, {"b", 1}}, "l", "P"))
	if detail(list, 0)[1] != tokA {
		t.Errorf("C's token for a = %v; want its lender's, %v", detail(list, 0)[1], tokA)
	}
	if d := detail(list, 1); len(d) != 2 || d[0] != "b" {
		t.Errorf("D's positions %v; want b only (a is borrowed)", d)
	}
	seqD := seqOf(list, 1)
	if rc := r.record("C"); fmt.Sprint(rc["r"]) != "map[a:P]" {
		t.Errorf("C's record r = %v; want {a: P}", rc["r"])
	}
	if rp := r.record("P"); rp["b"] != float64(1) {
		t.Errorf("P's record b = %v; want 1 (it lends)", rp["b"])
	}
	nested, _ := r.c.ZRange(ctx, r.key("nested"), 0, -1).Result()
	for _, m := range []string{" P\x00C", " P\x00D", "P\x00C", "P\x00D"} {
		if !slices.Contains(nested, m) {
			t.Errorf("nested %q lacks %q", nested, m)
		}
	}
	r.wantKeyRec("a", epoch, 1, 0, "P") // C borrows: not a holder of its own
	r.wantKeyRec("b", epoch, 1, 1, "Q") // D waits on b only

	// P's hold ends: C is revoked (its owner told), D queues on a at its
	// own sequence number, and P keeps its slot on a (z) until C goes.
	r.checkRelease(r.release(owner, 0, "P"), []string{"h"}, nil)
	if h := hintFor(hints.hint(t), "C"); h == nil || h["x"] != nil {
		t.Errorf("hint after P's release = %v; want {id: C}", h)
	}
	if !slices.Contains(mustZRange(t, r, "queue"), fmt.Sprintf("a\x00%016d\x00D", seqD)) {
		t.Errorf("queue %q; want D on a at its sequence number %d", mustZRange(t, r, "queue"), seqD)
	}
	if rd := r.record("D"); rd["r"] != nil {
		t.Errorf("D's record r = %v; want none after its lender left", rd["r"])
	}
	if rc, rp := r.record("C"), r.record("P"); rc["v"] != float64(1) || rp["z"] != float64(1) {
		t.Errorf("C's v = %v, P's z = %v; want 1 and 1 (C revoked, P kept for it)", rc["v"], rp["z"])
	}
	cdl, _ := r.c.ZScore(ctx, r.key("deadlines"), "C").Result()
	if pdl, _ := r.c.ZScore(ctx, r.key("deadlines"), "P").Result(); pdl != cdl {
		t.Errorf("P's deadline %v; want its revoked borrower's, %v", pdl, cdl)
	}
	r.wantKeyRec("a", epoch, 1, 1, "P")
	// Gone to their owner: no renewal, a release of P changes nothing.
	r.heartbeat(owner, ttl, []string{"C", "g", "P", "g", "D", "w"}, "C", "P", "D")
	if dl, _ := r.c.ZScore(ctx, r.key("deadlines"), "C").Result(); dl != cdl {
		t.Errorf("C's deadline moved from %v to %v; a revoked entry is not renewed", cdl, dl)
	}
	r.checkRelease(r.release(owner, 0, "P"), []string{"g"}, nil)
	r.wantKeyRec("a", epoch, 1, 1, "P")
	if _, err := r.enqueue(owner, ttl, req("C", lane("a", 1), "l", "P")); err != nil {
		t.Fatal(err)
	} else if rc := r.record("C"); rc["v"] != float64(1) {
		t.Errorf("an enqueue of C's id changed it: %v", rc)
	}
	// C's release removes C, then P: a is free (D still waits on b).
	r.checkRelease(r.release(owner, 0, "C"), []string{"l"}, nil)
	if r.exists("C") || r.exists("P") {
		t.Errorf("after C's release: C there %v, P there %v; want neither", r.exists("C"), r.exists("P"))
	}
	r.wantKeyRec("a", epoch, 1, 1)
	r.checkRelease(r.release(owner, 0, "Q"), []string{"h"}, []string{"D"})
	_, list = r.heartbeat(owner, ttl, []string{"D", "h"}, "D")
	if tok, _ := strconv.ParseUint(detail(list, 0)[1].(string), 10, 64); detail(list, 0)[0] != "a" || tok <= mustUint(t, tokA.(string)) {
		t.Errorf("D's tokens %v; want a new token for a above %v", detail(list, 0), tokA)
	}
	if p := r.checkInspect(r.inspect(10, "a", "")); p.stats[2] != 1 {
		t.Errorf("counts %v; want revoked 1", p.stats)
	}
}

func mustZRange(t *testing.T, r *protoRunner, key string) []string {
	t.Helper()
	m, err := r.c.ZRange(context.Background(), r.key(key), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustUint(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestProtocolSequenceRealRedis: a waiter's sequence number is written in
// 16 digits in its queue member, up to MAX_SEQ itself (exact in the entry
// record's JSON); past MAX_SEQ an enqueue whose requests could need more
// fails with LANES_EXHAUSTED while entries wait, and numbers start again
// from 1 once none does.
func TestProtocolSequenceRealRedis(t *testing.T) {
	secNoLeaks(t)
	r := newProtoRunner(t)
	owner := "owner-" + r.nonce
	const ttl = 30000
	ctx := context.Background()
	r.mustEnqueue(owner, ttl, []string{"H", "h"}, req("H", lane("k", 1)))
	_, list := r.mustEnqueue(owner, ttl, []string{"W1", "w"}, req("W1", lane("k", 1)))
	if seqOf(list, 0) != 1 || !slices.Contains(mustZRange(t, r, "queue"), "k\x000000000000000001\x00W1") {
		t.Errorf("W1 seq %d, queue %q; want 1, in 16 digits", seqOf(list, 0), mustZRange(t, r, "queue"))
	}
	max := r.doc.bounds["MAX_SEQ"]
	if err := r.c.HSet(ctx, r.key("meta"), "seq", max-1).Err(); err != nil {
		t.Fatal(err)
	}
	_, list = r.mustEnqueue(owner, ttl, []string{"W2", "w"}, req("W2", lane("k", 1)))
	if seqOf(list, 0) != max || r.record("W2")["q"] != float64(max) || !slices.Contains(mustZRange(t, r, "queue"), fmt.Sprintf("k\x00%016d\x00W2", max)) {
		t.Errorf("W2 seq %d, record %v, queue %q; want MAX_SEQ %d everywhere", seqOf(list, 0), r.record("W2")["q"], mustZRange(t, r, "queue"), max)
	}
	_, err := r.enqueue(owner, ttl, req("A", lane("k2", 1)), req("W3", lane("k", 1)))
	if err == nil || !strings.HasPrefix(err.Error(), "LANES_EXHAUSTED ") {
		t.Fatalf("enqueue past MAX_SEQ while W1 waits = %v; want LANES_EXHAUSTED", err)
	}
	// Refused before any request was enqueued: neither is there.
	if r.exists("A") || r.exists("W3") {
		t.Errorf("after LANES_EXHAUSTED: A there %v, W3 there %v; want neither", r.exists("A"), r.exists("W3"))
	}
	r.checkRelease(r.release(owner, 0, "W1", "W2"), []string{"w", "w"}, nil)
	_, list = r.mustEnqueue(owner, ttl, []string{"W3", "w"}, req("W3", lane("k", 1)))
	if seqOf(list, 0) != 1 {
		t.Errorf("W3 seq %d; want 1 (numbers start again once no entry waits)", seqOf(list, 0))
	}
	if seq, _ := r.c.HGet(ctx, r.key("meta"), "seq").Result(); seq != "1" {
		t.Errorf("meta seq = %q after the wrap; want 1", seq)
	}
}

// doctorPage is one doctor.lua reply.
type doctorPage struct {
	epoch, next       string
	problems, repairs []string
	reaped            int64
}

// doctor runs one doctor.lua page and checks its documented shape:
// [epoch, next cursor, [problem, ...], [repair, ...], reaped].
func (r *protoRunner) doctor(what, mode, cursor string, count int) doctorPage {
	r.t.Helper()
	if cell := r.doc.replies["doctor.lua"]; cell != "`[epoch, next cursor, [problem, ...], [repair, ...], reaped]`" {
		r.t.Fatalf("PROTOCOL.md writes the reply of doctor.lua as %s, which the test does not read: update the test", cell)
	}
	v := r.mustCall("doctor.lua", map[string]any{"what": what, "mode": mode, "cursor": cursor, "count": count})
	f, ok := v.([]any)
	if !ok || len(f) != 5 {
		r.t.Fatalf("doctor.lua reply %#v; want 5 elements", v)
	}
	var p doctorPage
	var ok0, ok1, ok4 bool
	p.epoch, ok0 = f[0].(string)
	p.next, ok1 = f[1].(string)
	p.reaped, ok4 = f[4].(int64)
	if !ok0 || !ok1 || !ok4 || !regexp.MustCompile(`^\d+$`).MatchString(p.next) {
		r.t.Fatalf("doctor.lua reply %#v; want an epoch, a cursor, two lists and a count", v)
	}
	for i, l := range []*[]string{&p.problems, &p.repairs} {
		list, ok := f[2+i].([]any)
		if !ok {
			r.t.Fatalf("doctor.lua reply %#v: element %d is not a list", v, 3+i)
		}
		for _, x := range list {
			s, ok := x.(string)
			if !ok || s == "" || strings.Contains(s, "\n") {
				r.t.Fatalf("doctor.lua reply %#v: %#v is not one line", v, x)
			}
			*l = append(*l, s)
		}
	}
	return p
}

// doctorAll walks the documented state keys as Go's doctor does, each until
// its cursor is "0", and returns the problems and repairs.
func (r *protoRunner) doctorAll(mode string) (epoch string, problems, repairs []string) {
	r.t.Helper()
	for _, what := range r.doc.walks {
		for cursor, pages := "0", 0; ; pages++ {
			p := r.doctor(what, mode, cursor, 2)
			epoch, cursor = p.epoch, p.next
			problems, repairs = append(problems, p.problems...), append(repairs, p.repairs...)
			if cursor == "0" || pages > 1000 {
				break
			}
		}
	}
	return epoch, problems, repairs
}

// TestProtocolDoctorRealRedis: doctor.lua walks each documented state key
// in pages, finds nothing in a consistent namespace, reports each stray
// member and each wrong key record in one line and with repair removes or
// mends it; an entry that disagrees with its index resets the namespace;
// "reap" removes expired entries whatever the mode.
func TestProtocolDoctorRealRedis(t *testing.T) {
	secNoLeaks(t)
	r := newProtoRunner(t)
	owner := "owner-" + r.nonce
	nsch := r.subscribeNamespace()
	const ttl = 30000
	ctx := context.Background()
	if p := r.doctor("entries", "check", "0", 10); p.epoch != "" || p.next != "0" || len(p.problems)+len(p.repairs) != 0 || p.reaped != 0 {
		t.Errorf("doctor with no state = %+v; want [\"\", \"0\", [], [], 0]", p)
	}
	epoch, _ := r.mustEnqueue(owner, ttl, []string{"H", "h", "W", "w", "N", "h", "B", "h"},
		req("H", lane("k", 1)), req("W", lane("k", 1)), req("N", lane("j", 1), "l", "H"), req("B", [][]any{{"k", 1}, {"m", 2}}, "l", "H"))
	nsch.reset(t)
	if e, problems, repairs := r.doctorAll("check"); e != epoch || len(problems)+len(repairs) != 0 {
		t.Fatalf("doctor check of a consistent namespace = %s %q %q; want epoch %s and nothing", e, problems, repairs, epoch)
	}

	// Stray members and a wrong key record: reported, then removed or
	// mended.
	tok := r.wantKeyRec("k", epoch, 1, 1, "H")
	r.c.ZAdd(ctx, r.key("queue"), redis.Z{Score: 0, Member: "k\x000000000000000099\x00ghost"})
	r.c.ZAdd(ctx, r.key("deadlines"), redis.Z{Score: float64(r.now() + ttl), Member: "ghost2"})
	r.c.ZAdd(ctx, r.key("nested"), redis.Z{Score: 0, Member: "H\x00ghost3"}, redis.Z{Score: 0, Member: " H\x00W"})
	r.c.HSet(ctx, r.key("lanes"), "k", strings.Join([]string{epoch, "1", tok, "5", "H", "ghost4"}, " "))
	_, problems, repairs := r.doctorAll("check")
	if len(problems) != 6 || len(repairs) != 0 {
		t.Errorf("doctor check = %q, %q; want 6 problems (queue, deadlines, 2 nested, a holder and a count of k's record) and no repair", problems, repairs)
	}
	_, problems, repairs = r.doctorAll("repair")
	if len(problems) != 6 || len(repairs) != 5 {
		t.Errorf("doctor repair = %q, %q; want the 6 problems and 5 repairs (k's record mended once)", problems, repairs)
	}
	r.wantKeyRec("k", epoch, 1, 1, "H")
	for key, want := range map[string]int{"queue": 2, "deadlines": 5, "nested": 4} {
		if n := len(r.zset(key)); n != want {
			t.Errorf("%s holds %d after the repair: %v; want %d", key, n, r.zset(key), want)
		}
	}
	if e, problems, repairs := r.doctorAll("check"); e != epoch || len(problems)+len(repairs) != 0 {
		t.Errorf("doctor check after the repair = %s %q %q; want nothing", e, problems, repairs)
	}

	// An entry that disagrees with its index: repair resets the namespace.
	rec := r.record("W")
	rec["s"] = "h"
	js, _ := json.Marshal(rec)
	r.c.HSet(ctx, r.key("entries"), "W", string(js))
	p := r.doctor("entries", "check", "0", 100)
	if len(p.problems) == 0 || p.epoch != epoch {
		t.Errorf("doctor check of a broken entry = %+v; want a problem", p)
	}
	p = r.doctor("entries", "repair", "0", 100)
	if p.epoch == epoch || p.next != "0" || len(p.repairs) == 0 {
		t.Errorf("doctor repair of a broken entry = %+v; want a reset: a new epoch, next \"0\"", p)
	}
	if got := nsch.reset(t); got != p.epoch {
		t.Errorf("namespace message %q; want the reset's epoch %q", got, p.epoch)
	}
	if n, _ := r.c.HLen(ctx, r.key("entries")).Result(); n != 1 {
		t.Errorf("entries holds %d after the reset; want its marker alone", n)
	}

	// reap: in repair mode only (check mode is refused above, in
	// TestProtocolBadArgRealRedis).
	epoch2 := p.epoch
	r.c.HSet(ctx, r.key("lanes"), "\x00", strings.Join([]string{r.doc.keyspace, epoch2, "0", "30000", "0"}, " ")) // end the freeze
	r.mustEnqueue(owner, 1, []string{"X", "h", "Y", "h"}, req("X", lane("x", 1)), req("Y", lane("y", 1)))
	time.Sleep(20 * time.Millisecond)
	p = r.doctor("reap", "repair", "0", 1)
	if p.epoch != epoch2 || p.next != "0" || p.reaped != 2 || r.exists("X") || r.exists("Y") {
		t.Errorf("doctor reap = %+v; want 2 reaped, next \"0\"", p)
	}
	if meta := r.hash("meta"); meta["expired"] != "2" {
		t.Errorf("meta %q; want expired 2", meta)
	}
}

// TestProtocolRecordRealRedis: record.lua stores a call's value in the
// run's records (its eighth key) with the retention as its TTL and, in
// the same step, releases the owner's entries as release.lua does; it
// stores even with no state.
func TestProtocolRecordRealRedis(t *testing.T) {
	secNoLeaks(t)
	r := newProtoRunner(t)
	a, b := "owner-a-"+r.nonce, "owner-b-"+r.nonce
	hintsB := r.subscribe(b)
	const ttl = 30000
	ctx := context.Background()
	record := func(owner, call, value string, retention int, ids ...string) any {
		t.Helper()
		return r.mustCall("record.lua", map[string]any{"owner id": owner, "call id": call, "value": value, "retention ms": retention, "entry ids...": ids})
	}
	r.run = "run-" + r.nonce
	if e := r.checkReleaseOf("record.lua", record(a, "call-0", "v0", 60000), nil, nil); e != "" {
		t.Errorf("record.lua with no state: epoch %q; want \"\"", e)
	}
	if n, _ := r.c.Exists(ctx, r.keys...).Result(); n != 0 {
		t.Errorf("record.lua with no state made %d keys of the namespace; want none", n)
	}
	epoch, _ := r.mustEnqueue(a, ttl, []string{"H", "h"}, req("H", lane("k", 1)))
	r.mustEnqueue(b, ttl, []string{"W", "w"}, req("W", lane("k", 1)))
	value := "bytes \x00\xff\n of any kind"
	if e := r.checkReleaseOf("record.lua", record(a, "call-1", value, 120000, "H", "nosuch", "W"), []string{"h", "g", "g"}, []string{"W"}); e != epoch {
		t.Errorf("record.lua epoch %q; want %q", e, epoch)
	}
	if h := hintFor(hintsB.hint(t), "W"); h == nil || h["x"] == nil {
		t.Errorf("hint to W's owner = %v; want its grant", h)
	}
	if got, _ := r.c.HGetAll(ctx, r.runKey(r.run)).Result(); !mapsEqual(got, map[string]string{"call-0": "v0", "call-1": value}) {
		t.Errorf("the run's records = %q; want call-0 and call-1", got)
	}
	if pttl, _ := r.c.PTTL(ctx, r.runKey(r.run)).Result(); pttl <= 110*time.Second || pttl > 120*time.Second {
		t.Errorf("the run's records have TTL %v; want the retention, 2 minutes", pttl)
	}
	r.wantKeyRec("k", epoch, 1, 0, "W")
	// "f": an operator released W by force.
	r.checkRelease(r.release("", 60000, "W"), []string{"h"}, nil)
	hintsB.hint(t)
	r.checkReleaseOf("record.lua", record(b, "call-2", "v2", 1000, "W"), []string{"f"}, nil)
}

// TestProtocolFenceRealRedis: fence.lua as documented: OK for a token
// equal to or above the highest seen, LANES_STALE <highest> below it,
// LANES_BADARG for a malformed resource or token, LANES_CORRUPT for a
// stored highest that is not a token.
func TestProtocolFenceRealRedis(t *testing.T) {
	secNoLeaks(t)
	r := newProtoRunner(t)
	fence := func(resource, token string) (any, error) {
		return r.call("fence.lua", map[string]any{"resource": resource, "token": token})
	}
	for _, tok := range []string{"5", "5", "18446744073709551615"} {
		if v, err := fence("res", tok); err != nil || v != "OK" {
			t.Errorf("fence res %s = %v, %v; want OK", tok, v, err)
		}
	}
	if _, err := fence("res", "18446744073709551614"); err == nil || err.Error() != "LANES_STALE 18446744073709551615" {
		t.Errorf("a lower token = %v; want LANES_STALE 18446744073709551615", err)
	}
	for _, tt := range []struct{ resource, token, field string }{
		{"", "1", "resource"}, {"r", "05", "token"}, {"r", "0", "token"}, {"r", "18446744073709551616", "token"}, {"r", "1.5", "token"},
	} {
		if _, err := fence(tt.resource, tt.token); err == nil || !strings.HasPrefix(err.Error(), "LANES_BADARG "+tt.field+" ") {
			t.Errorf("fence %q %q = %v; want LANES_BADARG %s", tt.resource, tt.token, err, tt.field)
		}
	}
	if err := r.c.HSet(context.Background(), r.fence, "bad", "x1").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := fence("bad", "7"); err == nil || err.Error() != "LANES_CORRUPT x1" {
		t.Errorf("a corrupt highest = %v; want LANES_CORRUPT x1", err)
	}
	if pttl, _ := r.c.PTTL(context.Background(), r.fence).Result(); pttl != -1 {
		t.Errorf("%s has TTL %v; want none", r.fence, pttl)
	}
}

// The reviewer's findings on real Redis (each a kind, each kept as a test).

// Every script that releases keeps a lender that ended for its revoked
// borrowers: a record.lua step sent again (its first reply lost) after the
// lender's release once removed the kept lender with its borrower and
// granted the key while the borrower's owner had not been told. And a
// lender released by force, then kept, answers its owner "f".
func TestProtocolEveryReleaseKeepsEndedLenderRealRedis(t *testing.T) {
	secNoLeaks(t)
	for _, how := range []string{"release then record", "force then release", "force then record"} {
		t.Run(how, func(t *testing.T) {
			r := newProtoRunner(t)
			owner, other := "owner-"+r.nonce, "other-"+r.nonce
			const ttl = 30000
			epoch, _ := r.mustEnqueue(owner, ttl, []string{"P", "h"}, req("P", lane("a", 1)))
			r.mustEnqueue(other, ttl, []string{"C", "h"}, req("C", lane("a", 1), "l", "P"))
			r.mustEnqueue(other, ttl, []string{"T", "w"}, req("T", lane("a", 1)))
			record := func(id string) any {
				return r.mustCall("record.lua", map[string]any{"owner id": owner, "call id": "call-" + id, "value": "v", "retention ms": 60000, "entry ids...": []string{id}})
			}
			first, again := "h", "g"
			switch how {
			case "release then record":
				r.checkRelease(r.release(owner, 0, "P"), []string{"h"}, nil)
				r.checkReleaseOf("record.lua", record("P"), []string{"g"}, nil)
			case "force then release":
				first, again = "h", "f"
				r.checkRelease(r.release("", 60000, "P"), []string{first}, nil)
				r.checkRelease(r.release(owner, 0, "P"), []string{again}, nil)
			case "force then record":
				r.checkRelease(r.release("", 60000, "P"), []string{first}, nil)
				r.checkReleaseOf("record.lua", record("P"), []string{"f"}, nil)
			}
			r.wantKeyRec("a", epoch, 1, 1, "P") // kept for C; T waits
			if !r.exists("P") || !r.exists("C") {
				t.Fatalf("P there %v, C there %v; want both until C's owner releases C", r.exists("P"), r.exists("C"))
			}
			r.checkRelease(r.release(other, 0, "C"), []string{"l"}, []string{"T"})
			r.checkRelease(r.release(other, 0, "T"), []string{"h"}, nil)
		})
	}
}

// A key with more holders than Lua's unpack takes (about 8,000) works
// like any other: a request queues on it, a release hands it on, and a
// lean release of many keys at once works (each once failed with a Lua
// error after writing part of the step).
func TestProtocolManyHoldersRealRedis(t *testing.T) {
	secNoLeaks(t)
	r := newProtoRunner(t)
	owner := "owner-" + r.nonce
	// The longest TTL (MAX_TTL, an hour): the nine steps that make 8,200
	// holders took more than a minute on a loaded 2-core machine under
	// -race, and holders whose TTL of a minute had run out then let W in
	// at once. The namespace's keys are deleted when the test ends.
	const ttl, n = 3600000, 8200
	for from := 0; from < n; from += 1000 {
		var reqs []map[string]any
		var want []string
		for i := from; i < min(n, from+1000); i++ {
			id := fmt.Sprintf("h%05d", i)
			reqs = append(reqs, req(id, lane("big", n)))
			want = append(want, id, "h")
		}
		r.mustEnqueue(owner, ttl, want, reqs...)
	}
	r.mustEnqueue(owner, ttl, []string{"W", "w"}, req("W", lane("big", n)))
	r.checkRelease(r.release(owner, 0, "h00000"), []string{"h"}, []string{"W"})
	// A lean release of 250 entries of 33 keys each: 8,250 key records in
	// one step.
	var reqs []map[string]any
	var want, ids []string
	for i := range 250 {
		var ls [][]any
		for j := range 33 {
			ls = append(ls, []any{fmt.Sprintf("k%03d-%02d", i, j), 1})
		}
		id := fmt.Sprintf("m%03d", i)
		reqs = append(reqs, req(id, ls))
		want, ids = append(want, id, "h"), append(ids, id)
	}
	for i := 0; i < len(reqs); i += 100 { // MAX_STEP_LANES per enqueue
		r.mustEnqueue(owner, ttl, want[2*i:2*min(len(reqs), i+100)], reqs[i:min(len(reqs), i+100)]...)
	}
	v := r.release(owner, 0, ids...)
	was := make([]string, len(ids))
	for i := range was {
		was[i] = "h"
	}
	r.checkRelease(v, was, nil)
}

// Expired waiters queued ahead of a live one stand in no one's way: each
// step removes up to DEAD_MAX of them from the head of a queue it looks
// at and answers more = 1 while some remain, so a caller asks again at
// once; the live waiter is granted after a bounded number of steps, not
// after one heartbeat interval per few hundred dead waiters.
func TestProtocolDeadWaitersAheadRealRedis(t *testing.T) {
	secNoLeaks(t)
	r := newProtoRunner(t)
	owner, dead := "owner-"+r.nonce, "dead-"+r.nonce
	ctx := context.Background()
	// An hour (MAX_TTL), not a minute: H and W must not expire while the
	// dead waiters are enqueued, which took 19.7s on a loaded machine;
	// nothing waits for their TTL, and the cleanup deletes the keys.
	const ttl = 3600000
	r.mustEnqueue(owner, ttl, []string{"H", "h"}, req("H", lane("k", 1)))
	nDead := 2*int(r.doc.bounds["DEAD_MAX"]) + 500
	for from := 0; from < nDead; from += 1000 {
		var reqs []map[string]any
		var want []string
		for i := from; i < min(nDead, from+1000); i++ {
			id := fmt.Sprintf("d%05d", i)
			reqs = append(reqs, req(id, lane("k", 1)))
			want = append(want, id, "w")
		}
		r.mustEnqueue(dead, 3000, want, reqs...) // dead once their TTL passed
	}
	r.mustEnqueue(owner, ttl, []string{"W", "w"}, req("W", lane("k", 1)))
	// The dead waiters' deadlines passed (TTL 1 ms); W's did not.
	for {
		dl, err := r.c.ZScore(ctx, r.key("deadlines"), fmt.Sprintf("d%05d", nDead-1)).Result()
		if err != nil || float64(r.now()) > dl {
			break
		}
	}
	r.checkRelease(r.release(owner, 0, "H"), []string{"h"}, nil)
	steps := 0
	for {
		steps++
		v := r.mustCall("heartbeat.lua", map[string]any{"TTL ms": ttl, "owner id": owner, "entry ids...": []string{"W"}})
		_, list := r.statuses("heartbeat.lua", v, "W", list1state(v))
		more := v.([]any)[2].(int64)
		if list[0].([]any)[1] == "h" {
			break
		}
		if more != 1 {
			t.Fatalf("step %d: W waits and more = 0 with dead waiters ahead; want more = 1", steps)
		}
		if steps > nDead/int(r.doc.bounds["DEAD_MAX"])+2 {
			t.Fatalf("W still waits after %d steps behind %d dead waiters; each step removes up to DEAD_MAX %d", steps, nDead, r.doc.bounds["DEAD_MAX"])
		}
	}
	t.Logf("W granted at heartbeat step %d behind %d dead waiters", steps, nDead)
	r.release(owner, 0, "W")
}

// list1state returns the state of the first status of a reply.
func list1state(v any) string { return v.([]any)[1].([]any)[0].([]any)[1].(string) }

// The id of a lender that expired while a borrower holds is taken until
// the borrower goes: an enqueue of it again by its owner is refused
// ("t"), not made a new entry over the kept record (which once left the
// key listing a holder that waited on it, for good).
func TestProtocolExpiredLenderIDTakenRealRedis(t *testing.T) {
	secNoLeaks(t)
	r := newProtoRunner(t)
	owner, other := "owner-"+r.nonce, "other-"+r.nonce
	ctx := context.Background()
	epoch, _ := r.mustEnqueue(owner, 200, []string{"P", "h"}, req("P", lane("a", 1)))
	r.mustEnqueue(other, 30000, []string{"C", "h"}, req("C", lane("a", 1), "l", "P"))
	for { // until P's deadline passed
		dl, err := r.c.ZScore(ctx, r.key("deadlines"), "P").Result()
		if err != nil || float64(r.now()) > dl {
			break
		}
	}
	r.mustEnqueue(owner, 30000, []string{"P", "t"}, req("P", lane("a", 1)))
	r.wantKeyRec("a", epoch, 1, 0, "P")
	if rp := r.record("P"); rp["z"] != float64(1) || rp["s"] != "h" {
		t.Errorf("P's record %v; want held and kept (z) for C", rp)
	}
	r.checkRelease(r.release(other, 0, "C"), []string{"l"}, nil)
	r.mustEnqueue(owner, 30000, []string{"P", "h"}, req("P", lane("a", 1))) // the id is free again
	r.release(owner, 0, "P")
}

// An entry record edited by hand (not JSON, or JSON without the fields a
// step needs) is taken for absent: the other entries' steps go on, doctor
// reports it and --repair mends the namespace (each once failed with a
// Lua error: heartbeats, new keys, status and doctor alike).
func TestProtocolCorruptRecordRealRedis(t *testing.T) {
	secNoLeaks(t)
	for _, bad := range []string{"not json", "{}", `{"k":"x","s":"h"}`, `[1,2]`} {
		t.Run(bad, func(t *testing.T) {
			r := newProtoRunner(t)
			owner := "owner-" + r.nonce
			ctx := context.Background()
			const ttl = 30000
			r.mustEnqueue(owner, 300, []string{"A", "h"}, req("A", lane("a", 1)))
			r.mustEnqueue(owner, ttl, []string{"B", "h", "W", "w"}, req("B", lane("b", 1)), req("W", lane("b", 1)))
			if err := r.c.HSet(ctx, r.key("entries"), "A", bad).Err(); err != nil {
				t.Fatal(err)
			}
			r.heartbeat(owner, ttl, []string{"A", "g", "B", "h", "W", "w"}, "A", "B", "W")
			r.mustEnqueue(owner, ttl, []string{"N", "h"}, req("N", lane("new", 1)))
			r.inspect(10, "a", "", "b", "") // A shown with its id alone
			// A request on a waits until A's deadline passes (A, gone to
			// its owner, is not renewed), then is granted as after a crash.
			r.mustEnqueue(owner, ttl, []string{"X", "w"}, req("X", lane("a", 1)))
			giveUp := r.now() + 300 + 2000
			for list1state(r.mustCall("heartbeat.lua", map[string]any{"TTL ms": ttl, "owner id": owner, "entry ids...": []string{"X"}})) != "h" {
				if r.now() > giveUp {
					t.Fatalf("X still waits on a two seconds past the deadline of A, whose record is %q", bad)
				}
			}
			if err := r.c.HSet(ctx, r.key("entries"), "B", bad).Err(); err != nil {
				t.Fatal(err)
			}
			p := r.doctor("entries", "check", "0", 100)
			if len(p.problems) == 0 {
				t.Errorf("doctor found nothing in a namespace with entry A = %q", bad)
			}
			r.doctor("entries", "repair", "0", 100)
			r.checkMarkers(t)
		})
	}
}
