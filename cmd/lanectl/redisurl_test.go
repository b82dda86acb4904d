package main

import (
	"errors"
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"redis://127.0.0.1:6379", "redis://127.0.0.1:6379"},
		{"redis://user:secret@host:6379/0", "redis://user:xxxxx@host:6379/0"},
		{"redis://:secret@host", "redis://:xxxxx@host"},
		{"rediss://default:s%40cret@host:6380", "rediss://default:xxxxx@host:6380"},
		{"redis://user@host", "redis://xxxxx@host"},     // redis-cli reads a user part without ":" as the password
		{"redis://:x:y@[", "redis://:xxxxx@["},          // does not parse
		{"redis://u:p@ss@[::1", "redis://u:xxxxx@[::1"}, // does not parse; '@' in the password
		{"redis://[", "redis://["},
		{"", ""},
	}
	for _, tt := range tests {
		if got := redactURL(tt.in); got != tt.want {
			t.Errorf("redactURL(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

func TestRedactSecret(t *testing.T) {
	tests := []struct{ msg, url, want string }{
		{"auth failed for secret", "redis://u:secret@h", "auth failed for xxxxx"},
		{"dial tcp h:1: refused", "redis://u:secret@h:1", "dial tcp h:1: refused"},
		{"bad thing p@ss", "redis://u:p@ss@[", "bad thing xxxxx"},
		{"s@cret and s%40cret", "redis://u:s%40cret@h", "xxxxx and xxxxx"},
		{"nothing to hide", "redis://h", "nothing to hide"},
	}
	for _, tt := range tests {
		if got := redactSecret(tt.msg, tt.url); got != tt.want {
			t.Errorf("redactSecret(%q, %q) = %q; want %q", tt.msg, tt.url, got, tt.want)
		}
	}
}

func TestParseRedisURL(t *testing.T) {
	opt, err := parseRedisURL("rediss://alice:secret@example.com:6380/2")
	if err != nil {
		t.Fatalf("parseRedisURL() = %v", err)
	}
	if opt.Addr != "example.com:6380" || opt.Username != "alice" || opt.Password != "secret" || opt.DB != 2 || opt.TLSConfig == nil {
		t.Errorf("parseRedisURL() = addr %s user %s db %d tls %v; want example.com:6380 alice 2 TLS", opt.Addr, opt.Username, opt.DB, opt.TLSConfig != nil)
	}
	for _, bad := range []string{"redis://:x:y@[", "http://h", "redis://u:secret@h/x/y", "redis://u:secret@h/?nope=1"} {
		_, err := parseRedisURL(bad)
		var ue *usageError
		if !errors.As(err, &ue) {
			t.Errorf("parseRedisURL(%q) = %v; want a usage error", bad, err)
			continue
		}
		if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "x:y") {
			t.Errorf("parseRedisURL(%q) = %q; it shows the password", bad, err)
		}
	}
}

func TestErrorLine(t *testing.T) {
	err := errors.New("first\nsecond  line for u:pw")
	if got, want := errorLine(err, "redis://u:pw@h"), "lanectl: first; second line for u:xxxxx"; got != want {
		t.Errorf("errorLine() = %q; want %q", got, want)
	}
	if got, want := errorLine(errors.New("lanectl: twice"), ""), "lanectl: twice"; got != want {
		t.Errorf("errorLine() = %q; want %q", got, want)
	}
}
