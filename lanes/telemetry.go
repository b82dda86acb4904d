package lanes

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lanes-dev/lanes/internal/otelx"
)

// ScopeName is the instrumentation scope of the spans and metrics of lanes.
const ScopeName = "github.com/lanes-dev/lanes"

// Attribute keys of the spans and metrics of lanes. GenAI keys follow the
// OpenTelemetry semantic conventions for tool execution.
const (
	AttrNamespace = attribute.Key("lanes.namespace") // the namespace, on every span and metric
	AttrEntry     = attribute.Key("lanes.entry")
	AttrKeys      = attribute.Key("lanes.keys")
	AttrLimits    = attribute.Key("lanes.limits")
	AttrPosition  = attribute.Key("lanes.queue.position") // the farthest place at enqueue, from 1
	AttrTokens    = attribute.Key("lanes.tokens")         // "key=token,..."
	AttrTenant    = attribute.Key("lanes.tenant")
	AttrOutcome   = attribute.Key("lanes.outcome")
	// AttrKeyClass is the class of a lane key on the per-key gauges of
	// RegisterMetrics, from the prefix that types it: tenant, tool,
	// concurrency, file, lock, run, or other for an untyped key.
	AttrKeyClass = attribute.Key("lanes.key.class")
	// AttrKey is one lane's key on the per-key gauges of RegisterMetrics,
	// only for the keys an operator allowed (WithRawKeys).
	AttrKey      = attribute.Key("lanes.key")
	AttrToolName = attribute.Key("gen_ai.tool.name")
	AttrCallID   = attribute.Key("gen_ai.tool.call.id")
)

// attrErrorType is the semantic conventions' error.type: the class of a
// failure (errorType), on spans that end in error.
const attrErrorType = attribute.Key("error.type")

// WithTracerProvider sets where the Session's spans go; default the global
// provider (otel.GetTracerProvider). Until a global provider is set, a
// Session given none spends nothing on spans.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(s *Session) error {
		s.tel.tracer = otelx.NewTracer(tp, ScopeName)
		return nil
	}
}

// WithMeterProvider sets where the Session's metrics go; default the global
// provider (otel.GetMeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(s *Session) error {
		s.tel.meter = otelx.NewMeter(mp, ScopeName)
		return nil
	}
}

// Namespace returns the namespace of the Session's backend, which every
// span and metric of the Session carries as lanes.namespace: the
// backend's Namespace method's, if it has one ("memory" for the in-memory
// backend), else "".
func (s *Session) Namespace() string { return s.tel.ns }

// namespaceOf returns the namespace b names.
func namespaceOf(b Backend) string {
	if n, ok := b.(interface{ Namespace() string }); ok {
		return n.Namespace()
	}
	if _, ok := b.(*Memory); ok {
		return "memory" // as its Snapshot says
	}
	return ""
}

// durationBuckets are the bucket boundaries, in seconds, of every duration
// histogram: lock waits and holds from 100µs to 10 minutes.
var durationBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
	0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
}

// telemetry holds a Session's instruments. Attributes are built only for
// spans that record; the attribute sets of metrics are built once, so that
// recording allocates nothing.
type telemetry struct {
	tracer otelx.Tracer
	meter  otelx.Meter
	ns     string
	nsAttr attribute.KeyValue

	waitDur, holdDur, handoff             metric.Float64Histogram
	grants, lost, beatFails, polls, evict metric.Int64Counter

	// The options of each measurement, as slices made once: passed with
	// "...", they cost no allocation per measurement.
	outcomes [outcomeCount][]metric.RecordOption // namespace and outcome
	nsOnly   []metric.AddOption                  // namespace
}

// outcome is how a wait or a hold ended, as metrics record it.
type outcome int

const (
	outcomeGranted outcome = iota
	outcomeFailed
	outcomeReleased
	outcomeLost
	outcomeCount
)

var outcomeNames = [outcomeCount]string{"granted", "failed", "released", "lost"}

func newTelemetry(b Backend) telemetry {
	ns := namespaceOf(b)
	return telemetry{tracer: otelx.GlobalTracer(ScopeName), meter: otelx.GlobalMeter(ScopeName),
		ns: ns, nsAttr: AttrNamespace.String(ns)}
}

// instruments creates the metric instruments once the meter is final, and
// adds 0 to every counter, so that each series exists from the start and
// an alert on increase() sees the first event.
func (t *telemetry) instruments() {
	for o := range outcomeCount {
		t.outcomes[o] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(t.nsAttr, AttrOutcome.String(outcomeNames[o])))}
	}
	t.nsOnly = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(t.nsAttr))}
	m := t.meter
	buckets := metric.WithExplicitBucketBoundaries(durationBuckets...)
	t.waitDur, _ = m.Float64Histogram("lanes.wait.duration", metric.WithUnit("s"), buckets,
		metric.WithDescription("Time from enqueue to grant or to the end of the wait"))
	t.holdDur, _ = m.Float64Histogram("lanes.hold.duration", metric.WithUnit("s"), buckets,
		metric.WithDescription("Time a lease was held, from grant to release or loss"))
	t.handoff, _ = m.Float64Histogram("lanes.handoff.duration", metric.WithUnit("s"), buckets,
		metric.WithDescription("From the backend's grant (its clock) to the waiting process taking it from the hint (its clock): clock skew between them adds to it"))
	t.grants, _ = m.Int64Counter("lanes.grants", metric.WithUnit("{grant}"),
		metric.WithDescription("Leases granted to this process"))
	t.lost, _ = m.Int64Counter("lanes.leases.lost", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases lost: not renewed in time or released by force"))
	t.beatFails, _ = m.Int64Counter("lanes.heartbeat.failures", metric.WithUnit("{heartbeat}"),
		metric.WithDescription("Heartbeat steps that failed"))
	t.polls, _ = m.Int64Counter("lanes.polls.fallback", metric.WithUnit("{grant}"),
		metric.WithDescription("Grants found by a periodic poll rather than a hint"))
	t.evict, _ = m.Int64Counter("lanes.waiter.evictions", metric.WithUnit("{entry}"),
		metric.WithDescription("Waiting entries of this process that the backend evicted"))
	if m.On() {
		for _, c := range []metric.Int64Counter{t.grants, t.lost, t.beatFails, t.polls, t.evict} {
			c.Add(context.Background(), 0, t.nsOnly...)
		}
	}
}

