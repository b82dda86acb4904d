package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// defaultRedisURL is the server lanectl uses when neither --redis nor
// LANES_REDIS_URL names one.
const defaultRedisURL = "redis://127.0.0.1:6379"

// redacted stands for a password in anything lanectl prints.
const redacted = "xxxxx"

// redactURL returns raw with its password replaced by xxxxx, so it can be
// printed: the one of the user part and that of a password= query
// parameter (a Sentinel URL's master password). It works on URLs that do
// not parse too: a malformed URL is shown in an error message, and its
// password must not be.
func redactURL(raw string) string {
	if !strings.Contains(raw, "://") && raw != "" && !bareAddress(raw) {
		// Not a URL: perhaps a password put where the URL goes.
		return redacted
	}
	// Without "://", url.Parse reads "user:pw@host" as a scheme and an
	// opaque rest, and Redacted keeps the password.
	if u, err := url.Parse(raw); err == nil && strings.Contains(raw, "://") {
		return safeURL(u, raw)
	}
	if i, j, ok := passwordSpan(raw); ok {
		raw = raw[:i] + redacted + raw[j:]
	} else if i, j, ok := authority(raw); ok && badHost(raw[i:j]) {
		// "user:pw:port" that lost its "@host", with a password url.Parse
		// refuses in a host ("%", "^", a space)
		raw = raw[:i] + redacted + raw[j:]
	} else if i, j, ok := portSpan(raw); ok {
		// no "@": a password may stand where the port goes (redis://:pw)
		raw = raw[:i] + redacted + raw[j:]
	}
	if f := strings.Index(raw, "#"); f >= 0 {
		raw = raw[:f+1] + redacted // a fragment may be the rest of a password
	}
	if q := strings.Index(raw, "?"); q >= 0 {
		raw = raw[:q+1] + redactQuery(raw[q+1:])
	}
	return raw
}

// safeURL writes the parsed URL u (raw as given) with nothing that may be
// a secret: the password, a port or path that is no number, a fragment,
// a query parameter that is no option name, the value of a parameter
// named for a secret, an addr= that is no host:port. A raw URL with an
// "@" the parse did not read as the user part's end (a password holding
// "#", "?" or "/") is shown as its scheme alone.
func safeURL(u *url.URL, raw string) string {
	rest := raw[strings.Index(raw, "://")+3:]
	if strings.Contains(rest, "@") && (u.User == nil || strings.Contains(u.Fragment+u.RawQuery+u.Path, "@")) {
		return u.Scheme + "://" + redacted
	}
	var b strings.Builder
	b.WriteString(u.Scheme + "://")
	if u.User != nil {
		// A user part without ":" is where redis-cli and others read the
		// password (redis://PASSWORD@host): it is shown only with one.
		_, pw := u.User.Password()
		if n := u.User.Username(); pw && safeUser(n) {
			b.WriteString(n)
		} else {
			b.WriteString(redacted)
		}
		if pw {
			b.WriteString(":" + redacted)
		}
		b.WriteString("@")
	}
	if badHost(u.Host) {
		b.WriteString(redacted) // "user:pw:port" that lost its "@", maybe
	} else if p := u.Port(); p != "" && !validPort(p) && !portShown(u.Hostname(), p, u.User != nil) {
		b.WriteString(net.JoinHostPort(u.Hostname(), redacted)) // a password that lost its "@", maybe
	} else {
		b.WriteString(u.Host)
	}
	switch p := strings.TrimPrefix(u.Path, "/"); {
	case u.Path == "":
	case p == "" || strings.Trim(p, "0123456789") == "":
		b.WriteString(u.EscapedPath())
	default:
		b.WriteString("/" + redacted)
	}
	if u.RawQuery != "" || u.ForceQuery {
		b.WriteString("?" + redactQuery(u.RawQuery))
	}
	if u.Fragment != "" || strings.HasSuffix(raw, "#") {
		b.WriteString("#" + redacted)
	}
	return b.String()
}

