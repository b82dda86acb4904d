package integration_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
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
// document says (its keyspace table and its script table, parsed here, so
// that the document cannot drift from the scripts silently), and check the
// replies, errors, hints and keys against the document. Each test works in
// a namespace of its own and deletes its keys when it ends.

// protoDoc is what the tests read from docs/PROTOCOL.md.
type protoDoc struct {
	keys     []protoKey          // the keyspace table, in order
	state    int                 // keys 1 to state are the namespace's state
	protocol string              // ARGV[1]
	wake     string              // ARGV[2], the hint channel prefix, with {ns}
	fence    string              // the key of fence.lua, with {ns}
	argv     map[string][]string // script -> the names of its ARGV, in order
	replies  map[string]string   // script -> its reply cell
	codes    map[string][]string // error code -> its documented fields
	badarg   []string            // the fields LANES_BADARG names
	record   []string            // the fields of the entry record
	bounds   map[string]int64    // the bounds table
	text     string
}

type protoKey struct {
	name   string // with {ns}
	typ    string // hash or zset
	zero   bool   // "scores 0"
	marker bool   // it holds a marker "\0"
	mark   string // the marker's value (hash) or score (sorted set)
}

var numberWords = map[string]int{"eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}

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
		if n, _ := strconv.Atoi(m[1]); n != len(d.keys)+1 {
			t.Fatalf("PROTOCOL.md: keyspace row %s comes after %d rows", m[1], len(d.keys))
		}
		d.keys = append(d.keys, k)
	}
	if len(d.keys) == 0 {
		t.Fatal("PROTOCOL.md: no keyspace table")
	}
	for _, re := range []string{"A namespace `ns` is (\\w+) keys", "All take the (\\w+) keys above as `KEYS`"} {
		m := regexp.MustCompile(re).FindStringSubmatch(flat)
		if m == nil || numberWords[m[1]] != len(d.keys) {
			t.Errorf("PROTOCOL.md says %q; its keyspace table has %d keys", m, len(d.keys))
		}
	}
	m := regexp.MustCompile(`Keys 1 to (\d+) are the namespace's state`).FindStringSubmatch(flat)
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
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Z_]+)` \\| (\\d+) \\|").FindAllStringSubmatch(d.text, -1) {
		d.bounds[m[1]], _ = strconv.ParseInt(m[2], 10, 64)
	}
	for _, b := range []string{"MAX_ID_LEN", "MAX_KEY_LEN", "MAX_TTL", "MAX_SEQ", "MAX_LANES", "MAX_LIMIT", "MAX_STEP_LANES", "MAX_FIELD_LEN"} {
		if d.bounds[b] == 0 {
			t.Fatalf("PROTOCOL.md: the bounds table has no %s", b)
		}
	}
	return d
}

// protoScripts are the scripts the document describes: the lanes scripts
// (lib.lua in front), then fence.lua.
var protoScripts = []string{"enqueue.lua", "heartbeat.lua", "release.lua", "inspect.lua", "fence.lua"}

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
	src, sha map[string]string
	noscript map[string]int
	nonce    string
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
	r := &protoRunner{t: t, doc: d, c: redis.NewClient(opt), ns: redistest.Namespace("it-proto-"),
		src: map[string]string{}, sha: map[string]string{}, noscript: map[string]int{}, nonce: secRandomHex(8)}
	tag := "{" + r.ns + "}"
	for _, k := range d.keys {
		r.keys = append(r.keys, strings.Replace(k.name, "{ns}", tag, 1))
	}
	r.wake = strings.Replace(d.wake, "{ns}", tag, 1)
	r.fence = strings.Replace(d.fence, "{ns}", tag, 1)
	t.Cleanup(func() {
		r.c.Del(context.Background(), append(slices.Clone(r.keys), r.fence)...)
		r.c.Close()
	})
	return r
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
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
	keys := r.keys
	if script == "fence.lua" {
		keys = []string{r.fence}
	}
	return r.eval(script, keys, argv)
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
		if s, ok := detail[0].(string); len(detail) != 1 || !ok || s == "" {
			r.t.Fatalf("%s: detail %#v; want [message]", script, detail)
		}
	case `cycle in words, JSON {"entries", "keys"}`:
		words, _ := detail[0].(string)
		raw, _ := detail[1].(string)
		var who struct{ Entries, Keys []string }
		if len(detail) != 2 || words == "" || json.Unmarshal([]byte(raw), &who) != nil || len(who.Entries) == 0 {
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
	top, ok := v.([]any)
	if !ok || len(top) != 2 {
		r.t.Fatalf("%s reply %#v; want [epoch, [statuses]]", script, v)
	}
	epoch, ok1 := top[0].(string)
	list, ok2 := top[1].([]any)
	if !ok1 || !ok2 || len(list) != len(want)/2 {
		r.t.Fatalf("%s reply %#v; want an epoch and %d statuses", script, v, len(want)/2)
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

// checkRelease checks release.lua's reply [epoch, [state per id], [granted
// ids]] and returns the epoch.
func (r *protoRunner) checkRelease(v any, was, granted []string) string {
	r.t.Helper()
	f, ok := v.([]any)
	if !ok || len(f) != 3 {
		r.t.Fatalf("release.lua reply %#v; want [epoch, [state per id], [granted ids]]", v)
	}
	epoch, ok0 := f[0].(string)
	states, ok1 := f[1].([]any)
	ids, ok2 := f[2].([]any)
	if !ok0 || !ok1 || !ok2 {
		r.t.Fatalf("release.lua reply %#v; want a string and two lists", v)
	}
	got := func(l []any) []string {
		var out []string
		for _, x := range l {
			out = append(out, fmt.Sprint(x))
		}
		return out
	}
	for _, s := range got(states) {
		if !strings.Contains(r.doc.replies["release.lua"], `"`+s+`"`) {
			r.t.Errorf("release.lua state %q is not documented (%s)", s, r.doc.replies["release.lua"])
		}
	}
	if !slices.Equal(got(states), was) || !slices.Equal(got(ids), granted) {
		r.t.Errorf("release.lua reply %v; want states %q, granted %q", v, was, granted)
	}
	return epoch
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
	stats []int64 // expired, evicted, revoked, resets, frozen
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
	optional := map[string]bool{"c": true, "t": true, "n": true, "l": true, "g": true, "x": true, "r": true}
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

// TestProtocolDocMatchesScripts: what PROTOCOL.md says of the scripts'
// KEYS, ARGV, error codes, entry record and bounds is what their sources
// say.
func TestProtocolDocMatchesScripts(t *testing.T) {
	d := readProtocol(t)
	lib, err := os.ReadFile("../scripts/lua/lib.lua")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`#KEYS ~= (\d+)`).FindSubmatch(lib)
	if m == nil {
		t.Fatal("lib.lua checks no number of KEYS")
	}
	if n, _ := strconv.Atoi(string(m[1])); n != len(d.keys) {
		t.Errorf("lib.lua takes %d KEYS; PROTOCOL.md documents %d", n, len(d.keys))
	}
	for i, k := range d.keys {
		name := k.name[strings.LastIndex(k.name, ":")+1:]
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^--\s+%d %s\s`, i+1, name)).Match(lib) {
			t.Errorf("PROTOCOL.md has key %d %s; lib.lua's header does not", i+1, name)
		}
	}
	if st := regexp.MustCompile(`local STATE = \{([^}]*)\}`).FindSubmatch(lib); st == nil || len(strings.Split(string(st[1]), ",")) != d.state {
		t.Errorf("lib.lua's STATE is %q; PROTOCOL.md says keys 1 to %d are the state", st, d.state)
	}
	for i, k := range d.keys {
		if want := i < d.state && !strings.HasSuffix(k.name, ":meta"); k.marker != want {
			t.Errorf("PROTOCOL.md: key %s marker %v; want a marker on every state key but meta", k.name, k.marker)
		}
	}
	if p := regexp.MustCompile(`local PROTOCOL = '([^']*)'`).FindSubmatch(lib); p == nil || string(p[1]) != d.protocol {
		t.Errorf("lib.lua's PROTOCOL is %q; PROTOCOL.md says %q", p, d.protocol)
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
	var codes []string
	for _, m := range regexp.MustCompile(`LANES_[A-Z]+`).FindAllString(all, -1) {
		codes = append(codes, m)
	}
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
	rec := regexp.MustCompile(`(?s)-- Entry record(.*?)\n\n`).FindSubmatch(lib)
	if rec == nil {
		t.Fatal("lib.lua's header describes no entry record")
	}
	var libFields []string
	for _, m := range regexp.MustCompile(`\b([a-z]) = `).FindAllSubmatch(rec[1], -1) {
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
}

