package batch_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/sched"
	"github.com/lanes-dev/lanes/sched/batch"
)

// Rate lanes (issue 15) in TOML: rate = { key, limit, per } and cost = N
// or "{argument}".
func TestParseConfigRate(t *testing.T) {
	cfg := parse(t, `
[tools.ask]
command = ["true"]
concurrency = { key = "partner", limit = 4 }
rate = { key = "partner", limit = 60, per = "1m" }
cost = "{max_tokens}"

[tools.ping]
command = ["true"]
concurrency = { key = "partner", limit = 4 }
rate = { key = "partner", limit = 60, per = "1m" }
cost = 2
`, "")
	ask := cfg.Tools["ask"]
	if want := (sched.Rate{Key: "partner", Limit: 60, Per: time.Minute}); ask.Rate == nil || *ask.Rate != want {
		t.Fatalf("tools.ask.rate = %+v; want %+v", ask.Rate, want)
	}
	ctx := context.Background()
	if n, err := ask.Cost(ctx, json.RawMessage(`{"max_tokens": 12}`)); n != 12 || err != nil {
		t.Errorf("tools.ask.cost({max_tokens: 12}) = %d, %v; want 12", n, err)
	}
	if _, err := ask.Cost(ctx, json.RawMessage(`{"prompt": "x"}`)); err == nil || !strings.Contains(err.Error(), "max_tokens") {
		t.Errorf("tools.ask.cost({}) = %v; want an error naming max_tokens", err)
	}
	if n, err := cfg.Tools["ping"].Cost(ctx, json.RawMessage(`{}`)); n != 2 || err != nil {
		t.Errorf("tools.ping.cost = %d, %v; want 2", n, err)
	}
}

func TestParseConfigRateErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{`rate = { key = "p", limit = 60 }`, "tools.t.rate: needs key, limit and per"},
		{`rate = { key = "p", limit = 0, per = "1s" }`, "tools.t.rate.limit: 0 is below 1"},
		{`rate = { key = "p", limit = 6, per = "soon" }`, `tools.t.rate.per: "soon" is not a duration`},
		{`rate = { key = "p", limit = 6, per = "1s", burst = 2 }`, "tools.t.rate.burst: unknown key"},
		{`rate = 60`, "tools.t.rate: must be a table"},
		{`rate = { key = "p", limit = 6, per = "1s" }` + "\ncost = \"max_tokens\"", `tools.t.cost: "max_tokens" must be a whole number or "{argument}"`},
		{`cost = 3`, "tool t: a cost without a rate"},
	} {
		_, err := batch.ParseConfig([]byte("[tools.t]\ncommand = [\"true\"]\n"+tc.src), "")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%q) = %v; want an error saying %q", tc.src, err, tc.want)
		}
	}
	// The agreement check: one key, one rate, naming the tools.
	_, err := batch.ParseConfig([]byte(`
[tools.a]
command = ["true"]
rate = { key = "partner", limit = 60, per = "1m" }
[tools.b]
command = ["true"]
rate = { key = "partner", limit = 10, per = "1s" }
`), "")
	if err == nil || !strings.Contains(err.Error(), `key "partner" has different rates: a says 60/m, b says 10/s`) {
		t.Errorf("ParseConfig(two rates on one key) = %v; want the tools named", err)
	}
}
