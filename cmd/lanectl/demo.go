package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/spf13/cobra"
)

// demoOptions are the flags of `lanectl demo`.
type demoOptions struct {
	keep bool
}

func newDemoCommand(o *demoOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "demo [--keep]",
		Short: "Run RFD 129's failure with three replicas, with and without lanes",
		Long: `demo starts an embedded Redis-protocol server and three replica processes,
each running one model response through "lanectl batch" against one real
directory of drafts:

  replica A (Anthropic Messages): renumber 008→011, 007→010, 006→009, 005→008,
            then one call to a partner API
  replica B (OpenAI Chat):        two drafts, each under the next free number,
            and one call to the partner API
  replica C (OpenAI Responses):   one draft, and three calls to the partner
            API, which refuses more than 2 at once

Replica A starts first; B and C once A's first call runs, so the drafts come
after the renumbering in the lanes' FIFO order.

The tools share the concurrency key "rfd" (limit 1) and "partner" (limit 2).
demo runs the replicas once with lanes, then once with --no-lanes (every call
at once, as a runtime without lanes does), prints each run's timeline and
what came out, and exits 0 only if the run with lanes came out right.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd) },
	}
	cmd.Flags().BoolVar(&o.keep, "keep", false, "keep the demo's directory and print where it is")
	return cmd
}

func (o *demoOptions) run(cmd *cobra.Command) error {
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("demo: finding lanectl: %w", err)
	}
	root, err := os.MkdirTemp("", "lanes-demo-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintf(out, "demo directory: %s\n", root)
	} else {
		defer os.RemoveAll(root)
	}
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return fmt.Errorf("demo: starting the embedded server: %w", err)
	}
	defer m.Close()
	url := "redis://" + m.Addr()
	fmt.Fprintf(out, "embedded Redis-protocol server at %s; three replicas run `lanectl batch`:\n", url)
	fmt.Fprintln(out, "  A  Anthropic Messages   renumber 008→011, 007→010, 006→009, 005→008; one partner call")
	fmt.Fprintln(out, "  B  OpenAI Chat          two drafts under the next free number; one partner call")
	fmt.Fprintln(out, "  C  OpenAI Responses     one draft; three partner calls (the partner refuses more than 2 at once)")
	fmt.Fprintln(out, "Each timeline line is a tool starting or ending; with lanes, a call waits in its lane until the")
	fmt.Fprintln(out, "one before it on the same key ends (rfd: one at a time, partner: two), across the replicas.")

	withLanes, err := o.round(ctx, out, exe, url, filepath.Join(root, "with-lanes"), true)
	if err != nil {
		return err
	}
	if _, err := o.round(ctx, out, exe, url, filepath.Join(root, "without-lanes"), false); err != nil {
		return err
	}
	fmt.Fprintln(out)
	if !withLanes {
		return &exitError{code: 1, err: fmt.Errorf("demo: the run with lanes did not come out right (see above)")}
	}
	fmt.Fprintln(out, "with lanes, every call landed as the model meant; without, the same calls collided.")
	return nil
}

// replica is one runner process of the demo and the response it runs.
type replica struct {
	name, format, response string
}

var demoReplicas = []replica{
	{"A", "Anthropic Messages", `{"role":"assistant","content":[
  {"type":"text","text":"Renumbering the drafts, then checking the partner."},
  {"type":"tool_use","id":"a1","name":"rfd_renumber","input":{"id":"008","new":"011"}},
  {"type":"tool_use","id":"a2","name":"rfd_renumber","input":{"id":"007","new":"010"}},
  {"type":"tool_use","id":"a3","name":"rfd_renumber","input":{"id":"006","new":"009"}},
  {"type":"tool_use","id":"a4","name":"rfd_renumber","input":{"id":"005","new":"008"}},
  {"type":"tool_use","id":"a5","name":"partner_api","input":{"q":"status"}}]}`},
	{"B", "OpenAI Chat Completions", `{"choices":[{"message":{"role":"assistant","tool_calls":[
  {"id":"b1","type":"function","function":{"name":"rfd_draft","arguments":"{\"slug\":\"parser\"}"}},
  {"id":"b2","type":"function","function":{"name":"rfd_draft","arguments":"{\"slug\":\"lexer\"}"}},
  {"id":"b3","type":"function","function":{"name":"partner_api","arguments":"{\"q\":\"quota\"}"}}]}}]}`},
	{"C", "OpenAI Responses", `{"output":[
  {"type":"function_call","call_id":"c1","name":"rfd_draft","arguments":"{\"slug\":\"printer\"}"},
  {"type":"function_call","call_id":"c2","name":"partner_api","arguments":"{\"q\":\"orders\"}"},
  {"type":"function_call","call_id":"c3","name":"partner_api","arguments":"{\"q\":\"invoices\"}"},
  {"type":"function_call","call_id":"c4","name":"partner_api","arguments":"{\"q\":\"refunds\"}"}]}`},
}

// demoDrafts are the drafts the workspace starts with.
var demoDrafts = []string{"005-alpha.md", "006-beta.md", "007-gamma.md", "008-delta.md"}

// round runs the three replicas on a fresh workspace, prints the timeline
// and the checks, and reports whether everything came out right.
func (o *demoOptions) round(ctx context.Context, out io.Writer, exe, url, dir string, lanes bool) (bool, error) {
	if err := os.MkdirAll(filepath.Join(dir, "drafts"), 0o755); err != nil {
		return false, err
	}
	for _, d := range demoDrafts {
		if err := os.WriteFile(filepath.Join(dir, "drafts", d), []byte("# "+d+"\n"), 0o644); err != nil {
			return false, err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "tools.toml"), []byte(demoTools(exe)), 0o644); err != nil {
		return false, err
	}
	title := "with lanes: the tools share the keys rfd (limit 1) and partner (limit 2) in Redis"
	if !lanes {
		title = "without lanes (--no-lanes): every call at once, as a runtime without lanes runs them"
	}
	fmt.Fprintf(out, "\n== %s\n", title)

	var wg sync.WaitGroup
	results := make([][]batchOutcome, len(demoReplicas))
	errs := make([]error, len(demoReplicas))
	for i, r := range demoReplicas {
		if i == 1 {
			// B and C start once A's first call runs: A's calls are queued.
			waitForTimeline(ctx, dir, demoReplicas[0].name)
		}
		calls := filepath.Join(dir, "response-"+r.name+".json")
		if err := os.WriteFile(calls, []byte(r.response), 0o644); err != nil {
			return false, err
		}
		args := []string{"--redis", url, "--namespace", "demo", "batch", "--tools", filepath.Join(dir, "tools.toml"), "--calls", calls, "--json", "--run-id", "replica-" + r.name}
		if !lanes {
			args = append(args, "--no-lanes")
		}
		wg.Go(func() {
			c := exec.CommandContext(ctx, exe, args...)
			c.Env = append(os.Environ(), "LANES_DEMO_DIR="+dir, "LANES_DEMO_REPLICA="+r.name)
			var stdout, stderr bytes.Buffer
			c.Stdout, c.Stderr = &stdout, &stderr
			if err := c.Run(); err != nil {
				errs[i] = fmt.Errorf("replica %s: %v: %s", r.name, err, strings.TrimSpace(stderr.String()))
				return
			}
			errs[i] = json.Unmarshal(stdout.Bytes(), &results[i])
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return false, err
		}
	}
	printTimeline(out, dir)
	return demoChecks(out, dir, results), nil
}

// waitForTimeline waits, for at most ten seconds, until a tool of replica
// name has logged its start.
func waitForTimeline(ctx context.Context, dir, name string) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		b, _ := os.ReadFile(filepath.Join(dir, "timeline"))
		if bytes.Contains(b, []byte("\t"+name+"\t")) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// demoTools is the tools file of the demo: every tool is lanectl itself.
func demoTools(exe string) string {
	cmd := func(tool string) string {
		return fmt.Sprintf("[%s, %s, %s]", strconv.Quote(exe), strconv.Quote("demo-tool"), strconv.Quote(tool))
	}
	return `[runner]
max_concurrent_tools = 8

[tools.rfd_renumber]
command = ` + cmd("rfd_renumber") + `
concurrency = { key = "rfd" }
safe = true

[tools.rfd_draft]
command = ` + cmd("rfd_draft") + `
concurrency = { key = "rfd" }
safe = true

[tools.partner_api]
command = ` + cmd("partner_api") + `
concurrency = { key = "partner", limit = 2 }
safe = true
idempotent = true
`
}

// printTimeline prints what the tools logged, in time order.
func printTimeline(out io.Writer, dir string) {
	f, err := os.Open(filepath.Join(dir, "timeline"))
	if err != nil {
		fmt.Fprintf(out, "  (no timeline: %v)\n", err)
		return
	}
	defer f.Close()
	type line struct {
		at                    int64
		replica, call, ev, do string
	}
	var lines []line
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.SplitN(sc.Text(), "\t", 5)
		if len(fs) != 5 {
			continue
		}
		at, _ := strconv.ParseInt(fs[0], 10, 64)
		lines = append(lines, line{at, fs[1], fs[2], fs[3], fs[4]})
	}
	slices.SortStableFunc(lines, func(a, b line) int { return int(a.at - b.at) })
	if len(lines) == 0 {
		return
	}
	t0 := lines[0].at
	for _, l := range lines {
		mark := "  "
		if l.ev == "fail" {
			mark = "✗ "
		}
		fmt.Fprintf(out, "  %7s  %s %-3s %s%-5s %s\n", "+"+strconv.FormatInt((l.at-t0)/int64(time.Millisecond), 10)+"ms", l.replica, l.call, mark, l.ev, l.do)
	}
}

// demoChecks prints what came out of a round and reports whether it is
// what the model meant.
func demoChecks(out io.Writer, dir string, results [][]batchOutcome) bool {
	ok := true
	check := func(good bool, format string, args ...any) {
		mark := "✓"
		if !good {
			mark, ok = "✗", false
		}
		fmt.Fprintf(out, "  %s %s\n", mark, fmt.Sprintf(format, args...))
	}
	var failed []string
	for _, rs := range results {
		for _, r := range rs {
			if r.Status != "ok" {
				failed = append(failed, fmt.Sprintf("%s %s: %s", r.ID, r.Tool, r.Error))
			}
		}
	}
	fmt.Fprintln(out)
	check(len(failed) == 0, "every call succeeded%s", list(failed))

	drafts := filepath.Join(dir, "drafts")
	var missing []string
	for _, want := range []string{"008-alpha.md", "009-beta.md", "010-gamma.md", "011-delta.md"} {
		if _, err := os.Stat(filepath.Join(drafts, want)); err != nil {
			missing = append(missing, want)
		}
	}
	check(len(missing) == 0, "the renumber chain landed: 005→008, 006→009, 007→010, 008→011%s", list(prefix("missing ", missing)))

	nums := draftNumbers(drafts)
	var dup []string
	for i := 1; i < len(nums); i++ {
		if nums[i] == nums[i-1] && (len(dup) == 0 || dup[len(dup)-1] != fmt.Sprintf("%03d", nums[i])) {
			dup = append(dup, fmt.Sprintf("%03d", nums[i]))
		}
	}
	names, _ := filepath.Glob(filepath.Join(drafts, "*.md"))
	for i := range names {
		names[i] = filepath.Base(names[i])
	}
	check(len(dup) == 0 && len(nums) == len(demoDrafts)+3, "seven drafts under seven numbers: %s%s", strings.Join(names, " "), list(prefix("number used twice: ", dup)))

	most := readInt(filepath.Join(dir, "partner.most"))
	check(most <= partnerQuota, "the partner API saw %s at once at most (its quota is %d)", plural(most, "call"), partnerQuota)
	return ok
}

func list(xs []string) string {
	if len(xs) == 0 {
		return ""
	}
	return "\n      " + strings.Join(xs, "\n      ")
}

func prefix(p string, xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = p + x
	}
	return out
}
