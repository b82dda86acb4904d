package lanes

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/lanes-dev/lanes/scripts/lua"
)

// TestHolderTTLBoundIsTheScripts: the memory backend looks at as many
// holders, and waiters ahead, for a waiting status's HolderTTL as the
// scripts do (lib.lua's PURGE_ALL), so both backends give a waiter the
// same HolderTTL (or none) on a key of many holders.
func TestHolderTTLBoundIsTheScripts(t *testing.T) {
	m := regexp.MustCompile(`(?m)^local PURGE_ALL = ([0-9]+)`).FindStringSubmatch(lua.Source("enqueue.lua"))
	if m == nil {
		t.Fatal("lib.lua defines no PURGE_ALL")
	}
	if n, err := strconv.Atoi(m[1]); err != nil || n != holderTTLMax {
		t.Errorf("lib.lua: PURGE_ALL = %s; holderTTLMax = %d", m[1], holderTTLMax)
	}
}
