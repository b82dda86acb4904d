package ui_test

// The HTTP endpoints and the event stream, against the real Redis server
// of the tests (internal/redistest: LANES_REDIS_URL or 127.0.0.1:6379). The
// server is shared: each test works in a namespace of its own and deletes
// only that namespace's keys at its end (never FLUSHALL). The tests of the
// token and the host check use the in-memory backend, and say so.

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lanes-dev/lanes/internal/redisproc"
	"github.com/lanes-dev/lanes/internal/redistest"
	"github.com/lanes-dev/lanes/internal/ui"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitFor bounds every wait of these tests.
const waitFor = 10 * time.Second

// serve runs a ui.Server for cfg (a look every 20ms unless cfg says) behind
// an httptest server until t ends.
func serve(t *testing.T, cfg ui.Config) (*httptest.Server, *ui.Server) {
	t.Helper()
	if cfg.Interval == 0 {
		cfg.Interval = 20 * time.Millisecond
	}
	srv, err := ui.New(cfg)
	if err != nil {
		t.Fatalf("ui.New() = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		_ = srv.Run(ctx)
		close(ran)
	}()
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		cancel()
		<-ran // ends the event streams
		ts.Close()
	})
	return ts, srv
}

// realRedis returns a backend in a fresh namespace of the real Redis
// server (its keys deleted when t ends) and a session on it.
func realRedis(t *testing.T) (*redislane.Backend, *lanes.Session) {
	t.Helper()
	b := redistest.Backend(t, redistest.Client(t), "ui-test-")
	return b, session(t, b)
}

func session(t *testing.T, b lanes.Backend) *lanes.Session {
	t.Helper()
	s, err := lanes.NewSession(context.Background(), b, lanes.WithTTL(5*time.Second), lanes.WithOwner("ui-test-host", 77))
	if err != nil {
		t.Fatalf("NewSession() = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func acquire(t *testing.T, s *lanes.Session, req lanes.Request) *lanes.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	l, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("Acquire(%v) = %v", req.Lanes, err)
	}
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	return l
}

// get sends GET path (with header h) and decodes the JSON answer into v.
func get(t *testing.T, ts *httptest.Server, path string, h http.Header, v any) int {
	t.Helper()
	req, err := http.NewRequest("GET", ts.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	return do(t, req, v)
}

func do(t *testing.T, req *http.Request, v any) int {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("%s %s answered %d, not JSON: %q", req.Method, req.URL.Path, resp.StatusCode, body)
		}
	}
	return resp.StatusCode
}