// badHost reports whether a URL's host has a ":" outside brackets before
// its port: no host, but "user:pw:port" whose "@host" was forgotten.
func badHost(host string) bool {
	return !strings.HasPrefix(host, "[") && strings.Count(host, ":") > 1
}

// safeUser reports whether a URL's user name may be printed: printable
// ASCII without ":" (a decoded "a%3Apw" reads as a password), no control
// character to break the line.
func safeUser(n string) bool {
	for i := 0; i < len(n); i++ {
		if c := n[i]; c <= ' ' || c >= 127 || c == ':' {
			return false
		}
	}
	return true
}

// authority finds the part of raw between "scheme://" and the first "/",
// "?" or "#" after it.
func authority(raw string) (i, j int, ok bool) {
	k := strings.Index(raw, "://")
	if k < 0 {
		return 0, 0, false
	}
	i = k + 3
	j = len(raw)
	if e := strings.IndexAny(raw[i:], "/?#"); e >= 0 {
		j = i + e
	}
	return i, j, true
}

// portSpan finds, in a URL without a user part, a "port" that is no port
// number, the place a password lands when "user:pw@" lost its "@host":
// redis://:hunter2.
func portSpan(raw string) (i, j int, ok bool) {
	k := strings.Index(raw, "://")
	if k < 0 {
		return 0, 0, false
	}
	auth := raw[k+3:]
	if e := strings.IndexAny(auth, "/?#"); e >= 0 {
		auth = auth[:e]
	}
	c := strings.LastIndex(auth, ":")
	if c < 0 || strings.Contains(auth, "@") || validPort(auth[c+1:]) || !strings.ContainsFunc(auth[c+1:], isAlnumRune) ||
		portShown(auth[:c], auth[c+1:], false) {
		return 0, 0, false
	}
	return k + 3 + c + 1, k + 3 + len(auth), true
}

// redactQuery returns the query q with every pair that may hold a secret
// replaced: a name that is no option name (letters and "_") becomes
// xxxxx whole; the value of a name holding "pass", "secret", "token" or
// "auth" (any case), and an addr= that is no host:port, become xxxxx;
// the rest stays as written. Pairs split at "&" and ";" (Go drops a ";"
// pair, but it is printed all the same).
func redactQuery(q string) string {
	var b strings.Builder
	for len(q) > 0 {
		i := strings.IndexAny(q, "&;")
		p, sep := q, ""
		if i >= 0 {
			p, sep, q = q[:i], q[i:i+1], q[i+1:]
		} else {
			q = ""
		}
		k, v, ok := strings.Cut(p, "=")
		switch {
		case !optionName.MatchString(queryKey(k)):
			p = redacted
		case ok && secretKey(k):
			p = k + "=" + redacted
		case ok && strings.EqualFold(queryKey(k), "addr") && !hostPort(queryKey(v)):
			p = k + "=" + redacted
		}
		b.WriteString(p + sep)
	}
	return b.String()
}

// optionName matches the name of a go-redis URL option, or a word like it.
var optionName = regexp.MustCompile(`^[A-Za-z_]{1,40}$`)

// hostPort reports whether v is host:port with a port number (or one
// mistyped, portShown) and no user part: an addr= that holds no secret.
func hostPort(v string) bool {
	h, p, err := net.SplitHostPort(v)
	port := err == nil && (validPort(p) || portShown(h, p, false))
	return port && h != "" && !strings.ContainsAny(h, "@:/?#%") || port && net.ParseIP(h) != nil
}

// portShown reports whether the port of host:port, a port that is no port
// number, may be printed all the same: whether it cannot be a password put
// where the port goes, by a user part that lost its "@host"
// (redis://user:pw, redis://:pw) or by mistake (redis://host:pw). It can
// not after a user part (userInfo: the "@" is there, and the password
// before it), nor, after a host, when it is a number of at most five digits:
// a port mistyped (0, 99999, 65536), which the error then names. Anything
// else, letters above all, stays hidden.
func portShown(host, port string, userInfo bool) bool {
	if port == "" || len(port) > 40 {
		return false
	}
	if userInfo {
		return safeUser(port)
	}
	return host != "" && len(port) <= 5 && strings.Trim(port, "0123456789") == ""
}

