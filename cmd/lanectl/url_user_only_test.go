package main

import "testing"

// A user part with no ":" is no user name go-redis can use (it sends AUTH
// only with a password), but it is where redis-cli, Lettuce and others
// read the password (redis://PASSWORD@HOST), and "user@password@host" is
// a ":" typed as "@". Either way it was printed as the user name, in the
// error and in status's header.
func TestUserPartWithoutPasswordNeverPrinted(t *testing.T) {
	secretNeverPrinted(t, "keys", "S3cr3tZ",
		"redis://S3cr3tZ@127.0.0.1:1",
		"redis://default@S3cr3tZ@127.0.0.1:1",
	)
}
