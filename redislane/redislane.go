// Package redislane is the Redis backend of lanes: queues, holders, limits
// and fencing counters kept in Redis and changed only by the Lua scripts of
// package lua, so several processes on several machines share one set of
// lanes.
//
// Every state change is one script run by SHA (EVALSHA, with EVAL on
// NOSCRIPT), so an uncontended acquire and release cost one round trip
// each. Time comes from Redis TIME. Every key of a namespace shares one hash
// tag, so the scripts work on Redis Cluster; grant hints travel by pub/sub
// on one subscription per Backend. docs/PROTOCOL.md describes the keyspace
// and the scripts for runners in other languages.
package redislane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/lanes-dev/lanes/internal/otelx"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/scripts/lua"
)

// The scripts, declared once; go-redis runs them by SHA and loads them on
// NOSCRIPT.
var (
	enqueueScript   = redis.NewScript(lua.Source("enqueue.lua"))
	heartbeatScript = redis.NewScript(lua.Source("heartbeat.lua"))
	releaseScript   = redis.NewScript(lua.Source("release.lua"))
	inspectScript   = redis.NewScript(lua.Source("inspect.lua"))
)

// DefaultPrefix is the first part of every key name: lanes:{ns}:entries.
const DefaultPrefix = "lanes"

// Backend is a lanes.Backend on Redis for one namespace. It is safe for
// concurrent use. It uses the client's pool for its steps and, once a
// Session subscribes, one pub/sub connection, however many entries wait.
type Backend struct {
	c      redis.UniversalClient
	ns     string
	keys   []string // the nine KEYS of every script, in lib.lua's order
	wake   string   // prefix of the grant-hint channels
	tracer otelx.Tracer

	mu     sync.Mutex // guards ps
	ps     *redis.PubSub
	reader sync.WaitGroup

	hintsMu  sync.RWMutex
	hints    map[string]func([]lanes.Hint) // channel -> hint
	confirms map[string]chan struct{}      // channel -> closed when Redis confirms the subscription
}

var _ lanes.Backend = (*Backend)(nil)

// Option configures New.
type Option func(*Backend) error

// WithPrefix replaces DefaultPrefix at the head of every key and channel
// name; it must be 1 to 64 bytes without braces or spaces.
func WithPrefix(p string) Option {
	return func(b *Backend) error {
		if p == "" || len(p) > 64 || strings.ContainsAny(p, "{} \t\r\n") {
			return fmt.Errorf("%w: key prefix %q must be 1 to 64 bytes without braces or spaces", lanes.ErrInvalid, p)
		}
		b.keys = keyNames(p, b.ns)
		b.wake = p + ":{" + b.ns + "}:wake:"
		return nil
	}
}

