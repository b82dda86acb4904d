package otelx

import "strings"

// The classes of lane keys that metrics report in place of the keys
// themselves (attribute lanes.key.class), so that a namespace with a
// million files still makes a handful of series.
const (
	ClassTenant      = "tenant"      // tenant:NAME, the runner's per-tenant lane
	ClassTool        = "tool"        // tool:NAME, the runner's per-tool lane
	ClassConcurrency = "concurrency" // concurrency:NAME, a tool's concurrency key
	ClassFile        = "file"        // lock:file:PATH (or file:PATH), a file's lock key
	ClassLock        = "lock"        // lock:NAME, any other lock key
	ClassRun         = "run"         // run:RUN/KEY, a lane one run narrowed for itself
	ClassOther       = "other"       // an untyped key (lanectl lock KEY)
)

// Classes lists every class KeyClass returns.
var Classes = []string{ClassTenant, ClassTool, ClassConcurrency, ClassFile, ClassLock, ClassRun, ClassOther}

// KeyClass returns the class of a lane key from the prefix that types it
// (package sched's TenantPrefix, ToolPrefix, ConcurrencyPrefix, LockPrefix
// and RunPrefix; a test there ties them to these rules).
func KeyClass(key string) string {
	typ, rest, ok := strings.Cut(key, ":")
	if !ok {
		return ClassOther
	}
	switch typ {
	case "tenant":
		return ClassTenant
	case "tool":
		return ClassTool
	case "concurrency":
		return ClassConcurrency
	case "file":
		return ClassFile
	case "run":
		return ClassRun
	case "lock":
		if strings.HasPrefix(rest, "file:") {
			return ClassFile
		}
		return ClassLock
	}
	return ClassOther
}
