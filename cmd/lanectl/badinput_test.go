package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestBadInput runs lanectl in process with each kind of bad input: each
// exits with its code from the table, says why in one line on stderr, and
// leaves nothing in Redis.
func TestBadInput(t *testing.T) {
	m := newMiniredis(t)
	notExec := t.TempDir() + "/not-executable"
	writeFile(t, notExec, "#!/bin/sh\n", 0o644)
	unreachable := []string{"--redis", "redis://127.0.0.1:1"}
	tests := []struct {
		name   string
		global []string // flags before the command; default --redis and --namespace of a fresh namespace
		args   []string
		code   int
	}{
		{"negative limit", nil, []string{"lock", "--limit", "-1", "k", "--", "true"}, exitUsage},
		{"limit 0", nil, []string{"lock", "--limit", "0", "k", "--", "true"}, exitUsage},
		{"empty key", nil, []string{"lock", "", "--", "true"}, exitUsage},
		{"duplicate key", nil, []string{"lock", "k", "k", "--", "true"}, exitUsage},
		{"ttl 0", nil, []string{"lock", "--ttl", "0", "k", "--", "true"}, exitUsage},
		{"ttl negative", nil, []string{"lock", "--ttl", "-1s", "k", "--", "true"}, exitUsage},
		{"ttl too short", nil, []string{"lock", "--ttl", "10ms", "k", "--", "true"}, exitUsage},
		{"wait negative", nil, []string{"lock", "--wait", "-1s", "k", "--", "true"}, exitUsage},
		{"bad entry id", nil, []string{"lock", "--id", "a b", "k", "--", "true"}, exitUsage},
		{"missing --", nil, []string{"lock", "k", "true"}, exitUsage},
		{"port out of range", []string{"--redis", "redis://127.0.0.1:99999"}, []string{"keys"}, exitUsage},
		{"negative database", []string{"--redis", "redis://127.0.0.1:6379/-1"}, []string{"keys"}, exitUsage},
		{"too many entries to release", nil, append([]string{"release", "--force"}, manyIDs(1001)...), exitUsage},
		{"nothing after --", nil, []string{"lock", "k", "--"}, exitUsage},
		{"no key before --", nil, []string{"lock", "--", "true"}, exitUsage},
		{"empty command", nil, []string{"lock", "k", "--", ""}, exitUsage},
		{"unreachable redis lock", unreachable, []string{"lock", "k", "--", "true"}, exitUnavailable},
		{"unreachable redis status", unreachable, []string{"status"}, exitUnavailable},
		{"malformed URL", []string{"--redis", "redis://:x:y@["}, []string{"status"}, exitUsage},
		{"bad URL scheme", []string{"--redis", "http://127.0.0.1:1"}, []string{"keys"}, exitUsage},
		{"bad namespace", []string{"--redis", m.url, "--namespace", "a b"}, []string{"status"}, exitUsage},
		{"empty namespace", []string{"--redis", m.url, "--namespace", ""}, []string{"keys"}, exitUsage},
		{"release without --force", nil, []string{"release", "some-entry"}, exitUsage},
		{"release without entries", nil, []string{"release", "--force"}, exitUsage},
		{"keys with an argument", nil, []string{"keys", "k"}, exitUsage},
		{"status with an empty key", nil, []string{"status", ""}, exitUsage},
		{"command not found", nil, []string{"lock", "k", "--", "lanectl-test-no-such-command"}, exitCommandNotFound},
		{"command not executable", nil, []string{"lock", "k", "--", notExec}, exitCannotRun},
		{"dev-server bad addr", nil, []string{"dev-server", "--addr", "nowhere"}, exitUsage},
		{"batch --local --no-lanes", nil, []string{"batch", "--tools", "t.toml", "--calls", "c.json", "--local", "--no-lanes"}, exitUsage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newServer(t, "miniredis", m.url) // a namespace of its own
			args := s.args(tt.args...)
			if tt.global != nil {
				args = append(append([]string{"--namespace", s.ns}, tt.global...), tt.args...)
			}
			code, stdout, stderr := runInProcess(t, args...)
			if code != tt.code {
				t.Errorf("lanectl %q = %d; want %d (stderr %q)", args, code, tt.code, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout = %q; want nothing", stdout)
			}
			assertOneLine(t, stderr)
			s.assertEmpty(t)
		})
	}
}