// noSpan stands for the spans not started while nothing receives them.
var noSpan = trace.SpanFromContext(context.Background())

// internal is the kind of lanes' own spans, made once.
var internal = trace.WithSpanKind(trace.SpanKindInternal)

// startWait starts the span of r's wait, a child of ctx's span.
func (t *telemetry) startWait(ctx context.Context, r Request) trace.Span {
	if !t.tracer.On() {
		return noSpan
	}
	_, span := t.tracer.Start(ctx, "lanes.wait", internal)
	if span.IsRecording() {
		span.SetAttributes(requestAttrs(r, t.nsAttr)...)
	}
	return span
}

// stepContext returns ctx with the span of the first wait among tickets,
// so that the backend's step (its Redis span) is a child of that wait; ctx
// as it is when nothing receives spans.
func (t *telemetry) stepContext(ctx context.Context, tickets []*Ticket) context.Context {
	if !t.tracer.On() {
		return ctx
	}
	for _, tk := range tickets {
		if sp := tk.e.span; sp != nil && sp.SpanContext().IsValid() {
			return trace.ContextWithSpan(ctx, sp)
		}
	}
	return ctx
}

// startHold starts the span of a lease, a child of ctx's span and linked
// to the span of its wait, and returns ctx with it.
func (t *telemetry) startHold(ctx context.Context, id string, tokens map[string]uint64, wait trace.Span) (context.Context, trace.Span) {
	if !t.tracer.On() {
		return ctx, noSpan
	}
	if wait == nil || !wait.SpanContext().IsValid() {
		ctx, span := t.tracer.Start(ctx, "lanes.hold", internal)
		return ctx, t.holdAttrs(span, id, tokens)
	}
	ctx, span := t.tracer.Start(ctx, "lanes.hold", internal, trace.WithLinks(trace.Link{SpanContext: wait.SpanContext()}))
	return ctx, t.holdAttrs(span, id, tokens)
}

// holdAttrs sets the attributes of a lease's span, when it records.
func (t *telemetry) holdAttrs(span trace.Span, id string, tokens map[string]uint64) trace.Span {
	if span.IsRecording() {
		span.SetAttributes(t.nsAttr, AttrEntry.String(id), AttrTokens.String(tokenList(tokens)))
	}
	return span
}

func requestAttrs(r Request, ns attribute.KeyValue) []attribute.KeyValue {
	keys := make([]string, len(r.Lanes))
	limits := make([]int64, len(r.Lanes))
	for i, l := range r.Lanes {
		keys[i], limits[i] = l.Key, int64(l.Limit)
	}
	a := []attribute.KeyValue{ns, AttrEntry.String(r.ID), AttrKeys.StringSlice(keys), AttrLimits.Int64Slice(limits)}
	if r.Tool != "" {
		a = append(a, AttrToolName.String(r.Tool))
	}
	if r.CallID != "" {
		a = append(a, AttrCallID.String(r.CallID))
	}
	if r.Tenant != "" {
		a = append(a, AttrTenant.String(r.Tenant))
	}
	return a
}

// endSpan ends span with outcome, marking it an error, with its
// error.type, when err is set.
func endSpan(span trace.Span, outcome string, err error) {
	if span.IsRecording() {
		span.SetAttributes(AttrOutcome.String(outcome))
		if err != nil {
			span.SetAttributes(attrErrorType.String(errorType(err)))
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// errorType returns the class of err as spans record it in error.type: one
// word per error of package lanes (canceled, wait_timeout, lease_lost,
// not_holder, id_conflict, limit_mismatch, lock_cycle, unavailable,
// closed, invalid), "" for nil, and "_OTHER" for any other error.
func errorType(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrCanceled):
		return "canceled"
	case errors.Is(err, ErrWaitTimeout):
		return "wait_timeout"
	case errors.Is(err, ErrLeaseLost):
		return "lease_lost"
	case errors.Is(err, ErrNotHolder):
		return "not_holder"
	case errors.Is(err, ErrIDConflict):
		return "id_conflict"
	case errors.Is(err, ErrLimitMismatch):
		return "limit_mismatch"
	case errors.Is(err, ErrLockCycle):
		return "lock_cycle"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	case errors.Is(err, ErrClosed):
		return "closed"
	case errors.Is(err, ErrInvalid):
		return "invalid"
	}
	return "_OTHER"
}

func tokenList(tokens map[string]uint64) string {
	var b strings.Builder
	for k, v := range tokens {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strconv.FormatUint(v, 10))
	}
	return b.String()
}

func seconds(d time.Duration) float64 { return d.Seconds() }

// record adds one duration to h with the namespace and o, when anything
// receives metrics.
func (t *telemetry) record(h metric.Float64Histogram, v float64, o outcome) {
	if t.meter.On() {
		h.Record(context.Background(), v, t.outcomes[o]...)
	}
}

// count adds one to c with the namespace, when anything receives metrics.
func (t *telemetry) count(c metric.Int64Counter) {
	if t.meter.On() {
		c.Add(context.Background(), 1, t.nsOnly...)
	}
}
