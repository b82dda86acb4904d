package main

import (
	"strings"
	"testing"
)

// Secrets a review found printed back: in a ";" query pair, a port, an
// addr= seed, a password option go-redis lacks.
func TestSecretsInQueryAndPortNeverPrinted(t *testing.T) {
	for _, tt := range []struct{ url, secret string }{
		{"redis://127.0.0.1:1/?db=0;password=s3cr3t", "s3cr3t"},                   // ";" pair: Go drops it, redactQuery splits on "&" only
		{"redis://:12345!", "12345!"},                                             // redis://:pw with no letter in pw: portSpan skips it
		{"redis://:20240601", "20240601"},                                         // digits only: quoted as a port
		{"redis://127.0.0.1:1/?addr=127.0.0.1:s3cr3t", "s3cr3t"},                  // Cluster seed addr=host:pw, like redis://:pw
		{"redis://127.0.0.1:1/?master_name=m&sentinel_password=s3cr3t", "s3cr3t"}, // a password option go-redis lacks, quoted back
	} {
		eachURLSource(t, tt.url, "keys", func(how, stdout, stderr string) {
			if strings.Contains(stderr+stdout, tt.secret) {
				t.Errorf("%s %q: output %q shows %q", how, tt.url, stderr+stdout, tt.secret)
			}
		})
	}
}

// A password that is a common word is blanked everywhere in the message,
// which then no longer says what it says: "xxxxx://" for the scheme.
func TestShortPasswordKeepsTheMessage(t *testing.T) {
	_, _, stderr := runInProcess(t, "--redis", "redis://:redis@127.0.0.1:1", "keys")
	assertOneLine(t, stderr)
	if !strings.Contains(stderr, "redis://") {
		t.Errorf("stderr %q: the URL's scheme was redacted as the password", stderr)
	}
}
