package main

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Rate lanes (issue 15): `lanectl lock --rate N/s KEY -- CMD` across
// processes, `--cost`, and `lanectl status` showing the key's window. Run
// against miniredis and the real Redis server.

// TestLockRateAcrossProcesses: five lock processes at once on a 2/s rate:
// they are granted in three waves a window apart. Each command prints its
// fencing token, which is the Redis clock at its grant (µs times 1.024,
// tokenize in lib.lua; a grant a window after another is far above the
// previous token + 1): no three grants fall within one window, by the
// clock the rate is kept by. (Each command's own start time, on this
// machine's clock, once stood in for the grant and failed under load: a
// process that started late made two starts look closer than the grants.)
func TestLockRateAcrossProcesses(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		var mu sync.Mutex
		var grants []float64 // µs of the Redis clock
		var wg sync.WaitGroup
		for range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, out, stderr := runBin(t, s.args("lock", "--rate", "2/s", "partner", "--", "sh", "-c", "echo $LANES_TOKEN")...)
				tok, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
				if code != 0 || err != nil {
					t.Errorf("lock --rate 2/s = %d, %q, stderr %q; want 0 and a token", code, out, stderr)
					return
				}
				mu.Lock()
				grants = append(grants, float64(tok)/1.024)
				mu.Unlock()
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		slices.Sort(grants)
		for i := 2; i < len(grants); i++ {
			// a window, less 1µs for the token's rounding down
			if d := grants[i] - grants[i-2]; d < 1e6-1 {
				t.Errorf("grants %d and %d are %.0fµs apart by their tokens; a 2/s rate puts at least a window (1s) between them", i-2, i, d)
			}
		}
		s.assertEmpty(t)
	})
}

func TestLockRateStatusAndErrors(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		for _, cost := range []string{"1", "2"} {
			if code, _, stderr := runBin(t, s.args("lock", "--rate", "5/m", "--cost", cost, "tpm", "--", "true")...); code != 0 {
				t.Fatalf("lock --rate 5/m --cost %s = %d, stderr %q; want 0", cost, code, stderr)
			}
		}
		code, out, stderr := runBin(t, s.args("--json", "status", "tpm")...)
		var v statusView
		if code != 0 || json.Unmarshal([]byte(out), &v) != nil || len(v.Keys) != 1 || v.Keys[0].Rate == nil {
			t.Fatalf("status --json tpm = %d, %q, stderr %q; want the key's window", code, out, stderr)
		}
		if r := v.Keys[0].Rate; r.Rate != "5/m" || r.Spent != 3 || r.Limit != 5 || r.NextFreeMS <= 0 || r.NextFreeMS > 60000 {
			t.Errorf("status --json tpm: rate %+v; want 5/m with 3 spent, the next free within a minute", r)
		}
		code, out, _ = runBin(t, s.args("status", "tpm")...)
		if code != 0 || !strings.Contains(out, "RATE KEY") || !strings.Contains(out, "3/5") {
			t.Errorf("status tpm = %d, %q; want a rate table with 3/5 spent", code, out)
		}
		if !strings.Contains(out, "no holders or waiters") || strings.Contains(out, "LEASE LEFT") {
			t.Errorf("status tpm = %q; want no empty holder table for a key with only a window", out)
		}
		// Another rate on a key in use (a holder carries 5/m), a cost above
		// the rate, a bad rate.
		holder := startBin(t, s.args("lock", "--rate", "5/m", "tpm", "--", "sleep", "60")...)
		eventually(t, "a lock with --rate 5/m holds tpm", func() bool {
			ks := s.inspect(t).Keys
			return len(ks) == 1 && len(ks[0].Holders) == 1
		})
		for _, tc := range []struct {
			args []string
			code int
			want string
		}{
			{[]string{"lock", "--rate", "9/m", "tpm", "--", "true"}, exitUsage, "pass --rate 5/m"},
			{[]string{"lock", "--rate", "5/m", "--cost", "6", "tpm", "--", "true"}, exitUsage, "--cost must be 1 to 5"},
			// Regression (review of rate lanes, finding 4): --cost 0 is
			// refused as the message says; a rate-only key's limit is not
			// shown as its internal MaxLimit.
			{[]string{"lock", "--rate", "5/m", "--cost", "0", "tpm", "--", "true"}, exitUsage, "--cost must be 1 to 5 (the rate's limit), got 0"},
			{[]string{"lock", "--rate", "5/m", "--limit", "2", "tpm", "--", "true"}, exitUsage, `key "tpm" is held or awaited with no concurrency limit (a rate alone bounds it); this request names limit 2 (pass its holders' --rate and no --limit: lanectl status tpm shows the rate)`},
			{[]string{"lock", "--rate", "5/fortnight", "tpm", "--", "true"}, exitUsage, "--rate"},
			{[]string{"lock", "--cost", "2", "tpm", "--", "true"}, exitUsage, "--cost 2 needs --rate"},
		} {
			code, _, stderr := runBin(t, s.args(tc.args...)...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Errorf("%q = %d, stderr %q; want %d and %q", tc.args, code, stderr, tc.code, tc.want)
			}
		}
		holder.signal(t, syscall.SIGTERM)
		if code := holder.wait(t); code != 128+int(syscall.SIGTERM) {
			t.Errorf("the holder exited %d; want %d (its command ended by SIGTERM)", code, 128+int(syscall.SIGTERM))
		}
		// Idle again: the units spent bind no one; 9/m counts them (4 of 9).
		if code, _, stderr := runBin(t, s.args("lock", "--try", "--rate", "9/m", "--cost", "5", "tpm", "--", "true")...); code != 0 {
			t.Errorf("lock --try --rate 9/m --cost 5 on idle tpm with 4 units spent = %d, %q; want 0", code, stderr)
		}
		s.assertEmpty(t)
	})
}
