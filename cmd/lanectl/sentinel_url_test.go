package main

import (
	"net/url"
	"strings"
	"testing"
)

// (Found by an outside trial.) A master_name= URL that names a plain
// Redis server, not a Sentinel, exited 69 (unavailable) with go-redis's
// "all sentinels specified in configuration are unreachable: ERR unknown
// command 'sentinel'". The server answered: the URL is wrong, a
// configuration error (78), and the one line says the server is not a
// Sentinel, without the password. Against miniredis and the real Redis
// server (no key is written to either).
func TestMasterNameOnPlainRedisIsConfigError(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		u, err := url.Parse(s.url)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword("", "s3cret-sentinel") // no Sentinel asks for it: not one
		if s.name == "redis" {
			u.User = nil // the shared server may require its own
		}
		q := u.Query()
		q.Set("master_name", "mymaster")
		u.RawQuery = q.Encode()
		for _, cmd := range [][]string{{"status"}, {"lock", "k", "--", "true"}} {
			code, out, stderr := runInProcess(t, append([]string{"--redis", u.String(), "--namespace", s.ns}, cmd...)...)
			if code != exitConfig || out != "" {
				t.Errorf("%s with master_name= on a plain server = %d, %q, %q; want %d", cmd[0], code, out, stderr, exitConfig)
			}
			assertOneLine(t, stderr)
			if !strings.Contains(stderr, "is not a Sentinel") || !strings.Contains(stderr, "master_name=mymaster") {
				t.Errorf("%s: stderr %q; want it to name the URL and say it is not a Sentinel", cmd[0], stderr)
			}
			if strings.Contains(stderr, "s3cret") {
				t.Errorf("%s: stderr %q shows the password", cmd[0], stderr)
			}
		}
	})
}
