// Package batch holds the files of one batch run: the TOML form of a
// sched.Config (LoadConfig, ParseConfig), tool bodies that run external
// commands (Command), and the tool calls of one model response in the
// Anthropic Messages, OpenAI Chat Completions or OpenAI Responses form
// (ReadCalls), and the message that answers that response in its own
// form (ReadResponse, Response.Reply, worded by Wording). `lanectl batch`
// puts them together.
//
// The TOML form of a configuration, every key optional but a tool's command
// (which a tool of an MCP server has not):
//
//	[runner]
//	max_concurrent_tools = 8        # the turn lane, at least 1; default 10
//	per_tenant = 16                 # 0 or unset: unbounded
//	per_tool = { search = 4 }       # per declared tool; 0: unbounded
//	parallel_tool_calls = true      # default true
//	on_tool_error = "surface"       # or "fail_run"
//	unmarked = "barrier"            # or "parallel": what a tool that declares
//	                                # nothing does (see below); default "barrier"
//	retention = "24h"               # how long a run's outcomes are kept by run
//	                                # id and call id; 1ms to 720h; default 24h
//	workspace = "."                 # root of relative file: lock keys and the
//	                                # tools' working directory; relative to this
//	                                # file's directory; default: the working directory
//
//	[tools.rfd_renumber]
//	command = ["./tools/rfd", "renumber"]  # argv; a relative path with a slash is
//	                                       # taken against this file's directory,
//	                                       # a bare name is looked up in PATH
//	concurrency = { key = "rfd" }   # N | { key, limit } | { key } (limit 1) | 0
//	safe = false                    # true: never a barrier; false: always one
//	safe_if = 'args.mode == "read"' # instead of safe: a CEL expression over args
//	read_only_hint = true           # the MCP annotation
//	idempotent = true
//	timeout = "10s"                 # a Go duration; counts the execution only
//	fan_out = { enabled = true, on_error = "stop" }  # on_error "continue" (default)
//	                                # or "stop"; also fan_out = true
//	enabled = false                 # disabled tools are still validated
//	lock_keys = ["file:{path}", "draft:{id}"]
//	description = "Renumber an RFD" # what an MCP server of the tools lists
//	input_schema = { type = "object", properties = { from = { type = "string" } } }
//
//	[mcp_servers.files]             # an MCP server whose tools are tools
//	command = ["./files-server"]    # started, on standard input and output,
//	                                # in the workspace; or url = "http://..."
//	                                # (streamable HTTP), not both
//	env = { FILES_MODE = "rw" }     # added to the command's environment
//	prefix = "files_"               # before each tool name it lists
//	start_timeout = "30s"           # to start and list its tools; default 30s
//
// A configuration with [mcp_servers] is read with Parse (or Load) and
// File.Resolve, which asks each server for its tools through a Connector
// (sched/mcptools.Connect; this package does not import an MCP SDK):
// every tool a server lists is a tool, and a [tools.NAME] without a
// command declares lanes for one of them; see File.Resolve for the
// annotations' defaults, name clashes and servers that fail. ParseConfig
// and LoadConfig refuse such a configuration with an error that says so.
//
//	[reply]                         # what `lanectl batch --reply` tells the model of
//	                                # a call that did not end ok (Wording): error,
//	                                # timed_out, never_dispatched, safe_to_retry,
//	                                # indeterminate, interrupted, no_output,
//	                                # output_not_stored; {tool} {error} {code} {output}
//	never_dispatched = "Not run: {error}. Nothing was done; you may call it again."
//
// Whether a call is a barrier (it runs alone: every call before it has
// ended when it starts, none after it starts before it ends) follows
// DESIGN.md section 5. safe, or safe_if, decides when written (safe =
// false written out keeps a barrier); else read_only_hint = true makes the
// tool safe; else a tool that declares what it conflicts on (concurrency
// or lock_keys) is ordered by its keys only: calls on other keys and
// keyless calls run beside it; else the tool declares nothing, and is a
// barrier unless [runner] unmarked = "parallel".
//
// safe_if is a CEL expression (github.com/google/cel-go) over one
// variable, args: the call's arguments as JSON gives them (a map for an
// object, whole numbers as int, others as double; for a tool that fans
// out, the list of its operations). The call is safe when it gives true.
// An expression that fails to evaluate (a missing argument, a type
// mismatch, more than MaxSafeIfCost) or gives anything but true means
// unsafe; a malformed expression, or one that cannot give a boolean, is a
// configuration error naming the tool. Use has(args.x) to test for an
// argument.
//
// There is no [tools."*"]: whether a tool's calls conflict depends on what
// the tool does (RFD 129), so a default for every tool is refused with an
// error that says so.
//
// A run's outcomes are kept by run id and call id for retention after its
// last one (in Redis, one hash per run; lanes.RunStore), so that `lanectl
// batch --run-id ID` started again returns the settled calls' outcomes
// without running them again and reports a call in flight when its
// process died as safe_to_retry or indeterminate.
//
// # lanectl batch
//
// `lanectl batch --tools FILE (--calls FILE | --resume FILE)` runs one
// response's calls with this configuration. Its flags: --tenant T (the
// per_tenant lane); --run-id ID (the entries' and records' id; started
// again with the same id, a batch returns the settled calls' outcomes,
// "stored", and runs no settled or in-flight call again); --ttl D (the
// lease TTL); --deadline D (ends the whole run D after its start: queued
// calls never dispatched, running ones cancelled); --checkpoint FILE
// (where SIGUSR1, which pauses the batch, writes the checkpoint of the
// rest: running calls finish, none starts); --resume FILE (goes on from
// such a checkpoint, in place of --calls); --local (lanes in the process);
// --no-lanes; --events; --reply (prints Response.Reply in place of the
// outcomes; with --json, {"reply", "outcomes"}); --json. With --json it
// prints one object per call,
// in call order:
//
//	{"id", "tool", "status", "code", "output", "error", "queued_ms",
//	 "ran_ms", "tokens", "stored", "operations"}
//
// status is one of sched's Status values (ok, error, timed_out,
// never_dispatched, safe_to_retry, indeterminate, interrupted); code, ""
// for ok, is one of sched's Code values, stable across releases:
// TOOL_ERROR, TOOL_UNKNOWN, TOOL_DISABLED, TOOL_BAD_CALL_ID,
// TOOL_BAD_ARGUMENTS, TOOL_DECLINED, TOOL_REWRITE_FAILED, TOOL_LOCK_KEYS,
// TOOL_COST, TOOL_LOCK_CYCLE, TOOL_LIMIT_MISMATCH, TOOL_UNAVAILABLE,
// TOOL_LANES_ERROR, TOOL_WAIT_TIMEOUT, TOOL_RUN_CONFLICT, TOOL_TIMEOUT,
// TOOL_NEVER_DISPATCHED, TOOL_SAFE_TO_RETRY, TOOL_INDETERMINATE,
// TOOL_INTERRUPTED, TOOL_OUTPUT_NOT_STORED; stored is true for an outcome
// read from the run's records rather than run now; operations, only for a
// call that fanned out, holds one object of the same shape per operation
// (id CALL#N), in written order.
//
// # Lock keys
//
// A lock key template puts the top-level argument NAME, a string or a
// number, in place of {NAME}. A template that starts with "file:" maps the
// rest through sched.FileKey against the workspace: the path the kernel
// would open (symbolic links followed component by component, each ".."
// applied to what the components before it resolved to; a tail that does
// not exist yet taken lexically), so every spelling of one path gives one
// key (a hard link, another path to the file, gets its own). A call whose arguments lack one, or hold something
// else there, fails with "could not tell what the call changes".
//
// Decoding is strict: an unknown key, a key spelled with other capitals, or
// a value of the wrong type is an error naming the key.
package batch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/lanes-dev/lanes/sched"
)

