package main

import "testing"

// A user part whose "@host" was forgotten, "user:password:port", with a
// password that url.Parse refuses in a host (a "%" not followed by two hex
// digits, a space, a "^", an "@" written %40) does not parse at all: the
// error quoted the URL whole, password and all. TestPasswordAsHostNeverPrinted
// covers the same mistake with a password url.Parse accepts.
func TestUnparsableUserPartAsHostNeverPrinted(t *testing.T) {
	secretNeverPrinted(t, "keys", "S3cr3tZ",
		"redis://default:S3cr3tZ%:6379",
		"redis://:S3cr3tZ%:6379",
		"redis://default:S3cr3tZ^:6379",
		"redis://default:S3cr3tZ :6379",
		"redis://default:S3cr3tZ%:6379/0",
		"redis://u:S3cr3tZ%40127.0.0.1:6379",
	)
}
