package integration_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
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
// replies, errors, hints and keys against the document.

// protoDoc is what the tests read from docs/PROTOCOL.md.
type protoDoc struct {
	keys    []protoKey          // the keyspace table, in order
	wake    string              // the hint channel prefix, with {ns}
	argv    map[string][]string // script -> the ARGV names after the prefix
	replies map[string]string   // script -> its reply cell
	codes   map[string][]string // error code -> its documented fields
	record  []string            // the fields of the entry record
	ttlKeys []int               // the keys (from 1) with a safety-net TTL
	text    string
}

type protoKey struct {
	name  string // with {ns}
	typ   string // hash, zset or string
	zero  bool   // "scores 0"
	never bool   // "never deleted"
}

var numberWords = map[string]int{"seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}

func readProtocol(t *testing.T) protoDoc {
	t.Helper()
	b, err := os.ReadFile("../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	d := protoDoc{text: string(b), argv: map[string][]string{}, replies: map[string]string{}, codes: map[string][]string{}}
	for _, m := range regexp.MustCompile("(?m)^\\| (\\d+) \\| `([^`]+)` \\| ([^|]+) \\| ([^|]+) \\|$").FindAllStringSubmatch(d.text, -1) {
		typ := strings.TrimSpace(m[3])
		k := protoKey{name: m[2], zero: strings.Contains(typ, "scores 0"), never: strings.Contains(m[4], "never deleted")}
		switch {
		case typ == "hash", typ == "string":
			k.typ = typ
		case strings.HasPrefix(typ, "sorted set"):
			k.typ = "zset"
		default:
			t.Fatalf("PROTOCOL.md: key %s has type %q, which the test does not know", m[2], typ)
		}
		if n, _ := strconv.Atoi(m[1]); n != len(d.keys)+1 {
			t.Fatalf("PROTOCOL.md: keyspace row %s comes after %d rows", m[1], len(d.keys))
		}
		d.keys = append(d.keys, k)
	}
	if len(d.keys) == 0 {
		t.Fatal("PROTOCOL.md: no keyspace table")
	}
	for _, re := range []string{"A namespace `ns` is (\\w+) keys", "All take the\\s+(\\w+) keys above as `KEYS`"} {
		m := regexp.MustCompile(re).FindStringSubmatch(d.text)
		if m == nil || numberWords[m[1]] != len(d.keys) {
			t.Errorf("PROTOCOL.md says %q; its keyspace table has %d keys", m, len(d.keys))
		}
	}
	m := regexp.MustCompile("hint channel prefix\\s+`([^`]+)` as `ARGV\\[1\\]`").FindStringSubmatch(d.text)
	if m == nil {
		t.Fatal("PROTOCOL.md: no hint channel prefix as ARGV[1]")
	}
	d.wake = m[1]
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
	for _, s := range []string{"enqueue.lua", "heartbeat.lua", "release.lua", "inspect.lua"} {
		if _, ok := d.argv[s]; !ok {
			t.Fatalf("PROTOCOL.md: the script table has no row for %s", s)
		}
	}
	for _, m := range regexp.MustCompile("(?m)^\\| `(LANES_[A-Z]+)([^`]*)` \\|").FindAllStringSubmatch(d.text, -1) {
		d.codes[m[1]] = strings.Fields(m[2])
	}
	rec := regexp.MustCompile(`(?s)The entry record is a JSON object(.*?)\n\n`).FindStringSubmatch(d.text)
	if rec == nil {
		t.Fatal("PROTOCOL.md: no entry record paragraph")
	}
	for _, f := range regexp.MustCompile("`([a-z]+)`").FindAllStringSubmatch(rec[1], -1) {
		d.record = append(d.record, f[1])
	}
	ttl := regexp.MustCompile(`Keys (\d+) to (\d+)(?: and (\d+))? carry a safety-net TTL`).FindStringSubmatch(strings.Join(strings.Fields(d.text), " "))
	if ttl == nil {
		t.Fatal("PROTOCOL.md: no sentence on which keys carry a safety-net TTL")
	}
	from, _ := strconv.Atoi(ttl[1])
	to, _ := strconv.Atoi(ttl[2])
	for i := from; i <= to; i++ {
		d.ttlKeys = append(d.ttlKeys, i)
	}
	if n, err := strconv.Atoi(ttl[3]); err == nil {
		d.ttlKeys = append(d.ttlKeys, n)
	}
	return d
}

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
	for _, k := range d.keys {
		r.keys = append(r.keys, strings.Replace(k.name, "{ns}", "{"+r.ns+"}", 1))
	}
	r.wake = strings.Replace(d.wake, "{ns}", "{"+r.ns+"}", 1)
	t.Cleanup(func() {
		r.c.Del(context.Background(), r.keys...)
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
func (r *protoRunner) eval(ctx context.Context, script string, keys []string, argv []any) (any, error) {
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
// document's list: the prefix, then each documented argument from vals (a
// name ending in "..." takes a []string).
func (r *protoRunner) call(script string, vals map[string]any) (any, error) {
	r.t.Helper()
	argv := []any{r.wake}
	for _, name := range r.doc.argv[script] {
		v, ok := vals[name]
		if !ok {
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return r.eval(ctx, script, r.keys, argv)
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

// checkTuple checks one per-entry reply v against the documented tuples:
// it must be [id, state, detail...] with the documented shape for state.
// It returns the detail list.
func (r *protoRunner) checkTuple(script string, v any, id, state string) []any {
	r.t.Helper()
	doc := tuples(r.t, r.doc.replies[script])[state]
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
		if len(detail) == 0 || len(detail)%2 != 0 {
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

// statuses checks a per-request or per-id reply: one tuple per id.
func (r *protoRunner) statuses(script string, v any, want ...string) []any {
	r.t.Helper()
	list, ok := v.([]any)
	if !ok || len(list) != len(want)/2 {
		r.t.Fatalf("%s reply %#v; want %d statuses", script, v, len(want)/2)
	}
	for i := 0; i < len(want); i += 2 {
		r.checkTuple(script, list[i/2], want[i], want[i+1])
	}
	return list
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

// hints collects the messages of one owner's hint channel.
type hints struct {
	ps *redis.PubSub
}

func (r *protoRunner) subscribe(owner string) *hints {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ps := r.c.Subscribe(ctx, r.wake+owner)
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { ps.Close() })
	return &hints{ps: ps}
}

// next returns the next hint, as the JSON list PROTOCOL.md describes:
// {"id", "q", "x"} for a grant, {"id"} for another change.
func (h *hints) next(t *testing.T) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := h.ps.ReceiveMessage(ctx)
	if err != nil {
		t.Fatalf("no hint: %v", err)
	}
	var items []map[string]any
	if err := json.Unmarshal([]byte(m.Payload), &items); err != nil {
		t.Fatalf("hint %q is not the JSON list PROTOCOL.md describes: %v", m.Payload, err)
	}
	return items
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
// KEYS and ARGV is what their sources say.
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
	for script, names := range d.argv {
		body, err := os.ReadFile("../scripts/lua/" + script)
		if err != nil {
			t.Fatal(err)
		}
		src := lua.Source(script)
		if !strings.HasPrefix(src, string(lib)) || !strings.HasSuffix(src, string(body)) {
			t.Errorf("lua.Source(%q) is not lib.lua followed by %s", script, script)
		}
		header := regexp.MustCompile(`(?s)-- ARGV:(.*?)\n-- [A-Z]`).FindSubmatch(body)
		if header == nil {
			t.Errorf("%s: no ARGV in its header", script)
			continue
		}
		fixed, variadic := 0, false
		for _, m := range regexp.MustCompile(`\[(\d+)(\.\.\.)?\]`).FindAllSubmatch(header[1], -1) {
			if len(m[2]) > 0 {
				variadic = true
			} else {
				fixed++
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
		if fixed != docFixed+1 || variadic != docVariadic {
			t.Errorf("%s: its header has %d fixed ARGV (prefix included), variadic %v; PROTOCOL.md documents the prefix and %q", script, fixed, variadic, names)
		}
	}
}

// TestProtocolRealRedis runs every documented script with the documented
// KEYS and ARGV and checks the replies' shapes, the error codes, the hints
// and the keyspace against PROTOCOL.md.
func TestProtocolRealRedis(t *testing.T) {
	secNoLeaks(t)
	r := newProtoRunner(t)
	ownerA, ownerB := "owner-a-"+r.nonce, "owner-b-"+r.nonce
	r.subscribe(ownerA) // before the first enqueue, as a client does
	hintsB := r.subscribe(ownerB)
	const ttl = 30000

	// enqueue: a grant, then two waiters of another owner.
	v, err := r.enqueue(ownerA, ttl, req("e1", lane("k1", 1), "c", "call-1", "t", "tool-1", "n", "tenant-1"))
	if err != nil {
		t.Fatalf("enqueue.lua: %v", err)
	}
	tok1 := r.statuses("enqueue.lua", v, "e1", "h")[0].([]any)[2].([]any)[1].(string)
	v, _ = r.enqueue(ownerB, ttl, req("e2", lane("k1", 1)), req("e3", lane("k1", 1)))
	list := r.statuses("enqueue.lua", v, "e2", "w", "e3", "w")
	if p2, p3 := list[0].([]any)[2].([]any)[1], list[1].([]any)[2].([]any)[1]; p2 != int64(1) || p3 != int64(2) {
		t.Errorf("positions of e2, e3 = %v, %v; want 1, 2", p2, p3)
	}
	// A retry by the same owner keeps the place; another owner cannot take
	// a held id.
	v, _ = r.enqueue(ownerB, ttl, req("e2", lane("k1", 1)))
	r.statuses("enqueue.lua", v, "e2", "w")
	v, _ = r.enqueue(ownerB, ttl, req("e1", lane("k1", 1)))
	r.statuses("enqueue.lua", v, "e1", "e")

	// The error codes: match the code and its documented fields.
	_, err = r.enqueue(ownerA, ttl, req("e8", lane("k8", 1)), req("e9", lane("k1", 2)))
	if f := r.doc.codes["LANES_LIMIT"]; err == nil || !strings.HasPrefix(err.Error(), "LANES_LIMIT ") || len(f) != 3 {
		t.Fatalf("enqueue with another limit = %v; want LANES_LIMIT with the fields %q", err, f)
	} else if got := strings.Fields(strings.TrimPrefix(err.Error(), "LANES_LIMIT ")); !slices.Equal(got, []string{"1", "2", "k1"}) {
		t.Errorf("LANES_LIMIT fields = %q; want %s = 1 2 k1", got, f)
	}
	if n, _ := r.c.HExists(context.Background(), r.key("entries"), "e8").Result(); n {
		t.Errorf("after LANES_LIMIT, e8 was enqueued; want nothing of the batch")
	}
	for _, bad := range []func() error{
		func() error { _, err := r.enqueue(ownerA, 0, req("e7", lane("k7", 1))); return err },
		func() error {
			_, err := r.call("enqueue.lua", map[string]any{"TTL ms": ttl, "owner id": ownerA, "host": "h", "pid": 1, "requests JSON": "not json"})
			return err
		},
		func() error {
			_, err := r.call("heartbeat.lua", map[string]any{"TTL ms": "soon", "owner id": ownerA, "entry ids...": []string{"e1"}})
			return err
		},
		func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := r.eval(ctx, "inspect.lua", r.keys[:len(r.keys)-1], []any{r.wake})
			return err
		},
	} {
		if err := bad(); err == nil || !strings.HasPrefix(err.Error(), "LANES_BADARG ") {
			t.Errorf("malformed ARGV or KEYS = %v; want LANES_BADARG", err)
		}
	}
	if _, ok := r.doc.codes["LANES_BADARG"]; !ok {
		t.Errorf("PROTOCOL.md documents no LANES_BADARG")
	}

	// heartbeat: held, waiting, gone (unknown, or another owner's).
	v = r.mustCall("heartbeat.lua", map[string]any{"TTL ms": ttl, "owner id": ownerA, "entry ids...": []string{"e1", "nosuch", "e2"}})
	r.statuses("heartbeat.lua", v, "e1", "h", "nosuch", "g", "e2", "g")
	v = r.mustCall("heartbeat.lua", map[string]any{"TTL ms": ttl, "owner id": ownerB, "entry ids...": []string{"e2", "e3"}})
	r.statuses("heartbeat.lua", v, "e2", "w", "e3", "w")

	// inspect: the holders and waiters, entry records as documented.
	r.checkInspect(r.mustCall("inspect.lua", map[string]any{"keys...": []string{}}), map[string][2][]string{"k1": {{"e1"}, {"e2", "e3"}}})
	r.checkInspect(r.mustCall("inspect.lua", map[string]any{"keys...": []string{"k1", "nokey"}}), map[string][2][]string{"k1": {{"e1"}, {"e2", "e3"}}})
	rec := r.record("e1")
	if x, _ := rec["x"].(map[string]any); x["k1"] != tok1 || rec["c"] != "call-1" || rec["t"] != "tool-1" || rec["n"] != "tenant-1" || rec["s"] != "h" {
		t.Errorf("record of e1 = %v; want token %s, call, tool, tenant, state h", rec, tok1)
	}

	// release by the owner: the hand-off, and the new holder's owner hears
	// of its grant on its channel.
	v = r.mustCall("release.lua", map[string]any{"caller's owner id": ownerA, "entry ids...": []string{"e1", "nosuch"}})
	r.checkRelease(v, []string{"h", "g"}, []string{"e2"})
	h := hintFor(hintsB.next(t), "e2")
	if x, _ := h["x"].(map[string]any); h == nil || h["q"] != r.record("e2")["q"] || x["k1"] == nil {
		t.Errorf("hint to e2's owner = %v; want {id: e2, q: its sequence number, x: its token}", h)
	}
	// A caller removes only its own entries; an operator ("") any, and
	// their owner is told.
	v = r.mustCall("release.lua", map[string]any{"caller's owner id": ownerA, "entry ids...": []string{"e3"}})
	r.checkRelease(v, []string{"g"}, nil)
	v = r.mustCall("release.lua", map[string]any{"caller's owner id": "", "entry ids...": []string{"e2"}})
	r.checkRelease(v, []string{"h"}, []string{"e3"})
	items := hintsB.next(t)
	if hintFor(items, "e2") == nil || hintFor(items, "e3") == nil || hintFor(items, "e3")["q"] == nil {
		t.Errorf("hint after a release by force = %v; want e2 (evicted) and e3 (granted, with q)", items)
	}

	// A lock cycle through nested calls: P holds a, Q holds b, R (under Q)
	// waits for a; C (under P) asking for b would wait for its ancestor.
	v, _ = r.enqueue(ownerA, ttl, req("P", lane("a", 1)), req("Q", lane("b", 1)))
	r.statuses("enqueue.lua", v, "P", "h", "Q", "h")
	v, _ = r.enqueue(ownerA, ttl, req("R", lane("a", 1), "l", "Q"))
	r.statuses("enqueue.lua", v, "R", "w")
	v, _ = r.enqueue(ownerA, ttl, req("C", lane("b", 1), "l", "P"))
	r.statuses("enqueue.lua", v, "C", "c")

	// An entry that expires: inspect (which renews nothing) reaps it, the
	// stats count it, and its owner's heartbeat finds it gone.
	v, _ = r.enqueue(ownerA, 1, req("short", lane("k9", 1)))
	r.statuses("enqueue.lua", v, "short", "h")
	deadline := time.Now().Add(10 * time.Second)
	for {
		v = r.mustCall("inspect.lua", map[string]any{"keys...": []string{"k9"}})
		if keys, _ := v.([]any)[1].([]any); len(keys) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the entry with a 1ms TTL never expired: %v", v)
		}
		time.Sleep(5 * time.Millisecond)
	}
	v = r.mustCall("heartbeat.lua", map[string]any{"TTL ms": ttl, "owner id": ownerA, "entry ids...": []string{"short"}})
	r.statuses("heartbeat.lua", v, "short", "g")

	r.checkKeyspace(t)
	if len(r.noscript) != 4 {
		t.Errorf("NOSCRIPT met for %v; want once per script (the EVALSHA then EVAL path)", r.noscript)
	}
}

// checkInspect checks inspect.lua's reply against PROTOCOL.md and want:
// key -> holders, waiters.
func (r *protoRunner) checkInspect(v any, want map[string][2][]string) {
	t := r.t
	t.Helper()
	cell := r.doc.replies["inspect.lua"]
	// The reply's top-level elements: now, the keys, and any list of
	// counters written after the keys as [name, name].
	counters := regexp.MustCompile(`\.\.\.\], \[([a-z, ]+)\]\]` + "`" + `$`).FindStringSubmatch(cell)
	f, ok := v.([]any)
	wantLen := 2
	if counters != nil {
		wantLen = 3
	}
	if !ok || len(f) != wantLen {
		t.Fatalf("inspect.lua reply %#v; want %d elements as PROTOCOL.md writes %s", v, wantLen, cell)
	}
	now, ok := f[0].(int64)
	tm, err := r.c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !ok || now <= 0 || now > tm.UnixMilli()+1 {
		t.Errorf("inspect.lua now = %v; want ms of the Redis clock (%d)", f[0], tm.UnixMilli())
	}
	// Each holder and waiter: [entry JSON, deadline, ...] as documented.
	em := regexp.MustCompile(`\[\[(entry JSON[^\]]*)\], \.\.\.holders\]`).FindStringSubmatch(cell)
	if em == nil {
		t.Fatalf("PROTOCOL.md: no [[entry JSON, ...], ...holders] in %s", cell)
	}
	elems := strings.Split(em[1], ", ")
	keys, ok := f[1].([]any)
	if !ok || len(keys) != len(want) {
		t.Fatalf("inspect.lua keys = %#v; want %d keys", f[1], len(want))
	}
	for _, kv := range keys {
		k, ok := kv.([]any)
		if !ok || len(k) != 4 {
			t.Fatalf("inspect.lua key %#v; want [key, limit, holders, waiters]", kv)
		}
		name, _ := k[0].(string)
		w, ok := want[name]
		if _, isInt := k[1].(int64); !ok || !isInt {
			t.Fatalf("inspect.lua key %#v; want one of %v with an integer limit", kv, want)
		}
		for i, role := range []string{"holders", "waiters"} {
			pairs, _ := k[2+i].([]any)
			var ids []string
			for _, p := range pairs {
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
						if dl, err := strconv.ParseInt(fmt.Sprint(pair[j]), 10, 64); err != nil || dl <= now {
							t.Errorf("inspect.lua deadline %v; want ms after now %d", pair[j], now)
						}
					case "id":
						id, _ = pair[j].(string)
					default:
						t.Fatalf("PROTOCOL.md documents %q in an inspect.lua entry, which the test does not know: update the test", e)
					}
				}
				for field := range rec {
					if !slices.Contains(r.doc.record, field) {
						t.Errorf("entry record field %q is not documented (PROTOCOL.md: %q)", field, r.doc.record)
					}
				}
				for _, field := range r.doc.record {
					if optional := map[string]bool{"c": true, "t": true, "n": true, "l": true, "g": true, "x": true, "r": true}; !optional[field] {
						if _, ok := rec[field]; !ok {
							t.Errorf("entry record %v lacks %q", rec, field)
						}
					}
				}
				if id == "" {
					id, _ = rec["id"].(string)
				}
				ids = append(ids, id)
			}
			if !slices.Equal(ids, w[i]) {
				t.Errorf("inspect.lua %s of %s = %q; want %q", role, name, ids, w[i])
			}
		}
	}
	if counters != nil {
		names := strings.Split(counters[1], ", ")
		c, ok := f[2].([]any)
		if !ok || len(c) != len(names) {
			t.Fatalf("inspect.lua counters %#v; want %d: %q", f[2], len(names), names)
		}
		for i, n := range c {
			if x, ok := n.(int64); !ok || x < 0 {
				t.Errorf("inspect.lua counter %s = %#v; want a count", names[i], n)
			}
		}
	}
}

// checkRelease checks release.lua's reply: [[state per id], [granted ids]].
func (r *protoRunner) checkRelease(v any, was, granted []string) {
	r.t.Helper()
	f, ok := v.([]any)
	if !ok || len(f) != 2 {
		r.t.Fatalf("release.lua reply %#v; want [[state per id], [granted ids]]", v)
	}
	states, ok1 := f[0].([]any)
	ids, ok2 := f[1].([]any)
	if !ok1 || !ok2 {
		r.t.Fatalf("release.lua reply %#v; want two lists", v)
	}
	got := func(l []any) []string {
		var out []string
		for _, x := range l {
			out = append(out, fmt.Sprint(x))
		}
		return out
	}
	if !slices.Equal(got(states), was) || !slices.Equal(got(ids), granted) {
		r.t.Errorf("release.lua reply %v; want states %q, granted %q", v, was, granted)
	}
}

// checkKeyspace checks the keys against the keyspace table: their names and
// types, the members' forms, scores 0 where documented, no TTL on the keys
// never deleted.
func (r *protoRunner) checkKeyspace(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for i, k := range r.doc.keys {
		name := r.keys[i]
		typ, err := r.c.Type(ctx, name).Result()
		if err != nil || typ != k.typ {
			t.Errorf("TYPE %s = %q, %v; want %s", name, typ, err, k.typ)
			continue
		}
		if k.zero {
			zs, _ := r.c.ZRangeWithScores(ctx, name, 0, -1).Result()
			for _, z := range zs {
				if z.Score != 0 {
					t.Errorf("%s member %q has score %v; want 0", name, z.Member, z.Score)
				}
			}
		}
		if pttl, _ := r.c.PTTL(ctx, name).Result(); k.never && pttl != -1 {
			t.Errorf("%s has TTL %v; PROTOCOL.md says it is never deleted", name, pttl)
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
		"queue":  `^(a\x00\d{16}\x00R)$`,
		"holds":  `^(a\x00P|b\x00Q|k1\x00e3)$`,
		"nested": `^(Q\x00R)$`,
	} {
		ms := members(key)
		if len(ms) == 0 {
			t.Errorf("%s is empty", r.key(key))
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
	if seq, err := r.c.Get(ctx, r.key("seq")).Int64(); err != nil || seq < 8 {
		t.Errorf("seq = %d, %v; want the last sequence number (8 entries so far)", seq, err)
	}
	if dl, _ := r.c.ZScore(ctx, r.key("deadlines"), "P").Result(); dl <= float64(time.Now().UnixMilli()) {
		t.Errorf("deadline of P = %v; want ms of the Redis clock in the future", dl)
	}
}

// TestProtocolSafetyNetTTLRealRedis: PROTOCOL.md says the keys it names
// (1 to 5 and 8) carry a safety-net TTL at least a minute past the latest
// deadline, which heartbeat.lua raises when it falls short. Here a process
// holds a key and heartbeats (the TTL is set), then the namespace's first
// waiter and first nested call create the queue and nested keys; after the
// next heartbeat, every one of those keys must carry that TTL, or a
// namespace whose processes all died keeps them forever.
func TestProtocolSafetyNetTTLRealRedis(t *testing.T) {
	secNoLeaks(t)
	r := newProtoRunner(t)
	owner := "owner-" + r.nonce
	const ttl = 30000
	heartbeat := func(ids ...string) {
		t.Helper()
		r.mustCall("heartbeat.lua", map[string]any{"TTL ms": ttl, "owner id": owner, "entry ids...": ids})
	}
	v, _ := r.enqueue(owner, ttl, req("other", lane("o", 1)))
	r.statuses("enqueue.lua", v, "other", "h")
	heartbeat("other")
	v, _ = r.enqueue(owner, ttl, req("holder", lane("k", 1)), req("waiter", lane("k", 1)), req("child", lane("j", 1), "l", "holder"))
	r.statuses("enqueue.lua", v, "holder", "h", "waiter", "w", "child", "h")
	heartbeat("other", "holder", "waiter", "child")

	ctx := context.Background()
	last, err := r.c.ZRangeWithScores(ctx, r.key("deadlines"), -1, -1).Result()
	if err != nil || len(last) != 1 {
		t.Fatalf("deadlines = %v, %v", last, err)
	}
	tm, err := r.c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	least := time.Duration(int64(last[0].Score)-tm.UnixMilli())*time.Millisecond + time.Minute - time.Second
	for _, n := range r.doc.ttlKeys {
		name := r.keys[n-1]
		if exists, _ := r.c.Exists(ctx, name).Result(); exists == 0 {
			continue
		}
		if pttl, _ := r.c.PTTL(ctx, name).Result(); pttl < 0 {
			t.Errorf("after a heartbeat, %s has no TTL; PROTOCOL.md says at least a minute past the latest deadline (%v)", name, least)
		} else if pttl < least {
			t.Errorf("after a heartbeat, %s has TTL %v; PROTOCOL.md says at least a minute past the latest deadline (%v)", name, pttl, least)
		}
	}
}
