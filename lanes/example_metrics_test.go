package lanes_test

import (
	"context"
	"fmt"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/lanes-dev/lanes/lanes"
)

// RegisterMetrics reports holders and waiters per class of key; the keys
// an operator allows are reported by name too. Here a file's lock key
// counts toward the class file, and "gpu", allowed, is its own series.
func ExampleRegisterMetrics() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader() // in production: the Prometheus or OTLP exporter
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)
	b := lanes.NewMemory()
	reg, err := lanes.RegisterMetrics(mp, b, lanes.WithRawKeys("gpu"))
	if err != nil {
		panic(err)
	}
	defer reg.Unregister()

	s, _ := lanes.NewSession(ctx, b)
	defer s.Close()
	for _, key := range []string{"gpu", "lock:file:/srv/drafts/008.md"} {
		if _, err := s.Acquire(ctx, lanes.Request{Lanes: []lanes.Lane{{Key: key, Limit: 1}}}); err != nil {
			panic(err)
		}
	}

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(ctx, &rm)
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == "lanes.holders" {
				for _, p := range g.DataPoints {
					if p.Value > 0 {
						lines = append(lines, fmt.Sprintf("%s{%s} %d", m.Name, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Value))
					}
				}
			}
		}
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// lanes.holders{lanes.key.class=file,lanes.namespace=memory} 1
	// lanes.holders{lanes.key=gpu,lanes.key.class=other,lanes.namespace=memory} 1
}
