package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDevServer starts `lanectl dev-server`, reads its URL from the first
// line, runs `lock` and `status` against it, and stops it with SIGINT.
func TestDevServer(t *testing.T) {
	cmd := exec.Command(lanectlBin, "dev-server")
	cmd.Env = os.Environ()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urls, done := make(chan result, 1), make(chan error, 1)
	go func() {
		// Drain stdout, then reap the process.
		r := bufio.NewReader(stdout)
		line, err := r.ReadString('\n')
		urls <- result{line, err}
		_, _ = r.WriteTo(io.Discard)
		done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
	})

	var first result
	select {
	case first = <-urls:
	case <-time.After(waitFor):
		t.Fatalf("dev-server printed no line within %v; stderr %q", waitFor, stderr.String())
	}
	url := strings.TrimSuffix(first.line, "\n")
	if first.err != nil || !strings.HasPrefix(url, "redis://127.0.0.1:") {
		t.Fatalf("dev-server's first line = %q (%v); want redis://127.0.0.1:PORT", first.line, first.err)
	}

	s := connect(t, "dev-server", url)
	t.Cleanup(func() { s.close(false) })
	code, out, errOut := runBin(t, s.args("lock", "k", "--", "sh", "-c", `printf %s "$LANES_TOKEN"`)...)
	if tok, err := strconv.ParseUint(out, 10, 64); code != 0 || err != nil || tok == 0 {
		t.Errorf("lock against the dev-server = %d, %q (stderr %q); want 0 and a token", code, out, errOut)
	}
	code, out, _ = runBin(t, s.args("status", "--json")...)
	var st statusJSON
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || len(st.Keys) != 0 {
		t.Errorf("status --json against the dev-server = %d, %q; want 0 and no keys", code, out)
	}

	s.close(false)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("dev-server after SIGINT: %v; want exit 0 (stderr %q)", err, stderr.String())
		}
	case <-time.After(waitFor):
		t.Fatalf("dev-server did not exit within %v of SIGINT", waitFor)
	}
}

type result struct {
	line string
	err  error
}