// New returns the Backend of namespace ns on c. It does not contact Redis;
// the first step does. The error wraps lanes.ErrInvalid for a bad namespace
// or option. Close ends its subscription; c stays the caller's to close.
func New(c redis.UniversalClient, ns string, opts ...Option) (*Backend, error) {
	if err := lanes.ValidateNamespace(ns); err != nil {
		return nil, err
	}
	b := &Backend{c: c, ns: ns, hints: map[string]func([]lanes.Hint){}, confirms: map[string]chan struct{}{}, tracer: otelx.GlobalTracer(lanes.ScopeName)}
	if err := WithPrefix(DefaultPrefix)(b); err != nil {
		return nil, err
	}
	for _, o := range opts {
		if err := o(b); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func keyNames(prefix, ns string) []string {
	base := prefix + ":{" + ns + "}:"
	names := []string{"entries", "queue", "holds", "limits", "deadlines", "tokens", "seq", "nested", "stats"}
	for i, n := range names {
		names[i] = base + n
	}
	return names
}

// Namespace returns the namespace.
func (b *Backend) Namespace() string { return b.ns }

// Keys returns the names of the namespace's Redis keys, in the order the
// scripts take them; tokens, seq and stats (the sixth, seventh and ninth)
// are never deleted.
func (b *Backend) Keys() []string { return append([]string(nil), b.keys...) }

// wireRequest is one request as enqueue.lua reads it.
type wireRequest struct {
	ID      string   `json:"id"`
	Lanes   [][]any  `json:"k"`
	CallID  string   `json:"c,omitempty"`
	Tool    string   `json:"t,omitempty"`
	Tenant  string   `json:"n,omitempty"`
	Lineage []string `json:"l,omitempty"`
}

// Enqueue implements lanes.Backend in one round trip.
func (b *Backend) Enqueue(ctx context.Context, o lanes.Owner, ttl time.Duration, reqs []lanes.Request) ([]lanes.Status, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	if err := lanes.ValidateStep(reqs); err != nil {
		return nil, err
	}
	if ttl < time.Millisecond {
		return nil, fmt.Errorf("%w: TTL %v is under 1ms", lanes.ErrInvalid, ttl)
	}
	wire := make([]wireRequest, len(reqs))
	for i, r := range reqs {
		if err := r.Validate(); err != nil {
			return nil, err
		}
		if len(r.Lanes) == 0 {
			return nil, fmt.Errorf("%w: entry %s names no lane; a backend takes requests with at least one", lanes.ErrInvalid, r.ID)
		}
		w := wireRequest{ID: r.ID, CallID: r.CallID, Tool: r.Tool, Tenant: r.Tenant, Lineage: r.Lineage}
		for _, l := range r.Lanes {
			if l.Limit == 0 {
				return nil, fmt.Errorf("%w: key %q: a backend takes no lane with limit 0", lanes.ErrInvalid, l.Key)
			}
			w.Lanes = append(w.Lanes, []any{l.Key, l.Limit})
		}
		wire[i] = w
	}
	js, err := json.Marshal(wire)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", lanes.ErrInvalid, err)
	}
	if err := validateOwner(o); err != nil {
		return nil, err
	}
	v, err := b.run(ctx, enqueueScript, "enqueue", b.wake, ms(ttl), o.ID, o.Host, o.PID, js)
	if err != nil {
		return nil, b.mapErr(err)
	}
	return parseStatuses(v, len(reqs))
}

// Heartbeat implements lanes.Backend in one round trip.
func (b *Backend) Heartbeat(ctx context.Context, owner string, ttl time.Duration, ids []string) ([]lanes.Status, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	if len(ids) > lanes.MaxStepRequests || ttl < time.Millisecond {
		return nil, fmt.Errorf("%w: a heartbeat step takes 1 to %d ids and a TTL of 1ms or more", lanes.ErrInvalid, lanes.MaxStepRequests)
	}
	args := make([]any, 0, len(ids)+3)
	args = append(args, b.wake, ms(ttl), owner)
	for _, id := range ids {
		args = append(args, id)
	}
	v, err := b.run(ctx, heartbeatScript, "heartbeat", args...)
	if err != nil {
		return nil, b.mapErr(err)
	}
	return parseStatuses(v, len(ids))
}

// Release implements lanes.Backend in one round trip.
func (b *Backend) Release(ctx context.Context, by string, ids []string) (lanes.Released, error) {
	if len(ids) == 0 {
		return lanes.Released{}, nil
	}
	if len(ids) > lanes.MaxStepRequests {
		return lanes.Released{}, fmt.Errorf("%w: a release step takes at most %d ids", lanes.ErrInvalid, lanes.MaxStepRequests)
	}
	args := make([]any, 0, len(ids)+2)
	args = append(args, b.wake, by)
	for _, id := range ids {
		args = append(args, id)
	}
	v, err := b.run(ctx, releaseScript, "release", args...)
	if err != nil {
		return lanes.Released{}, b.mapErr(err)
	}
	return parseReleased(v, len(ids))
}

// Inspect implements lanes.Backend in one round trip.
func (b *Backend) Inspect(ctx context.Context, keys []string) (*lanes.Snapshot, error) {
	args := make([]any, 0, len(keys)+1)
	args = append(args, b.wake)
	for _, k := range keys {
		if err := lanes.ValidateKey(k); err != nil {
			return nil, err
		}
		args = append(args, k)
	}
	v, err := b.run(ctx, inspectScript, "inspect", args...)
	if err != nil {
		return nil, b.mapErr(err)
	}
	snap, err := parseSnapshot(v)
	if err != nil {
		return nil, err
	}
	snap.Namespace = b.ns
	return snap, nil
}

// Subscribe implements lanes.Backend. It returns once Redis confirmed the
// subscription, so no hint published after it returns is missed. All
// subscriptions of a Backend share one pub/sub connection, which go-redis
// re-establishes after a cut; hints published meanwhile are lost, and the
// Session's polling covers them.
func (b *Backend) Subscribe(ctx context.Context, owner string, hint func([]lanes.Hint)) (func(), error) {
	ch := b.wake + owner
	confirmed := make(chan struct{})
	b.hintsMu.Lock()
	b.hints[ch] = hint
	b.confirms[ch] = confirmed
	b.hintsMu.Unlock()
	b.mu.Lock()
	if b.ps == nil {
		b.ps = b.c.Subscribe(context.WithoutCancel(ctx))
		msgs := b.ps.ChannelWithSubscriptions()
		b.reader.Add(1)
		go b.read(msgs)
	}
	err := b.ps.Subscribe(ctx, ch)
	b.mu.Unlock()
	if err == nil {
		select {
		case <-confirmed:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if err != nil {
		b.forget(ch)
		return nil, b.mapErr(err)
	}
	return func() {
		b.forget(ch)
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.ps != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = b.ps.Unsubscribe(ctx, ch)
		}
	}, nil
}

func (b *Backend) forget(ch string) {
	b.hintsMu.Lock()
	defer b.hintsMu.Unlock()
	delete(b.hints, ch)
	delete(b.confirms, ch)
}

func (b *Backend) read(msgs <-chan any) {
	defer b.reader.Done()
	for msg := range msgs {
		switch m := msg.(type) {
		case *redis.Subscription:
			b.hintsMu.Lock()
			if c := b.confirms[m.Channel]; c != nil && m.Kind == "subscribe" {
				close(c)
				delete(b.confirms, m.Channel)
			}
			b.hintsMu.Unlock()
		case *redis.Message:
			b.hintsMu.RLock()
			hint := b.hints[m.Channel]
			b.hintsMu.RUnlock()
			if hint != nil {
				hint(parseHints(m.Payload))
			}
		}
	}
}

// Close ends the Backend's subscription. It does not close the client.
func (b *Backend) Close() error {
	b.mu.Lock()
	ps := b.ps
	b.ps = nil
	b.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close()
	b.reader.Wait()
	return err
}

// run runs one script on the namespace's keys, in a span when anything
// receives spans.
func (b *Backend) run(ctx context.Context, s *redis.Script, name string, args ...any) (any, error) {
	if !b.tracer.On() {
		return s.Run(ctx, b.c, b.keys, args...).Result()
	}
	ctx, span := b.tracer.Start(ctx, "lanes.redis "+name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrDBSystem, attrDBOperation, attrNamespace.String(b.ns), attrScript.String(name)))
	defer span.End()
	v, err := s.Run(ctx, b.c, b.keys, args...).Result()
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	return v, err
}

// Attributes of the script spans.
var (
	attrDBSystem    = attribute.String("db.system.name", "redis")
	attrDBOperation = attribute.String("db.operation.name", "EVALSHA")
	attrNamespace   = attribute.Key("lanes.namespace")
	attrScript      = attribute.Key("lanes.script")
)

// WithTracerProvider sets where the Backend's spans go, one per script run
// ("lanes.redis enqueue"...); default the global provider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(b *Backend) error {
		b.tracer = otelx.NewTracer(tp, lanes.ScopeName)
		return nil
	}
}

