package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestHumanDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0ms"},
		{0, "0ms"},
		{350 * time.Millisecond, "350ms"},
		{time.Second, "1s"},
		{1250 * time.Millisecond, "1.2s"},
		{59*time.Second + 990*time.Millisecond, "59.9s"},
		{3*time.Minute + 4*time.Second + 500*time.Millisecond, "3m4s"},
		{2*time.Hour + 5*time.Minute + 59*time.Second, "2h5m"},
	}
	for _, tt := range tests {
		if got := humanDuration(tt.d); got != tt.want {
			t.Errorf("humanDuration(%v) = %q; want %q", tt.d, got, tt.want)
		}
	}
}

func TestCell(t *testing.T) {
	if got := cell(""); got != "-" {
		t.Errorf(`cell("") = %q; want "-"`, got)
	}
	if got := cell("a\tb\nc"); got != "a b c" {
		t.Errorf("cell(tab, newline) = %q; want %q", got, "a b c")
	}
	long := strings.Repeat("é", 100)
	if got := cell(long); len([]rune(got)) != maxCell || !strings.HasSuffix(got, "…") {
		t.Errorf("cell(100 runes) = %q; want %d runes ending in …", got, maxCell)
	}
}

func TestCallID(t *testing.T) {
	if got := callID([]string{"/usr/bin/sh", "-c", "echo $SECRET_TOKEN"}); got != "sh" {
		t.Errorf("callID() = %q; want the command's name only, no arguments", got)
	}
	if got := callID([]string{"a\nb"}); got != "a b" {
		t.Errorf("callID() = %q; want control characters replaced", got)
	}
	long := callID([]string{strings.Repeat("é", 150)}) // 300 bytes
	if len(long) > maxCallID || !strings.HasPrefix(strings.Repeat("é", 150), long) {
		t.Errorf("callID(300 bytes) = %d bytes, %q; want at most %d bytes cut on a rune", len(long), long, maxCallID)
	}
}

// TestRateTableNextFree: NEXT FREE IN says "now" while the window has
// units free and nobody waits, and how long until the next leave it once
// all are spent, or while a waiter needs more units than are free.
func TestRateTableNextFree(t *testing.T) {
	v := statusView{Keys: []statusKey{
		{Key: "free", Rate: &rateView{Rate: "5/m", Limit: 5, Spent: 3, NextFreeMS: 40000}},
		{Key: "full", Rate: &rateView{Rate: "5/m", Limit: 5, Spent: 5, NextFreeMS: 1500}},
		{Key: "idle", Rate: &rateView{Rate: "5/m", Limit: 5}},
		{Key: "short", Rate: &rateView{Rate: "3/m", Limit: 3, Spent: 2, NextFreeMS: 58000}, Waiters: []waiterView{{Entry: "w", Position: 1}}},
	}}
	var b strings.Builder
	if err := writeRateTable(&b, v); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"free": "now", "full": ms(1500), "idle": "now", "short": ms(58000)} {
		var line []string
		for _, l := range strings.Split(b.String(), "\n") {
			if f := strings.Fields(l); len(f) > 3 && f[0] == key {
				line = f
			}
		}
		if len(line) < 4 || line[3] != want {
			t.Errorf("rate table line of %s = %q; want NEXT FREE IN %q\n%s", key, line, want, b.String())
		}
	}
}

// TestJSONKeepsAngleBrackets: lanectl's JSON is read by people too: a
// tool's output "a -> b" stays so, not "a -\u003e b" (still valid JSON).
func TestJSONKeepsAngleBrackets(t *testing.T) {
	var b strings.Builder
	if err := printBatchJSON(&b, []batchOutcome{{ID: "c1", Output: "renumber 8 -> 11 & <done>"}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"renumber 8 -> 11 & <done>"`) {
		t.Errorf("batch --json = %s; want the output's <, > and & as they are", b.String())
	}
	b.Reset()
	if err := (jsonPrinter{&b}).write(map[string]string{"key": "a<b>&c"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"a<b>&c"`) {
		t.Errorf("--json = %s; want <, > and & as they are", b.String())
	}
}

// Keys and entry ids print whole in status and keys tables, however long:
// a user copies them into other commands, and two that differ at the end
// must not print alike.
func TestStatusPrintsLongKeysWhole(t *testing.T) {
	key := strings.Repeat("k", 300) + "-end"
	id := strings.Repeat("e", 200) + "-tail"
	v := statusView{Namespace: "ns", Server: "redis://127.0.0.1:6379", Keys: []statusKey{{Key: key, Limit: 1,
		Holders: []holderView{{Entry: id, Token: 1, Host: "h", PID: 1}},
		Waiters: []waiterView{{Entry: id + "2", Position: 1, Host: "h", PID: 2}}}}}
	var buf bytes.Buffer
	if err := (tablePrinter{&buf}).Status(v); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{key, id, id + "2"} {
		if !strings.Contains(buf.String(), want+" ") {
			t.Errorf("status table:\n%s\nwant %s…%s whole", buf.String(), want[:8], want[len(want)-8:])
		}
	}
	buf.Reset()
	if err := (tablePrinter{&buf}).Keys(keysView{Namespace: "ns", Keys: []keyCount{{Key: key, Limit: 1, Holders: 1}}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), key+" ") {
		t.Errorf("keys table:\n%s\nwant the key whole", buf.String())
	}
}
