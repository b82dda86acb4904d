package main

import (
	"strings"
	"testing"
)

// (Found by a review.) Secrets in a user part that broke the parse (a "#",
// "?" or "/" in the password), in an addr= seed, and encoded colons.
func TestBrokenUserPartsNeverPrinted(t *testing.T) {
	for _, tt := range []struct{ url, secret string }{
		// A password with an unencoded '#', '?' or '/' after leading digits:
		// url.Parse reads "user:2024" as host:port and the rest as the
		// fragment, query or path, which Redacted and the errors show.
		{"redis://admin:2024#Secret@127.0.0.1:1", "Secret"},
		{"redis://:2024#Secret@127.0.0.1:1", "Secret"},
		{"redis://admin:2024?Secret@127.0.0.1:1", "Secret"},
		{"redis://admin:2024/Secret@127.0.0.1:1", "Secret"},
		// userinfo in a Cluster/Sentinel addr= seed: quoted in the URL and in
		// go-redis's "unable to parse addr param" error.
		{"redis://127.0.0.1:1/?addr=user:s3cr3t@127.0.0.1:2", "s3cr3t"},
		{"redis://127.0.0.1:1/?master_name=m&addr=:s3cr3t@127.0.0.1:2", "s3cr3t"},
		// addr= whose port is no port: redacted in the URL as written, but
		// go-redis's error shows the decoded value.
		{"redis://127.0.0.1:1/?addr=127.0.0.1:2%3As3cr3t", "s3cr3t"},
		// addr= with an encoded ':': checkPort calls it no port, yet it is shown.
		{"redis://127.0.0.1:1/?addr=127.0.0.1%3As3cr3t", "s3cr3t"},
	} {
		eachURLSource(t, tt.url, "status", func(how, stdout, stderr string) {
			if strings.Contains(stderr+stdout, tt.secret) {
				t.Errorf("%s %q: output %q shows %q", how, tt.url, stderr+stdout, tt.secret)
			}
		})
	}
}

// (Found by a review.) A one-letter password (or one that is a common substring) is
// blanked inside every word: "bxxxxxd --redis URL ... pxxxxxssword".
func TestOneLetterPasswordKeepsTheMessage(t *testing.T) {
	for _, u := range []string{
		"redis://127.0.0.1:1/?password=a&password=b",
		"redis://:a@127.0.0.1:1/?bogus=1",
	} {
		_, _, stderr := runInProcess(t, "--redis", u, "status")
		if !strings.Contains(stderr, "bad --redis URL") && !strings.Contains(stderr, "cannot reach Redis") {
			t.Errorf("%q: message garbled: %q", u, stderr)
		}
	}
}