// secretKey reports whether a query parameter named k may hold a password.
func secretKey(k string) bool {
	k = strings.ToLower(queryKey(k))
	for _, w := range []string{"pass", "secret", "token", "auth"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// isAlnumRune reports whether r is a letter or digit, or not ASCII.
func isAlnumRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r >= 128
}

// validPort reports whether p is a port number, 1 to 65535.
func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n >= 1 && n <= 65535 && !strings.HasPrefix(p, "+")
}

// queryKey returns a query parameter's name as go-redis reads it.
func queryKey(k string) string {
	if u, err := url.QueryUnescape(k); err == nil {
		return u
	}
	return k
}

// passwordSpan finds the password of a URL by hand, for one that does not
// parse: it lies between the first ":" of the userinfo and the last "@"
// after "scheme://".
func passwordSpan(raw string) (i, j int, ok bool) {
	start := 0
	if k := strings.Index(raw, "://"); k >= 0 {
		start = k + 3
	}
	at := strings.LastIndex(raw[start:], "@")
	if at < 0 {
		return 0, 0, false
	}
	colon := strings.Index(raw[start:start+at], ":")
	if colon < 0 {
		return 0, 0, false
	}
	return start + colon + 1, start + at, true
}

// redactSecret returns msg with the password of rawURL, as written and as
// decoded, replaced by xxxxx: a last guard on what lanectl prints, whatever
// a library put in an error.
func redactSecret(msg, rawURL string) string {
	var secrets []string
	if u, err := url.Parse(rawURL); err == nil {
		if p, ok := u.User.Password(); ok {
			secrets = append(secrets, p, url.QueryEscape(p), url.PathEscape(p))
		}
		for _, p := range strings.FieldsFunc(u.RawQuery, func(r rune) bool { return r == '&' || r == ';' }) {
			k, v, ok := strings.Cut(p, "=")
			switch {
			case ok && secretKey(k):
				secrets = append(secrets, v, queryKey(v))
			case ok && strings.EqualFold(queryKey(k), "addr") && !hostPort(queryKey(v)):
				// a seed with a user part (PASSWORD@host:port): dial errors
				// quote its host, and a part of it may be printed alone
				a := queryKey(v)
				secrets = append(secrets, v, a)
				if h, _, err := net.SplitHostPort(a); err == nil {
					secrets = append(secrets, h)
				}
				if i := strings.LastIndexAny(a, "@/"); i > 0 {
					secrets = append(secrets, a[:i])
				}
			}
		}
		if badHost(u.Host) {
			// "user:pw:port" with no "@": dial errors quote the "host"
			secrets = append(secrets, u.Host, u.Hostname())
		}
		if _, pw := u.User.Password(); u.User != nil && !pw {
			n := u.User.Username() // a password, maybe (redis://PASSWORD@host)
			secrets = append(secrets, n, url.PathEscape(n), url.QueryEscape(n))
		} else if n := u.User.Username(); n != "" && !safeUser(n) {
			secrets = append(secrets, n, url.PathEscape(n), url.QueryEscape(n))
		}
	} else if i, j, ok := passwordSpan(rawURL); ok {
		secrets = append(secrets, rawURL[i:j])
	}
	for _, s := range secrets {
		if s != "" {
			msg = replaceSecret(msg, s)
		}
	}
	return msg
}

// replaceSecret replaces s in msg by xxxxx where it stands alone: not
// inside a longer word (a password "a" leaves "bad" be), nor as a URL's
// scheme (a password "redis" leaves "redis://" be).
func replaceSecret(msg, s string) string {
	var b strings.Builder
	for {
		i := strings.Index(msg, s)
		if i < 0 {
			b.WriteString(msg)
			return b.String()
		}
		b.WriteString(msg[:i])
		after := msg[i+len(s):]
		inWord := i > 0 && isAlnumRune(rune(msg[i-1])) || after != "" && isAlnumRune(rune(after[0]))
		if inWord || strings.HasPrefix(after, "://") {
			b.WriteString(s) // part of a longer word, or a scheme
		} else {
			b.WriteString(redacted)
		}
		msg = after
	}
}

