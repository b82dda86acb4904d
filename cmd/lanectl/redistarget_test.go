package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/lanes"
)

// The URL forms of --redis, parsed without a server: one server, a
// Cluster's seeds (addr=), a Sentinel's master (master_name=).
func TestParseRedisTarget(t *testing.T) {
	tests := []struct {
		url  string
		want string // kind and what matters of its options
	}{
		{"redis://h:1", "single h:1 db=0 tls=false"},
		{"rediss://u:pw@h:1/2", "single h:1 db=2 tls=true user=u"},
		{"unix:///tmp/redis.sock", "single /tmp/redis.sock db=0 tls=false"},
		{"redis://u:pw@h:1?addr=h:2&addr=h:3", "cluster [h:1 h:2 h:3] tls=false user=u"},
		{"rediss://h:1/0?addr=h:2&dial_timeout=2s", "cluster [h:1 h:2] tls=true user="},
		{"redis://s:26379?master_name=m&addr=s2:26379&password=mpw", "sentinel m [s:26379 s2:26379] db=0 tls=false master-password=true"},
		{"rediss://s:26379/2?master_name=m", "sentinel m [s:26379] db=2 tls=true master-password=false"},
	}
	for _, tt := range tests {
		tg, err := parseRedisTarget(tt.url, "--redis URL")
		if err != nil {
			t.Errorf("parseRedisTarget(%q) = %v", tt.url, err)
			continue
		}
		var got string
		switch {
		case tg.single != nil:
			got = fmt.Sprintf("single %s db=%d tls=%v", tg.single.Addr, tg.single.DB, tg.single.TLSConfig != nil)
			if tg.single.Username != "" {
				got += " user=" + tg.single.Username
			}
		case tg.cluster != nil:
			got = fmt.Sprintf("cluster %v tls=%v user=%s", tg.cluster.Addrs, tg.cluster.TLSConfig != nil, tg.cluster.Username)
		case tg.failover != nil:
			got = fmt.Sprintf("sentinel %s %v db=%d tls=%v master-password=%v", tg.failover.MasterName, tg.failover.SentinelAddrs,
				tg.failover.DB, tg.failover.TLSConfig != nil, tg.failover.Password != "")
		}
		if got != tt.want {
			t.Errorf("parseRedisTarget(%q) = %s; want %s", tt.url, got, tt.want)
		}
	}
}

// Each malformed URL of the three forms exits 64 in one line that names
// what is wrong and shows no password, neither the user part's nor a
// password= parameter's. No server is contacted.
func TestBadRedisURLs(t *testing.T) {
	tests := []struct{ url, want string }{
		{"redis://h:1?master_name=", "master_name is empty"},
		{"redis://h:1?master_name=m&bogus=1&password=s3cret", "unexpected option: bogus"},
		{"redis://h:1?master_name=m&addr=nonsense", "addr param"},
		{"redis://h:1?master_name=m&addr=h:99999", "the port of h:99999 is not a number from 1 to 65535"},
		{"redis://u:s3cret@h:1/x?master_name=m", "invalid database number"},
		{"redis://u:s3cret@h:1?addr=nonsense", "addr param"},
		{"redis://h:1?addr=h:0", "the port of h:0 is not a number from 1 to 65535"},
		{"redis://h:1/3?addr=h:2", "only database 0"},
		{"redis://u:s3cret@h:1?addr=h:2&db=3", "unexpected option: db"},
		{"http://h:1?addr=h:2", "scheme"},
		{"redis://u:s3cret@h:1?addr=h:2&password=s3cret", "unexpected option: password"},
	}
	for _, tt := range tests {
		code, out, stderr := runInProcess(t, "--redis", tt.url, "--namespace", "x", "status")
		if code != exitUsage || out != "" || !strings.Contains(stderr, tt.want) {
			t.Errorf("--redis %q = %d, %q, %q; want %d and %q", tt.url, code, out, stderr, exitUsage, tt.want)
		}
		if strings.Contains(stderr, "s3cret") {
			t.Errorf("--redis %q: stderr %q shows the password", tt.url, stderr)
		}
		assertOneLine(t, stderr)
	}
}

