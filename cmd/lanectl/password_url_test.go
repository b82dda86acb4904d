package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// A password put where the URL goes is never printed back, whichever way
// it came (--redis, LANES_REDIS_URL, --redis-url-file), and whatever its
// form: a bare word, a word:digits pair (read as host:port by the hint, and
// as a scheme by go-redis), a URL missing its "@host".
func TestPasswordWhereTheURLGoesNeverPrinted(t *testing.T) {
	for _, tt := range []struct{ url, secret string }{
		{"hunter2", "hunter2"},                       // bare word: quoted back as the URL
		{"Tr0ub4dor:1234", "tr0ub4dor"},              // go-redis's scheme error, and the hint
		{"Tr0ub4dor:1234", "Tr0ub4dor"},              // the hint
		{"mypass:word", "mypass"},                    // go-redis's scheme error
		{"redis://:hunter2", "hunter2"},              // url's "invalid port" error
		{"redis://h:1/?Password=hunter2", "hunter2"}, // a password parameter in another case
	} {
		eachURLSource(t, tt.url, "keys", func(how, _, stderr string) {
			assertOneLine(t, stderr)
			if strings.Contains(stderr, tt.secret) {
				t.Errorf("%s %q: stderr %q shows %q", how, tt.url, stderr, tt.secret)
			}
		})
	}
}

// eachURLSource runs lanectl cmd with url given each way a Redis URL
// comes (--redis, LANES_REDIS_URL, --redis-url-file) and calls check with
// the way's name and the output.
// secretNeverPrinted runs cmd with each of urls, from each source, and
// checks that the output is one line on stderr that does not show secret.
func secretNeverPrinted(t *testing.T, cmd, secret string, urls ...string) {
	t.Helper()
	for _, u := range urls {
		eachURLSource(t, u, cmd, func(how, stdout, stderr string) {
			assertOneLine(t, stderr)
			if strings.Contains(stdout+stderr, secret) {
				t.Errorf("%s %q: output %q shows the password", how, u, stdout+stderr)
			}
		})
	}
}

func eachURLSource(t *testing.T, url, cmd string, check func(how, stdout, stderr string)) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "url")
	writeFile(t, file, url+"\n", 0o600)
	for _, how := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"--redis", nil, []string{"--redis", url, cmd}},
		{"LANES_REDIS_URL", map[string]string{"LANES_REDIS_URL": url}, []string{cmd}},
		{"--redis-url-file", nil, []string{"--redis-url-file", file, cmd}},
	} {
		_, stdout, stderr := runWithEnv(t, how.env, how.args...)
		check(how.name, stdout, stderr)
	}
}
