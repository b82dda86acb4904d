package sched

import (
	"context"
	"encoding/json"
	"fmt"
)

// The user's functions the scheduler calls, each turning a panic into an
// error: one tool's bug fails its call, not the process.

// safeRun runs a tool body.
func safeRun(run Body, ctx context.Context, inv Invocation) (out string, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = "", fmt.Errorf("tool %s panicked: %v", inv.Tool, p)
		}
	}()
	return run(ctx, inv)
}

// safeLockKeys runs a LockKeysFunc.
func safeLockKeys(f LockKeysFunc, ctx context.Context, args json.RawMessage) (keys []string, err error) {
	defer func() {
		if p := recover(); p != nil {
			keys, err = nil, fmt.Errorf("panicked: %v", p)
		}
	}()
	return f(ctx, args)
}

// safeSafe runs a SafeFunc.
func safeSafe(f SafeFunc, args json.RawMessage) (ok bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			ok, err = false, fmt.Errorf("panicked: %v", p)
		}
	}()
	return f(args)
}

// safeRewrite runs Options.Rewrite.
func safeRewrite(f func(context.Context, Call) (json.RawMessage, error), ctx context.Context, c Call) (args json.RawMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			args, err = nil, fmt.Errorf("panicked: %v", p)
		}
	}()
	return f(ctx, c)
}
