package redislane_test

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/fencing"
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
		"MAX_BORROWERS":     lanes.MaxBorrowers,
		"MAX_RATE_PER":      int64(lanes.MaxRatePer / time.Millisecond),
		"RATE_LOG_MAX":      lanes.MaxRateLog,
		"REVOKED_TOMB":      int64(lanes.RevokedTombstone / time.Millisecond),
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

// TestNamespaceRuleIsOne: redislane and the Redis fencing guard accept and
// refuse the same namespaces (issue 10: the guard refused "é-ns", which the
// backend and lanectl accepted).
func TestNamespaceRuleIsOne(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	for _, ns := range []string{"prod", "é-ns", "a b", "{x}", "", strings.Repeat("n", 128), strings.Repeat("n", 129), "tenant/42:eu"} {
		_, errB := redislane.New(c, ns)
		_, errG := fencing.NewRedisGuard(c, ns)
		if (errB == nil) != (errG == nil) {
			t.Errorf("namespace %q: redislane.New = %v, fencing.NewRedisGuard = %v; want the same answer", ns, errB, errG)
		}
		if errB != nil && !errors.Is(errB, lanes.ErrInvalid) {
			t.Errorf("namespace %q: redislane.New = %v; want ErrInvalid", ns, errB)
		}
	}
}
