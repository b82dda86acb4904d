package redislane

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// wireRequest is one request as enqueue.lua reads it, as encoding/json
// writes it: the reference appendRequests must match byte for byte.
type wireRequest struct {
	ID      string   `json:"id"`
	Lanes   [][]any  `json:"k"`
	CallID  string   `json:"c,omitempty"`
	Tool    string   `json:"t,omitempty"`
	Tenant  string   `json:"n,omitempty"`
	Lineage []string `json:"l,omitempty"`
}

func marshalRequests(t *testing.T, reqs []lanes.Request) []byte {
	wire := make([]wireRequest, len(reqs))
	for i, r := range reqs {
		w := wireRequest{ID: r.ID, CallID: r.CallID, Tool: r.Tool, Tenant: r.Tenant, Lineage: r.Lineage}
		for _, l := range r.Lanes {
			if l.Rate.IsZero() {
				w.Lanes = append(w.Lanes, []any{l.Key, l.Limit})
			} else {
				w.Lanes = append(w.Lanes, []any{l.Key, l.Limit, l.Rate.Limit, l.Rate.Per.Milliseconds(), max(l.Cost, 1)})
			}
		}
		wire[i] = w
	}
	js, err := json.Marshal(wire)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// randString draws from pieces that exercise every escape json.Marshal
// makes: quotes, backslashes, control characters, HTML-unsafe characters,
// multi-byte UTF-8, U+2028/U+2029 and invalid UTF-8.
func randString(r *rand.Rand) string {
	pieces := []string{"a", "Z", "0", "-", ":", "/", " ", ".", "_", "\"", "\\", "\n", "\r", "\t", "\b", "\f", "\x00", "\x01", "\x1f", "\x7f",
		"<", ">", "&", "é", "日本", "🦀", "\u2028", "\u2029", "\xff", "\xc3", "\xed\xa0\x80", "'", "{", "]", "\u00a0", "\ufeff"}
	var b []byte
	for range r.IntN(12) {
		b = append(b, pieces[r.IntN(len(pieces))]...)
	}
	return string(b)
}

func TestAppendRequestsMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 3000 {
		reqs := make([]lanes.Request, 1+r.IntN(4))
		for i := range reqs {
			q := lanes.Request{ID: randString(r), CallID: randString(r), Tool: randString(r), Tenant: randString(r)}
			if r.IntN(3) == 0 {
				q.ID = "plain-id-" + string(rune('a'+i))
			}
			for range r.IntN(4) {
				q.Lineage = append(q.Lineage, randString(r))
			}
			if r.IntN(5) == 0 {
				q.Lineage = []string{} // empty, not nil: omitted as well
			}
			for range r.IntN(4) { // none at all: "k":null, as encoding/json writes it
				l := lanes.Lane{Key: randString(r), Limit: r.IntN(1 << 20)}
				if r.IntN(3) == 0 {
					l.Rate = lanes.Rate{Limit: 1 + r.IntN(1000), Per: time.Duration(r.Int64N(int64(time.Hour)))}
					l.Cost = r.IntN(5)
				}
				q.Lanes = append(q.Lanes, l)
			}
			reqs[i] = q
		}
		want := marshalRequests(t, reqs)
		if got := appendRequests(nil, reqs); !bytes.Equal(got, want) {
			t.Fatalf("case %d: appendRequests =\n%s\nwant (encoding/json)\n%s", n, got, want)
		}
	}
}
