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
	AttrEntry    = attribute.Key("lanes.entry")
	AttrKeys     = attribute.Key("lanes.keys")
	AttrLimits   = attribute.Key("lanes.limits")
	AttrPosition = attribute.Key("lanes.queue.position") // the farthest place at enqueue, from 1
	AttrTokens   = attribute.Key("lanes.tokens")         // "key=token,..."
	AttrTenant   = attribute.Key("lanes.tenant")
	AttrOutcome  = attribute.Key("lanes.outcome")
	AttrKey      = attribute.Key("lanes.key") // one lane's key, on per-lane metrics
	AttrToolName = attribute.Key("gen_ai.tool.name")
	AttrCallID   = attribute.Key("gen_ai.tool.call.id")
)

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

// telemetry holds a Session's instruments. Attributes are built only for
// spans that record.
type telemetry struct {
	tracer otelx.Tracer
	meter  otelx.Meter

	waitDur, holdDur, handoff             metric.Float64Histogram
	grants, lost, beatFails, polls, evict metric.Int64Counter
}

func newTelemetry() telemetry {
	return telemetry{tracer: otelx.GlobalTracer(ScopeName), meter: otelx.GlobalMeter(ScopeName)}
}

// instruments creates the metric instruments once the meter is final.
func (t *telemetry) instruments() {
	m := t.meter
	t.waitDur, _ = m.Float64Histogram("lanes.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from enqueue to grant or to the end of the wait"))
	t.holdDur, _ = m.Float64Histogram("lanes.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a lease was held, from grant to release or loss"))
	t.handoff, _ = m.Float64Histogram("lanes.handoff.duration", metric.WithUnit("s"),
		metric.WithDescription("From the backend's grant (its clock) to the waiting process taking it from the hint (its clock): clock skew between them adds to it"))
	t.grants, _ = m.Int64Counter("lanes.grants", metric.WithDescription("Leases granted to this process"))
	t.lost, _ = m.Int64Counter("lanes.leases.lost", metric.WithDescription("Leases lost: not renewed in time or released by force"))
	t.beatFails, _ = m.Int64Counter("lanes.heartbeat.failures", metric.WithDescription("Heartbeat steps that failed"))
	t.polls, _ = m.Int64Counter("lanes.polls.fallback", metric.WithDescription("Grants found by a periodic poll rather than a hint"))
	t.evict, _ = m.Int64Counter("lanes.waiter.evictions", metric.WithDescription("Waiting entries of this process that the backend evicted"))
}

// Outcome attribute sets, made once so recording allocates nothing.
var (
	outcomeGranted  = metric.WithAttributeSet(attribute.NewSet(AttrOutcome.String("granted")))
	outcomeFailed   = metric.WithAttributeSet(attribute.NewSet(AttrOutcome.String("failed")))
	outcomeReleased = metric.WithAttributeSet(attribute.NewSet(AttrOutcome.String("released")))
	outcomeLost     = metric.WithAttributeSet(attribute.NewSet(AttrOutcome.String("lost")))
)

// noSpan stands for the spans not started while nothing receives them.
var noSpan = trace.SpanFromContext(context.Background())

// startWait starts the span of r's wait, a child of ctx's span.
func (t *telemetry) startWait(ctx context.Context, r Request) trace.Span {
	if !t.tracer.On() {
		return noSpan
	}
	_, span := t.tracer.Start(ctx, "lanes.wait", trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(requestAttrs(r)...)
	}
	return span
}

// startHold starts the span of a lease, a child of ctx's span, and returns
// ctx with it.
func (t *telemetry) startHold(ctx context.Context, id string, tokens map[string]uint64) (context.Context, trace.Span) {
	if !t.tracer.On() {
		return ctx, noSpan
	}
	ctx, span := t.tracer.Start(ctx, "lanes.hold", trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(AttrEntry.String(id), AttrTokens.String(tokenList(tokens)))
	}
	return ctx, span
}

func requestAttrs(r Request) []attribute.KeyValue {
	keys := make([]string, len(r.Lanes))
	limits := make([]int64, len(r.Lanes))
	for i, l := range r.Lanes {
		keys[i], limits[i] = l.Key, int64(l.Limit)
	}
	a := []attribute.KeyValue{AttrEntry.String(r.ID), AttrKeys.StringSlice(keys), AttrLimits.Int64Slice(limits)}
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

// endSpan ends span with outcome, marking it an error when err is set.
func endSpan(span trace.Span, outcome string, err error) {
	if span.IsRecording() {
		span.SetAttributes(AttrOutcome.String(outcome))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
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

// record adds one duration to h, when anything receives metrics.
func (t *telemetry) record(h metric.Float64Histogram, v float64, o metric.RecordOption) {
	if t.meter.On() {
		h.Record(context.Background(), v, o)
	}
}

// count adds one to c, when anything receives metrics.
func (t *telemetry) count(c metric.Int64Counter) {
	if t.meter.On() {
		c.Add(context.Background(), 1)
	}
}

// RegisterMetrics reports the state of b's lanes to mp at each collection:
// per key (attribute lanes.key) the gauges lanes.holders, lanes.waiters and
// lanes.wait.oldest (seconds the head waiter has waited), and the backend's
// counts since the namespace was first used: lanes.leases.expired (crashed
// or stalled holders) and lanes.waiters.evicted. Each collection runs one Inspect step, bounded by
// five seconds; unregister the returned Registration to stop.
func RegisterMetrics(mp metric.MeterProvider, b Backend) (metric.Registration, error) {
	m := mp.Meter(ScopeName)
	holders, err1 := m.Int64ObservableGauge("lanes.holders", metric.WithDescription("Holders of a key"))
	waiters, err2 := m.Int64ObservableGauge("lanes.waiters", metric.WithDescription("Entries queued for a key"))
	oldest, err3 := m.Float64ObservableGauge("lanes.wait.oldest", metric.WithUnit("s"), metric.WithDescription("How long the head of a key's queue has waited"))
	expired, err5 := m.Int64ObservableCounter("lanes.leases.expired", metric.WithDescription("Leases that expired: their holders crashed or stalled"))
	evicted, err6 := m.Int64ObservableCounter("lanes.waiters.evicted", metric.WithDescription("Waiting entries that expired"))
	if err := errors.Join(err1, err2, err3, err5, err6); err != nil {
		return nil, err
	}
	return m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		snap, err := b.Inspect(ctx, nil)
		if err != nil {
			return err
		}
		for _, k := range snap.Keys {
			at := metric.WithAttributeSet(attribute.NewSet(AttrKey.String(k.Key)))
			o.ObserveInt64(holders, int64(len(k.Holders)), at)
			o.ObserveInt64(waiters, int64(len(k.Waiters)), at)
			if len(k.Waiters) > 0 {
				o.ObserveFloat64(oldest, snap.Time.Sub(k.Waiters[0].Enqueued).Seconds(), at)
			}
		}
		o.ObserveInt64(expired, int64(snap.Stats.ExpiredHolders))
		o.ObserveInt64(evicted, int64(snap.Stats.EvictedWaiters))
		return nil
	}, holders, waiters, oldest, expired, evicted)
}