// parseRedisURL parses a --redis URL with redis.ParseURL: redis:// or
// rediss:// (TLS), with user and password, a database number and go-redis's
// query options. Its error is a usageError that shows the URL redacted.
func parseRedisURL(raw string) (*redis.Options, error) {
	return parseRedisURLFrom(raw, fmt.Sprintf("--redis URL %q", redactURL(raw)))
}

// parseRedisURLFrom is parseRedisURL with the error naming the URL as
// what: a URL read from a file is not quoted (the file may hold a bare
// password by mistake), only the file is named.
func parseRedisURLFrom(raw, what string) (*redis.Options, error) {
	opt, err := redis.ParseURL(raw)
	if err != nil {
		return nil, badURL(err, raw, what)
	}
	if err := checkPort(opt.Addr, what, hiddenPort(raw) == ""); err != nil {
		return nil, err
	}
	if opt.DB < 0 {
		return nil, usageErrorf("bad %s: database %d is negative", what, opt.DB)
	}
	return opt, nil
}

// badURL is the usageError of a URL that go-redis refused, with the
// reason only: url.Parse's errors quote the whole URL, password and all.
func badURL(err error, raw, what string) error {
	if raw == "" {
		return usageErrorf("bad %s: it is empty", what)
	}
	if !strings.Contains(raw, "://") {
		// go-redis and net/url quote parts of it, which may be a password
		return usageErrorf("bad %s: not a redis:// or rediss:// URL%s", what, schemeHint(raw))
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		// net/url quotes the part it stumbled on (a password read as a
		// port, say): the reason is told without it
		err = errors.New(quoted.ReplaceAllString(ue.Err.Error(), ""))
		if strings.HasPrefix(err.Error(), "invalid port") {
			err = errors.New("its port is not a number from 1 to 65535" + hiddenPort(raw))
		}
	}
	reason := safeReason(redactSecret(err.Error(), raw))
	if reason == "invalid database number" {
		// the path is not shown: it may be the rest of a password holding "/"
		reason += " (the path after the host must be a database number, such as /0; shown as " + redacted + ", since it may hold part of a password)"
	}
	return usageErrorf("bad %s: %s%s", what, strings.TrimSuffix(strings.TrimSpace(reason), ":"), schemeHint(raw))
}

// safeReason is go-redis's reason for refusing a URL without the part of
// the URL it quotes after ": " (an option's value, a database "number"),
// which may be a secret; an option's name stays.
func safeReason(reason string) string {
	r := strings.TrimPrefix(strings.TrimPrefix(reason, "redis: "), "net/url: ")
	head, rest, ok := strings.Cut(r, ": ")
	if !ok || optionName.MatchString(rest) {
		return r
	}
	return head
}

// quoted matches a Go-quoted string and the space before it.
var quoted = regexp.MustCompile(` ?"(?:[^"\\]|\\.)*"`)

// checkPort refuses an address whose port is not 1 to 65535. It names the
// address when its port may be shown (portShown: a number mistyped, or
// shown, the URL's own host's after a user part), and says why it hides
// it otherwise: it may be a password.
func checkPort(addr, what string, shown bool) error {
	if host, port, err := net.SplitHostPort(addr); err == nil && !validPort(port) {
		if (shown || portShown(host, port, false)) && plainText(addr) {
			return usageErrorf("bad %s: the port of %s is not a number from 1 to 65535", what, addr)
		}
		return usageErrorf("bad %s: a port is not a number from 1 to 65535%s", what, hiddenNote)
	}
	return nil
}

// hiddenNote says why a port that is no port number is not shown.
const hiddenNote = " (it is not shown, as it may be a password)"

// hiddenPort returns hiddenNote if redactURL hides the port of the URL
// raw, "" if it shows it.
func hiddenPort(raw string) string {
	shown := redactURL(raw)
	if i, j, ok := authority(shown); ok && strings.HasSuffix(shown[i:j], ":"+redacted) {
		return hiddenNote
	}
	return ""
}

