package sched_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/sched"
)

// Rate lanes (issue 15): one key, one rate, across every declared tool,
// or a configuration error naming the tools.
func TestRateAgreementNamesTools(t *testing.T) {
	body := func(context.Context, sched.Invocation) (string, error) { return "", nil }
	partner := &sched.Rate{Key: "partner", Limit: 60, Per: time.Minute}
	for _, tc := range []struct {
		name  string
		tools map[string]sched.Tool
		want  []string // "" when valid
	}{
		{"same rate", map[string]sched.Tool{
			"a": {Rate: partner, Run: body},
			"b": {Rate: &sched.Rate{Key: "partner", Limit: 60, Per: time.Minute}, Run: body},
		}, nil},
		{"rate and limit on one key", map[string]sched.Tool{
			"a": {Concurrency: sched.Concurrency{Key: "partner", Limit: 2}, Rate: partner, Run: body},
			"b": {Concurrency: sched.Concurrency{Key: "partner", Limit: 2}, Rate: partner, Run: body},
		}, nil},
		{"other rate", map[string]sched.Tool{
			"a": {Rate: partner, Run: body},
			"b": {Rate: &sched.Rate{Key: "partner", Limit: 30, Per: time.Minute}, Run: body},
		}, []string{`key "partner" has different rates`, "a says 60/m", "b says 30/m"}},
		{"no rate on a rate key", map[string]sched.Tool{
			"a": {Rate: partner, Run: body},
			"c": {Concurrency: sched.Concurrency{Key: "partner", Limit: 2}, Run: body},
		}, []string{"different rates", "c says no rate", "different limits"}},
		{"cost without rate", map[string]sched.Tool{
			"a": {Cost: sched.CostOf(2), Run: body},
		}, []string{"tool a: a cost without a rate"}},
		{"bad window", map[string]sched.Tool{
			"a": {Rate: &sched.Rate{Key: "p", Limit: 1, Per: time.Microsecond}, Run: body},
		}, []string{"tool a: rate of key \"p\""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := sched.Config{Tools: tc.tools}.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v; want nil", err)
				}
				return
			}
			if !errors.Is(err, sched.ErrConfig) {
				t.Fatalf("Validate() = %v; want ErrConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q; want it to say %q", err, w)
				}
			}
		})
	}
}

// A cost taken from the call's arguments: a missing, non-numeric or
// too-large value fails that call alone (TOOL_COST), the others run and
// spend what they say; a call whose cost does not fit in the window waits
// for it.
func TestRateCostFromArguments(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		var mu sync.Mutex
		var ran []string
		cfg := sched.Config{Tools: map[string]sched.Tool{
			"gen": {
				Rate: &sched.Rate{Key: "tpm", Limit: 100, Per: 300 * time.Millisecond},
				Cost: sched.CostFromArgument("max_tokens"),
				Run: func(_ context.Context, inv sched.Invocation) (string, error) {
					mu.Lock()
					ran = append(ran, inv.CallID)
					mu.Unlock()
					return "ok", nil
				},
			},
		}}
		s := e.scheduler(cfg)
		calls := []sched.Call{
			{ID: "c1", Tool: "gen", Args: json.RawMessage(`{"max_tokens": 60}`)},
			{ID: "c2", Tool: "gen", Args: json.RawMessage(`{"max_tokens": "30"}`)},
			{ID: "c3", Tool: "gen", Args: json.RawMessage(`{}`)},
			{ID: "c4", Tool: "gen", Args: json.RawMessage(`{"max_tokens": "lots"}`)},
			{ID: "c5", Tool: "gen", Args: json.RawMessage(`{"max_tokens": 500}`)},
			{ID: "c6", Tool: "gen", Args: json.RawMessage(`{"max_tokens": 50}`)}, // waits for c1's units to leave
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		res, err := s.Run(ctx, calls, sched.Options{})
		if err != nil {
			t.Fatalf("Run() = %v", err)
		}
		want := map[string]sched.Code{"c1": "", "c2": "", "c3": sched.CodeCost, "c4": sched.CodeCost, "c5": sched.CodeCost, "c6": ""}
		for _, o := range res.Outcomes {
			if o.Code != want[o.CallID] {
				t.Errorf("call %s: code %q (%v); want %q", o.CallID, o.Code, o.Err, want[o.CallID])
			}
		}
		for i, w := range []string{"max_tokens", "max_tokens", "cost 500"} {
			if o := res.Outcomes[2+i]; o.Err == nil || !strings.Contains(o.Err.Error(), w) {
				t.Errorf("call %s: error %v does not say %q", o.CallID, o.Err, w)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(ran) != 3 {
			t.Errorf("ran %v; want c1, c2 and c6", ran)
		}
	})
}

// Regression (review of rate lanes, finding 4): a null or negative cost
// argument is named as what it is, and the range said is the one enforced.
func TestCostFromArgumentSaysWhy(t *testing.T) {
	f := sched.CostFromArgument("n")
	for args, want := range map[string]string{
		`{"n": null}`: `argument "n" is null, not a number`,
		`{"n": -1}`:   `argument "n" is -1, not a whole number from 1 to`,
		`{"n": 0}`:    `argument "n" is 0, not a whole number from 1 to`,
		// large numbers as written, not in exponent form (5e+09)
		`{"n": 5000000000}`:   `argument "n" is 5000000000, not a whole number from 1 to 1073741824`,
		`{"n": "5000000000"}`: `argument "n" is 5000000000, not a whole number from 1 to 1073741824`,
		`{"n": 2.5}`:          `argument "n" is 2.5, not a whole number`,
	} {
		if _, err := f(context.Background(), json.RawMessage(args)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CostFromArgument(n)(%s) = %v; want an error saying %q", args, err, want)
		}
	}
	if n, err := f(context.Background(), json.RawMessage(`{"n": " 5 "}`)); n != 5 || err != nil {
		t.Errorf("CostFromArgument(n)(\" 5 \") = %d, %v; want 5", n, err)
	}
}
