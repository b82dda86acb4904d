package main

import (
	"strings"
	"testing"
)

// (Found by an outside trial.) A port mistyped in --redis was redacted as
// if it were a password: "redis://127.0.0.1:xxxxx": a port is not a number
// from 1 to 65535. A port that is a number (at most five digits) after a
// host, or any port after a user part, cannot be a password that lost its
// "@host": the error shows the URL with only the password redacted, and
// names the address whose port is bad. A port of letters without a user
// part (redis://host:abc, which redis://default:s3cr3t looks like) stays
// hidden, and the error says the port is bad and why it is hidden. No
// server is contacted (neither miniredis nor real Redis).
func TestBadPortShownWithOnlyPasswordRedacted(t *testing.T) {
	for _, tt := range []struct{ url, want string }{
		{"redis://127.0.0.1:99999", `bad --redis URL "redis://127.0.0.1:99999": the port of 127.0.0.1:99999 is not a number from 1 to 65535`},
		{"redis://localhost:0", `bad --redis URL "redis://localhost:0": the port of localhost:0 is not a number from 1 to 65535`},
		{"rediss://[::1]:70000", `bad --redis URL "rediss://[::1]:70000": the port of [::1]:70000 is not a number from 1 to 65535`},
		{"redis://u:s3cret@127.0.0.1:99999/0", `bad --redis URL "redis://u:xxxxx@127.0.0.1:99999/0": the port of 127.0.0.1:99999 is not a number from 1 to 65535`},
		{"redis://u:s3cret@host:abc", `bad --redis URL "redis://u:xxxxx@host:abc": its port is not a number from 1 to 65535`},
		{"redis://127.0.0.1:1/?addr=127.0.0.1:99999", `bad --redis URL "redis://127.0.0.1:1/?addr=127.0.0.1:99999": the port of 127.0.0.1:99999 is not a number from 1 to 65535`},
		{"redis://127.0.0.1:99999/?master_name=m&password=s3cret", `bad --redis URL "redis://127.0.0.1:99999/?master_name=m&password=xxxxx": the port of 127.0.0.1:99999 is not a number from 1 to 65535`},
		// Letters where the port goes, no user part: maybe a password.
		{"redis://host:abc", `bad --redis URL "redis://host:xxxxx": its port is not a number from 1 to 65535 (it is not shown, as it may be a password)`},
		{"redis://:s3cret", `bad --redis URL "redis://:xxxxx": its port is not a number from 1 to 65535 (it is not shown, as it may be a password)`},
	} {
		code, out, stderr := runInProcess(t, "--redis", tt.url, "--namespace", "x", "status")
		if code != exitUsage || out != "" || stderr != "lanectl: "+tt.want+"\n" {
			t.Errorf("--redis %q = %d, %q, stderr %q; want %d and %q", tt.url, code, out, stderr, exitUsage, "lanectl: "+tt.want)
		}
		if strings.Contains(stderr, "s3cret") {
			t.Errorf("--redis %q: stderr %q shows the password", tt.url, stderr)
		}
	}
}

// redactURL keeps a mistyped port number, and hides one that may be a
// password (digits alone where no host stands, or more than five of them
// after a name that may be a user's).
func TestRedactURLKeepsMistypedPort(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"redis://127.0.0.1:99999", "redis://127.0.0.1:99999"},
		{"redis://u:pw@h:99999", "redis://u:xxxxx@h:99999"},
		{"redis://10.0.0.1:abc", "redis://10.0.0.1:xxxxx"},
		{"redis://:20240601", "redis://:xxxxx"},
		{"redis://admin:12345678", "redis://admin:xxxxx"},
		{"redis://h:1?addr=h:99999", "redis://h:1?addr=h:99999"},
		{"redis://h:1?addr=h:s3cret", "redis://h:1?addr=xxxxx"},
	} {
		if got := redactURL(tt.in); got != tt.want {
			t.Errorf("redactURL(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}
