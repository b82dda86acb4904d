// Package lua embeds the Lua scripts that make every state change of the
// Redis backend (package redislane) and of the Redis fencing guard. They are
// the reference of docs/PROTOCOL.md: a runner in another language runs the
// same sources with the same KEYS and ARGV.
//
// Each file opens with a header naming its KEYS, ARGV, reply and error
// codes. The lanes scripts (enqueue, heartbeat, release, inspect, doctor,
// record) share the helpers of lib.lua, which Source puts in front of
// them: Redis scripts cannot include one another. On Redis 7 the same code
// also loads as one Functions library (Library), which defines the helpers
// once instead of at every call.
package lua

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"

	"embed"
)

//go:embed *.lua
var files embed.FS

// Scripts lists the scripts that run with lib.lua in front of them.
var Scripts = []string{"enqueue.lua", "heartbeat.lua", "release.lua", "inspect.lua", "doctor.lua", "record.lua"}

// Source returns the full source of the named script (e.g. "enqueue.lua"),
// ready for EVAL or SCRIPT LOAD. It panics on a name that is not embedded:
// names are constants of this module, never input.
func Source(name string) string {
	body := read(name)
	if !slices.Contains(Scripts, name) {
		return body
	}
	return read("lib.lua") + "\n" + body
}

func read(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(fmt.Sprintf("lua: no embedded script %q", name))
	}
	return string(b)
}

var library = sync.OnceValues(func() (string, string) {
	var b strings.Builder
	for _, s := range append([]string{"lib.lua"}, Scripts...) {
		b.WriteString(read(s))
	}
	sum := sha1.Sum([]byte(b.String()))
	name := "lanes_" + hex.EncodeToString(sum[:])[:12]
	var code strings.Builder
	code.WriteString("#!lua name=" + name + "\n")
	code.WriteString(read("lib.lua"))
	for _, s := range Scripts {
		fmt.Fprintf(&code, "\nredis.register_function('%s', function(KEYS, ARGV)\n%s\nend)\n", name+"_"+strings.TrimSuffix(s, ".lua"), read(s))
	}
	return name, code.String()
})

// Library returns the Redis Functions library of the lanes scripts, for
// FUNCTION LOAD (Redis 7): its name and its code. Each script is a function
// of the library (Function), which takes the same KEYS and ARGV and gives
// the same reply. The name carries a digest of the sources, so that two
// versions of lanes on one server each load and call their own.
func Library() (name, code string) { return library() }

// Function returns the name of script's function in Library, e.g.
// "lanes_0123456789ab_enqueue" for "enqueue.lua".
func Function(script string) string {
	name, _ := library()
	return name + "_" + strings.TrimSuffix(script, ".lua")
}