// plainText reports whether s holds no space and no control character:
// a part of a URL that may be quoted in a message of one line.
func plainText(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 127 || r == utf8.RuneError })
}

// redisTarget is what a Redis URL names, in the forms go-redis parses:
// one server (redis.ParseURL), a Redis Cluster through seed nodes
// (redis.ParseClusterURL: addr= query parameters), or the master that
// Sentinels name (redis.ParseFailoverURL: master_name=). Exactly one of
// its options is set.
type redisTarget struct {
	single   *redis.Options
	cluster  *redis.ClusterOptions
	failover *redis.FailoverOptions

	raw, what string // the URL and how errors name it
}

// parseRedisTarget parses a Redis URL of any form: master_name= makes it a
// Sentinel URL (the host and any addr= are Sentinels; the user and
// password of the URL are the Sentinels', those of the master come from
// username= and password=), addr= without master_name= a Cluster URL (the
// host and every addr= are seed nodes), anything else one server's.
func parseRedisTarget(raw, what string) (*redisTarget, error) {
	t := &redisTarget{raw: raw, what: what}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
		// unix://, or a mistake whose error parseRedisURLFrom words.
		if t.single, err = parseRedisURLFrom(raw, what); err != nil {
			return nil, err
		}
		return t, nil
	}
	switch q := u.Query(); {
	case q.Has("master_name"):
		opt, err := redis.ParseFailoverURL(raw)
		if err != nil {
			return nil, badURL(err, raw, what)
		}
		if opt.MasterName == "" {
			return nil, usageErrorf("bad %s: master_name is empty; it names the master the Sentinels watch", what)
		}
		if opt.DB < 0 {
			return nil, usageErrorf("bad %s: database %d is negative", what, opt.DB)
		}
		for _, a := range opt.SentinelAddrs {
			if err := checkPort(a, what, false); err != nil {
				return nil, err
			}
		}
		t.failover = opt
	case q.Has("addr"):
		return t.asCluster(u)
	default:
		t.single, err = parseRedisURLFrom(raw, what)
		if err != nil {
			return nil, err
		}
	}
	return t, nil
}

// asCluster makes t a Cluster target: seed nodes, database 0 only.
func (t *redisTarget) asCluster(u *url.URL) (*redisTarget, error) {
	opt, err := redis.ParseClusterURL(t.raw)
	if err != nil {
		return nil, badURL(err, t.raw, t.what)
	}
	if db := strings.Trim(u.Path, "/"); db != "" && db != "0" {
		return nil, usageErrorf("bad %s: database %q: a Redis Cluster has only database 0", t.what, db)
	}
	for _, a := range opt.Addrs {
		if err := checkPort(a, t.what, false); err != nil {
			return nil, err
		}
	}
	t.single, t.cluster = nil, opt
	opt.ContextTimeoutEnabled = true // see honourContexts
	return t, nil
}

// seedOf returns the Cluster target whose seed is t's one server: the
// same URL read by redis.ParseClusterURL, for a server that says it is a
// cluster node (cluster_enabled:1). The CAs of t are kept.
func (t *redisTarget) seedOf() (*redisTarget, error) {
	u, err := url.Parse(t.raw)
	if err != nil {
		return nil, badURL(err, t.raw, t.what)
	}
	c, err := (&redisTarget{raw: t.raw, what: t.what}).asCluster(u)
	if err != nil {
		return nil, usageErrorf("%s names a Redis Cluster node (cluster_enabled:1), used as a seed: %s", redactURL(t.raw), strings.TrimPrefix(err.Error(), "bad "+t.what+": "))
	}
	if tls := t.tlsConfig(); tls != nil && c.cluster.TLSConfig != nil {
		c.cluster.TLSConfig.RootCAs = tls.RootCAs
	}
	return c, nil
}

// tlsConfig returns the TLS configuration of t, nil without TLS.
func (t *redisTarget) tlsConfig() *tls.Config {
	switch {
	case t.cluster != nil:
		return t.cluster.TLSConfig
	case t.failover != nil:
		return t.failover.TLSConfig
	default:
		return t.single.TLSConfig
	}
}

