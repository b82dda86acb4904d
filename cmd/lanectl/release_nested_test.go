package main

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// populateNested enqueues, for owners without a Session (processes gone,
// as a nested lanectl lock whose process was killed):
//
//	k5 (limit 1): holder outer; waiter wk5
//	k6 (limit 1): holder inner, a lease borrowed from outer (lineage
//	              [outer], on k5 and k6); waiter wk6
func populateNested(t *testing.T, s *server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	k5, k6 := lanes.Lane{Key: "k5", Limit: 1}, lanes.Lane{Key: "k6", Limit: 1}
	steps := []struct {
		owner string
		req   lanes.Request
		want  lanes.State
	}{
		{"o-outer", lanes.Request{ID: "outer", Lanes: []lanes.Lane{k5}}, lanes.Held},
		{"o-inner", lanes.Request{ID: "inner", Lineage: []string{"outer"}, Lanes: []lanes.Lane{k5, k6}}, lanes.Held},
		{"o-wait", lanes.Request{ID: "wk5", Lanes: []lanes.Lane{k5}}, lanes.Waiting},
		{"o-wait", lanes.Request{ID: "wk6", Lanes: []lanes.Lane{k6}}, lanes.Waiting},
	}
	for _, st := range steps {
		sts, err := s.b.Enqueue(ctx, lanes.Owner{ID: st.owner, Host: "test-host", PID: 4242}, time.Minute, []lanes.Request{st.req})
		if err != nil || len(sts) != 1 || sts[0].State != st.want {
			t.Fatalf("Enqueue(%s) = %+v, %v; want %s", st.req.ID, sts, err, st.want)
		}
	}
}

// grantedLines splits release's output into its lines before the
// "granted next: " ones, and what those say after it, sorted (the order of
// grants of one step is not what these tests are about).
func grantedLines(out string) (lines, granted []string) {
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if g, ok := strings.CutPrefix(l, "granted next: "); ok {
			granted = append(granted, g)
		} else {
			lines = append(lines, l)
		}
	}
	slices.Sort(granted)
	return lines, granted
}

// TestReleaseOfLenderSaysItKeepsItsSlot: a forced release of a holder that
// a live lease borrowed from ends it but keeps its slot (DESIGN.md
// invariant 10): release says so and names the borrower, where it said
// "released" while the waiter behind went on waiting (a break-it review);
// then releasing the borrower and the lender together releases both, where
// the lender, gone with its borrower in the same step, was reported "no
// entry" with exit 4 and the revoked borrower as a lender. miniredis and
// the real Redis server.
func TestReleaseOfLenderSaysItKeepsItsSlot(t *testing.T) {
	for _, s := range []*server{newMiniredis(t), newRealRedis(t)} {
		t.Run(s.name, func(t *testing.T) {
			populateNested(t, s)
			code, out, stderr := runInProcess(t, s.args("release", "--force", "--json", "outer")...)
			if code != 0 || stderr != "" {
				t.Fatalf("release --force outer = %d, stderr %q; want 0 and nothing", code, stderr)
			}
			var got struct {
				Released []struct {
					Entry     string   `json:"entry"`
					Was       string   `json:"was"`
					Kept      bool     `json:"kept"`
					Borrowers []string `json:"borrowers"`
				} `json:"released"`
				Granted []string `json:"granted"`
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("release --json printed %q: %v", out, err)
			}
			if len(got.Released) != 1 || got.Released[0].Was != "held" || !got.Released[0].Kept || !slices.Equal(got.Released[0].Borrowers, []string{"inner"}) || len(got.Granted) != 0 {
				t.Errorf("release --force outer = %s; want outer held, kept for [inner], nobody granted", out)
			}
			snap := s.inspect(t)
			if len(snap.Keys) == 0 || snap.Keys[0].Key != "k5" || len(snap.Keys[0].Holders) != 1 || snap.Keys[0].Holders[0].ID != "outer" || !snap.Keys[0].Holders[0].Ended {
				t.Fatalf("after it, Inspect() = %+v; want k5 still held by outer, ended", snap.Keys)
			}

			code, out, stderr = runInProcess(t, s.args("release", "--force", "inner", "outer")...)
			if code != 0 || stderr != "" {
				t.Fatalf("release --force inner outer = %d, stdout %q, stderr %q; want 0 and nothing on stderr", code, out, stderr)
			}
			lines, granted := grantedLines(out)
			want := []string{
				"released inner (holder of k5, k6 whose lease was revoked when the lease it borrowed from ended; it was told to stop and may still be finishing)",
				"released outer (holder of k5 whose lease had ended, kept for leases borrowed from it; they were told to stop and may still be finishing)",
			}
			if !slices.Equal(lines, want) {
				t.Fatalf("release --force inner outer printed:\n%s\nwant:\n%s\ngranted next: wk5, wk6 (in some order)", out, strings.Join(want, "\n"))
			}
			if want := []string{"wk5 (holder of k5, owner test-host:4242)", "wk6 (holder of k6, owner test-host:4242)"}; !slices.Equal(granted, want) {
				t.Errorf("granted next: %q; want %q", granted, want)
			}
		})
	}
}

