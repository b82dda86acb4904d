// Package lua embeds the Lua scripts that make every state change of the
// Redis backend (package redislane) and of the Redis fencing guard. They are
// the reference of docs/PROTOCOL.md: a runner in another language runs the
// same sources with the same KEYS and ARGV.
//
// Each file opens with a header naming its KEYS, ARGV, reply and error
// codes. The lanes scripts (enqueue, heartbeat, release, inspect, doctor) share the
// helpers of lib.lua, which Source puts in front of them: Redis scripts
// cannot include one another.
package lua

import (
	"embed"
	"fmt"
)

//go:embed *.lua
var files embed.FS

// shared lists the scripts that run with lib.lua in front of them.
var shared = map[string]bool{"enqueue.lua": true, "heartbeat.lua": true, "release.lua": true, "inspect.lua": true, "doctor.lua": true, "record.lua": true}

// Source returns the full source of the named script (e.g. "enqueue.lua"),
// ready for EVAL or SCRIPT LOAD. It panics on a name that is not embedded:
// names are constants of this module, never input.
func Source(name string) string {
	body, err := files.ReadFile(name)
	if err != nil {
		panic(fmt.Sprintf("lua: no embedded script %q", name))
	}
	if !shared[name] {
		return string(body)
	}
	lib, err := files.ReadFile("lib.lua")
	if err != nil {
		panic("lua: lib.lua is not embedded")
	}
	return string(lib) + "\n" + string(body)
}
