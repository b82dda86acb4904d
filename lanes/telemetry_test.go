package lanes_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/lanes-dev/lanes/lanes"
)

// RegisterMetrics reports holders, waiters, the head's wait and the
// backend's counts at each collection.
func TestRegisterMetrics(t *testing.T) {
	ctx := context.Background()
	b := lanes.NewMemory()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)
	reg, err := lanes.RegisterMetrics(mp, b)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	s, err := lanes.NewSession(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	k := []lanes.Lane{{Key: "k", Limit: 1}}
	l, err := s.Acquire(ctx, lanes.Request{Lanes: k})
	if err != nil {
		t.Fatal(err)
	}
	ts, err := s.Enqueue(ctx, lanes.Request{Lanes: k}, lanes.Request{Lanes: k})
	if err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					got[m.Name] += float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					got[m.Name] += p.Value
				}
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					got[m.Name] += float64(p.Value)
				}
			}
		}
	}
	if got["lanes.holders"] != 1 || got["lanes.waiters"] != 2 {
		t.Errorf("metrics %v; want 1 holder and 2 waiters", got)
	}
	if _, ok := got["lanes.leases.expired"]; !ok {
		t.Errorf("no lanes.leases.expired in %v", got)
	}
	if _, ok := got["lanes.wait.oldest"]; !ok {
		t.Errorf("no lanes.wait.oldest in %v", got)
	}
	_ = l.Release(ctx)
	for _, tk := range ts {
		l, err := tk.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Release(ctx)
	}
}

// BenchmarkAcquireReleaseTelemetry is one acquire and release on the
// in-memory backend: with no OpenTelemetry provider anywhere (the cost the
// issue wants nil), and with an SDK provider that records every span.
func BenchmarkAcquireReleaseTelemetry(b *testing.B) {
	run := func(b *testing.B, opts ...lanes.Option) {
		ctx := context.Background()
		s, err := lanes.NewSession(ctx, lanes.NewMemory(), append([]lanes.Option{lanes.WithTTL(time.Minute)}, opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		r := lanes.Request{ID: "x", Lanes: []lanes.Lane{{Key: "k", Limit: 1}}, Tool: "t", CallID: "c"}
		b.ReportAllocs()
		for b.Loop() {
			l, err := s.Acquire(ctx, r)
			if err != nil {
				b.Fatal(err)
			}
			_ = l.Release(ctx)
		}
	}
	b.Run("no-provider", func(b *testing.B) { run(b) })
	b.Run("sdk-recording", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(discard{})))
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		defer tp.Shutdown(context.Background())
		defer mp.Shutdown(context.Background())
		run(b, lanes.WithTracerProvider(tp), lanes.WithMeterProvider(mp))
	})
}

type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }
