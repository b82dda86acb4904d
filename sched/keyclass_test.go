package sched_test

import (
	"testing"

	"github.com/lanes-dev/lanes/internal/otelx"
	"github.com/lanes-dev/lanes/sched"
)

// The class that metrics report for a key (lanes.key.class) follows the
// prefixes that type sched's keys.
func TestKeyClassOfTypedKeys(t *testing.T) {
	file, err := sched.FileKey("", "drafts/008.md")
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		sched.TenantPrefix + "acme":             otelx.ClassTenant,
		sched.ToolPrefix + "read":               otelx.ClassTool,
		sched.ConcurrencyPrefix + "partner-api": otelx.ClassConcurrency,
		sched.LockPrefix + file:                 otelx.ClassFile,
		file:                                    otelx.ClassFile,
		sched.LockPrefix + "draft:008":          otelx.ClassLock,
		sched.RunPrefix + "r1/" + sched.TenantPrefix + "acme": otelx.ClassRun,
		"gpu":        otelx.ClassOther,
		"gpu:0":      otelx.ClassOther,
		"lockfile:x": otelx.ClassOther,
	} {
		if got := otelx.KeyClass(key); got != want {
			t.Errorf("KeyClass(%q) = %q; want %q", key, got, want)
		}
	}
}
