package redislane_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/lanes-dev/lanes/internal/redisproc"
	"github.com/lanes-dev/lanes/scripts/lua"
)

// TestLeanCachesBoundedByBytesRealRedis: the lean steps' caches of what
// they wrote hold a bounded number of bytes, whatever the records' sizes.
// A key whose holders come one at a time has a record one holder longer at
// each step; a cache bounded by entries alone kept every length of it, and
// the library's Lua memory grew with the square of the holders (310 MB
// for 1,500 holders of 246-byte ids, the third review of the caches).
// Here 600 holders of 200-byte ids on one key, on a private redis-server
// (RealRedis), through the real library: the Functions memory may grow by
// what the steps leave for the Lua GC, not by the sum of the records
// (about 72 MB without the bound).
func TestLeanCachesBoundedByBytesRealRedis(t *testing.T) {
	c := fuzzClient(t)
	ctx := context.Background()
	name, code := lua.Library()
	if err := c.FunctionLoad(ctx, code).Err(); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	ns := "leanmem"
	keys := nsKeys(ns)
	t.Cleanup(func() { c.Del(context.Background(), keys...) })
	f := &fz{t: t, c: c}
	call := func(script string, args ...any) {
		t.Helper()
		if _, err := f.call(name, ns, script, args); err != nil {
			t.Fatalf("%s: %v", script, err)
		}
	}
	vm := func() int64 {
		t.Helper()
		v, err := redisproc.InfoField(ctx, c, "memory", "used_memory_vm_functions")
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("used_memory_vm_functions %q: %v", v, err)
		}
		return n
	}
	call("enqueue", "600000", "o1", "h", "7", `[{"id":"warm","k":[["warm",1]]}]`)
	before := vm()
	pad := strings.Repeat("x", 200)
	for i := range 600 {
		call("enqueue", "600000", "o1", "h", "7", fmt.Sprintf(`[{"id":"%s%d","k":[["S",1000000]]}]`, pad, i))
	}
	grew := vm() - before
	t.Logf("Functions memory grew by %.1f MB over 600 holders", float64(grew)/(1<<20))
	if grew > 16<<20 {
		t.Errorf("Functions memory grew by %.1f MB over 600 holders of 200-byte ids on one key; want at most 16 MB (the caches are bounded by bytes)", float64(grew)/(1<<20))
	}
}
