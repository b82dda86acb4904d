package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"text/tabwriter"

	"github.com/lanes-dev/lanes/lanes"
)

// The golden tests run status, keys, watch and batch whole, on miniredis
// (batch also in memory), and compare what they print, table and JSON,
// with testdata/*.golden once the fields that change from run to run are
// normalized: times, durations, fencing tokens, pids, hosts, entry ids
// lanectl drew at random, ports and temporary paths. After a deliberate
// change of an output:
//
//	go test ./cmd/lanectl -run Golden -update
//
// rewrites the files; review their diff like code.

var update = flag.Bool("update", false, "rewrite testdata/*.golden with what the commands print now")

// assertGolden compares got, normalized, with testdata/name.golden (or
// rewrites the file under -update).
func assertGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s (run with -update if the change is meant):\n--- got\n%s\n--- want\n%s", name, path, got, want)
	}
}

// The volatile values of the JSON outputs: each field's number or string
// becomes a fixed placeholder of the same JSON type.
var (
	jsonNumbers = regexp.MustCompile(`"(token|pid|held_ms|lease_left_ms|waiting_ms|queued_ms|ran_ms)":( ?)[0-9]+`)
	jsonStrings = regexp.MustCompile(`"(time|host)":( ?)"[^"]*"`)
	// jsonTokens are the values of a batch outcome's "tokens" object.
	jsonTokens = regexp.MustCompile(`("(?:concurrency|lock|tool|tenant):[^"]*":( ?))[0-9]+`)
	ports      = regexp.MustCompile(`(redis://[^/\s"]*:)[0-9]+`)
	plainTimes = regexp.MustCompile(`[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+(Z|[+-][0-9:]+)`)
)

// normalizer replaces the volatile parts of lanectl's output.
type normalizer struct {
	// literal replacements first: temporary paths, random entry ids.
	literal []string
}

func (n normalizer) text(s string) string {
	if len(n.literal) > 0 {
		s = strings.NewReplacer(n.literal...).Replace(s)
	}
	s = ports.ReplaceAllString(s, "${1}PORT")
	return plainTimes.ReplaceAllString(s, "TIME")
}

// json normalizes a JSON output (indented or one object per line).
func (n normalizer) json(s string) string {
	s = n.text(s)
	s = jsonNumbers.ReplaceAllString(s, `"$1":${2}0`)
	s = jsonStrings.ReplaceAllString(s, `"$1":${2}"$1"`)
	return jsonTokens.ReplaceAllString(s, "${1}0")
}

// tableCells splits a row of a tabwriter table: cells are separated by two
// spaces or more, and hold one space at most in a row.
var tableCells = regexp.MustCompile(`\s{2,}`)

// volatileColumns are the columns of status tables whose cells change from
// run to run, and what replaces them.
var volatileColumns = map[string]string{"TOKEN": "TOKEN", "OWNER": "HOST:PID", "FOR": "DUR", "LEASE LEFT": "DUR"}

// table normalizes the status tables in s (each from a "KEY ... TOKEN"
// header to the next blank line): volatile cells are replaced and the
// columns aligned again, so a wider token or duration changes nothing.
func (n normalizer) table(s string) string {
	s = n.text(s)
	var out strings.Builder
	var header []string
	var tw *tabwriter.Writer
	flushTable := func() {
		if tw != nil {
			tw.Flush()
			tw, header = nil, nil
		}
	}
	for _, line := range strings.SplitAfter(s, "\n") {
		row := strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(row, "KEY ") && strings.Contains(row, "TOKEN"):
			flushTable()
			header = tableCells.Split(row, -1)
			tw = tabwriter.NewWriter(&out, 0, 0, 2, ' ', 0)
			tw.Write([]byte(strings.Join(header, "\t") + "\n"))
		case tw != nil && row != "":
			cells := tableCells.Split(row, -1)
			for i, c := range cells {
				if i < len(header) && c != "-" {
					if p, ok := volatileColumns[header[i]]; ok {
						cells[i] = p
					}
				}
			}
			tw.Write([]byte(strings.Join(cells, "\t") + "\n"))
		default:
			flushTable()
			out.WriteString(line)
		}
	}
	flushTable()
	return out.String()
}