// TestBadInputSaysWhat checks the words of a few errors of TestBadInput:
// each names what the user typed, not an id or a detail of its own.
func TestBadInputSaysWhat(t *testing.T) {
	for _, tt := range []struct {
		args      []string
		want, not string
	}{
		{[]string{"--redis", "redis://127.0.0.1:1", "lock", "k", "k", "--", "true"}, `lock names key "k" twice`, "entry"},
		{[]string{"--redis", "redis://127.0.0.1:1", "lock", "--ttl", "0", "k", "--", "true"}, "--ttl must be a whole number of milliseconds from 30ms to 1h0m0s, got 0s", "positive"},
		// a new user's trial: 2h said "TTL 2h0m0s must be ... from 1ms to 1h0m0s" (lock) and "lanes: invalid ttl: ..." (batch)
		{[]string{"--redis", "redis://127.0.0.1:1", "lock", "--ttl", "2h", "k", "--", "true"}, "--ttl must be a whole number of milliseconds from 30ms to 1h0m0s, got 2h0m0s", "lanes:"},
		{[]string{"--redis", "redis://127.0.0.1:1", "batch", "--tools", "t.toml", "--calls", "c.json", "--ttl", "2h"}, "--ttl must be a whole number of milliseconds from 30ms to 1h0m0s, got 2h0m0s", "lanes:"},
		{[]string{"--redis", "redis://127.0.0.1:1", "mcp", "serve", "--tools", "t.toml", "--ttl", "1500us"}, "--ttl must be a whole number of milliseconds from 30ms to 1h0m0s, got 1.5ms", "lanes:"},
		{[]string{"--redis", "redis://u:pw@127.0.0.1:6379/abc", "keys"}, "must be a database number, such as /0", "abc"},
	} {
		code, _, stderr := runInProcess(t, tt.args...)
		if code != exitUsage || !strings.Contains(stderr, tt.want) || strings.Contains(stderr, tt.not) {
			t.Errorf("lanectl %q = %d %q; want %d, %q and no %q", tt.args, code, stderr, exitUsage, tt.want, tt.not)
		}
		assertOneLine(t, stderr)
	}
}

// TestCommandLineMistakeIsOneLine checks that a mistake cobra finds (an
// unknown flag or command) prints one error line that points to --help.
func TestCommandLineMistakeIsOneLine(t *testing.T) {
	for _, args := range [][]string{
		{"lock", "--bogus", "k", "--", "true"},
		{"lock", "--limit", "many", "k", "--", "true"},
		{"stauts"},
		{},
	} {
		code, _, stderr := runInProcess(t, args...)
		if code != exitUsage {
			t.Errorf("lanectl %q = %d; want %d", args, code, exitUsage)
		}
		assertOneLine(t, stderr)
		if !strings.Contains(stderr, "--help") {
			t.Errorf("lanectl %q printed %q; want a pointer to --help", args, stderr)
		}
	}
	if _, _, stderr := runInProcess(t, "stauts"); !strings.Contains(stderr, `did you mean "status"?`) {
		t.Errorf("lanectl stauts printed %q; want a suggestion", stderr)
	}
	for flag, want := range map[string]string{"many": "not a whole number", "99999999999999999999": "out of range"} {
		if _, _, stderr := runInProcess(t, "lock", "--limit", flag, "k", "--", "true"); !strings.Contains(stderr, want) || strings.Contains(stderr, "strconv") {
			t.Errorf("lock --limit %s printed %q; want %q in plain words, no strconv", flag, stderr, want)
		}
	}
}

// TestRuntimeErrorShowsNoUsage checks that an error that is not a mistake
// in the command line prints one line and no usage.
func TestRuntimeErrorShowsNoUsage(t *testing.T) {
	_, _, stderr := runInProcess(t, "--redis", "redis://127.0.0.1:1", "keys")
	if strings.Contains(stderr, "Usage") {
		t.Errorf("an unreachable server printed the usage: %q", stderr)
	}
	assertOneLine(t, stderr)
}

// TestPasswordNeverPrinted checks that the password of --redis or
// LANES_REDIS_URL appears in no message.
func TestPasswordNeverPrinted(t *testing.T) {
	for _, url := range []string{
		"redis://user:hunter2@127.0.0.1:1",
		"redis://:hunter2@127.0.0.1:1/0",
		"rediss://user:hunter2@127.0.0.1:1",
		"redis://user:hunter2@[bad",
		"redis://user:hunter2@127.0.0.1:1/x/y",
		"redis://user:hunter2@127.0.0.1:1/?bogus=hunter2",
	} {
		t.Run(redactURL(url), func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runInProcess(t, "--redis", url, "status")
			if code != exitUnavailable && code != exitUsage {
				t.Errorf("status --redis %s = %d; want %d or %d", redactURL(url), code, exitUnavailable, exitUsage)
			}
			if strings.Contains(stdout+stderr, "hunter2") {
				t.Errorf("status --redis %s printed the password: %q", redactURL(url), stderr)
			}
			assertOneLine(t, stderr)
		})
	}
	// From the environment too.
	var out, errb strings.Builder
	env := func(k string) string {
		if k == "LANES_REDIS_URL" {
			return "redis://user:hunter2@127.0.0.1:1"
		}
		return ""
	}
	code := run(t.Context(), nil, []string{"keys"}, strings.NewReader(""), &out, &errb, env)
	if code != exitUnavailable || strings.Contains(errb.String(), "hunter2") || !strings.Contains(errb.String(), "redis://user:xxxxx@127.0.0.1:1") {
		t.Errorf("keys with LANES_REDIS_URL = %d, %q; want %d naming redis://user:xxxxx@127.0.0.1:1", code, errb.String(), exitUnavailable)
	}
}

