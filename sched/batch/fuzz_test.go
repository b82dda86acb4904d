package batch_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lanes-dev/lanes/sched"
	"github.com/lanes-dev/lanes/sched/batch"
)

// The seed corpora are checked in under testdata/fuzz/.

// FuzzParseConfig checks that no input panics, that every rejection is a
// sched.ErrConfig with a one-line message, and that what is accepted
// validates and computes lock keys without panicking.
func FuzzParseConfig(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := batch.ParseConfig(data, "testdata")
		if err != nil {
			if msg := err.Error(); msg == "" || strings.ContainsAny(msg, "\r\n") || !utf8.ValidString(msg) {
				t.Fatalf("ParseConfig(%q) = %q; want a non-empty line of UTF-8", data, msg)
			}
			if !errors.Is(err, sched.ErrConfig) {
				t.Fatalf("ParseConfig(%q) = %v; want sched.ErrConfig", data, err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("ParseConfig(%q) accepted a configuration that does not validate: %v", data, err)
		}
		for name, tool := range cfg.Tools {
			if !tool.Disabled && tool.Run == nil {
				t.Fatalf("ParseConfig(%q): enabled tool %s has no body", data, name)
			}
			if tool.LockKeys != nil {
				_, _ = tool.LockKeys(context.Background(), []byte(`{"path": "a/b", "id": 7, "x": "y"}`))
			}
		}
	})
}

// FuzzReadCalls checks that no input panics, that every rejection has a
// one-line message, and that every call read has arguments.
func FuzzReadCalls(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		calls, format, err := batch.ReadCalls(data)
		if err != nil {
			if msg := err.Error(); msg == "" || strings.ContainsAny(msg, "\r\n") || !utf8.ValidString(msg) {
				t.Fatalf("ReadCalls(%q) = %q; want a non-empty line of UTF-8", data, msg)
			}
			if calls != nil || format != "" {
				t.Fatalf("ReadCalls(%q) = %v, %q with error %v; want nothing but the error", data, calls, format, err)
			}
			return
		}
		switch format {
		case batch.Anthropic, batch.OpenAIChat, batch.OpenAIResponses:
		default:
			t.Fatalf("ReadCalls(%q) format = %q; want one of the three", data, format)
		}
		if calls == nil {
			t.Fatalf("ReadCalls(%q) = nil calls; want a non-nil slice", data)
		}
		for i, c := range calls {
			if len(c.Args) == 0 {
				t.Fatalf("ReadCalls(%q) call %d has no arguments; want {} at least", data, i)
			}
		}
	})
}