// TestProtocolRealRedis runs every documented lanes script with the
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
	if seqOf(list, 0) != 0 {
		t.Errorf("e1 granted by its enqueue has seq %d; want 0", seqOf(list, 0))
	}
	tok1 := detail(list, 0)[1].(string)
	_, list = r.mustEnqueue(ownerB, ttl, []string{"e2", "w", "e3", "w"}, req("e2", lane("k1", 1)), req("e3", lane("k1", 1)))
	if p2, p3 := detail(list, 0)[1], detail(list, 1)[1]; p2 != int64(1) || p3 != int64(2) {
		t.Errorf("positions of e2, e3 = %v, %v; want 1, 2", p2, p3)
	}
	seq2 := seqOf(list, 0)
	if seq2 < 1 || seqOf(list, 1) != seq2+1 {
		t.Errorf("sequence numbers of e2, e3 = %d, %d; want consecutive from 1", seq2, seqOf(list, 1))
	}
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
	if r.exists("e8") {
		t.Errorf("after LANES_LIMIT, e8 was enqueued; want nothing of the step")
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

	r.checkKeyspace(t)
	if len(r.noscript) != 4 {
		t.Errorf("NOSCRIPT met for %v; want once per script (the EVALSHA then EVAL path)", r.noscript)
	}
}

