package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// The tools of `lanectl demo`, run as `lanectl demo-tool NAME` by the
// replicas' batches: they work on the real files of a demo workspace
// ($LANES_DEMO_DIR), with a pause that widens the race a runtime without
// lanes loses, and log their start and end to its timeline.

// demoPause is how long a demo tool thinks between reading and writing.
const demoPause = 80 * time.Millisecond

// partnerQuota is the partner API's limit: more calls at once are refused.
const partnerQuota = 2

func newDemoToolCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "demo-tool NAME",
		Short:  "A tool of lanectl demo (reads its arguments as JSON on standard input)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := os.Getenv("LANES_DEMO_DIR")
			if dir == "" {
				return usageErrorf("demo-tool runs under lanectl demo (LANES_DEMO_DIR is not set)")
			}
			var in map[string]string
			if err := json.NewDecoder(cmd.InOrStdin()).Decode(&in); err != nil && !errors.Is(err, io.EOF) {
				return fmt.Errorf("arguments: %w", err)
			}
			t := demoTool{dir: dir, replica: os.Getenv("LANES_DEMO_REPLICA"), call: os.Getenv("LANES_CALL_ID"), args: in}
			t.log("start", args[0]+" "+t.describe(args[0]))
			out, err := t.run(args[0])
			if err != nil {
				t.log("fail", err.Error())
				// The tool's own words, named by the tool: the batch shows
				// them, and "lanectl: ..." read as lanectl failing (a new
				// user's trial).
				fmt.Fprintf(cmd.ErrOrStderr(), "%s: %v\n", args[0], err)
				return &exitError{code: 1}
			}
			t.log("done", out)
			_, err = fmt.Fprintln(cmd.OutOrStdout(), out)
			return err
		},
	}
}

type demoTool struct {
	dir, replica, call string
	args               map[string]string
}

func (t demoTool) describe(tool string) string {
	switch tool {
	case "rfd_renumber":
		return t.args["id"] + "→" + t.args["new"]
	case "rfd_draft":
		return t.args["slug"]
	default:
		return t.args["q"]
	}
}

func (t demoTool) run(tool string) (string, error) {
	switch tool {
	case "rfd_renumber":
		return t.renumber(t.args["id"], t.args["new"])
	case "rfd_draft":
		return t.draft(t.args["slug"])
	case "partner_api":
		return t.partner(t.args["q"])
	}
	return "", fmt.Errorf("no demo tool %q", tool)
}

// renumber moves draft id to number new, if new is free when it looks.
func (t demoTool) renumber(id, new string) (string, error) {
	from := t.find(id)
	if from == "" {
		return "", fmt.Errorf("no draft %s", id)
	}
	if t.find(new) != "" {
		return "", fmt.Errorf("draft %s exists: cannot move %s there", new, filepath.Base(from))
	}
	time.Sleep(demoPause)
	to := filepath.Join(filepath.Dir(from), new+strings.TrimPrefix(filepath.Base(from), id))
	if err := os.Rename(from, to); err != nil {
		return "", err
	}
	return filepath.Base(from) + " → " + filepath.Base(to), nil
}

// draft writes a new draft under the next free number.
func (t demoTool) draft(slug string) (string, error) {
	next := 1
	for _, n := range t.numbers() {
		next = max(next, n+1)
	}
	time.Sleep(demoPause)
	name := fmt.Sprintf("%03d-%s.md", next, slug)
	f, err := os.OpenFile(filepath.Join(t.dir, "drafts", name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return "", err
	}
	return "wrote " + name, f.Close()
}

// partner answers q like an API that refuses more than partnerQuota calls at once.
func (t demoTool) partner(q string) (string, error) {
	n, err := t.inflight(+1)
	if err != nil {
		return "", err
	}
	defer t.inflight(-1)
	if n > partnerQuota {
		return "", fmt.Errorf("partner refused %q: quota of %d exceeded (%d calls at once)", q, partnerQuota, n)
	}
	time.Sleep(2 * demoPause)
	return fmt.Sprintf("answer to %q (%d of %d in use)", q, n, partnerQuota), nil
}

// inflight adds d to the partner's count of calls in flight, under a file
// lock, records the most it saw, and returns the new count.
func (t demoTool) inflight(d int) (int, error) {
	f, err := os.OpenFile(filepath.Join(t.dir, "partner.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return 0, err
	}
	n := readInt(filepath.Join(t.dir, "partner.inflight")) + d
	if err := os.WriteFile(filepath.Join(t.dir, "partner.inflight"), []byte(strconv.Itoa(n)), 0o644); err != nil {
		return 0, err
	}
	if most := filepath.Join(t.dir, "partner.most"); n > readInt(most) {
		if err := os.WriteFile(most, []byte(strconv.Itoa(n)), 0o644); err != nil {
			return 0, err
		}
	}
	return n, nil
}

func readInt(path string) int {
	b, _ := os.ReadFile(path)
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// find returns the path of draft number id, or "".
func (t demoTool) find(id string) string {
	m, _ := filepath.Glob(filepath.Join(t.dir, "drafts", id+"-*.md"))
	if len(m) == 0 {
		return ""
	}
	return m[0]
}

// numbers returns the numbers of the drafts, one per file, sorted.
func (t demoTool) numbers() []int {
	return draftNumbers(filepath.Join(t.dir, "drafts"))
}

func draftNumbers(dir string) []int {
	m, _ := filepath.Glob(filepath.Join(dir, "*-*.md"))
	var out []int
	for _, p := range m {
		if n, err := strconv.Atoi(strings.SplitN(filepath.Base(p), "-", 2)[0]); err == nil {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out
}

// log appends one line to the workspace's timeline: time, replica, call, event, what.
func (t demoTool) log(event, what string) {
	f, err := os.OpenFile(filepath.Join(t.dir, "timeline"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%d\t%s\t%s\t%s\t%s\n", time.Now().UnixNano(), t.replica, t.call, event, strings.ReplaceAll(what, "\n", " "))
}