// TestReleaseOfKeptLenderNamesItsBorrowers: the forced release of a lender
// kept for a revoked borrower removes the borrower with it, whose own keys
// pass on: release names it (a break-it review: it granted a waiter of a
// key the named entry never held, without a word). miniredis and the real
// Redis server.
func TestReleaseOfKeptLenderNamesItsBorrowers(t *testing.T) {
	for _, s := range []*server{newMiniredis(t), newRealRedis(t)} {
		t.Run(s.name, func(t *testing.T) {
			populateNested(t, s)
			if code, out, stderr := runInProcess(t, s.args("release", "--force", "outer")...); code != 0 || !strings.HasPrefix(out, "ended outer") {
				t.Fatalf("release --force outer = %d, %q, %q; want outer ended and kept", code, out, stderr)
			}
			code, out, stderr := runInProcess(t, s.args("release", "--force", "outer")...)
			if code != 0 || stderr != "" {
				t.Fatalf("second release --force outer = %d, stderr %q; want 0 and nothing", code, stderr)
			}
			if _, stays := entryInfos(s.inspect(t))["inner"]; stays {
				t.Fatalf("after the second release, inner is still there")
			}
			lines, granted := grantedLines(out)
			want := []string{
				"released outer (holder of k5 whose lease had ended, kept for leases borrowed from it; they were told to stop and may still be finishing)",
				"released with outer: inner (nested under it)",
			}
			if !slices.Equal(lines, want) || !slices.ContainsFunc(granted, func(g string) bool { return strings.HasPrefix(g, "wk6 ") }) {
				t.Errorf("second release --force outer printed:\n%s\nwant:\n%s\ngranted next: wk5 and wk6", out, strings.Join(want, "\n"))
			}
		})
	}
}

// TestReleaseOfLineageInAnyOrder: once a lender is kept for its revoked
// borrowers, any release of them reports every entry that left and exits
// 0, whatever the order named: a lender named before its borrower took
// the borrower with it, and the borrower was reported "no entry" with exit
// 1; a borrower's release took its kept lender along without a word; a
// leaf was said twice, with each of two lenders named (a review of
// 0ee21ea and 9cbc0b7). Chain: outer on k5; inner nested under it, on k5
// and k6; leaf nested under both, on k5, k6 and k7 (populateNested's
// entries and one more, owners without a Session). miniredis and the
// real Redis server.
func TestReleaseOfLineageInAnyOrder(t *testing.T) {
	const (
		outerLine = "released outer (holder of k5 whose lease had ended, kept for leases borrowed from it; they were told to stop and may still be finishing)"
		innerKept = "released inner (holder of k5, k6 whose lease had ended, kept for leases borrowed from it; they were told to stop and may still be finishing)"
		leafLine  = "released leaf (holder of k5, k6, k7 whose lease was revoked when the lease it borrowed from ended; it was told to stop and may still be finishing)"
	)
	innerRevoked := "released inner (holder of k5, k6 whose lease was revoked when the lease it borrowed from ended; it was told to stop and may still be finishing)"
	cases := []struct {
		name    string
		first   []string // released before, if any
		ids     []string
		want    []string // the lines before "granted next"
		granted []string // sorted
		left    int      // entries left after
	}{
		{"lender first", nil, []string{"outer", "leaf"}, []string{outerLine, "released with outer: inner (nested under it)", leafLine}, []string{"wk5", "wk6"}, 2},
		{"a borrower of a kept lender that keeps another", nil, []string{"leaf"}, []string{leafLine}, nil, 4},
		{"the last borrower", []string{"leaf"}, []string{"inner"}, []string{innerRevoked, "released with inner: outer (the entry it was nested under, kept for it)"}, []string{"wk5", "wk6"}, 2},
		{"two lenders", nil, []string{"inner", "outer"}, []string{innerKept, "released with inner: leaf (nested under it)", outerLine}, []string{"wk5", "wk6"}, 2},
	}
	for _, c := range cases {
		for _, s := range []*server{newMiniredis(t), newRealRedis(t)} {
			t.Run(c.name+"/"+s.name, func(t *testing.T) {
				populateNested(t, s)
				ctx := context.Background()
				sts, err := s.b.Enqueue(ctx, lanes.Owner{ID: "o-leaf", Host: "test-host", PID: 4242}, time.Minute,
					[]lanes.Request{{ID: "leaf", Lineage: []string{"outer", "inner"}, Lanes: []lanes.Lane{{Key: "k5", Limit: 1}, {Key: "k6", Limit: 1}, {Key: "k7", Limit: 1}}}})
				if err != nil || sts[0].State != lanes.Held {
					t.Fatalf("Enqueue(leaf) = %+v, %v; want held", sts, err)
				}
				if code, out, _ := runInProcess(t, s.args("release", "--force", "outer")...); code != 0 || !strings.HasPrefix(out, "ended outer") {
					t.Fatalf("release --force outer = %d, %q; want outer ended and kept", code, out)
				}
				if c.first != nil {
					if code, out, stderr := runInProcess(t, s.args(append([]string{"release", "--force"}, c.first...)...)...); code != 0 {
						t.Fatalf("release --force %s = %d, %q, %q; want 0", c.first, code, out, stderr)
					}
				}
				code, out, stderr := runInProcess(t, s.args(append([]string{"release", "--force"}, c.ids...)...)...)
				if code != 0 || stderr != "" {
					t.Fatalf("release --force %s = %d, stdout %q, stderr %q; want 0 and nothing on stderr", strings.Join(c.ids, " "), code, out, stderr)
				}
				lines, next := grantedLines(out)
				var granted []string
				for _, g := range next {
					granted = append(granted, strings.SplitN(g, " ", 2)[0])
				}
				if !slices.Equal(lines, c.want) || !slices.Equal(granted, c.granted) {
					t.Errorf("release --force %s printed:\n%s\nwant:\n%s\ngranted next: %s", strings.Join(c.ids, " "), out, strings.Join(c.want, "\n"), strings.Join(c.granted, ", "))
				}
				if snap := s.inspect(t); len(entryInfos(snap)) != c.left {
					t.Errorf("after it, entries %v; want %d", slices.Sorted(maps.Keys(entryInfos(snap))), c.left)
				}
			})
		}
	}
}
