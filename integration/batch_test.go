package integration_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Real Redis: the RFD 129 batch run by three `lanectl batch` processes at
// once. The tools log, around a pause, their call and the fencing tokens of
// their lanes; from that log alone: calls on the rfd key never overlap and
// run in token order, which is each replica's written order; the partner
// key never has more than 2; nothing is left in the namespace.
func TestRFDBatchAcrossThreeProcessesRealRedis(t *testing.T) {
	ns, b, c := namespace(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	tool := filepath.Join(dir, "tool")
	script := "#!/bin/sh\ncat >/dev/null\n" +
		`echo "start $LANES_CALL_ID $LANES_TOKENS" >>` + strconvQuote(log) + "\nsleep 0.05\n" +
		`echo "end $LANES_CALL_ID $LANES_TOKENS" >>` + strconvQuote(log) + "\n"
	if err := os.WriteFile(tool, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	tools := fmt.Sprintf(`[runner]
max_concurrent_tools = 8

[tools.rfd_renumber]
command = [%[1]q]
concurrency = { key = "rfd" }
safe = true

[tools.rfd_draft]
command = [%[1]q]
concurrency = { key = "rfd" }
safe = true

[tools.partner_api]
command = [%[1]q]
concurrency = { key = "partner", limit = 2 }
safe = true
`, tool)
	toolsFile := filepath.Join(dir, "tools.toml")
	if err := os.WriteFile(toolsFile, []byte(tools), 0o644); err != nil {
		t.Fatal(err)
	}
	// Each replica writes an Anthropic response: r<replica>-<n> in order.
	// A replica still running after two minutes is killed: the test fails,
	// it does not hang.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range 3 {
		var blocks []string
		for n, name := range []string{"rfd_renumber", "rfd_renumber", "partner_api", "rfd_draft", "partner_api", "rfd_draft"} {
			blocks = append(blocks, fmt.Sprintf(`{"type":"tool_use","id":"r%d-%d","name":%q,"input":{}}`, i, n, name))
		}
		calls := filepath.Join(dir, fmt.Sprintf("calls-%d.json", i))
		if err := os.WriteFile(calls, []byte(`{"content":[`+strings.Join(blocks, ",")+`]}`), 0o644); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			cmd := exec.CommandContext(ctx, lanectl, "--redis", redisURL(), "--namespace", ns, "batch", "--tools", toolsFile, "--calls", calls, "--json")
			out, err := cmd.CombinedOutput()
			if err != nil {
				errs[i] = fmt.Errorf("replica %d: %v: %s", i, err, out)
			} else if strings.Count(string(out), `"status": "ok"`) != 6 {
				errs[i] = fmt.Errorf("replica %d: not every call ok: %s", i, out)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	running := map[string]map[string]bool{} // key -> calls running
	var lastRFD uint64
	lastInReplica := map[string]int{} // replica -> index of its last call started on rfd
	lines := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines++
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 {
			t.Fatalf("log line %q", sc.Text())
		}
		ev, call := fs[0], fs[1]
		for _, kv := range strings.Split(fs[2], ",") {
			key, tokS, _ := strings.Cut(kv, "=")
			tok, err := strconv.ParseUint(tokS, 10, 64)
			if err != nil {
				t.Fatalf("token in %q: %v", sc.Text(), err)
			}
			if running[key] == nil {
				running[key] = map[string]bool{}
			}
			if ev == "end" {
				delete(running[key], call)
				continue
			}
			running[key][call] = true
			switch key {
			case "concurrency:rfd":
				if len(running[key]) > 1 {
					t.Fatalf("%s started while %v ran on rfd", call, running[key])
				}
				if tok <= lastRFD {
					t.Fatalf("%s started on rfd with token %d after token %d", call, tok, lastRFD)
				}
				lastRFD = tok
				replica, n, _ := strings.Cut(call, "-")
				idx, _ := strconv.Atoi(n)
				if last, seen := lastInReplica[replica]; seen && idx <= last {
					t.Fatalf("%s started on rfd after call %d of its replica: out of written order", call, last)
				}
				lastInReplica[replica] = idx
			case "concurrency:partner":
				if len(running[key]) > 2 {
					t.Fatalf("%d calls at once on partner (limit 2): %v", len(running[key]), running[key])
				}
			}
		}
	}
	if lines != 3*6*2 {
		t.Fatalf("%d log lines; want %d", lines, 3*6*2)
	}
	assertNamespaceEmpty(t, b, c)
}

func strconvQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
