package main

// A small client of the Chrome DevTools protocol over a pipe
// (--remote-debugging-pipe: commands on the browser's fd 3, replies and
// events on its fd 4, each message JSON ended by a NUL byte). It is all
// the browser test needs (open a page, evaluate JavaScript, take a
// screenshot) without a module dependency: chromedp would bring cdproto's
// generated code (tens of MB of source) into the module for one test.

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// chromiumBinary returns the path of Debian's chromium, or "" when it is
// not installed.
func chromiumBinary() string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browser is a headless Chromium driven through the DevTools pipe.
type browser struct {
	cmd  *exec.Cmd
	w    io.WriteCloser
	done chan struct{} // closed when the reader ends

	mu      sync.Mutex
	next    int
	pending map[int]chan cdpMessage
	console []string // console messages and uncaught exceptions of the pages
	err     error    // why the reader ended
}

// cdpMessage is one message from the browser: a reply (ID) or an event
// (Method).
type cdpMessage struct {
	ID        int             `json:"id"`
	Result    json.RawMessage `json:"result"`
	Error     *cdpError       `json:"error"`
	Method    string          `json:"method"`
	Params    json.RawMessage `json:"params"`
	SessionID string          `json:"sessionId"`
}

type cdpError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// startBrowser starts headless Chromium for t (closed when t ends), with
// a profile of its own in a temporary directory and nothing that reaches
// the network.
func startBrowser(t *testing.T, bin string) *browser {
	t.Helper()
	toR, toW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fromR, fromW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--hide-scrollbars", "--remote-debugging-pipe",
		"--user-data-dir="+t.TempDir(), "about:blank")
	cmd.ExtraFiles = []*os.File{toR, fromW} // fd 3: it reads; fd 4: it writes
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	toR.Close()
	fromW.Close()
	b := &browser{cmd: cmd, w: toW, done: make(chan struct{}), pending: map[int]chan cdpMessage{}}
	go b.read(fromR)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.call(ctx, "", "Browser.close", nil, nil)
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		toW.Close()
		<-b.done
		fromR.Close()
		if t.Failed() {
			if lines, dropped := chromiumLog(stderr.String(), 10); len(lines) > 0 {
				t.Logf("chromium's stderr (last lines; %d lines about D-Bus left out): %s", dropped, strings.Join(lines, "\n"))
			}
		}
	})
	return b
}

// chromiumLog returns the last n lines of chromium's stderr s, without the
// lines about D-Bus (a machine without a session bus makes chromium print
// dozens; they would push a test's own failure out of a report that shows
// only the end of its output), and how many of those it left out.
func chromiumLog(s string, n int) (lines []string, dropped int) {
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		switch {
		case l == "":
		case strings.Contains(l, ":ERROR:dbus/"):
			dropped++
		default:
			lines = append(lines, l)
		}
	}
	return lines[max(len(lines)-n, 0):], dropped
}

// read delivers the browser's replies to their callers and keeps the
// pages' console messages, until the pipe closes.
func (b *browser) read(r io.Reader) {
	defer close(b.done)
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		raw, err := br.ReadBytes(0)
		if err != nil {
			b.mu.Lock()
			b.err = err
			for id, ch := range b.pending {
				close(ch)
				delete(b.pending, id)
			}
			b.mu.Unlock()
			return
		}
		var m cdpMessage
		if json.Unmarshal(raw[:len(raw)-1], &m) != nil {
			continue
		}
		b.mu.Lock()
		if m.ID != 0 {
			if ch := b.pending[m.ID]; ch != nil {
				ch <- m
				delete(b.pending, m.ID)
			}
		} else if line := consoleLine(m); line != "" {
			b.console = append(b.console, line)
		}
		b.mu.Unlock()
	}
}

