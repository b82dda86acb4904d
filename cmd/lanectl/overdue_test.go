package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// TestViewsSayOverdueEntries: a snapshot that still shows entries past
// their deadline (a backlog of expired entries larger than one look
// removes: a break-it review saw status show dead holders holding, with
// nothing to say the view was stale) makes status and keys end with a line
// that says how many, and their JSON carry "overdue"; a holder kept for
// its borrowers (Ended) and live entries do not count. Built from a
// snapshot: the backlog that needs it is large (see Inspect).
func TestViewsSayOverdueEntries(t *testing.T) {
	now := time.Date(2026, 12, 7, 7, 0, 0, 0, time.UTC)
	entry := func(id string) lanes.Entry {
		return lanes.Entry{ID: id, Owner: lanes.Owner{ID: "o", Host: "h", PID: 1}, Enqueued: now.Add(-time.Minute)}
	}
	snap := func(overdue bool) *lanes.Snapshot {
		deadHolder := now.Add(time.Second)
		deadWaiter := now.Add(time.Minute)
		if overdue {
			deadHolder, deadWaiter = now.Add(-time.Second), now
		}
		return &lanes.Snapshot{Namespace: "ns", Time: now, Keys: []lanes.KeyState{
			{Key: "a", Limit: 1,
				Holders: []lanes.Holder{{Entry: entry("dead"), Token: 7, Granted: now.Add(-time.Minute), Expires: deadHolder}},
				Waiters: []lanes.Waiter{{Entry: entry("w"), Position: 1, Expires: deadWaiter}}},
			{Key: "b", Limit: 1,
				Holders: []lanes.Holder{{Entry: entry("lender"), Token: 8, Granted: now.Add(-time.Minute), Expires: now.Add(-time.Hour), Ended: true}}},
		}}
	}
	const want = "2 entries shown are past their deadline and not yet removed"
	for _, overdue := range []bool{true, false} {
		sv := newStatusView(snap(overdue))
		kv := newKeysView(snap(overdue))
		var status, keys, statusJSON, keysJSON bytes.Buffer
		for _, err := range []error{
			tablePrinter{&status}.Status(sv), tablePrinter{&keys}.Keys(kv),
			jsonPrinter{&statusJSON}.Status(sv), jsonPrinter{&keysJSON}.Keys(kv),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
		for what, out := range map[string]string{"status": status.String(), "keys": keys.String()} {
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			last := lines[len(lines)-1]
			if got := strings.HasPrefix(last, want); got != overdue {
				t.Errorf("%s (overdue entries: %v) ended %q; want the overdue line: %v", what, overdue, last, overdue)
			}
		}
		for what, out := range map[string][]byte{"status --json": statusJSON.Bytes(), "keys --json": keysJSON.Bytes()} {
			var v struct {
				Overdue *int `json:"overdue"`
			}
			if err := json.Unmarshal(out, &v); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			switch {
			case overdue && (v.Overdue == nil || *v.Overdue != 2):
				t.Errorf("%s = %s; want \"overdue\": 2", what, out)
			case !overdue && v.Overdue != nil:
				t.Errorf("%s = %s; want no \"overdue\"", what, out)
			}
		}
	}
	if got := overdueLine(1); !strings.HasPrefix(got, "1 entry shown is past its deadline") {
		t.Errorf("overdueLine(1) = %q", got)
	}
	// watch prints a look when entries turn overdue, or no longer are,
	// though its holders and waiters did not change (a break-it review:
	// a holder that died after watch's first frame was never said overdue).
	var c changes
	for i, overdue := range []bool{false, true, true, false} {
		printed := c.view(newStatusView(snap(overdue)))
		if want := i == 0 || i == 1 || i == 3; printed != want {
			t.Errorf("look %d (overdue entries: %v): watch prints it = %v; want %v", i, overdue, printed, want)
		}
	}
}
