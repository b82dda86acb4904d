package batch_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lanes-dev/lanes/lanes"
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

// FuzzLockKeyTemplate checks a lock-key template against call arguments:
// no template or argument panics; a template is refused with one line, or
// yields keys that lanes accepts, or an error of one line for the call.
func FuzzLockKeyTemplate(f *testing.F) {
	f.Fuzz(func(t *testing.T, template string, args []byte) {
		src := fmt.Sprintf("[tools.w]\ncommand = [\"true\"]\nlock_keys = [%s]\n", tomlString(template))
		cfg, err := batch.ParseConfig([]byte(src), t.TempDir())
		if err != nil {
			if msg := err.Error(); msg == "" || strings.ContainsAny(msg, "\r\n") {
				t.Fatalf("template %q refused with %q; want one line", template, msg)
			}
			return
		}
		keys, err := cfg.Tools["w"].LockKeys(context.Background(), args)
		if err != nil {
			if msg := err.Error(); msg == "" || strings.ContainsAny(msg, "\r\n") {
				t.Fatalf("template %q on %q: error %q; want one line", template, args, msg)
			}
			return
		}
		for _, k := range keys {
			if err := lanes.ValidateKey(sched.LockPrefix + k); err != nil && len(k) < lanes.MaxKeyLen-len(sched.LockPrefix) {
				// Too long is the scheduler's to refuse, per call; anything
				// else is a key lanes cannot hold.
				if !strings.Contains(err.Error(), "control character") && !strings.Contains(err.Error(), "UTF-8") {
					t.Fatalf("template %q on %q gave key %q that lanes refuses: %v", template, args, k, err)
				}
			}
		}
	})
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
