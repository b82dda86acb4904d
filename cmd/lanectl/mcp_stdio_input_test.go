package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// A reviewer's cases of stdio input that the first version of the line
// checker let through, or that its drain could not match, and that ended
// `lanectl mcp serve` (exit 70) or kept it from ever ending; the comment
// of each test tells what happened then. Now each is answered (a batch, an
// id the SDK answers under another, a line over 4 MiB: -32600) and
// serving goes on. README: serve runs until its standard input ends, once
// every request read before was answered, then exits 0.

type rv2Step struct {
	line    string // written with a line break
	waitFor string // before the next step: the reply of this id (canonical JSON)
}

type rv2Result struct {
	code    int // -1: did not exit in time
	replies map[string]json.RawMessage
	stderr  string
}

func rv2Serve(t *testing.T, tools string, steps []rv2Step, limit time.Duration) rv2Result {
	return rv2ServeVersion(t, tools, "2025-06-18", steps, limit)
}

func rv2ServeVersion(t *testing.T, tools, version string, steps []rv2Step, limit time.Duration) rv2Result {
	t.Helper()
	cmd, stdin, stdout, stderr := startServeLocal(t, tools)
	var mu sync.Mutex
	replies := map[string]json.RawMessage{}
	seen := make(chan struct{}, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			var r struct {
				ID json.RawMessage `json:"id"`
			}
			line := append([]byte(nil), sc.Bytes()...)
			if json.Unmarshal(line, &r) == nil {
				mu.Lock()
				replies[string(r.ID)] = line
				mu.Unlock()
			}
			select {
			case seen <- struct{}{}:
			default:
			}
		}
	}()
	all := append([]rv2Step{
		{`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"` + version + `","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, `"init"`},
		{`{"jsonrpc":"2.0","method":"notifications/initialized"}`, ""},
	}, steps...)
	for _, s := range all {
		if _, err := io.WriteString(stdin, s.line+"\n"); err != nil {
			break // serve ended
		}
		if s.waitFor != "" {
			deadline := time.After(waitFor)
		wait:
			for {
				mu.Lock()
				_, ok := replies[s.waitFor]
				mu.Unlock()
				if ok {
					break
				}
				select {
				case <-seen:
				case <-deadline:
					break wait
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
	}
	stdin.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	res := rv2Result{code: -1}
	select {
	case err := <-done:
		res.code = 0
		if ee, ok := err.(*exec.ExitError); ok {
			res.code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
	case <-time.After(limit):
	}
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	res.replies = replies
	mu.Unlock()
	res.stderr = stderr.String()
	return res
}

func rv2Tools(t *testing.T) string {
	f := newMCPFixture(t)
	return f.toolsFile(t, "[tools.hi]\ncommand = [\"sh\", \"-c\", \"cat >/dev/null; echo hi\"]\n"+
		"[tools.slow]\ncommand = [\"sh\", \"-c\", \"cat >/dev/null; sleep 1; echo slow\"]\n")
}

const rv2Ping99 = `{"jsonrpc":"2.0","id":99,"method":"ping"}`

func rv2WantServedOn(t *testing.T, r rv2Result, what string) {
	t.Helper()
	if r.code != 0 || r.replies["99"] == nil {
		t.Errorf("%s: exit %d (-1: still running), reply to the ping after it %s; want exit 0 and the ping answered; stderr: %s",
			what, r.code, r.replies["99"], r.stderr)
	}
}

// A well-formed batch, after the client negotiated 2025-06-18 (the
// version the project's own test uses), passes the line checker; the SDK
// then ends the session ("JSON-RPC batching is not supported in
// 2025-06-18 and later"): exit 70, the ping after it unanswered.
func TestMCPServeBatchAfter20250618AnsweredServingGoesOn(t *testing.T) {
	r := rv2Serve(t, rv2Tools(t), []rv2Step{
		{`[{"jsonrpc":"2.0","id":10,"method":"ping"}]`, ""},
		{rv2Ping99, ""},
	}, waitFor)
	rv2WantServedOn(t, r, "a batch after initialize with 2025-06-18")
}

// A batch of two requests with one id passes the checker; the SDK ends
// the session ("duplicate message ID"): exit 70. (Protocol 2025-03-26,
// which has batches.)
func TestMCPServeBatchDuplicateIDAnsweredServingGoesOn(t *testing.T) {
	r := rv2ServeVersion(t, rv2Tools(t), "2025-03-26", []rv2Step{
		{`[{"jsonrpc":"2.0","id":10,"method":"ping"},{"jsonrpc":"2.0","id":10,"method":"ping"}]`, ""},
		{rv2Ping99, ""},
	}, waitFor)
	rv2WantServedOn(t, r, "a batch with a repeated id")
}

// A batch whose one message nests exactly 1000 levels: the checker decodes
// the message alone (depth 1000, within the SDK's limit) and passes it; the
// SDK decodes the whole batch (depth 1001), fails, and ends the session
// ("exceeded maximum nesting depth of 1000"): exit 70. The same message
// alone is answered, and one level deeper gets -32600.
func TestMCPServeBatchAtDepthLimitAnsweredServingGoesOn(t *testing.T) {
	m := fmt.Sprintf(`{"jsonrpc":"2.0","id":10,"method":"ping","params":{"x":%s%s}}`, strings.Repeat("[", 998), strings.Repeat("]", 998))
	r := rv2ServeVersion(t, rv2Tools(t), "2025-03-26", []rv2Step{{"[" + m + "]", ""}, {rv2Ping99, ""}}, waitFor)
	rv2WantServedOn(t, r, "a batch of one message nested 1000 deep")
}

// Ids the SDK reads as another id (it truncates a JSON number to int64:
// 1.5 is answered as 1, -0 as 0, 1e20 as -9223372036854775808): the drain
// waits for an answer of id 1.5 that never comes, and serve never exits
// after its input ended, though every request was answered.
func TestMCPServeNonIntegerIDRefusedAndExits(t *testing.T) {
	for _, id := range []string{"1.5", "-0", "1e20"} {
		t.Run(id, func(t *testing.T) {
			r := rv2Serve(t, rv2Tools(t), []rv2Step{
				{fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"ping"}`, id), ""},
				{rv2Ping99, "99"},
			}, 5*time.Second)
			if r.code != 0 {
				t.Errorf("ping of id %s, input closed: exit %d (-1: still running after 5s); want exit 0 (or a -32600 for the id); replies %s; stderr: %s",
					id, r.code, rv2Show(r.replies), r.stderr)
			}
		})
	}
}

