package redislane_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/lanes-dev/lanes/internal/redistest"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

// BenchmarkAcquireReleaseTraced is BenchmarkAcquireRelease with an SDK
// tracer provider that records every span (kept in memory, reset each op)
// and an SDK meter provider: the cost of telemetry someone receives, on the
// real Redis server.
func BenchmarkAcquireReleaseTraced(b *testing.B) {
	c := realClient(b)
	ctx := context.Background()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer tp.Shutdown(ctx)
	defer mp.Shutdown(ctx)
	be, err := redislane.New(c, redistest.Namespace("bench-"), redislane.WithTracerProvider(tp))
	if err != nil {
		b.Fatal(err)
	}
	defer redistest.Delete(c, be)
	defer be.Close()
	s, err := lanes.NewSession(ctx, be, lanes.WithTracerProvider(tp), lanes.WithMeterProvider(mp))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	r := lanes.Request{Lanes: []lanes.Lane{{Key: "bench", Limit: 1}}}
	b.ReportAllocs()
	for b.Loop() {
		r.ID = ""
		l, err := s.Acquire(ctx, r)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
		spans.Reset()
	}
}