func ms(d time.Duration) int64 {
	if d < time.Millisecond {
		return 1
	}
	return d.Milliseconds()
}

func validateOwner(o lanes.Owner) error {
	if o.ID == "" || strings.ContainsAny(o.ID, " \t\r\n") || len(o.ID) > lanes.MaxIDLen {
		return fmt.Errorf("%w: owner id %q must be 1 to %d bytes without spaces", lanes.ErrInvalid, o.ID, lanes.MaxIDLen)
	}
	if len(o.Host) > lanes.MaxFieldLen {
		return fmt.Errorf("%w: owner host is longer than %d bytes", lanes.ErrInvalid, lanes.MaxFieldLen)
	}
	return nil
}

// mapErr turns a script's error into the errors of package lanes: a domain
// outcome (LANES_<CODE>) into its sentinel, anything else into
// ErrUnavailable, keeping the cause in the chain.
func (b *Backend) mapErr(err error) error {
	var re redis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		switch {
		case strings.HasPrefix(msg, "LANES_LIMIT "):
			f := strings.SplitN(strings.TrimPrefix(msg, "LANES_LIMIT "), " ", 3)
			if len(f) == 3 {
				rec, err1 := strconv.Atoi(f[0])
				req, err2 := strconv.Atoi(f[1])
				if err1 == nil && err2 == nil {
					return &lanes.LimitMismatchError{Key: f[2], Recorded: rec, Requested: req}
				}
			}
			return fmt.Errorf("%w: %s", lanes.ErrLimitMismatch, msg)
		case strings.HasPrefix(msg, "LANES_BADARG "):
			return fmt.Errorf("%w: %s", lanes.ErrInvalid, msg)
		}
	}
	// Connection errors, timeouts and server errors (LOADING, READONLY,
	// NOPERM...) alike: the step's outcome is unknown to the caller.
	return fmt.Errorf("%w: redis namespace %s: %w", lanes.ErrUnavailable, b.ns, err)
}