// post sends JSON body to path as the page does (X-Lanes-UI), with extra
// headers h.
func post(t *testing.T, ts *httptest.Server, path string, body any, h http.Header, v any) int {
	t.Helper()
	raw, _ := json.Marshal(body)
	req, err := http.NewRequest("POST", ts.URL+path, strings.NewReader(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Lanes-UI", "1")
	for k, vs := range h {
		req.Header[k] = vs
	}
	return do(t, req, v)
}

// stateUntil polls GET /api/state?query until cond holds on the frame.
func stateUntil(t *testing.T, ts *httptest.Server, query, what string, cond func(ui.Frame) bool) ui.Frame {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		var f ui.Frame
		code := get(t, ts, "/api/state?"+query, nil, &f)
		if code == http.StatusOK && cond(f) {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s; last answer %d: %+v", waitFor, what, code, f)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func findKey(f ui.Frame, key string) *ui.KeyView {
	for _, n := range f.Namespaces {
		for i := range n.Keys {
			if n.Keys[i].Key == key {
				return &n.Keys[i]
			}
		}
	}
	return nil
}

func keyNames(f ui.Frame) []string {
	var out []string
	for _, n := range f.Namespaces {
		for _, k := range n.Keys {
			out = append(out, k.Key)
		}
	}
	return out
}

func TestStateShowsHoldersAndWaitersRealRedis(t *testing.T) {
	b, s := realRedis(t)
	ts, _ := serve(t, ui.Config{Sources: []ui.Source{{Namespace: b.Namespace(), Lanes: b}}})
	held := acquire(t, s, lanes.Request{ID: "holder-1", Tool: "search", CallID: "call_1", Tenant: "acme",
		Lanes: []lanes.Lane{{Key: "tool:search", Limit: 1}, {Key: "tenant:acme", Limit: 5}}})
	tickets, err := s.Enqueue(context.Background(), lanes.Request{ID: "waiter-1", Tool: "search", CallID: "call_2",
		Lanes: []lanes.Lane{{Key: "tool:search", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tickets[0].Cancel(context.Background()) })

	f := stateUntil(t, ts, "", "tool:search has its holder and its waiter", func(f ui.Frame) bool {
		k := findKey(f, "tool:search")
		return k != nil && len(k.Holders) == 1 && len(k.Waiters) == 1
	})
	if got := keyNames(f); strings.Join(got, " ") != "tool:search tenant:acme" {
		t.Errorf("keys = %q; want tool:search (a waiter) before tenant:acme", got)
	}
	n := f.Namespaces[0]
	if !n.OK || n.Namespace != b.Namespace() || n.SeenAt == "" || n.HistoryFrom == "" || f.IntervalMS != 20 || f.AllowRelease {
		t.Errorf("namespace view = %+v, interval %d, allow release %v; want ok, seen, 20ms, no release", n, f.IntervalMS, f.AllowRelease)
	}
	k := findKey(f, "tool:search")
	h, w := k.Holders[0], k.Waiters[0]
	if h.Entry != "holder-1" || h.Host != "ui-test-host" || h.PID != 77 || h.Tool != "search" || h.CallID != "call_1" ||
		h.Tenant != "acme" || h.Token != held.Token("tool:search") || k.Class != "tool" || k.Limit != 1 {
		t.Errorf("holder = %+v of %+v; want holder-1 of ui-test-host:77, search, call_1, acme, token %d", h, k, held.Token("tool:search"))
	}
	if h.LeaseLeftMS <= 0 || h.LeaseLeftMS > 5000 || h.LeaseMS < h.LeaseLeftMS || h.Granted == "" || h.Expires == "" ||
		strings.Join(h.Keys, " ") != "tool:search tenant:acme" {
		t.Errorf("holder lease = %+v; want 0 < left <= 5s <= lease, both keys", h)
	}
	if w.Entry != "waiter-1" || w.Position != 1 || w.CallID != "call_2" || w.Enqueued == "" {
		t.Errorf("waiter = %+v; want waiter-1 at position 1", w)
	}

	// Filters: by class, by prefix, a class unknown.
	var only ui.Frame
	if code := get(t, ts, "/api/state?class=tenant", nil, &only); code != 200 || strings.Join(keyNames(only), " ") != "tenant:acme" {
		t.Errorf("GET /api/state?class=tenant = %d %q; want 200 and tenant:acme alone", code, keyNames(only))
	}
	if code := get(t, ts, "/api/state?prefix="+url.QueryEscape("tool:s"), nil, &only); code != 200 || strings.Join(keyNames(only), " ") != "tool:search" {
		t.Errorf("GET /api/state?prefix=tool:s = %d %q; want 200 and tool:search alone", code, keyNames(only))
	}
	var e struct{ Error string }
	if code := get(t, ts, "/api/state?class=locks", nil, &e); code != 400 || !strings.Contains(e.Error, `unknown class "locks"`) {
		t.Errorf("GET /api/state?class=locks = %d %q; want 400 naming the class", code, e.Error)
	}
	if code := get(t, ts, "/api/nothing", nil, &e); code != 404 || e.Error == "" {
		t.Errorf("GET /api/nothing = %d %q; want 404 with an error", code, e.Error)
	}

	// The waiter becomes the holder once the first lease is released.
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	stateUntil(t, ts, "", "waiter-1 holds tool:search", func(f ui.Frame) bool {
		k := findKey(f, "tool:search")
		return k != nil && len(k.Holders) == 1 && k.Holders[0].Entry == "waiter-1" && len(k.Waiters) == 0 && findKey(f, "tenant:acme") == nil
	})
}

// sse reads a stream of server-sent events.
type sse struct {
	events chan sseEvent
	cancel context.CancelFunc
	done   chan struct{}
}

type sseEvent struct{ name, data string }

func openEvents(t *testing.T, ts *httptest.Server, query string) *sse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/api/events?"+query, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		resp.Body.Close()
		t.Fatalf("GET /api/events = %d %s; want 200 text/event-stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := &sse{events: make(chan sseEvent, 1000), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer close(s.events)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.name != "" {
					s.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data += strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	return s
}

// until reads events until a "state" event's frame satisfies cond.
func (s *sse) until(t *testing.T, what string, cond func(ui.Frame) bool) ui.Frame {
	t.Helper()
	timeout := time.After(waitFor)
	var last ui.Frame
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				t.Fatalf("the event stream ended before %s; last frame %+v", what, last)
			}
			if ev.name != "state" {
				continue
			}
			last = ui.Frame{}
			if err := json.Unmarshal([]byte(ev.data), &last); err != nil {
				t.Fatalf("state event is not a frame: %v: %q", err, ev.data)
			}
			if cond(last) {
				return last
			}
		case <-timeout:
			t.Fatalf("timed out after %v waiting for an event where %s; last frame %+v", waitFor, what, last)
		}
	}
}

func TestEventsFollowChangesRealRedis(t *testing.T) {
	b, s := realRedis(t)
	ts, _ := serve(t, ui.Config{Sources: []ui.Source{{Namespace: b.Namespace(), Lanes: b}}})
	ev := openEvents(t, ts, "class=lock")
	ev.until(t, "the first frame comes, empty", func(f ui.Frame) bool {
		return len(f.Namespaces) == 1 && f.Namespaces[0].OK && len(keyNames(f)) == 0
	})
	acquire(t, s, lanes.Request{ID: "ignored", Lanes: []lanes.Lane{{Key: "tool:x", Limit: 1}}})
	l := acquire(t, s, lanes.Request{ID: "e1", Lanes: []lanes.Lane{{Key: "lock:file:/a", Limit: 1}}})
	f := ev.until(t, "lock:file:/a comes with its holder", func(f ui.Frame) bool {
		k := findKey(f, "lock:file:/a")
		return k != nil && len(k.Holders) == 1 && k.Holders[0].Entry == "e1"
	})
	if findKey(f, "tool:x") != nil {
		t.Errorf("stream filtered by class=lock sent tool:x: %q", keyNames(f))
	}
	// A heartbeat's renewal is no change, but the stream sends the frame
	// again every few seconds: the lease left comes back up.
	expires := findKey(f, "lock:file:/a").Holders[0].Expires
	ev.until(t, "the renewed lease comes in a later frame", func(f ui.Frame) bool {
		k := findKey(f, "lock:file:/a")
		return k != nil && len(k.Holders) == 1 && k.Holders[0].Expires > expires
	})
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	ev.until(t, "lock:file:/a is gone", func(f ui.Frame) bool { return findKey(f, "lock:file:/a") == nil })
}

func TestEventsSayRedisIsGoneAndBackRealRedis(t *testing.T) {
	b, s := realRedis(t) // the session holds through Redis directly
	opt, err := redis.ParseURL(redistest.URL())
	if err != nil {
		t.Fatal(err)
	}
	redisAddr := opt.Addr
	p := redisproc.StartProxy(t, redisAddr, 1)
	opt.Addr, opt.MaxRetries, opt.DialTimeout, opt.ReadTimeout = p.Addr(), -1, 200*time.Millisecond, 500*time.Millisecond
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	viaProxy, err := redislane.New(c, b.Namespace())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { viaProxy.Close() })
	ts, _ := serve(t, ui.Config{Sources: []ui.Source{{Namespace: b.Namespace(), Lanes: viaProxy}},
		ErrorText: func(err error) string { return "cannot reach Redis: " + err.Error() }})
	acquire(t, s, lanes.Request{ID: "kept", Lanes: []lanes.Lane{{Key: "report", Limit: 1}}})
	ev := openEvents(t, ts, "")
	ev.until(t, "report is held", func(f ui.Frame) bool { return findKey(f, "report") != nil })

	p.SetUpstream("127.0.0.1:1") // nothing listens there: Redis is gone
	p.CutAll()
	f := ev.until(t, "the outage shows", func(f ui.Frame) bool { return !f.Namespaces[0].OK })
	n := f.Namespaces[0]
	if !strings.HasPrefix(n.Error, "cannot reach Redis: ") || n.OutageSince == "" || n.SeenAt == "" || findKey(f, "report") == nil {
		t.Errorf("outage frame = %+v; want the error, since when, and the last look's keys (report)", n)
	}
	var st ui.Frame
	if code := get(t, ts, "/api/state", nil, &st); code != 200 || st.Namespaces[0].OK {
		t.Errorf("GET /api/state during the outage = %d, ok %v; want 200 and not ok", code, st.Namespaces[0].OK)
	}

	p.SetUpstream(redisAddr)
	f = ev.until(t, "the outage ends", func(f ui.Frame) bool { return f.Namespaces[0].OK })
	if n := f.Namespaces[0]; n.Error != "" || n.OutageSince != "" || findKey(f, "report") == nil {
		t.Errorf("frame after the outage = %+v; want no error and report still held", n)
	}
}

func TestTimelineDrawsHoldsInOrderRealRedis(t *testing.T) {
	b, s := realRedis(t)
	ts, _ := serve(t, ui.Config{Sources: []ui.Source{{Namespace: b.Namespace(), Lanes: b}}})
	stateUntil(t, ts, "", "a first look", func(f ui.Frame) bool { return f.Namespaces[0].OK })
	first := acquire(t, s, lanes.Request{ID: "first", Lanes: []lanes.Lane{{Key: "k", Limit: 1}}})
	tickets, err := s.Enqueue(context.Background(), lanes.Request{ID: "second", Lanes: []lanes.Lane{{Key: "k", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	stateUntil(t, ts, "", "second waits", func(f ui.Frame) bool { k := findKey(f, "k"); return k != nil && len(k.Waiters) == 1 })
	if err := first.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	second, err := tickets[0].Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stateUntil(t, ts, "", "second holds", func(f ui.Frame) bool {
		k := findKey(f, "k")
		return k != nil && len(k.Holders) == 1 && k.Holders[0].Entry == "second"
	})
	if err := second.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	stateUntil(t, ts, "", "k is free", func(f ui.Frame) bool { return findKey(f, "k") == nil })

	var tl ui.Timeline
	if code := get(t, ts, "/api/timeline?key=k&minutes=1", nil, &tl); code != 200 || len(tl.Spans) != 2 {
		t.Fatalf("GET /api/timeline = %d %+v; want 200 and two spans", code, tl)
	}
	a, c := tl.Spans[0], tl.Spans[1]
	if a.Entry != "first" || c.Entry != "second" || a.State != "released" || c.State != "released" {
		t.Fatalf("spans = %+v; want first then second, both released", tl.Spans)
	}
	// The release of first granted second: a hand-off, so first's end is
	// second's grant, exactly; second waited through first's hold.
	if !a.EndExact || a.GoneBy != c.Granted || !(c.Enqueued < a.GoneBy) || !(a.Granted < c.Granted) {
		t.Errorf("first %+v, second %+v; want first gone exactly at second's grant, second enqueued during first's hold", a, c)
	}
	if a.Token == 0 || c.Token <= a.Token {
		t.Errorf("tokens first %d, second %d; want increasing", a.Token, c.Token)
	}
	if tl.HistoryFrom == "" || tl.From == "" || tl.To == "" || tl.IntervalMS != 20 || tl.Namespace != b.Namespace() {
		t.Errorf("timeline = %+v; want its bounds, namespace and interval", tl)
	}

	var e struct{ Error string }
	for path, want := range map[string]string{
		"/api/timeline":                    "bad key",
		"/api/timeline?key=k&minutes=0":    "minutes must be",
		"/api/timeline?key=k&minutes=x":    "minutes must be",
		"/api/timeline?key=k&ns=elsewhere": `"elsewhere" is not a namespace watched here`,
		"/api/timeline?key=" + "%01":       "control character",
		"/api/release?ns=x&entry=y":        "force release is off",
	} {
		e.Error = ""
		code := get(t, ts, path, nil, &e)
		if (code != 400 && code != 403) || !strings.Contains(e.Error, want) {
			t.Errorf("GET %s = %d %q; want 400 or 403 with %q", path, code, e.Error, want)
		}
	}
}

// backendReleaser releases through a backend, as lanectl's does (the
// command's own is tested in cmd/lanectl).
type backendReleaser struct{ b lanes.Backend }

func (r backendReleaser) Preview(ctx context.Context, ns, entry string) (*ui.Preview, error) {
	snap, err := r.b.Inspect(ctx, nil)
	if err != nil {
		return nil, err
	}
	p := &ui.Preview{Namespace: ns, Entry: entry, Found: true, Question: "evict " + entry + "?"}
	for _, e := range ui.NextGranted(snap, entry) {
		p.Next = append(p.Next, ui.NextEntry{Entry: e.ID})
	}
	return p, nil
}

func (r backendReleaser) Release(ctx context.Context, ns, entry string) (*ui.Released, error) {
	rel, err := r.b.Release(ctx, "", []string{entry})
	if err != nil {
		return nil, err
	}
	return &ui.Released{Namespace: ns, Entry: entry, Was: rel.Was[0].String(), Granted: rel.Granted}, nil
}

func TestForceReleaseRealRedis(t *testing.T) {
	b, s := realRedis(t)
	ts, _ := serve(t, ui.Config{Sources: []ui.Source{{Namespace: b.Namespace(), Lanes: b}}, Releaser: backendReleaser{b}})
	held := acquire(t, s, lanes.Request{ID: "victim", Lanes: []lanes.Lane{{Key: "k", Limit: 1}}})
	tickets, err := s.Enqueue(context.Background(), lanes.Request{ID: "next", Lanes: []lanes.Lane{{Key: "k", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	stateUntil(t, ts, "", "next waits", func(f ui.Frame) bool { k := findKey(f, "k"); return k != nil && len(k.Waiters) == 1 && f.AllowRelease })

	var p ui.Preview
	if code := get(t, ts, "/api/release?ns="+b.Namespace()+"&entry=victim", nil, &p); code != 200 || len(p.Next) != 1 || p.Next[0].Entry != "next" {
		t.Fatalf("GET /api/release preview = %d %+v; want 200 and next to be granted", code, p)
	}
	var e struct{ Error string }
	// Not from the page: no X-Lanes-UI header (a form of another site).
	req, _ := http.NewRequest("POST", ts.URL+"/api/release", strings.NewReader(`{"namespace":"`+b.Namespace()+`","entry":"victim"}`))
	req.Header.Set("Content-Type", "application/json")
	if code := do(t, req, &e); code != 403 || !strings.Contains(e.Error, "X-Lanes-UI") {
		t.Errorf("POST /api/release without X-Lanes-UI = %d %q; want 403", code, e.Error)
	}
	// The header, but a body not sent as JSON (curl -d): the error says
	// what is missing, not the header that was sent.
	req, _ = http.NewRequest("POST", ts.URL+"/api/release", strings.NewReader(`{"namespace":"`+b.Namespace()+`","entry":"victim"}`))
	req.Header.Set("X-Lanes-UI", "1")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if code := do(t, req, &e); code != 403 || !strings.Contains(e.Error, "Content-Type: application/json") || strings.Contains(e.Error, "X-Lanes-UI") {
		t.Errorf("POST /api/release with X-Lanes-UI and a form body = %d %q; want 403 naming the Content-Type only", code, e.Error)
	}
	if code := post(t, ts, "/api/release", map[string]string{"namespace": b.Namespace(), "entry": "bad id"}, nil, &e); code != 400 || !strings.Contains(e.Error, "bad entry") {
		t.Errorf("POST /api/release with a bad id = %d %q; want 400", code, e.Error)
	}
	if code := post(t, ts, "/api/release", map[string]any{"namespace": b.Namespace(), "entry": "victim", "extra": 1}, nil, &e); code != 400 || !strings.Contains(e.Error, "bad JSON") {
		t.Errorf("POST /api/release with an unknown field = %d %q; want 400", code, e.Error)
	}

	var rel ui.Released
	if code := post(t, ts, "/api/release", map[string]string{"namespace": b.Namespace(), "entry": "victim"}, nil, &rel); code != 200 ||
		rel.Was != "held" || len(rel.Granted) != 1 || rel.Granted[0] != "next" {
		t.Fatalf("POST /api/release = %d %+v; want 200, was held, granted next", code, rel)
	}
	select {
	case <-held.Lost():
	case <-time.After(waitFor):
		t.Fatal("the released lease was not told it was lost")
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	next, err := tickets[0].Wait(ctx)
	if err != nil {
		t.Fatalf("next's wait = %v; want the grant", err)
	}
	defer next.Release(context.Background())
	if code := post(t, ts, "/api/release", map[string]string{"namespace": b.Namespace(), "entry": "victim"}, nil, &rel); code != 404 || rel.Was != "gone" {
		t.Errorf("POST /api/release again = %d %+v; want 404, gone", code, rel)
	}
}

// The token and the host check need no Redis: they use the in-memory
// backend.

func TestTokenGuardsEveryDataRoute(t *testing.T) {
	const token = "0123456789abcdef-secret"
	m := lanes.NewMemory()
	ts, _ := serve(t, ui.Config{Sources: []ui.Source{{Namespace: "mem", Lanes: m}}, Token: token})
	var e struct{ Error string }
	for _, path := range []string{"/api/state", "/api/events", "/api/timeline?key=k", "/api/release?ns=mem&entry=x"} {
		if code := get(t, ts, path, nil, &e); code != 401 || !strings.Contains(e.Error, "needs its token") {
			t.Errorf("GET %s without the token = %d %q; want 401", path, code, e.Error)
		}
		if code := get(t, ts, path, http.Header{"Authorization": {"Bearer wrong-token-0123456"}}, &e); code != 401 {
			t.Errorf("GET %s with a wrong token = %d; want 401", path, code)
		}
	}
	if code := get(t, ts, "/api/state", http.Header{"Authorization": {"Bearer " + token}}, nil); code != 200 {
		t.Errorf("GET /api/state with the token = %d; want 200", code)
	}
	// The page itself (no data) is served to anyone: it asks for the token.
	if code := get(t, ts, "/", nil, nil); code != 200 {
		t.Errorf("GET / = %d; want 200", code)
	}
	if code := post(t, ts, "/api/login", map[string]string{"token": "nope"}, nil, &e); code != 401 {
		t.Errorf("POST /api/login with a wrong token = %d; want 401", code)
	}
	raw, _ := json.Marshal(map[string]string{"token": token})
	req, _ := http.NewRequest("POST", ts.URL+"/api/login", strings.NewReader(string(raw)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Lanes-UI", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cookies := resp.Cookies()
	if resp.StatusCode != 204 || len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode || strings.Contains(cookies[0].Value, token) {
		t.Fatalf("POST /api/login = %d, cookies %+v; want 204 and one HttpOnly SameSite=Strict cookie without the token in it", resp.StatusCode, cookies)
	}
	if code := get(t, ts, "/api/state", http.Header{"Cookie": {cookies[0].Name + "=" + cookies[0].Value}}, nil); code != 200 {
		t.Errorf("GET /api/state with the session cookie = %d; want 200", code)
	}
	// With a token, another host name is served (the token guards it).
	req, _ = http.NewRequest("GET", ts.URL+"/api/state", nil)
	req.Host = "lanes.example"
	req.Header.Set("Authorization", "Bearer "+token)
	if code := do(t, req, nil); code != 200 {
		t.Errorf("GET /api/state for host lanes.example with the token = %d; want 200", code)
	}
}

func TestWithoutTokenOnlyLoopbackNamesAreServed(t *testing.T) {
	ts, _ := serve(t, ui.Config{Sources: []ui.Source{{Namespace: "mem", Lanes: lanes.NewMemory()}}})
	for host, want := range map[string]int{
		"127.0.0.1:8080": 200, "localhost:8080": 200, "[::1]:8080": 200, "app.localhost": 200,
		"evil.example:8080": 403, "10.0.0.1:8080": 403, "127.0.0.1.evil.example": 403,
	} {
		req, _ := http.NewRequest("GET", ts.URL+"/api/state", nil)
		req.Host = host
		if code := do(t, req, nil); code != want {
			t.Errorf("GET /api/state for host %s = %d; want %d", host, code, want)
		}
	}
	resp, err := http.Get(ts.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	csp := resp.Header.Get("Content-Security-Policy")
	if resp.StatusCode != 200 || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") ||
		!strings.Contains(string(body), `<script src="assets/app.js"`) {
		t.Errorf("GET / = %d, CSP %q; want the page, scripts from itself only", resp.StatusCode, csp)
	}
	for path, want := range map[string]int{"/assets/app.js": 200, "/assets/app.css": 200, "/assets/": 404, "/assets/nope.js": 404} {
		if code := get(t, ts, path, nil, nil); code != want {
			t.Errorf("GET %s = %d; want %d", path, code, want)
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	m := lanes.NewMemory()
	for name, cfg := range map[string]ui.Config{
		"no source":      {},
		"twice":          {Sources: []ui.Source{{Namespace: "a", Lanes: m}, {Namespace: "a", Lanes: m}}},
		"bad namespace":  {Sources: []ui.Source{{Namespace: "a b", Lanes: m}}},
		"short interval": {Sources: []ui.Source{{Namespace: "a", Lanes: m}}, Interval: time.Millisecond},
	} {
		if _, err := ui.New(cfg); err == nil {
			t.Errorf("ui.New(%s) = nil; want an error", name)
		}
	}
}

// TestEndedHolderKeepsItsSlotRealRedis: a lender released while its nested
// borrower (another process) holds through it ends but keeps its slot
// (DESIGN.md invariant 10); the view marks it ended. Raw backend steps, on
// real Redis: no Session releases the revoked borrower. (Borrowers take no
// slot and are not listed as holders.)
func TestEndedHolderKeepsItsSlotRealRedis(t *testing.T) {
	b, _ := realRedis(t)
	ts, _ := serve(t, ui.Config{Sources: []ui.Source{{Namespace: b.Namespace(), Lanes: b}}})
	ctx := context.Background()
	owner := lanes.Owner{ID: "ui-test-owner", Host: "ui-test-host", PID: 9}
	nested := lanes.Owner{ID: "ui-test-nested", Host: "ui-test-host", PID: 10}
	lane := []lanes.Lane{{Key: "concurrency:subagent", Limit: 1}}
	for _, step := range []struct {
		o   lanes.Owner
		req lanes.Request
	}{
		{owner, lanes.Request{ID: "outer", Tool: "agent", Lanes: lane}},
		{nested, lanes.Request{ID: "inner", Tool: "subagent", Lineage: []string{"outer"}, Lanes: lane}},
	} {
		st, err := b.Enqueue(ctx, step.o, time.Minute, []lanes.Request{step.req})
		if err != nil || st[0].State != lanes.Held {
			t.Fatalf("Enqueue(%s) = %+v, %v; want held", step.req.ID, st, err)
		}
	}
	t.Cleanup(func() { _, _ = b.Release(context.Background(), "", []string{"outer"}) }) // takes its borrowers too
	stateUntil(t, ts, "", "outer holds", func(f ui.Frame) bool {
		k := findKey(f, "concurrency:subagent")
		return k != nil && len(k.Holders) == 1 && !k.Holders[0].Ended
	})
	if _, err := b.Release(ctx, owner.ID, []string{"outer"}); err != nil {
		t.Fatal(err)
	}
	stateUntil(t, ts, "", "outer ended, its slot kept", func(f ui.Frame) bool {
		k := findKey(f, "concurrency:subagent")
		return k != nil && len(k.Holders) == 1 && k.Holders[0].Entry == "outer" && k.Holders[0].Ended
	})
}