// ConfigError is a configuration that does not parse, or does not hold
// together. Each problem names its TOML key (tools.NAME.FIELD). It is
// sched.ErrConfig to errors.Is.
type ConfigError struct {
	File     string   // the file it came from, when LoadConfig read one
	Problems []string // one line each
	err      error    // the TOML syntax error or Validate's error, if one
}

func (e *ConfigError) Error() string {
	msg := strings.Join(e.Problems, "; ")
	if e.File != "" {
		msg = e.File + ": " + msg
	}
	return msg
}

// Is reports whether target is sched.ErrConfig.
func (e *ConfigError) Is(target error) bool { return target == sched.ErrConfig }

// Unwrap returns the TOML parser's error or Validate's, when one caused e.
func (e *ConfigError) Unwrap() error { return e.err }

// LoadConfig reads the TOML configuration at path; relative paths in it
// (a command, the workspace) are taken against the file's directory. Its
// error is one line that starts with path.
func LoadConfig(path string) (sched.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return sched.Config{}, fmt.Errorf("cannot read %s: %w", path, err)
	}
	cfg, err := ParseConfig(data, filepath.Dir(path))
	if err != nil {
		if ce, ok := err.(*ConfigError); ok {
			ce.File = path
			return sched.Config{}, ce
		}
		return sched.Config{}, &ConfigError{File: path, Problems: []string{oneLine(err.Error())}}
	}
	return cfg, nil
}

// oneLine returns s on one line: line breaks become "; ", other control
// characters spaces, invalid UTF-8 a replacement character, and runs of
// spaces one space.
func oneLine(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.NewReplacer("\r\n", "; ", "\n", "; ", "\r", "; ").Replace(s)
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return ' '
		}
		return r
	}, s)
	return strings.Join(strings.Fields(s), " ")
}
