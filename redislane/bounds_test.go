package redislane_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
	"github.com/lanes-dev/lanes/scripts/lua"
)

// TestBoundsMatchGo: the bounds the scripts enforce (the constants at the
// head of lib.lua) are package lanes' bounds, so that a request refused by
// one layer is refused by the other, and the protocol version is the one
// this package sends.
func TestBoundsMatchGo(t *testing.T) {
	src := lua.Source("enqueue.lua")
	lua := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^local ([A-Z_]+) = ('?[0-9]+'?)`).FindAllStringSubmatch(src, -1) {
		lua[m[1]] = strings.Trim(m[2], "'")
	}
	want := map[string]int64{
		"MAX_KEY_LEN":       lanes.MaxKeyLen,
		"MAX_ID_LEN":        lanes.MaxIDLen,
		"MAX_FIELD_LEN":     lanes.MaxFieldLen,
		"MAX_LANES":         lanes.MaxLanes,
		"MAX_LINEAGE":       lanes.MaxLineage,
		"MAX_LIMIT":         lanes.MaxLimit,
		"MAX_STEP_REQUESTS": lanes.MaxStepRequests,
		"MAX_STEP_LANES":    lanes.MaxStepLanes,
		"MAX_TTL":           int64(lanes.MaxTTL / time.Millisecond),
		"CYCLE_VISITS":      lanes.MaxCycleVisits,
	}
	for name, v := range want {
		got, ok := lua[name]
		if !ok {
			t.Errorf("lib.lua defines no %s", name)
			continue
		}
		if n, err := strconv.ParseInt(got, 10, 64); err != nil || n != v {
			t.Errorf("lib.lua: %s = %s; package lanes says %d", name, got, v)
		}
	}
	if lua["PROTOCOL"] != redislane.Protocol {
		t.Errorf("lib.lua: PROTOCOL = %q; redislane.Protocol = %q", lua["PROTOCOL"], redislane.Protocol)
	}
}
