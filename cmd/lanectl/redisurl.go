package main

import (
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// defaultRedisURL is the server lanectl uses when neither --redis nor
// LANES_REDIS_URL names one.
const defaultRedisURL = "redis://127.0.0.1:6379"

// redacted stands for a password in anything lanectl prints.
const redacted = "xxxxx"

// redactURL returns raw with its password replaced by xxxxx, so it can be
// printed. It works on URLs that do not parse too: a malformed URL is shown
// in an error message, and its password must not be.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	if i, j, ok := passwordSpan(raw); ok {
		return raw[:i] + redacted + raw[j:]
	}
	return raw
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
	} else if i, j, ok := passwordSpan(rawURL); ok {
		secrets = append(secrets, rawURL[i:j])
	}
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, redacted)
		}
	}
	return msg
}

// parseRedisURL parses a --redis URL with redis.ParseURL: redis:// or
// rediss:// (TLS), with user and password, a database number and go-redis's
// query options. Its error is a usageError that shows the URL redacted.
func parseRedisURL(raw string) (*redis.Options, error) {
	opt, err := redis.ParseURL(raw)
	if err != nil {
		// url.Parse's errors quote the whole URL, password and all: keep
		// only the reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, usageErrorf("bad --redis URL %q: %s", redactURL(raw), strings.TrimSuffix(redactSecret(err.Error(), raw), ":"))
	}
	if _, port, err := net.SplitHostPort(opt.Addr); err == nil {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, usageErrorf("bad --redis URL %q: port %q is not 1 to 65535", redactURL(raw), port)
		}
	}
	if opt.DB < 0 {
		return nil, usageErrorf("bad --redis URL %q: database %d is negative", redactURL(raw), opt.DB)
	}
	return opt, nil
}