func TestRedactURLQueryPassword(t *testing.T) {
	tests := []struct{ in, want string }{
		{"redis://u:a@h:1?master_name=m&password=s3cret", "redis://u:xxxxx@h:1?master_name=m&password=xxxxx"},
		{"redis://h:1?pass%77ord=s3cret&master_name=m", "redis://h:1?pass%77ord=xxxxx&master_name=m"},
		{"redis://h:[?master_name=m&password=s3cret", "redis://h:[?master_name=m&password=xxxxx"}, // does not parse
		{"redis://h:1?addr=h:2", "redis://h:1?addr=h:2"},
	}
	for _, tt := range tests {
		if got := redactURL(tt.in); got != tt.want {
			t.Errorf("redactURL(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
	if got := redactSecret("auth failed: s3cret", "redis://h:1?master_name=m&password=s3cret"); got != "auth failed: xxxxx" {
		t.Errorf("redactSecret() = %q; want the password= parameter redacted", got)
	}
}

// writeCA writes a self-signed CA certificate, PEM, and returns its path.
func writeCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lanes test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.pem")
	writeFile(t, path, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), 0o600)
	return path
}

// --redis-ca-file is trusted for every form of rediss:// URL, and for the
// cluster a one-server URL turns into (its node says cluster_enabled:1).
func TestRedisCAFileEveryForm(t *testing.T) {
	ca := writeCA(t)
	for _, url := range []string{"rediss://h:1", "rediss://h:1?addr=h:2", "rediss://s:26379?master_name=m"} {
		g := &globalOptions{redisURL: url, caFile: ca, caFileFrom: "--redis-ca-file", getenv: noEnv}
		tg, err := g.redisTarget()
		if err != nil {
			t.Fatalf("redisTarget(%q) = %v", url, err)
		}
		if tc := tg.tlsConfig(); tc == nil || tc.RootCAs == nil {
			t.Errorf("redisTarget(%q): TLS %+v; want the CA file's pool", url, tc)
		}
		if tg.single != nil {
			seed, err := tg.seedOf()
			if err != nil || seed.cluster == nil || seed.cluster.TLSConfig.RootCAs != tg.single.TLSConfig.RootCAs {
				t.Errorf("seedOf(%q) = %+v, %v; want a cluster target with the CA file's pool", url, seed, err)
			}
		}
	}
}

// A one-server URL that names a cluster node becomes a seed, unless it
// names a database other than 0: a usage error.
func TestSeedOfRefusesDatabase(t *testing.T) {
	tg, err := parseRedisTarget("redis://u:s3cret@h:1/3", "--redis URL")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tg.seedOf()
	if exitCode(err) != exitUsage || !strings.Contains(err.Error(), "only database 0") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("seedOf(database 3) = %v; want a usage error naming database 0, without the password", err)
	}
}

// replyError is an error reply of Redis, as go-redis returns it.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

var _ redis.Error = replyError("")

// MOVED, ASK and CROSSSLOT, however wrapped, are configuration errors (78)
// that say what the cluster answered and what to do, never "cannot reach".
func TestMisroutedIsConfig(t *testing.T) {
	for _, reply := range []string{"MOVED 3999 127.0.0.1:7001", "ASK 3999 127.0.0.1:7001", "CROSSSLOT Keys in request don't hash to the same slot"} {
		err := &unreachableError{url: "redis://h:1", err: fmt.Errorf("%w: redis namespace ns: %w", lanes.ErrUnavailable, replyError(reply))}
		msg := errorLine(err, "")
		if exitCode(err) != exitConfig || !strings.Contains(msg, reply) || strings.Contains(msg, "cannot reach") {
			t.Errorf("%s: exit %d, %q; want %d, the reply, not \"cannot reach\"", reply, exitCode(err), msg, exitConfig)
		}
	}
	for _, err := range []error{replyError("ERR something"), replyError("MOVEDX"), fmt.Errorf("MOVED 1 h:1")} {
		if misrouted(err) != "" {
			t.Errorf("misrouted(%v) = %q; want \"\"", err, misrouted(err))
		}
	}
	if !slices.Contains([]int{exitConfig}, exitCode(&configError{"x"})) {
		t.Errorf("exitCode(configError) = %d; want %d", exitCode(&configError{"x"}), exitConfig)
	}
}
