package main

import (
	"strings"
	"testing"
)

// A user part with no ":" is no user name go-redis can use (it sends AUTH
// only with a password), but it is where redis-cli, Lettuce and others
// read the password (redis://PASSWORD@HOST), and "user@password@host" is
// a ":" typed as "@". Either way it was printed as the user name, in the
// error and in status's header.
func TestUserPartWithoutPasswordNeverPrinted(t *testing.T) {
	for _, u := range []string{
		"redis://S3cr3tZ@127.0.0.1:1",
		"redis://default@S3cr3tZ@127.0.0.1:1",
	} {
		eachURLSource(t, u, "keys", func(how, stdout, stderr string) {
			assertOneLine(t, stderr)
			if strings.Contains(stdout+stderr, "S3cr3tZ") {
				t.Errorf("%s %q: output %q shows the password", how, u, stdout+stderr)
			}
		})
	}
}