// A tools/call line over 4 MiB is passed on untagged, and the drain does
// not note it: when the input ends right after it, serve exits 0 at once,
// the call unanswered (README: the requests read before are answered
// first).
func TestMCPServeLongCallAnsweredAtEndOfInput(t *testing.T) {
	big := strings.Repeat("x", 4<<20)
	r := rv2Serve(t, rv2Tools(t), []rv2Step{
		{fmt.Sprintf(`{"jsonrpc":"2.0","id":20,"method":"tools/call","params":{"name":"slow","arguments":{"pad":%q}}}`, big), ""},
	}, waitFor)
	if r.code != 0 || r.replies["20"] == nil {
		t.Errorf("a tools/call of over 4 MiB, then the end of input: exit %d, reply %.200s; want its answer, then exit 0; stderr: %s", r.code, r.replies["20"], r.stderr)
	}
}

// A line over 4 MiB with blanks after its message: the checker trims
// blanks of shorter lines only, and the SDK ends the session ("invalid
// trailing data at the end of stream"): exit 70.
func TestMCPServeLongLineTrailingBlanksAnsweredServingGoesOn(t *testing.T) {
	big := strings.Repeat("x", 4<<20)
	r := rv2Serve(t, rv2Tools(t), []rv2Step{
		{fmt.Sprintf(`{"jsonrpc":"2.0","id":21,"method":"ping","params":{"pad":%q}}  `, big), ""},
		{rv2Ping99, ""},
	}, waitFor)
	rv2WantServedOn(t, r, "a ping of over 4 MiB with trailing blanks")
}

func rv2Show(m map[string]json.RawMessage) string {
	var b strings.Builder
	for id, r := range m {
		if id != `"init"` {
			fmt.Fprintf(&b, "%s ", r)
		}
	}
	return b.String()
}
