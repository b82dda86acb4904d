package main

import (
	"strings"
	"testing"
)

// A Cluster seed written with a password, addr=PASSWORD@HOST:PORT (the
// redis-cli form of a user part), is not host:port: the URL shows it as
// xxxxx, but the seed is dialed, and the resolver's error ("lookup
// PASSWORD@HOST: no such host") quoted it. The seeds are tried in random
// order, so the command runs until that seed's error has surely come.
func TestClusterSeedWithPasswordNeverPrinted(t *testing.T) {
	for _, u := range []string{
		"redis://127.0.0.1:1?addr=S3cr3tZ@127.0.0.1:2",
		"redis://127.0.0.1:1?addr=S3cr3tZ%40127.0.0.1:2",
		"redis://127.0.0.1:1?addr=S3cr3tZ/127.0.0.1:2",
	} {
		for i := 0; i < 16; i++ {
			_, stdout, stderr := runInProcess(t, "--redis", u, "keys")
			if strings.Contains(stdout+stderr, "S3cr3tZ") {
				t.Errorf("%q: output %q shows the password", u, stdout+stderr)
				break
			}
		}
	}
}