// consoleLine returns the text of a console or exception event, or "".
func consoleLine(m cdpMessage) string {
	switch m.Method {
	case "Runtime.consoleAPICalled":
		var p struct {
			Type string `json:"type"`
			Args []struct {
				Value       any    `json:"value"`
				Description string `json:"description"`
			} `json:"args"`
		}
		_ = json.Unmarshal(m.Params, &p)
		parts := []string{"console." + p.Type + ":"}
		for _, a := range p.Args {
			parts = append(parts, fmt.Sprint(a.Value, a.Description))
		}
		return strings.Join(parts, " ")
	case "Runtime.exceptionThrown":
		var p struct {
			Details struct {
				Text      string `json:"text"`
				Exception struct {
					Description string `json:"description"`
				} `json:"exception"`
			} `json:"exceptionDetails"`
		}
		_ = json.Unmarshal(m.Params, &p)
		return "exception: " + p.Details.Text + " " + p.Details.Exception.Description
	}
	return ""
}

// consoleLog returns the console messages and exceptions seen so far.
func (b *browser) consoleLog() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.console...)
}

// call sends method with params (in session, "" for the browser) and
// decodes the reply's result into result, if not nil.
func (b *browser) call(ctx context.Context, session, method string, params, result any) error {
	b.mu.Lock()
	if b.err != nil {
		b.mu.Unlock()
		return fmt.Errorf("%s: the browser is gone: %v", method, b.err)
	}
	b.next++
	id := b.next
	ch := make(chan cdpMessage, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	raw, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	if _, err := b.w.Write(append(raw, 0)); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return fmt.Errorf("%s: the browser closed the pipe", method)
		}
		if m.Error != nil {
			return fmt.Errorf("%s: %s (%d)", method, m.Error.Message, m.Error.Code)
		}
		if result != nil {
			return json.Unmarshal(m.Result, result)
		}
		return nil
	case <-ctx.Done():
		b.mu.Lock()
		delete(b.pending, id)
		b.mu.Unlock()
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// page is one tab of the browser.
type page struct {
	b       *browser
	session string
}

// newPage opens a tab of width x height CSS pixels.
func (b *browser) newPage(ctx context.Context, width, height int) (*page, error) {
	var target struct {
		TargetID string `json:"targetId"`
	}
	if err := b.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &target); err != nil {
		return nil, err
	}
	var att struct {
		SessionID string `json:"sessionId"`
	}
	if err := b.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att); err != nil {
		return nil, err
	}
	p := &page{b: b, session: att.SessionID}
	for _, step := range []struct {
		method string
		params any
	}{
		{"Runtime.enable", nil},
		{"Page.enable", nil},
		{"Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}},
	} {
		if err := b.call(ctx, p.session, step.method, step.params, nil); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// navigate loads url in the tab (it does not wait for the load).
func (p *page) navigate(ctx context.Context, url string) error {
	var r struct {
		ErrorText string `json:"errorText"`
	}
	if err := p.b.call(ctx, p.session, "Page.navigate", map[string]any{"url": url}, &r); err != nil {
		return err
	}
	if r.ErrorText != "" {
		return errors.New("navigate: " + r.ErrorText)
	}
	return nil
}

// eval evaluates expr in the page (awaiting a promise) and decodes its
// value into v.
func (p *page) eval(ctx context.Context, expr string, v any) error {
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	err := p.b.call(ctx, p.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &r)
	if err != nil {
		return err
	}
	if e := r.ExceptionDetails; e != nil {
		return fmt.Errorf("evaluating %q: %s %s", expr, e.Text, e.Exception.Description)
	}
	if v == nil || r.Result.Value == nil {
		return nil
	}
	return json.Unmarshal(r.Result.Value, v)
}

// waitUntil evaluates cond, a JavaScript expression, every 50ms until it
// is true, and fails t with what, the last value of show (a JavaScript
// expression describing the page) and the console when it is not by
// waitFor.
func (p *page) waitUntil(t *testing.T, what, cond, show string) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var ok bool
		err := p.eval(ctx, "Boolean("+cond+")", &ok)
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			var seen any
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = p.eval(ctx, show, &seen)
			cancel()
			t.Fatalf("timed out after %v waiting until %s (last error: %v); the page shows %v; console: %q", waitFor, what, err, seen, p.b.consoleLog())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// screenshot saves the visible part of the page as a PNG file.
func (p *page) screenshot(ctx context.Context, path string) error {
	var r struct {
		Data string `json:"data"`
	}
	if err := p.b.call(ctx, p.session, "Page.captureScreenshot", map[string]any{"format": "png"}, &r); err != nil {
		return err
	}
	png, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil {
		return err
	}
	return os.WriteFile(path, png, 0o644)
}
