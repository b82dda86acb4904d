package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/internal/redisproc"
	"github.com/lanes-dev/lanes/lanes"
)

var uiScreenshots = flag.Bool("ui-screenshots", false, "TestUIBrowserRealRedis saves its screenshots into docs/ (else into a temporary directory)")

// startLockOnStdin starts `lanectl lock KEY -- cat` with its own pipe for
// standard input: the command, and so the hold, ends when the test closes
// it. t's end kills the process if it still runs.
func startLockOnStdin(t *testing.T, s *server, id, key string) (*proc, io.WriteCloser) {
	t.Helper()
	p := &proc{cmd: exec.Command(lanectlBin, s.args("lock", "--id", id, key, "--", "cat")...), stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.cmd.WaitDelay = time.Second
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LANES_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting lanectl lock: %v", err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p, stdin
}

// startUI starts `lanectl ui` for s's namespace on Redis at redisURL, on a
// free loopback port with extra flags, and returns the process and the
// page's URL (the first line it prints).
func startUI(t *testing.T, s *server, redisURL string, flags ...string) (*proc, string) {
	t.Helper()
	p := startBin(t, append([]string{"--redis", redisURL, "--namespace", s.ns, "ui", "--addr", "127.0.0.1:0"}, flags...)...)
	var url string
	eventually(t, "lanectl ui prints its URL", func() bool {
		line, err := bufio.NewReader(strings.NewReader(p.stdout.String())).ReadString('\n')
		url = strings.TrimSpace(line)
		select {
		case <-p.done:
			t.Fatalf("lanectl ui exited %d: %s", p.cmd.ProcessState.ExitCode(), p.stderr)
		default:
		}
		return err == nil
	})
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("lanectl ui printed %q first; want its http://127.0.0.1:PORT/ URL", url)
	}
	return p, url
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestUIBrowserRealRedis runs `lanectl ui` on the real Redis server (shared:
// a namespace of its own, and only its keys deleted at the end) and looks
// at its page in headless Chromium: a key held by one `lanectl lock` and
// waited on by another shows both; when the first exits, the waiter's row
// becomes the holder's; the key's timeline draws both holds, the first
// before the second, and the second's wait beside the first's hold; the
// force release asks, names the entry and its owner, and ends the second
// lock's lease; an ended lender is marked; when Redis goes away (the UI reaches it through a proxy)
// the page says so, and recovers. A key and a tool name made of HTML show
// as text. A lanectl ui with a token makes the page ask for it. The screenshots go to docs/ with -ui-screenshots.
func TestUIBrowserRealRedis(t *testing.T) {
	bin := chromiumBinary()
	if bin == "" {
		t.Skip("SKIP: no chromium on PATH (Debian: apt-get install -y chromium); the browser test of lanectl ui needs it")
	}
	s := newRealRedis(t)
	shots := t.TempDir()
	if *uiScreenshots {
		shots = filepath.Join("..", "..", "docs")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitFor)
	defer cancel()

	// Other keys of several classes, held by this test's session, so that
	// the page shows more than one; and one whose key and tool are HTML.
	sess := s.session(t)
	hold := func(req lanes.Request) *lanes.Lease {
		l, err := sess.Acquire(ctx, req)
		if err != nil {
			t.Fatalf("Acquire(%v) = %v", req.Lanes, err)
		}
		t.Cleanup(func() { _ = l.Release(context.Background()) })
		return l
	}
	hold(lanes.Request{ID: "run7/call_1", Tool: "search", CallID: "call_1", Tenant: "acme",
		Lanes: []lanes.Lane{{Key: "tool:search", Limit: 4}, {Key: "tenant:acme", Limit: 16}}})
	hold(lanes.Request{ID: "run7/call_2", Tool: "rfd_renumber", CallID: "call_2", Tenant: "acme",
		Lanes: []lanes.Lane{{Key: "lock:file:/srv/rfd/0008/README.md", Limit: 1}}})
	xssKey := `tool:<img src=x onerror="window.__xss=1">`
	xss := hold(lanes.Request{ID: "xss", Tool: "<script>window.__xss=2</script>", Lanes: []lanes.Lane{{Key: xssKey, Limit: 1}}})

	// The UI reaches Redis through a proxy, to cut it at the end.
	opt, err := redis.ParseURL(s.url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := redisproc.StartProxy(t, opt.Addr, 1)
	ui, url := startUI(t, s, proxy.URL(), "--interval", "100ms", "--allow-release")
	const key = "concurrency:rfd"
	first, firstIn := startLockOnStdin(t, s, "replica-a.renumber", key)
	eventually(t, "the first lock holds "+key, func() bool {
		k := keyState(s.inspect(t), key)
		return k != nil && len(k.Holders) == 1 && k.Holders[0].ID == "replica-a.renumber"
	})
	second, secondIn := startLockOnStdin(t, s, "replica-b.renumber", key)
	eventually(t, "the second lock waits for "+key, func() bool {
		k := keyState(s.inspect(t), key)
		return k != nil && len(k.Waiters) == 1 && k.Waiters[0].ID == "replica-b.renumber"
	})

	p, err := startBrowser(t, bin).newPage(ctx, 1280, 760)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.navigate(ctx, url); err != nil {
		t.Fatal(err)
	}
	card := `[...document.querySelectorAll("article.key")].find(e => e.dataset.key === ` + jsString(key) + `)`
	rows := `(` + card + `? [...` + card + `.querySelectorAll("tbody tr")].map(r => r.dataset.state + ":" + r.dataset.entry).join(" ") : "no card for the key")`

	// HTML from Redis is text: no element made of it, and none of it ran.
	xssCard := `[...document.querySelectorAll("article.key")].find(e => e.dataset.key === ` + jsString(xssKey) + `)`
	p.waitUntil(t, "the page shows the HTML key as text", xssCard+` && `+xssCard+`.textContent.includes(`+jsString(xssKey)+`) && `+xssCard+`.textContent.includes("<script>")`, `document.body.innerText`)
	var injected bool
	if err := p.eval(ctx, `document.querySelector("#keys img, #keys script") !== null || window.__xss !== undefined`, &injected); err != nil || injected {
		t.Fatalf("the page made an element of a key or a tool name, or ran it (err %v)", err)
	}
	if err := xss.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p.waitUntil(t, "the HTML key leaves the page", `!(`+xssCard+`)`, `document.body.innerText`)

	// A lender whose hold ended while its nested borrower (another
	// process, raw steps: nobody releases it) holds keeps its slot: marked.
	sub := []lanes.Lane{{Key: "concurrency:subagent", Limit: 1}}
	for _, step := range []struct {
		o   lanes.Owner
		req lanes.Request
	}{
		{lanes.Owner{ID: "ui-test-agent", Host: "agent-host", PID: 11}, lanes.Request{ID: "agent-outer", Tool: "agent", Lanes: sub}},
		{lanes.Owner{ID: "ui-test-sub", Host: "agent-host", PID: 12}, lanes.Request{ID: "agent-inner", Tool: "subagent", Lineage: []string{"agent-outer"}, Lanes: sub}},
	} {
		if st, err := s.b.Enqueue(ctx, step.o, time.Minute, []lanes.Request{step.req}); err != nil || st[0].State != lanes.Held {
			t.Fatalf("Enqueue(%s) = %+v, %v; want held", step.req.ID, st, err)
		}
	}
	if _, err := s.b.Release(ctx, "ui-test-agent", []string{"agent-outer"}); err != nil {
		t.Fatal(err)
	}
	ended := `document.querySelector("tr[data-entry='agent-outer']")`
	p.waitUntil(t, "the page marks the ended lender", ended+` && `+ended+`.dataset.ended === "true" && `+ended+`.querySelector(".badge.ended").textContent === "slot kept"`,
		`document.body.innerText`)
	if _, err := s.b.Release(ctx, "", []string{"agent-outer"}); err != nil { // an operator's: its borrower goes too
		t.Fatal(err)
	}
	p.waitUntil(t, "the ended lender leaves the page", `!`+ended, `document.body.innerText`)

	// One holder, one waiter; then the waiter's row becomes the holder's.
	p.waitUntil(t, "the page shows the first lock holding and the second waiting",
		rows+` === "held:replica-a.renumber waiting:replica-b.renumber"`, rows)
	if err := p.screenshot(ctx, filepath.Join(shots, "ui-page.png")); err != nil {
		t.Fatal(err)
	}
	firstIn.Close() // cat ends, the first lock releases and exits
	if code := first.wait(t); code != 0 {
		t.Fatalf("first lanectl lock exited %d; want 0; stderr: %s", code, first.stderr)
	}
	p.waitUntil(t, "the second lock's row moves to holder", rows+` === "held:replica-b.renumber"`, rows)

	// The timeline: both holds in order, the second's wait beside the
	// first's hold.
	if err := p.eval(ctx, card+`.querySelector("a.tl-link").click()`, nil); err != nil {
		t.Fatal(err)
	}
	bars := `(() => { const r = {}; for (const e of document.querySelectorAll("#tl-chart rect[data-entry]")) { r[e.dataset.entry + "/" + e.classList[0]] = [Number(e.dataset.start), Number(e.dataset.end)]; } return r; })()`
	p.waitUntil(t, "the timeline shows both holds, the second held for a second",
		`(b => b["replica-a.renumber/hold"] && b["replica-b.renumber/hold"] && b["replica-b.renumber/hold"][1] - b["replica-b.renumber/hold"][0] >= 1000)(`+bars+`)`, `JSON.stringify(`+bars+`)`)
	var b map[string][2]float64
	if err := p.eval(ctx, bars, &b); err != nil {
		t.Fatal(err)
	}
	a, bh, bw := b["replica-a.renumber/hold"], b["replica-b.renumber/hold"], b["replica-b.renumber/wait"]
	switch {
	case !(a[0] < bh[0]):
		t.Errorf("timeline: first hold starts at %v, second at %v; want the first earlier", a[0], bh[0])
	case a[1] > bh[0]:
		t.Errorf("timeline: first hold ends at %v, after the second starts at %v", a[1], bh[0])
	case !(bw[0] < a[1] && bw[1] == bh[0]):
		t.Errorf("timeline: second wait %v; want it to start during the first hold %v and end at the second's grant %v", bw, a, bh[0])
	}
	var order []string
	if err := p.eval(ctx, `[...document.querySelectorAll("#tl-chart g[data-entry]")].map(g => g.dataset.entry)`, &order); err != nil {
		t.Fatal(err)
	}
	if strings.Join(order, " ") != "replica-a.renumber replica-b.renumber" {
		t.Errorf("timeline rows = %q; want the first lock's, then the second's", order)
	}
	if err := p.screenshot(ctx, filepath.Join(shots, "ui-timeline.png")); err != nil {
		t.Fatal(err)
	}

	// Force release from the page: the confirmation names the entry, what
	// it holds and its owner; then the second lock loses its lease.
	if err := p.eval(ctx, card+`.querySelector("tr[data-entry='replica-b.renumber'] button.release").click()`, nil); err != nil {
		t.Fatal(err)
	}
	want := "evict replica-b.renumber (holder of " + key + ") of "
	p.waitUntil(t, "the confirmation names the entry, its keys and owner",
		`document.getElementById("confirm").open && document.getElementById("confirm-question").textContent.startsWith(`+jsString(want)+`)`,
		`document.getElementById("confirm-question").textContent`)
	if err := p.eval(ctx, `document.getElementById("confirm-ok").click()`, nil); err != nil {
		t.Fatal(err)
	}
	if code := second.wait(t); code != exitLeaseLost {
		t.Errorf("second lanectl lock exited %d after the page released it; want %d (lease lost); stderr: %s", code, exitLeaseLost, second.stderr)
	}
	secondIn.Close()
	p.waitUntil(t, "the page says what it released", `document.getElementById("toast").textContent.startsWith("Released replica-b.renumber (was held")`,
		`document.getElementById("toast").textContent`)

	// Redis goes away (for the UI): the page says so and keeps what it
	// saw; then it comes back. (The timeline closed and the toast hidden,
	// for the screenshot.)
	if err := p.eval(ctx, `document.getElementById("tl-close").click(); document.getElementById("toast").hidden = true`, nil); err != nil {
		t.Fatal(err)
	}
	p.waitUntil(t, "the timeline closes", `document.getElementById("timeline").hidden && location.hash === ""`, `location.hash`)
	proxy.SetUpstream("127.0.0.1:1")
	proxy.CutAll()
	p.waitUntil(t, "the page says Redis is unreachable",
		`document.getElementById("conn").dataset.conn === "outage" && document.querySelector("#banners .banner").textContent.includes("since") && document.querySelector("article.key.stale") !== null`,
		`document.getElementById("conn").textContent + " | " + document.getElementById("banners").textContent`)
	if err := p.screenshot(ctx, filepath.Join(shots, "ui-outage.png")); err != nil {
		t.Fatal(err)
	}
	proxy.SetUpstream(opt.Addr)
	p.waitUntil(t, "the page is live again", `document.getElementById("conn").dataset.conn === "live" && document.querySelector("#banners .banner") === null`,
		`document.getElementById("conn").textContent + " | " + document.getElementById("banners").textContent`)

	// A lanectl ui with a token: the page asks for it, then shows the
	// keys; the session cookie is out of the page's reach (HttpOnly).
	const token = "browser-test-token-0123456789"
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeFile(t, tokenFile, token, 0o600)
	guarded, gurl := startUI(t, s, s.url, "--token-file", tokenFile)
	if err := p.navigate(ctx, gurl); err != nil {
		t.Fatal(err)
	}
	p.waitUntil(t, "the page asks for the token", `!document.getElementById("login").hidden && document.getElementById("filters").hidden`, `document.body.innerText`)
	if err := p.eval(ctx, `document.getElementById("token").value = "wrong-token-0123456789"; document.getElementById("login-form").requestSubmit()`, nil); err != nil {
		t.Fatal(err)
	}
	p.waitUntil(t, "a wrong token is refused", `document.getElementById("login-error").textContent === "wrong token"`, `document.getElementById("login-error").textContent`)
	if err := p.eval(ctx, `document.getElementById("token").value = `+jsString(token)+`; document.getElementById("login-form").requestSubmit()`, nil); err != nil {
		t.Fatal(err)
	}
	p.waitUntil(t, "the page shows the keys after the token", `document.getElementById("login").hidden && document.getElementById("conn").dataset.conn === "live" && document.querySelector("article.key") !== null && document.cookie === ""`,
		`document.getElementById("conn").textContent + " | cookie: " + document.cookie + " | " + document.body.innerText`)
	guarded.signal(t, syscall.SIGTERM)
	if code := guarded.wait(t); code != 0 || strings.Contains(guarded.stdout.String()+guarded.stderr.String(), token) {
		t.Errorf("lanectl ui with a token exited %d; stdout %q, stderr %q; want 0 and no token", code, guarded.stdout, guarded.stderr)
	}

	if log := p.b.consoleLog(); len(log) > 0 {
		t.Errorf("the page logged: %q", log)
	}

	ui.signal(t, syscall.SIGTERM)
	if code := ui.wait(t); code != 0 {
		t.Errorf("lanectl ui exited %d after SIGTERM; want 0; stderr: %s", code, ui.stderr)
	}
	if !strings.Contains(ui.stderr.String(), "ui: released replica-b.renumber") {
		t.Errorf("lanectl ui's stderr = %q; want it to say what the page released", ui.stderr)
	}
}
