package main

import (
	"net"
	"strings"
	"testing"
	"time"
)

// (Found by a review.) A user part whose "@host" was forgotten, "user:password:port"
// or ":password:port", is a host url.Parse accepts (only the part after the
// last ":" must be a port). The URL and the dial error quoted it; now
// neither does.
func TestPasswordAsHostNeverPrinted(t *testing.T) {
	for _, u := range []string{
		"redis://default:s3cr3t:6379",
		"redis://:s3cr3t:6379",
		"redis://default:s3cr3t:6379/0",
		"redis://default:s3cr3t:6379/?addr=127.0.0.1:1",
	} {
		eachURLSource(t, u, "status", func(how, stdout, stderr string) {
			if strings.Contains(stdout+stderr, "s3cr3t") {
				t.Errorf("%s %q: output %q shows the password", how, u, stdout+stderr)
			}
		})
	}
}

// (Found by a review.) A user name printed decoded split the status
// header with %0A and sent a terminal escape with %1B; it is not shown.
func TestUserNamePrintsOneLine(t *testing.T) {
	if c, err := net.DialTimeout("tcp", "127.0.0.1:6379", time.Second); err != nil {
		t.Skip("no Redis at 127.0.0.1:6379")
	} else {
		c.Close()
	}
	ns := "rv6-user-" + time.Now().Format("150405.000000")
	_, stdout, stderr := runInProcess(t, "--redis", "redis://u%0Ax%1B%5B2J@127.0.0.1:6379", "--namespace", ns, "status")
	first := strings.SplitN(stdout, "\n", 2)[0]
	if !strings.Contains(first, "127.0.0.1:6379") || strings.Contains(stdout, "\x1b") {
		t.Errorf("status header not one plain line: %q (stderr %q)", stdout, stderr)
	}
}

// (Found by a review.) "net/url: invalid userinfo" keeps its reason (it
// lost it to safeReason, which kept what stood before ": ").
func TestInvalidUserinfoKeepsItsReason(t *testing.T) {
	_, _, stderr := runInProcess(t, "--redis", "redis://u[x@127.0.0.1:1", "status")
	if strings.HasSuffix(strings.TrimSpace(stderr), ": net/url") {
		t.Errorf("reason garbled: %q", stderr)
	}
}
