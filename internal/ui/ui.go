// Package ui is the web view of `lanectl ui`: a page that shows every key of
// some namespaces with its holders and waiters, kept up to date by
// server-sent events, and a timeline of the grants and waits of one key.
//
// A Server looks at each namespace every Interval (one Inspect) and keeps
// what it saw: the last snapshot, for the page and GET /api/state, and a
// bounded history of spans, for GET /api/timeline. The history is the
// UI's own observation, not a record the lanes keep: it starts when the
// Server starts, and an entry granted and released between two looks is
// never seen. Its assets are embedded: no network and no build step.
//
// The routes: GET / (the page), /assets/, /api/state and /api/events (the
// Frame as JSON, and as a stream of "state" events), /api/timeline, GET and
// POST /api/release (a force release's preview, and the release, only with
// a Releaser), POST /api/login (trades the token for a cookie).
package ui

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// Inspector is what the UI needs of a namespace's lanes; a lanes.Backend is
// one.
type Inspector interface {
	Inspect(ctx context.Context, keys []string) (*lanes.Snapshot, error)
}

// Source is one namespace to watch.
type Source struct {
	Namespace string
	Lanes     Inspector
}

// Config configures a Server. Sources is required; every other field has a
// default.
type Config struct {
	Sources []Source
	// Interval is the time between two looks at a namespace (default
	// 250ms, at least 10ms). A hold shorter than it may be missed.
	Interval time.Duration
	// LookTimeout bounds one look (default 5s).
	LookTimeout time.Duration
	// History is how long the timeline keeps an entry after it left
	// (default 15m); MaxSpans bounds the spans kept per namespace (default
	// 10000), oldest dropped first.
	History  time.Duration
	MaxSpans int
	// Token, when set, is required of every request for data: as
	// "Authorization: Bearer TOKEN", or as the cookie POST /api/login sets.
	// When empty, only requests for a loopback host name are served.
	Token string
	// Releaser, when set, lets the page release entries by force.
	Releaser Releaser
	// ErrorText turns a failed look's error into the one line the page
	// shows (it should leave secrets out); default err.Error().
	ErrorText func(error) string
}

// Server serves the UI. Run looks at the namespaces; ServeHTTP serves
// requests, from the looks' results.
type Server struct {
	cfg       Config
	names     []string
	watchers  []*watcher
	tokenHash [32]byte
	session   string // the cookie's value: a MAC of the token
	mux       *http.ServeMux

	mu      sync.Mutex
	version uint64        // bumped when a namespace's view changes
	changed chan struct{} // closed and replaced at each bump
	done    chan struct{} // closed when Run returns
	running bool
}

// The defaults of Config.
const (
	DefaultInterval    = 250 * time.Millisecond
	MinInterval        = 10 * time.Millisecond
	DefaultLookTimeout = 5 * time.Second
	DefaultHistory     = 15 * time.Minute
	DefaultMaxSpans    = 10000
)

//go:embed assets
var assets embed.FS

// New returns a Server for cfg. It fails on a Config without sources, with
// a namespace named twice, or with an interval under MinInterval.
func New(cfg Config) (*Server, error) {
	if len(cfg.Sources) == 0 {
		return nil, errors.New("ui: no namespace to watch")
	}
	cfg.Interval = cmpOr(cfg.Interval, DefaultInterval)
	cfg.LookTimeout = cmpOr(cfg.LookTimeout, DefaultLookTimeout)
	cfg.History = cmpOr(cfg.History, DefaultHistory)
	cfg.MaxSpans = cmpOr(cfg.MaxSpans, DefaultMaxSpans)
	if cfg.ErrorText == nil {
		cfg.ErrorText = func(err error) string { return err.Error() }
	}
	switch {
	case cfg.Interval < MinInterval:
		return nil, fmt.Errorf("ui: interval %v is under %v", cfg.Interval, MinInterval)
	case cfg.History < 0 || cfg.MaxSpans < 0:
		return nil, errors.New("ui: history and max spans must not be negative")
	}
	s := &Server{cfg: cfg, changed: make(chan struct{}), done: make(chan struct{}), mux: http.NewServeMux()}
	for _, src := range cfg.Sources {
		if err := lanes.ValidateNamespace(src.Namespace); err != nil {
			return nil, err
		}
		for _, n := range s.names {
			if n == src.Namespace {
				return nil, fmt.Errorf("ui: namespace %q named twice", n)
			}
		}
		s.names = append(s.names, src.Namespace)
		s.watchers = append(s.watchers, newWatcher(src, s))
	}
	if cfg.Token != "" {
		s.tokenHash = sha256.Sum256([]byte(cfg.Token))
		mac := hmac.New(sha256.New, []byte(cfg.Token))
		mac.Write([]byte("lanectl ui session"))
		s.session = hex.EncodeToString(mac.Sum(nil))
	}
	s.routes()
	return s, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Namespaces returns the namespaces the Server watches, in the order given.
func (s *Server) Namespaces() []string { return append([]string(nil), s.names...) }

// Run looks at every namespace every Interval until ctx ends, then ends
// the event streams and returns nil. The first look at each namespace is
// done before the server has anything to show, so a request served before
// it sees an empty namespace marked as not looked at yet.
func (s *Server) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return errors.New("ui: Run called twice")
	}
	s.running = true
	s.mu.Unlock()
	defer close(s.done)
	var wg sync.WaitGroup
	for _, w := range s.watchers {
		wg.Go(func() { w.run(ctx) })
	}
	wg.Wait()
	return nil
}

