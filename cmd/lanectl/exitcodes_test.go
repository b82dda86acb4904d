package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/lanes-dev/lanes/lanes"
)

func TestExitCode(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, 0},
		{"usage", usageErrorf("bad"), 64},
		{"invalid", fmt.Errorf("x: %w", lanes.ErrInvalid), 64},
		{"limit mismatch", &lanes.LimitMismatchError{Key: "k", Recorded: 1, Requested: 2}, 64},
		{"unavailable", fmt.Errorf("x: %w", lanes.ErrUnavailable), 69},
		{"unreachable", &unreachableError{url: "redis://h", err: errors.New("refused")}, 69},
		{"wait timeout", fmt.Errorf("%w: %w", lanes.ErrWaitTimeout, context.DeadlineExceeded), 75},
		{"lease lost", fmt.Errorf("x: %w", lanes.ErrLeaseLost), 79},
		{"lock cycle", &lanes.LockCycleError{Entries: []string{"a", "b"}, Keys: []string{"k"}, Path: "a waits for b"}, 80},
		{"explicit", &exitError{code: 7}, 7},
		{"explicit wrapping another", &exitError{code: 79, err: lanes.ErrUnavailable}, 79},
		{"SIGINT", &interruptError{sig: syscall.SIGINT}, 130},
		{"SIGTERM wrapped", fmt.Errorf("x: %w", &interruptError{sig: syscall.SIGTERM}), 143},
		{"wrong password", errors.New("WRONGPASS invalid username-password pair or user is disabled."), 77},
		{"no auth", fmt.Errorf("x: %w", errors.New("NOAUTH Authentication required.")), 77},
		{"no permission", errors.New("NOPERM User lanes has no permissions to run the 'get' command"), 77},
		{"script ACL, Redis 7.0", fmt.Errorf("%w: %w", lanes.ErrUnavailable, errors.New("ERR The user executing the script can't run this command or subcommand script: 829e, on @user_script:311.")), 77},
		{"script ACL, Redis 7.2", fmt.Errorf("%w: %w", lanes.ErrUnavailable, errors.New("ERR ACL failure in script: User lanes has no permissions to run the 'pttl' command script: 829e")), 77},
		{"no such database", &unreachableError{url: "redis://h/99", err: errors.New("ERR DB index is out of range")}, 64},
		{"conflict, another status", &exitError{code: 9, kind: "conflict", err: errors.New("k not granted")}, 9},
		{"other", errors.New("boom"), 70},
	}
	for _, tt := range tests {
		if got := exitCode(tt.err); got != tt.want {
			t.Errorf("exitCode(%s: %v) = %d; want %d", tt.name, tt.err, got, tt.want)
		}
	}
}

// TestErrorCode: the name of each kind of error, for --json, follows the
// error, not a status --conflict-exit-code chose.
func TestErrorCode(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{usageErrorf("bad"), "usage"},
		{&unreachableError{url: "redis://h", err: errors.New("refused")}, "unavailable"},
		{&unreachableError{url: "redis://h/99", err: errors.New("ERR DB index is out of range")}, "usage"},
		{&exitError{code: exitCannotListen, err: errors.New("in use")}, "cannot_listen"},
		{&exitError{code: 0, kind: "conflict", err: errors.New("held")}, "conflict"},
		{&exitError{code: 42, err: errors.New("x")}, "exit_42"},
		{&interruptError{sig: syscall.SIGINT}, "interrupted"},
		{errors.New("boom"), "internal"},
	} {
		if got := errorCode(tt.err); got != tt.want {
			t.Errorf("errorCode(%v) = %q; want %q", tt.err, got, tt.want)
		}
	}
	for code := range map[int]bool{exitNotFound: true, exitUsage: true, exitDataErr: true, exitUnavailable: true, exitInternal: true,
		exitCannotListen: true, exitWaitTimeout: true, exitNoPerm: true, exitConfig: true, exitLeaseLost: true, exitLockCycle: true,
		exitCannotRun: true, exitCommandNotFound: true} {
		if exitNames[code] == "" {
			t.Errorf("exit status %d has no name for --json", code)
		}
	}
}

// TestExitCodesDistinct checks that the table never gives two meanings one
// code.
func TestExitCodesDistinct(t *testing.T) {
	codes := map[int]string{}
	for name, c := range map[string]int{
		"ok": exitOK, "not found": exitNotFound, "usage": exitUsage, "unavailable": exitUnavailable,
		"internal": exitInternal, "cannot listen": exitCannotListen, "config": exitConfig, "wait timeout": exitWaitTimeout, "lease lost": exitLeaseLost,
		"lock cycle": exitLockCycle, "data error": exitDataErr, "no permission": exitNoPerm,
		"cannot run": exitCannotRun, "command not found": exitCommandNotFound,
		"SIGINT": exitSignal + int(syscall.SIGINT), "SIGTERM": exitSignal + int(syscall.SIGTERM),
	} {
		if other, ok := codes[c]; ok {
			t.Errorf("exit code %d means both %s and %s", c, name, other)
		}
		codes[c] = name
	}
}

// A server lanectl could not reach when nothing named one says how to
// name one (a README trial ran status in a new terminal, without the
// walkthrough's LANES_REDIS_URL, and was told only "connection refused");
// one that was named is not second-guessed.
func TestUnreachableDefaultSaysHowToNameAServer(t *testing.T) {
	g := &globalOptions{getenv: func(string) string { return "" }}
	if err := g.resolve(newRootCommand(g, nil).PersistentFlags()); err != nil {
		t.Fatal(err)
	}
	err := g.unreachable(errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")).Error()
	if want := "cannot reach Redis at redis://127.0.0.1:6379: dial tcp 127.0.0.1:6379: connect: connection refused (no --redis, LANES_REDIS_URL or LANES_REDIS_URL_FILE named a server, so lanectl tried the default: set one, or start lanectl dev-server)"; err != want {
		t.Errorf("unreachable, by default = %q; want %q", err, want)
	}
	named := &globalOptions{redisURL: "redis://127.0.0.1:1"}
	if err := named.unreachable(errors.New("refused")).Error(); strings.Contains(err, "dev-server") {
		t.Errorf("unreachable, named = %q; want no hint", err)
	}
}