// schemeHint suggests the URL a bare address meant (see bareAddress):
// "; did you mean redis://127.0.0.1:6379?" for 127.0.0.1:6379, and "; did
// you mean redis://localhost:6379?" for localhost (Redis's default port).
// It says nothing for anything else: a bare word, or word:digits, may be a
// password put where the URL goes, and lanectl never prints one.
func schemeHint(raw string) string {
	if strings.Contains(raw, "://") || !bareAddress(raw) {
		return ""
	}
	if _, _, err := net.SplitHostPort(raw); err != nil {
		return "; did you mean redis://" + raw + ":6379?"
	}
	return "; did you mean redis://" + raw + "?"
}

// bareAddress reports whether raw is "localhost" or an IP address, alone
// or with a port: an address given without its redis://, and no secret.
func bareAddress(raw string) bool {
	host := raw
	if h, port, err := net.SplitHostPort(raw); err == nil {
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return false
		}
		host = h
	} else if strings.Contains(raw, ":") {
		return false // an IPv6 address takes its port in brackets
	}
	return host == "localhost" || net.ParseIP(host) != nil
}

// maxURLFile bounds what lanectl reads of a --redis-url-file.
const maxURLFile = 64 << 10

// readURLFile returns the Redis URL held by the file at path, trimmed of
// surrounding space. from names the flag or variable that named the file.
// Its errors are usageErrors that never show the file's content.
func readURLFile(path, from string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", usageErrorf("cannot read the Redis URL from %s %s: %v", from, path, pathReason(err))
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxURLFile+1))
	if err != nil {
		return "", usageErrorf("cannot read the Redis URL from %s %s: %v", from, path, pathReason(err))
	}
	if len(b) > maxURLFile {
		return "", usageErrorf("%s %s is larger than %d KiB; it must hold only the Redis URL", from, path, maxURLFile>>10)
	}
	raw := strings.TrimSpace(string(b))
	switch {
	case raw == "":
		return "", usageErrorf("%s %s is empty; it must hold the Redis URL", from, path)
	case strings.ContainsAny(raw, "\r\n"):
		return "", usageErrorf("%s %s holds more than one line; it must hold only the Redis URL", from, path)
	}
	return raw, nil
}

// loadCAs returns the pool of the PEM certificates in the file at path.
func loadCAs(path, from string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usageErrorf("cannot read the CA certificates of %s %s: %v", from, path, pathReason(err))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, usageErrorf("%s %s holds no PEM certificate", from, path)
	}
	return pool, nil
}

// pathReason returns the reason of a file error without the path, which
// the caller's message names once.
func pathReason(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// redisTarget returns what the global flags name: the URL of --redis, or
// the one read from --redis-url-file, with the CAs of --redis-ca-file
// trusted for TLS, whichever its form.
func (g *globalOptions) redisTarget() (*redisTarget, error) {
	shown := fmt.Sprintf("%q", redactURL(g.redisURL))
	if redactURL(g.redisURL) == redacted {
		shown = "(not shown: it may be a password)"
	}
	what := "--redis URL " + shown
	if g.urlFromEnv {
		what = "Redis URL " + shown + " in LANES_REDIS_URL"
	}
	if g.urlFile != "" {
		raw, err := readURLFile(g.urlFile, g.urlFileFrom)
		if err != nil {
			return nil, err
		}
		g.redisURL = raw // from now on, its password is redacted from errors
		what = fmt.Sprintf("Redis URL in %s %s", g.urlFileFrom, g.urlFile)
	}
	t, err := parseRedisTarget(g.redisURL, what)
	if err != nil {
		return nil, err
	}
	if g.caFile != "" {
		tc := t.tlsConfig()
		if tc == nil {
			if g.caFileFrom != "--redis-ca-file" {
				return t, nil // a variable set for other servers: not for this one
			}
			return nil, usageErrorf("--redis-ca-file is for TLS servers, and %s is not one (rediss:// is)", redactURL(g.redisURL))
		}
		pool, err := loadCAs(g.caFile, g.caFileFrom)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	return t, nil
}
