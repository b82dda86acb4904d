package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The README's agent loops, run as written: the shell one with a fake curl
// and the Python one with a fake anthropic module, each playing a model
// that calls the echo tool once and then answers with the tool's result.
// lanectl runs the call against miniredis (LANES_REDIS_URL), another
// process than the loop.

// readmeBlock returns the code block that follows the marker line in
// README.md.
func readmeBlock(t *testing.T, marker string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), marker+"\n")
	if !ok {
		t.Fatalf("README.md has no %q", marker)
	}
	lines := strings.Split(rest, "\n")
	if !strings.HasPrefix(lines[0], "```") {
		t.Fatalf("README.md: %q is not followed by a code block", marker)
	}
	var b strings.Builder
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, "```") {
			return b.String()
		}
		b.WriteString(l + "\n")
	}
	t.Fatalf("README.md: the code block after %q does not end", marker)
	return ""
}

// loopDir writes the tools of batch_test.go, tools.json (what the model is
// told) and a bin directory for the fakes; it returns the directory and
// the environment of the loop: PATH with the fakes and lanectl first, and
// the lanes in a namespace of miniredis.
func loopDir(t *testing.T) (dir string, env []string) {
	t.Helper()
	d := newBatchDir(t, "")
	writeFile(t, filepath.Join(d.dir, "tools.json"), `[{"name": "echo", "description": "Echoes its input.", "input_schema": {"type": "object"}}]`, 0o644)
	bin := filepath.Join(d.dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	s := newMiniredis(t)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LANES_") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+bin+string(os.PathListSeparator)+filepath.Dir(lanectlBin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"LANES_REDIS_URL="+s.url, "LANES_NAMESPACE="+s.ns)
	return d.dir, env
}

// The model's two answers: first a call of echo, then, given its result,
// the text "done: ID RESULT".
const (
	modelCalls = `{"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
  "content": [{"type": "text", "text": "Let me look."}, {"type": "tool_use", "id": "toolu_1", "name": "echo", "input": {"q": "hi"}}],
  "stop_reason": "tool_use", "stop_sequence": null, "usage": {"input_tokens": 10, "output_tokens": 5}}`
	wantFinal = `done: toolu_1 {"q": "hi"}` + "\n" // echo prints the arguments as the model wrote them
)

// TestReadmeReplyShell runs the README's shell loop with a fake curl that
// checks each request and answers as the model would.
func TestReadmeReplyShell(t *testing.T) {
	for _, tool := range []string{"sh", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the README's shell loop needs %s, which is not installed", tool)
		}
	}
	script := readmeBlock(t, "<!-- tested by TestReadmeReplyShell (cmd/lanectl) -->")
	dir, env := loopDir(t)
	// curl: the request on standard input (-d @-); the tools must be
	// there, and a last message of tool_results gets the final answer.
	writeFile(t, filepath.Join(dir, "bin", "curl"), `#!/bin/sh
req=$(cat)
echo request >> requests.log
printf '%s' "$req" | jq -e '.tools[0].name == "echo" and .max_tokens == 4096' >/dev/null || { echo "bad request: $req" >&2; exit 22; }
if printf '%s' "$req" | jq -e '.messages[-1].content | type == "array" and .[0].type == "tool_result"' >/dev/null; then
  printf '%s' "$req" | jq '.messages[-1].content[0] as $r | {type: "message", role: "assistant",
    content: [{type: "text", text: ("done: " + $r.tool_use_id + " " + $r.content)}], stop_reason: "end_turn"}'
else
  cat <<'JSON'
`+modelCalls+`
JSON
fi
`, 0o755)
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("the README's shell loop: %v, stdout %q, stderr %q", err, out, stderr)
	}
	if string(out) != wantFinal {
		t.Errorf("the README's shell loop printed %q; want %q", out, wantFinal)
	}
	if n := countLines(t, filepath.Join(dir, "requests.log"), "request"); n != 2 {
		t.Errorf("the loop sent %d requests; want 2", n)
	}
}

// TestReadmeReplyPython runs the README's Python loop with a fake
// anthropic module, first on sys.path, that checks each request and
// answers as the model would.
func TestReadmeReplyPython(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the README's Python loop is not run")
	}
	script := readmeBlock(t, "<!-- tested by TestReadmeReplyPython (cmd/lanectl) -->")
	dir, env := loopDir(t)
	writeFile(t, filepath.Join(dir, "loop.py"), script, 0o644)
	writeFile(t, filepath.Join(dir, "anthropic.py"), `import json

MODEL_CALLS = json.loads('''`+modelCalls+`''')
requests = []


class _Message(dict):
    def model_dump(self):
        return json.loads(json.dumps(self))


class _Messages:
    def create(self, **request):
        requests.append(request)
        assert request["tools"][0]["name"] == "echo", request
        last = request["messages"][-1]["content"]
        if isinstance(last, list) and last and last[0].get("type") == "tool_result":
            assert len(requests) == 2, requests
            text = "done: " + last[0]["tool_use_id"] + " " + last[0]["content"]
            return _Message(type="message", role="assistant", content=[{"type": "text", "text": text}], stop_reason="end_turn")
        assert len(requests) == 1, requests
        return _Message(MODEL_CALLS)


class Anthropic:
    def __init__(self):
        self.messages = _Messages()
`, 0o644)
	cmd := exec.Command(python, "loop.py")
	cmd.Dir, cmd.Env = dir, append(env, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("the README's Python loop: %v, stdout %q, stderr %q", err, out, stderr)
	}
	if string(out) != wantFinal {
		t.Errorf("the README's Python loop printed %q; want %q", out, wantFinal)
	}
}
