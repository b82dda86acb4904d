package batch_test

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// assertOneLine fails t unless err is a non-empty message on one line.
func assertOneLine(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("error = nil; want one")
	}
	if msg := err.Error(); msg == "" || strings.ContainsAny(msg, "\r\n") {
		t.Errorf("error %q; want one non-empty line", msg)
	}
}
