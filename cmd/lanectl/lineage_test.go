package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The tests of this file check issue 10, section 6: lineage crosses the
// process boundary. A lanectl started by a lanectl lock command or a
// lanectl batch tool takes the lineage its parent put in LANES_LINEAGE,
// LANES_ENTRY and LANES_NAMESPACE: it re-enters the keys its parent holds
// at once, with the parent's token, and a wait-for cycle fails at once.
// Without it, each case below waits for good. On miniredis and real Redis.

// TestLockNestedReentersAtOnce runs lanectl lock k -- sh -c 'lanectl lock k
// -- ...': the inner lock is granted k at once, with the outer's token.
func TestLockNestedReentersAtOnce(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		inner := `"$0" --redis "$1" lock k -- sh -c 'echo "inner $LANES_TOKEN $LANES_LINEAGE"'; echo "outer $LANES_TOKEN $LANES_ENTRY"`
		code, out, stderr := runBin(t, s.args("lock", "k", "--", "sh", "-c", inner, lanectlBin, s.url)...)
		if code != 0 {
			t.Fatalf("lock = %d: %s", code, stderr)
		}
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 2 {
			t.Fatalf("printed %q; want the inner line, then the outer", lines)
		}
		in, outer := strings.Fields(lines[0]), strings.Fields(lines[1])
		if len(in) != 3 || len(outer) != 3 || in[1] != outer[1] || in[1] == "0" {
			t.Fatalf("printed %q; want inner and outer with one token", lines)
		}
		if want := outer[2] + ","; !strings.HasPrefix(in[2], want) || strings.Count(in[2], ",") != 1 {
			t.Errorf("inner LANES_LINEAGE = %q; want the outer entry %s, then its own", in[2], outer[2])
		}
		s.assertEmpty(t)
	})
}

// TestBatchSubAgentReentersAtOnce runs a tool on concurrency key subagent
// (limit 1) that runs a sub-agent lanectl batch whose call uses the same
// key: the inner call is dispatched at once, with the outer call's token.
func TestBatchSubAgentReentersAtOnce(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		d := newBatchDir(t, "")
		inner := d.calls(t, "openai-chat", toolCall{"inner", "leaf", `{}`})
		writeFile(t, d.tools, batchTools+fmt.Sprintf(`
[tools.agent]
command = [%q, "--redis", %q, "batch", "--json", "--tools", %q, "--calls", %q]
concurrency = { key = "subagent" }
timeout = "15s"

[tools.leaf]
command = ["sh", "-c", "printf %%s \"$LANES_TOKENS\""]
concurrency = { key = "subagent" }
`, lanectlBin, s.url, d.tools, inner), 0o644)
		code, out, stderr := runBin(t, s.args("batch", "--json", "--tools", d.tools, "--calls", d.calls(t, "anthropic", toolCall{"outer", "agent", `{}`}))...)
		if code != 0 {
			t.Fatalf("batch = %d: %s", code, stderr)
		}
		got := decodeBatch(t, out)
		checkOutcomes(t, got, []want{{"outer", "agent", "ok", ""}})
		nested := decodeBatch(t, got[0].Output)
		checkOutcomes(t, nested, []want{{"inner", "leaf", "ok", ""}})
		tok := got[0].Tokens["concurrency:subagent"]
		if tok == 0 || nested[0].Tokens["concurrency:subagent"] != tok || nested[0].Output != fmt.Sprintf("concurrency:subagent=%d", tok) {
			t.Errorf("inner call = %+v; want the outer call's token %d on concurrency:subagent", nested[0], tok)
		}
		s.assertEmpty(t)
	})
}

// TestLockCycleFailsAtOnce closes a wait-for cycle across four processes:
// A holds k; B holds j and its nested lock waits for k; A's nested lock
// then asks for k and j. That request would wait for B, which waits for
// its nested lock, which waits for A, which waits for its nested lock: it
// fails at once with exit 80, A goes on and ends, and B gets k.
func TestLockCycleFailsAtOnce(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		dir := t.TempDir()
		goFile, codeFile := filepath.Join(dir, "go"), filepath.Join(dir, "code")
		aScript := `until [ -e "$2" ]; do sleep 0.01; done; "$0" --redis "$1" lock k j -- true 2> "$3.err"; echo $? > "$3"`
		a := startBin(t, s.args("lock", "k", "--", "sh", "-c", aScript, lanectlBin, s.url, goFile, codeFile)...)
		eventually(t, "A holds k", func() bool { return len(s.inspect(t).Keys) == 1 })
		b := startBin(t, s.args("lock", "j", "--", "sh", "-c", `"$0" --redis "$1" lock k -- true`, lanectlBin, s.url)...)
		eventually(t, "B's nested lock waits for k", func() bool {
			for _, ks := range s.inspect(t).Keys {
				if ks.Key == "k" && len(ks.Waiters) == 1 {
					return true
				}
			}
			return false
		})
		writeFile(t, goFile, "", 0o644)
		if code := a.wait(t); code != 0 {
			t.Errorf("A = %d; want 0: %s", code, a.stderr)
		}
		if code := b.wait(t); code != 0 {
			t.Errorf("B = %d; want 0: %s", code, b.stderr)
		}
		if c, _ := os.ReadFile(codeFile); string(c) != fmt.Sprintf("%d\n", exitLockCycle) {
			t.Errorf("A's nested lock exited %q; want %d", c, exitLockCycle)
		}
		msg, _ := os.ReadFile(codeFile + ".err")
		assertOneLine(t, string(msg))
		if !strings.Contains(string(msg), "lock cycle") {
			t.Errorf("A's nested lock said %q; want a lock cycle", msg)
		}
		s.assertEmpty(t)
	})
}

// TestMalformedLineageIsUsage: a LANES_LINEAGE that does not parse, or is
// longer than lanes allows, is a usage error in one line, for lock and
// batch, before anything reaches Redis.
func TestMalformedLineageIsUsage(t *testing.T) {
	d := newBatchDir(t, "")
	calls := d.calls(t, "anthropic", toolCall{"c1", "echo", `{}`})
	long := strings.TrimSuffix(strings.Repeat("e,", 65), ",")
	for _, lineage := range []string{"a,,b", "a%zz", long} {
		env := func(k string) string {
			switch k {
			case "LANES_LINEAGE":
				return lineage
			case "LANES_ENTRY":
				return "e"
			}
			return ""
		}
		for _, args := range [][]string{
			{"--redis", "redis://127.0.0.1:1", "lock", "k", "--", "true"},
			{"--redis", "redis://127.0.0.1:1", "batch", "--tools", d.tools, "--calls", calls},
		} {
			var out, errb strings.Builder
			code := run(t.Context(), nil, args, strings.NewReader(""), &out, &errb, env)
			if code != exitUsage || !strings.Contains(errb.String(), "LANES_LINEAGE") {
				t.Errorf("LANES_LINEAGE=%.20q lanectl %s = %d, %q; want %d naming LANES_LINEAGE", lineage, args[2], code, errb.String(), exitUsage)
			}
			assertOneLine(t, errb.String())
		}
	}
}