// bump tells the event streams that a view changed.
func (s *Server) bump() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.version++
	close(s.changed)
	s.changed = make(chan struct{})
}

// current returns the version of the views and a channel closed when it
// changes.
func (s *Server) current() (uint64, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version, s.changed
}

// frame returns the views of the namespaces f selects.
func (s *Server) frame(f Filter) Frame {
	now := time.Now()
	views := make([]NamespaceView, 0, len(s.watchers))
	for _, w := range s.watchers {
		views = append(views, w.view(now))
	}
	return Frame{
		Time: jsonTime(now), IntervalMS: s.cfg.Interval.Milliseconds(),
		AllowRelease: s.cfg.Releaser != nil, Namespaces: f.apply(views),
	}
}

// watcher returns the watcher of namespace ns, or nil.
func (s *Server) watcher(ns string) *watcher {
	for _, w := range s.watchers {
		if w.src.Namespace == ns {
			return w
		}
	}
	return nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	if s.cfg.Token == "" && !loopbackHost(r.Host) {
		// Without a token, only a loopback name: a page of another site
		// that resolves its own name to 127.0.0.1 (DNS rebinding) gets
		// nothing.
		writeError(w, http.StatusForbidden, "lanectl ui answers only requests for localhost or a loopback address without --token; open it as http://127.0.0.1:PORT/")
		return
	}
	s.mux.ServeHTTP(w, r)
}

func (s *Server) routes() {
	static, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(static)
	s.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, static, "index.html")
	})
	s.mux.Handle("GET /assets/", http.StripPrefix("/assets/", noDirs(files)))
	s.mux.HandleFunc("POST /api/login", s.login)
	s.mux.HandleFunc("GET /api/state", s.authed(s.state))
	s.mux.HandleFunc("GET /api/events", s.authed(s.events))
	s.mux.HandleFunc("GET /api/timeline", s.authed(s.timeline))
	s.mux.HandleFunc("GET /api/release", s.authed(s.releasePreview))
	s.mux.HandleFunc("POST /api/release", s.authed(s.release))
	s.mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no %s %s here", r.Method, r.URL.Path))
	})
}

// noDirs serves files only: a directory listing is refused.
func noDirs(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "" || strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// cookieName names the cookie that carries a session after POST /api/login.
const cookieName = "lanes_ui_session"

// authed serves h to requests that carry the token, when there is one.
func (s *Server) authed(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Token != "" && !s.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="lanectl ui"`)
			writeError(w, http.StatusUnauthorized, "this lanectl ui needs its token: give it on the page, or as Authorization: Bearer TOKEN")
			return
		}
		h(w, r)
	}
}

// authorized reports whether r carries the token or a session cookie,
// compared in constant time.
func (s *Server) authorized(r *http.Request) bool {
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return s.tokenMatches(tok)
	}
	if c, err := r.Cookie(cookieName); err == nil {
		return subtle.ConstantTimeCompare([]byte(c.Value), []byte(s.session)) == 1
	}
	return false
}

// tokenMatches compares tok with the token in constant time (their hashes,
// so that the length does not show either).
func (s *Server) tokenMatches(tok string) bool {
	h := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(h[:], s.tokenHash[:]) == 1
}

// login trades the token, posted as JSON {"token": ...}, for a session
// cookie (HttpOnly, SameSite=Strict), so that the page's event stream is
// authorized too.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if !fromPage(w, r) {
		return
	}
	if s.cfg.Token == "" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	var body struct {
		Token string `json:"token"`
	}
	if err := decodeJSON(r, &body); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !s.tokenMatches(body.Token) {
		writeError(w, http.StatusUnauthorized, "wrong token")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: s.session, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	w.WriteHeader(http.StatusNoContent)
}

// fromPage refuses (and answers) a state-changing request that does not
// come from the page: it must carry the X-Lanes-UI header, which a form or
// a page of another origin cannot send without a preflight this server
// never grants, and JSON.
func fromPage(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case r.Header.Get("X-Lanes-UI") != "1":
		writeError(w, http.StatusForbidden, "send the header X-Lanes-UI: 1 (and a JSON body)")
		return false
	case !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json"):
		writeError(w, http.StatusForbidden, "send the body as JSON, with the header Content-Type: application/json")
		return false
	}
	return true
}

// maxBody bounds a request's JSON body.
const maxBody = 64 << 10

// decodeJSON reads r's body, at most maxBody bytes of one JSON object,
// into v.
func decodeJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("bad JSON body: %v", err)
	}
	return nil
}

// loopbackHost reports whether host (a Host header, with or without a
// port) names this machine: localhost, a name under .localhost, or a
// loopback address.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// writeJSON writes v as JSON with status code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// errorJSON is the body of every error answer: one line.
type errorJSON struct {
	Error string `json:"error"`
}

// writeError answers with code and {"error": msg}.
func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, errorJSON{Error: msg})
}