// A malformed URL is named by where it came from: a bad LANES_REDIS_URL is
// not blamed on a --redis the user never gave; and an empty --redis is
// said plainly (a redaction of the empty URL once wrote xxxxx between
// every two letters of the message).
func TestBadRedisURLSource(t *testing.T) {
	var out, errb strings.Builder
	env := func(k string) string {
		if k == "LANES_REDIS_URL" {
			return "localhost:6379"
		}
		return ""
	}
	code := run(t.Context(), nil, []string{"keys"}, strings.NewReader(""), &out, &errb, env)
	if code != exitUsage || !strings.Contains(errb.String(), `"localhost:6379" in LANES_REDIS_URL`) || strings.Contains(errb.String(), "--redis") {
		t.Errorf("keys with LANES_REDIS_URL=localhost:6379 = %d, %q; want %d naming LANES_REDIS_URL, not --redis", code, errb.String(), exitUsage)
	}
	assertOneLine(t, errb.String())
	code, _, stderr := runInProcess(t, "--redis", "", "status")
	if code != exitUsage || stderr != "lanectl: bad --redis URL \"\": it is empty\n" {
		t.Errorf("status --redis '' = %d, %q; want %d and the plain reason", code, stderr, exitUsage)
	}
}

// TestLimitMismatch checks that a --limit other than the one a key is held
// with is refused as a usage error naming both limits, and changes nothing.
func TestLimitMismatch(t *testing.T) {
	s := newMiniredis(t)
	s.hold(t, "k")
	code, _, stderr := runInProcess(t, s.args("lock", "--limit", "2", "k", "--", "true")...)
	if code != exitUsage {
		t.Errorf("lock --limit 2 on a key held with limit 1 = %d; want %d", code, exitUsage)
	}
	assertOneLine(t, stderr)
	if !strings.Contains(stderr, "limit 1") || !strings.Contains(stderr, "names 2") {
		t.Errorf("stderr = %q; want both limits named", stderr)
	}
	snap := s.inspect(t)
	if len(snap.Keys) != 1 || len(snap.Keys[0].Holders) != 1 || len(snap.Keys[0].Waiters) != 0 {
		t.Errorf("Inspect() = %+v; want k held by the test alone", snap.Keys)
	}
}

func manyIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("e%d", i)
	}
	return ids
}

// The run id, tenant and entry ids of the command line are checked by the
// lanes validators of their field (lanes.ValidateEntryID, ValidateField):
// each bad one is a usage error in one line that names it and the rule.
// miniredis (nothing reaches it).
func TestBadIDsAndTenantsNameTheRule(t *testing.T) {
	s := newMiniredis(t)
	tools := t.TempDir() + "/tools.toml"
	writeFile(t, tools, "[tools.echo]\ncommand = [\"cat\"]\n", 0o644)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"batch", "--tools", tools, "--calls", "-", "--run-id", "a b"}, `bad --run-id "a b": it must be printable, without spaces, at most 128 bytes`},
		{[]string{"batch", "--tools", tools, "--calls", "-", "--run-id", strings.Repeat("r", 129)}, "at most 128 bytes"},
		{[]string{"batch", "--tools", tools, "--calls", "-", "--tenant", "a\tb"}, `bad --tenant "a\tb": it must be printable, at most 256 bytes`},
		{[]string{"mcp", "serve", "--tools", tools, "--tenant", strings.Repeat("t", 257)}, "it must be printable, at most 256 bytes"},
		{[]string{"release", "--force", "ok", "a b"}, `entry id "a b" must be printable ASCII without spaces`},
		{[]string{"release", "--force", ""}, "empty entry id"},
	}
	for _, tt := range tests {
		code, stdout, stderr := runInProcess(t, s.args(tt.args...)...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, tt.want) || strings.Contains(stderr, "lanes: invalid") {
			t.Errorf("lanectl %q = %d, %q, %q; want %d and %q, without the sentinel's words", tt.args, code, stdout, stderr, exitUsage, tt.want)
		}
		assertOneLine(t, stderr)
	}
	s.assertEmpty(t)
}