// batchTimes are the durations and tokens of a `batch` table's lines.
var batchTimes = regexp.MustCompile(`(queued|ran) [0-9.hms]+`)
var batchTokens = regexp.MustCompile(`((?:concurrency|lock|tool|tenant):[^=,\s]*=)[0-9]+`)

func (n normalizer) batchTable(s string) string {
	s = batchTimes.ReplaceAllString(n.text(s), "$1 DUR")
	return batchTokens.ReplaceAllString(s, "${1}TOKEN")
}

// goldenNamespace fills s's namespace for the golden tests: populate's
// entries (status_test.go), and key k4 held by a `lanectl lock --id
// lock-1 k4 -- sleep 60` process with the test's own entry lock-2 waiting
// behind it as another `lanectl lock` would. It returns the lock process.
func goldenNamespace(t *testing.T, s *server) *proc {
	t.Helper()
	populate(t, s)
	p := startBin(t, s.args("lock", "--id", "lock-1", "k4", "--", "sleep", "60")...)
	eventually(t, "lanectl lock holds k4", func() bool {
		for _, k := range s.inspect(t).Keys {
			if k.Key == "k4" && len(k.Holders) == 1 {
				return true
			}
		}
		return false
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := s.session(t).Enqueue(ctx, lanes.Request{ID: "lock-2", Tool: lockTool, CallID: "make",
		Lanes: []lanes.Lane{{Key: "k4", Limit: 1}}}); err != nil {
		t.Fatalf("Enqueue(lock-2) = %v", err)
	}
	t.Cleanup(func() {
		p.signal(t, syscall.SIGTERM)
		p.wait(t)
	})
	return p
}

// TestGoldenStatusKeys: status and keys, every key and named keys, table
// and JSON (miniredis).
func TestGoldenStatusKeys(t *testing.T) {
	s := newMiniredis(t)
	goldenNamespace(t, s)
	n := normalizer{literal: []string{s.ns, "NAMESPACE"}}
	for _, tt := range []struct {
		name string
		args []string
		norm func(string) string
	}{
		{"status", []string{"status"}, n.table},
		{"status_json", []string{"status", "--json"}, n.json},
		{"status_lock_only", []string{"status", "k4"}, n.table},
		{"status_empty", []string{"status", "nosuch"}, n.table},
		{"keys", []string{"keys"}, n.table},
		{"keys_json", []string{"keys", "--json"}, n.json},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, stderr := runInProcess(t, s.args(tt.args...)...)
			if code != 0 || stderr != "" {
				t.Fatalf("lanectl %q = %d, stderr %q; want 0 and nothing", tt.args, code, stderr)
			}
			assertGolden(t, tt.name, tt.norm(out))
		})
	}
}

// TestGoldenWatch: watch without a terminal and with --json, over one
// change (h1 released, w1 granted), on miniredis.
func TestGoldenWatch(t *testing.T) {
	for _, tt := range []struct {
		name string
		json bool
	}{{"watch", false}, {"watch_json", true}} {
		t.Run(tt.name, func(t *testing.T) {
			s := newMiniredis(t)
			populate(t, s)
			var p *inProcess
			args := s.args("watch", "--interval", "20ms")
			// printed counts the views watch printed: JSON lines, or tables
			// separated by a blank line (each written whole).
			printed := func() int {
				out := p.stdout.String()
				if tt.json {
					return strings.Count(out, "\n")
				}
				if out == "" {
					return 0
				}
				return strings.Count(out, "\n\n") + 1
			}
			if tt.json {
				args = append(args, "--json")
			}
			p = startInProcess(t, args...)
			eventually(t, "watch printed the namespace", func() bool { return printed() == 1 })
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			if _, err := s.b.Release(ctx, "", []string{"h1"}); err != nil {
				t.Fatal(err)
			}
			eventually(t, "watch printed the change", func() bool { return printed() == 2 })
			if code := p.stop(t); code != 0 {
				t.Fatalf("watch = %d, stderr %q", code, p.stderr)
			}
			n := normalizer{literal: []string{s.ns, "NAMESPACE"}}
			if tt.json {
				assertGolden(t, tt.name, n.json(p.stdout.String()))
			} else {
				assertGolden(t, tt.name, n.table(p.stdout.String()))
			}
		})
	}
}