// checkKeyspace checks the keys against the keyspace table after
// TestProtocolRealRedis: their names and types, the markers, the members'
// forms, scores 0 where documented, and no TTL.
func (r *protoRunner) checkKeyspace(t *testing.T) {
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
	members := func(key string) []string {
		m, err := r.c.ZRange(ctx, r.key(key), 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for key, re := range map[string]string{
		"queue":   `^(\x00|a\x00\d{16}\x00R)$`,
		"holds":   `^(\x00|a\x00P|b\x00Q|k1\x00e3)$`,
		"nested":  `^(\x00|Q\x00R)$`,
		"held":    `^(\x00|P|Q|e3)$`,
		"waiting": `^(\x00|R)$`,
		"tombs":   `^f\x00e2$`,
	} {
		ms := members(key)
		if len(ms) < 2 && key != "tombs" {
			t.Errorf("%s holds %q; want its marker and members", r.key(key), ms)
		}
		for _, m := range ms {
			if !regexp.MustCompile(re).MatchString(m) {
				t.Errorf("%s member %q; want the documented form %s", r.key(key), m, re)
			}
		}
	}
	if l, _ := r.c.HGet(ctx, r.key("limits"), "k1").Result(); l != "1" {
		t.Errorf("limits k1 = %q; want 1", l)
	}
	if tok, _ := r.c.HGet(ctx, r.key("tokens"), "k1").Result(); !regexp.MustCompile(`^[1-9][0-9]*$`).MatchString(tok) {
		t.Errorf("tokens k1 = %q; want the last token, decimal", tok)
	}
	meta, _ := r.c.HGetAll(ctx, r.key("meta")).Result()
	if meta["v"] != r.doc.protocol || meta["epoch"] == "" || meta["seq"] != "3" || meta["maxttl"] != "30000" || meta["expired"] != "1" {
		t.Errorf("meta = %v; want v %s, an epoch, seq 3 (e2, e3, R; grants at once and the refused C take none), maxttl 30000, expired 1", meta, r.doc.protocol)
	}
	if dl, _ := r.c.ZScore(ctx, r.key("held"), "P").Result(); dl <= float64(r.now()) {
		t.Errorf("deadline of P = %v; want ms of the Redis clock in the future", dl)
	}
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
		var got string
		if k.typ == "hash" {
			got, err = r.c.HGet(ctx, name, "\x00").Result()
		} else {
			var s float64
			s, err = r.c.ZScore(ctx, name, "\x00").Result()
			got = strconv.FormatFloat(s, 'f', -1, 64)
			if s > 1e300 {
				got = "+inf"
			}
		}
		if err != nil || got != k.mark {
			t.Errorf("%s marker \\0 = %q, %v; want %q", name, got, err, k.mark)
		}
	}
}

// TestProtocolRefusalsRealRedis: the per-request refusals "x" (the id
// names another request), "e" (another owner holds it), "t" (settled
// since) and "c" (a lock cycle) refuse that request alone and change
// nothing of it; the step's other requests go on.
func TestProtocolRefusalsRealRedis(t *testing.T) {
	secNoLeaks(t)
	r := newProtoRunner(t)
	a, b := "owner-a-"+r.nonce, "owner-b-"+r.nonce
	const ttl = 30000
	r.mustEnqueue(a, ttl, []string{"x1", "h", "x2", "w"}, req("x1", lane("k", 1)), req("x2", [][]any{{"k", 1}, {"j", 2}}, "l", "x0"))
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

	// "t": a settle (a release by the owner with a tombstone lifetime)
	// removes what is there and tombstones every id, present or not.
	r.checkRelease(r.release(a, 60000, "x3", "never"), []string{"w", "g"}, nil)
	zs, _ := r.c.ZRangeWithScores(context.Background(), r.key("tombs"), 0, -1).Result()
	if now := r.now(); len(zs) != 2 || zs[0].Member != "s\x00never" || zs[1].Member != "s\x00x3" || zs[0].Score < float64(now+59000) || zs[0].Score > float64(now+60001) {
		t.Errorf("tombs = %v; want s\\0never and s\\0x3 lapsing a minute from now", zs)
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
	seq, _ := r.c.HGet(context.Background(), r.key("meta"), "seq").Result()
	nested, _ := r.c.ZCard(context.Background(), r.key("nested")).Result()
	r.mustEnqueue(a, ttl, []string{"C", "c", "D", "w"}, req("C", lane("cb", 1), "l", "P"), req("D", lane("cb", 1)))
	seq2, _ := r.c.HGet(context.Background(), r.key("meta"), "seq").Result()
	nested2, _ := r.c.ZCard(context.Background(), r.key("nested")).Result()
	if r.exists("C") || nested2 != nested || seq2 != strconv.Itoa(mustAtoi(t, seq)+1) {
		t.Errorf("after the cycle refusal: C there %v, nested %d→%d, seq %s→%s; want only D's sequence number", r.exists("C"), nested, nested2, seq, seq2)
	}
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
// operator's release with lifetime 0 leaves none.
func TestProtocolTombstonesRealRedis(t *testing.T) {
	secNoLeaks(t)
	r := newProtoRunner(t)
	a := "owner-" + r.nonce
	hints := r.subscribe(a)
	const ttl = 30000
	r.mustEnqueue(a, ttl, []string{"f1", "h", "f2", "w", "f3", "h"}, req("f1", lane("k", 1)), req("f2", lane("k", 1)), req("f3", lane("j", 1)))
	r.checkRelease(r.release("", 200, "f1", "f3"), []string{"h", "h"}, []string{"f2"})
	items := hints.hint(t)
	if len(items) != 3 || hintFor(items, "f1") == nil || hintFor(items, "f3") == nil || hintFor(items, "f2")["x"] == nil {
		t.Errorf("hint %v; want f2 granted, f1 and f3 removed", items)
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
// eviction would) is seen by the next step, which resets the namespace:
// the reset is announced on the namespace's channel with the new epoch,
// every entry of the old epoch is gone, and no grant happens until the
// freeze ends, the latest deadline the lost state knew, or, when a
// deadline key itself was lost, now plus the longest TTL given.
func TestProtocolResetRealRedis(t *testing.T) {
	secNoLeaks(t)
	for _, lost := range []string{"queue", "held"} {
		t.Run(lost, func(t *testing.T) {
			r := newProtoRunner(t)
			owner := "owner-" + r.nonce
			hints := r.subscribe(owner)
			nsch := r.subscribeNamespace()
			const short = 1500
			epoch1, _ := r.mustEnqueue(owner, short, []string{"H", "h", "W", "w"}, req("H", lane("k", 1)), req("W", lane("k", 1)))
			if got := nsch.reset(t); got != epoch1 {
				t.Fatalf("namespace message %q; want the first epoch %q", got, epoch1)
			}
			ctx := context.Background()
			last, _ := r.c.ZScore(ctx, r.key("waiting"), "W").Result()
			if err := r.c.Del(ctx, r.key(lost)).Err(); err != nil {
				t.Fatal(err)
			}

			before := r.now()
			epoch2, _ := r.mustEnqueue(owner, short, []string{"N", "w"}, req("N", lane("idle", 1)))
			after := r.now()
			if epoch2 == epoch1 || epoch2 == "" {
				t.Errorf("epoch after the reset %q; want a new one (was %q)", epoch2, epoch1)
			}
			if got := nsch.reset(t); got != epoch2 {
				t.Errorf("namespace message after the reset: epoch %q; want %q", got, epoch2)
			}
			e, _ := r.heartbeat(owner, short, []string{"H", "g", "W", "g", "N", "w"}, "H", "W", "N")
			if e != epoch2 {
				t.Errorf("heartbeat epoch %q; want %q", e, epoch2)
			}
			r.checkMarkers(t)
			if n, _ := r.c.HLen(ctx, r.key("entries")).Result(); n != 2 {
				t.Errorf("entries holds %d fields after the reset; want the marker and N", n)
			}
			p := r.checkInspect(r.inspect(10, "k", "", "idle", ""))
			frozen := p.stats[4]
			switch lost {
			case "queue": // every deadline known: the latest one
				if frozen != int64(last) {
					t.Errorf("frozen until %d; want the latest deadline, %v", frozen, last)
				}
			case "held": // now plus the longest TTL an enqueue gave
				if frozen < before+short || frozen > after+short {
					t.Errorf("frozen until %d; want now plus maxttl (%d to %d)", frozen, before+short, after+short)
				}
			}
			if p.stats[3] != 1 || p.key(t, "k").limit != 0 || !slices.Equal(p.key(t, "idle").waiters, []string{"N"}) {
				t.Errorf("after the reset: %+v; want resets 1, k empty, N waiting on the idle key", p)
			}
			// No grant before the freeze ends; the first heartbeat after it
			// grants, and hints.
			for r.now() < frozen-100 {
				r.heartbeat(owner, short, []string{"N", "w"}, "N")
				time.Sleep(50 * time.Millisecond)
			}
			for r.now() <= frozen {
				time.Sleep(10 * time.Millisecond)
			}
			r.heartbeat(owner, short, []string{"N", "h"}, "N")
			if h := hintFor(hints.hint(t), "N"); h == nil || h["x"] == nil {
				t.Errorf("hint after the freeze = %v; want N's grant", h)
			}
		})
	}
}

// TestProtocolInspectPagingRealRedis: inspect.lua returns at most budget
// entries per page, holders then waiters, and a cursor to go on with: "h"
// or "w" and the member last returned, "w" (the waiters from the first),
// "\0" (the budget ran out before the key) or "" (done); a cursor of
// another key is refused.
func TestProtocolInspectPagingRealRedis(t *testing.T) {
	secNoLeaks(t)
	r := newProtoRunner(t)
	owner := "owner-" + r.nonce
	const ttl = 30000
	r.mustEnqueue(owner, ttl, []string{"h1", "h", "h2", "h", "w1", "w", "w2", "w", "w3", "w", "w4", "w", "w5", "w", "q1", "h"},
		req("h1", lane("p", 2)), req("h2", lane("p", 2)), req("w1", lane("p", 2)), req("w2", lane("p", 2)),
		req("w3", lane("p", 2)), req("w4", lane("p", 2)), req("w5", lane("p", 2)), req("q1", lane("q", 1)))
	member := func(id string) string {
		t.Helper()
		ms, _ := r.c.ZRangeByLex(context.Background(), r.key("queue"), &redis.ZRangeBy{Min: "[p\x00", Max: "(p\x01"}).Result()
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
	check(p, "p", want{[]string{"h1", "h2"}, []string{"w1"}, "w" + member("w1")})
	check(p, "q", want{nil, nil, "\x00"})
	p = r.checkInspect(r.inspect(3, "p", "w"+member("w1"), "q", ""))
	check(p, "p", want{nil, []string{"w2", "w3", "w4"}, "w" + member("w4")})
	check(p, "q", want{nil, nil, "\x00"})
	p = r.checkInspect(r.inspect(3, "p", "w"+member("w4"), "q", ""))
	check(p, "p", want{nil, []string{"w5"}, ""})
	check(p, "q", want{[]string{"q1"}, nil, ""})
	// The holders fill the budget: go on with "w", the first waiter.
	p = r.checkInspect(r.inspect(2, "p", ""))
	check(p, "p", want{[]string{"h1", "h2"}, nil, "w"})
	p = r.checkInspect(r.inspect(2, "p", "w"))
	check(p, "p", want{nil, []string{"w1", "w2"}, "w" + member("w2")})
	// More holders than the budget: they come in pages too.
	p = r.checkInspect(r.inspect(1, "p", ""))
	check(p, "p", want{[]string{"h1"}, nil, "hp\x00h1"})
	p = r.checkInspect(r.inspect(1, "p", "hp\x00h1"))
	check(p, "p", want{[]string{"h2"}, nil, "w"})
	// A cursor of another key is refused.
	if _, err := r.call("inspect.lua", map[string]any{"budget": 3, "key and cursor...": []string{"q", "w" + member("w1")}}); err == nil || !strings.HasPrefix(err.Error(), "LANES_BADARG cursor ") {
		t.Errorf("inspect q with a cursor of p = %v; want LANES_BADARG cursor", err)
	}
	// The budget is at most MAX_STEP_REQUESTS.
	if _, err := r.call("inspect.lua", map[string]any{"budget": r.doc.bounds["MAX_STEP_REQUESTS"] + 1, "key and cursor...": []string{"p", ""}}); err == nil || !strings.HasPrefix(err.Error(), "LANES_BADARG budget ") {
		t.Errorf("inspect with a budget past MAX_STEP_REQUESTS = %v; want LANES_BADARG budget", err)
	}
}

// TestProtocolBadArgRealRedis: every kind of out-of-bounds input is refused
// with LANES_BADARG and the documented field, before any change (a fresh
// namespace stays without keys); a wrong protocol argument, and a state of
// another version, with LANES_VERSION.
func TestProtocolBadArgRealRedis(t *testing.T) {
	secNoLeaks(t)
	r := newProtoRunner(t)
	owner := "owner-" + r.nonce
	b := r.doc.bounds
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
	var lineage []string
	for i := range b["MAX_LINEAGE"] + 1 {
		lineage = append(lineage, fmt.Sprint("a", i))
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
	for _, tt := range []struct {
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
		{"a tool past MAX_FIELD_LEN", "field", enq(30000, owner, "", 1, reqs(req("e", lane("k", 1), "t", long(b["MAX_FIELD_LEN"]+1))))},
		{"a lineage naming the request", "lineage", enq(30000, owner, "", 1, reqs(req("e", lane("k", 1), "l", "x e")))},
		{"a lineage past MAX_LINEAGE", "lineage", enq(30000, owner, "", 1, reqs(req("e", lane("k", 1), "l", strings.Join(lineage, " "))))},
		{"a step past MAX_STEP_LANES", "step", enq(30000, owner, "", 1, reqs(bigStep...))},
		{"heartbeat: a fractional TTL", "ttl", hb("1500.5", owner, "e")},
		{"heartbeat: no ids", "ids", hb(30000, owner)},
		{"heartbeat: a 5000-byte id", "id", hb(30000, owner, long(5000))},
		{"heartbeat: an owner with a space", "owner", hb(30000, "a b", "e")},
		{"release: a tombstone past MAX_TTL", "tombstone", rel(owner, b["MAX_TTL"]+1, "e")},
		{"release: a fractional tombstone", "tombstone", rel(owner, "0.5", "e")},
		{"release: an id with a newline", "id", rel(owner, 0, "a\nb")},
		{"release: no ids", "ids", rel(owner, 0)},
		{"inspect: budget 0", "budget", insp(0, "k", "")},
		{"inspect: a key without its cursor", "keys", insp(10, "k")},
		{"inspect: a key with a newline", "key", insp(10, "a\nb", "")},
		{"nine KEYS", "keys", func() error {
			_, err := r.eval("heartbeat.lua", r.keys[:len(r.keys)-1], []any{r.doc.protocol, r.wake, 30000, owner, "e"})
			return err
		}},
	} {
		err := tt.run()
		want := "LANES_BADARG " + tt.field + " "
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s = %v; want %s<what>", tt.name, err, want)
		}
		if !slices.Contains(r.doc.badarg, tt.field) {
			t.Errorf("%s: PROTOCOL.md does not list the LANES_BADARG field %q", tt.name, tt.field)
		}
	}
	if n, _ := r.c.Exists(context.Background(), r.keys...).Result(); n != 0 {
		t.Errorf("after refused steps, %d keys of the namespace exist; want none (refused before any change)", n)
	}

	// LANES_VERSION: a caller of another version, to every lanes script.
	for _, script := range []string{"enqueue.lua", "heartbeat.lua", "release.lua", "inspect.lua"} {
		vals := map[string]map[string]any{
			"enqueue.lua":   {"protocol": "1", "TTL ms": 30000, "owner id": owner, "host": "", "pid": 1, "requests JSON": ok},
			"heartbeat.lua": {"protocol": "1", "TTL ms": 30000, "owner id": owner, "entry ids...": []string{"e"}},
			"release.lua":   {"protocol": "1", "owner id": owner, "tombstone ms": 0, "entry ids...": []string{"e"}},
			"inspect.lua":   {"protocol": "1", "budget": 10, "key and cursor...": []string{"k", ""}},
		}[script]
		_, err := r.call(script, vals)
		if want := "LANES_VERSION " + r.doc.protocol + " 1"; err == nil || err.Error() != want {
			t.Errorf("%s with protocol 1 = %v; want %s", script, err, want)
		}
	}
	if n, _ := r.c.Exists(context.Background(), r.keys...).Result(); n != 0 {
		t.Errorf("after LANES_VERSION, %d keys of the namespace exist; want none", n)
	}
	// ... and a state made by another version.
	r.mustEnqueue(owner, 30000, []string{"e", "h"}, req("e", lane("k", 1)))
	if err := r.c.HSet(context.Background(), r.key("meta"), "v", "3").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := r.call("heartbeat.lua", map[string]any{"TTL ms": 30000, "owner id": owner, "entry ids...": []string{"e"}})
	if want := "LANES_VERSION " + r.doc.protocol + " data:3"; err == nil || err.Error() != want {
		t.Errorf("heartbeat on a state of version 3 = %v; want %s", err, want)
	}
}

// TestProtocolNoTTLRealRedis: no key of a namespace carries a TTL, and the
// eight state keys stay, holding their markers, once nothing is held or
// awaited (a namespace whose processes all died loses nothing that a
// later step relies on). This replaces protocol 1's safety-net TTL.
func TestProtocolNoTTLRealRedis(t *testing.T) {
	secNoLeaks(t)
	r := newProtoRunner(t)
	owner := "owner-" + r.nonce
	const ttl = 30000
	r.mustEnqueue(owner, ttl, []string{"holder", "h", "waiter", "w", "child", "h"},
		req("holder", lane("k", 1)), req("waiter", lane("k", 1)), req("child", [][]any{{"k", 1}, {"j", 1}}, "l", "holder"))
	r.heartbeat(owner, ttl, []string{"holder", "h", "waiter", "w", "child", "h"}, "holder", "waiter", "child")
	r.checkRelease(r.release(owner, 60000, "gone"), []string{"g"}, nil) // a tombstone
	r.checkMarkers(t)
	r.checkRelease(r.release(owner, 0, "holder", "waiter"), []string{"h", "w"}, nil)
	r.heartbeat(owner, ttl, []string{"child", "g"}, "child") // revoked with its lender
	r.checkMarkers(t)
	ctx := context.Background()
	for i, k := range r.doc.keys[:r.doc.state] {
		if !k.marker {
			continue
		}
		var n int64
		if k.typ == "hash" {
			n, _ = r.c.HLen(ctx, r.keys[i]).Result()
		} else {
			n, _ = r.c.ZCard(ctx, r.keys[i]).Result()
		}
		if n != 1 {
			t.Errorf("%s holds %d after every entry left; want its marker alone", r.keys[i], n)
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
	_, list := r.mustEnqueue(owner, ttl, []string{"P", "h", "Q", "h"}, req("P", lane("a", 1)), req("Q", lane("b", 1)))
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
	nested, _ := r.c.ZRange(ctx, r.key("nested"), 0, -1).Result()
	for _, m := range []string{" P\x00C", " P\x00D", "P\x00C", "P\x00D"} {
		if !slices.Contains(nested, m) {
			t.Errorf("nested %q lacks %q", nested, m)
		}
	}
	if n, _ := r.c.ZLexCount(ctx, r.key("holds"), "[a\x00", "(a\x01").Result(); n != 1 {
		t.Errorf("a has %d holders in holds; want 1 (P; C borrows)", n)
	}

	// P's hold ends: C is revoked (its owner told), D queues on a at its
	// own sequence number.
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
	r.heartbeat(owner, ttl, []string{"C", "g", "D", "w"}, "C", "D")
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
// 16 digits in its queue member; past MAX_SEQ an enqueue that must wait
// fails with LANES_EXHAUSTED while entries wait, and numbers start again
// from 1 once none does. (No waiter is given a number near MAX_SEQ here:
// PROTOCOL.md's known limits say why.)
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
	if err := r.c.HSet(ctx, r.key("meta"), "seq", max).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := r.enqueue(owner, ttl, req("A", lane("k2", 1)), req("W2", lane("k", 1)))
	if err == nil || !strings.HasPrefix(err.Error(), "LANES_EXHAUSTED ") {
		t.Fatalf("enqueue past MAX_SEQ while W1 waits = %v; want LANES_EXHAUSTED", err)
	}
	// Refused before any change: neither request is there.
	if r.exists("A") || r.exists("W2") {
		t.Errorf("after LANES_EXHAUSTED: A there %v, W2 there %v; want neither", r.exists("A"), r.exists("W2"))
	}
	r.checkRelease(r.release(owner, 0, "W1"), []string{"w"}, nil)
	_, list = r.mustEnqueue(owner, ttl, []string{"W3", "w"}, req("W3", lane("k", 1)))
	if seqOf(list, 0) != 1 {
		t.Errorf("W3 seq %d; want 1 (numbers start again once no entry waits)", seqOf(list, 0))
	}
	if seq, _ := r.c.HGet(ctx, r.key("meta"), "seq").Result(); seq != "1" {
		t.Errorf("meta seq = %q after the wrap; want 1", seq)
	}
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