// TestGoldenBatch: one batch of every kind of outcome, table and JSON, in
// memory (--local) and on miniredis: both print the same.
func TestGoldenBatch(t *testing.T) {
	run := func(t *testing.T, name string, global []string, flags ...string) {
		d := newBatchDir(t, "")
		calls := d.calls(t, "anthropic",
			toolCall{"c1", "echo", `{"q":"first"}`},
			toolCall{"c2", "nope", `{}`},
			toolCall{"c3", "ghost", `{}`},
			toolCall{"c4", "fail", `{}`},
			toolCall{"c5", "rfd_renumber", `{"rfd":129}`},
			toolCall{"c6", "rfd_renumber", `{"rfd":130}`})
		n := normalizer{literal: []string{d.dir, "DIR"}}
		for _, asJSON := range []bool{false, true} {
			args := append(append(append([]string{}, global...), "batch", "--tools", d.tools, "--calls", calls), flags...)
			golden, norm := name, n.batchTable
			if asJSON {
				args, golden, norm = append(args, "--json"), name+"_json", n.json
			}
			code, out, stderr := runBin(t, args...)
			if code != 0 || stderr != "" {
				t.Fatalf("lanectl %q = %d, stderr %q; want 0 and nothing", args, code, stderr)
			}
			assertGolden(t, golden, norm(out))
		}
	}
	t.Run("local", func(t *testing.T) { run(t, "batch", nil, "--local") })
	t.Run("miniredis", func(t *testing.T) {
		s := newMiniredis(t)
		run(t, "batch", s.args())
		s.assertEmpty(t)
	})
}

// TestGoldenNormalizer: the normalizer keeps what matters and aligns
// tables again; a value that is not volatile still fails the comparison.
func TestGoldenNormalizer(t *testing.T) {
	var buf bytes.Buffer
	v := statusView{Namespace: "ns", Server: "redis://127.0.0.1:6379", Keys: []statusKey{{Key: "k", Limit: 1,
		Holders: []holderView{{Entry: "h1", Token: 1234567890123456, Host: "a-long-host-name", PID: 99999, Tool: "edit", HeldMS: 65000, LeaseLeftMS: 100}},
		Waiters: []waiterView{{Entry: "w1", Position: 1, Host: "h", PID: 1, WaitingMS: 5}}}}}
	if err := (tablePrinter{&buf}).Status(v); err != nil {
		t.Fatal(err)
	}
	a := normalizer{}.table(buf.String())
	v.Keys[0].Holders[0].Token, v.Keys[0].Holders[0].Host, v.Keys[0].Holders[0].HeldMS = 7, "h", 1
	buf.Reset()
	_ = (tablePrinter{&buf}).Status(v)
	if b := (normalizer{}).table(buf.String()); a != b {
		t.Errorf("tables that differ by tokens, hosts and times normalize apart:\n%s\n%s", a, b)
	}
	v.Keys[0].Holders[0].Entry = "h2"
	buf.Reset()
	_ = (tablePrinter{&buf}).Status(v)
	if b := (normalizer{}).table(buf.String()); a == b {
		t.Errorf("tables that differ by an entry normalize to the same:\n%s", a)
	}
	if !strings.Contains(a, "redis://127.0.0.1:PORT") || !strings.Contains(a, "TOKEN") || !strings.Contains(a, "HOST:PID") {
		t.Errorf("normalized table:\n%s\nwant the port, tokens and owners replaced", a)
	}
}
