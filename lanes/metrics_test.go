package lanes_test

import (
	"context"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/lanes-dev/lanes/lanes"
)

// named is a Backend with a namespace, as redislane's.
type named struct {
	lanes.Backend
	ns string
}

func (n named) Namespace() string { return n.ns }

// point is one data point of a collection, by metric name and attributes.
type point struct {
	value   float64
	count   uint64    // histograms
	bounds  []float64 // histograms
	attrs   attribute.Set
	present bool
}

// collect returns every data point of reader, by metric name, each with its
// attributes.
func collect(t *testing.T, reader *sdkmetric.ManualReader) map[string][]point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string][]point{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{value: float64(p.Value), attrs: p.Attributes, present: true})
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{value: p.Value, attrs: p.Attributes, present: true})
				}
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{value: float64(p.Value), attrs: p.Attributes, present: true})
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{value: p.Sum, count: p.Count, bounds: p.Bounds, attrs: p.Attributes, present: true})
				}
			}
		}
	}
	return out
}

// find returns the point of name whose attributes hold every one of want.
func find(points map[string][]point, name string, want ...attribute.KeyValue) point {
	for _, p := range points[name] {
		ok := true
		for _, kv := range want {
			if v, has := p.attrs.Value(kv.Key); !has || v != kv.Value {
				ok = false
				break
			}
		}
		if ok && len(want) == p.attrs.Len() {
			return p
		}
	}
	return point{}
}

// A Session's counters exist, at 0 and with the namespace, before anything
// happened, so that an alert on increase() sees the first event; its
// duration histograms use buckets in seconds from 100µs to 10 minutes.
func TestSessionMetricsFromTheStart(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)
	s, err := lanes.NewSession(ctx, named{lanes.NewMemory(), "ns-a"}, lanes.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Namespace() != "ns-a" {
		t.Errorf("Namespace() = %q; want ns-a", s.Namespace())
	}
	ns := lanes.AttrNamespace.String("ns-a")
	got := collect(t, reader)
	for _, name := range []string{"lanes.grants", "lanes.leases.lost", "lanes.heartbeat.failures", "lanes.polls.fallback", "lanes.waiter.evictions"} {
		if p := find(got, name, ns); !p.present || p.value != 0 {
			t.Errorf("before any grant, %s{lanes.namespace=ns-a} = %+v; want present at 0", name, p)
		}
	}

	l, err := s.Acquire(ctx, lanes.Request{Lanes: []lanes.Lane{{Key: "gpu", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got = collect(t, reader)
	if p := find(got, "lanes.grants", ns); p.value != 1 {
		t.Errorf("lanes.grants = %v; want 1", p.value)
	}
	wait := find(got, "lanes.wait.duration", ns, lanes.AttrOutcome.String("granted"))
	hold := find(got, "lanes.hold.duration", ns, lanes.AttrOutcome.String("released"))
	if wait.count != 1 || hold.count != 1 {
		t.Fatalf("wait %+v, hold %+v; want one observation each, with the namespace and outcome", wait, hold)
	}
	want := []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	if !slices.Equal(wait.bounds, want) {
		t.Errorf("lanes.wait.duration buckets = %v; want %v", wait.bounds, want)
	}
}

// The per-key gauges report a class per key, not the key: a bounded set
// of series; the keys an operator allows are reported by name, and the
// series of their class leaves them out. Two namespaces holding the same
// key are two series.
func TestRegisterMetricsClassesAndRawKeys(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)
	a := named{lanes.NewMemory(), "ns-a"}
	b := named{lanes.NewMemory(), "ns-b"}
	for _, bk := range []lanes.Backend{a, b} {
		reg, err := lanes.RegisterMetrics(mp, bk, lanes.WithRawKeys("gpu", "tool:*", "idle"))
		if err != nil {
			t.Fatal(err)
		}
		defer reg.Unregister()
	}
	hold := func(bk lanes.Backend, keys ...string) {
		s, err := lanes.NewSession(ctx, bk)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		for _, k := range keys {
			if _, err := s.Acquire(ctx, lanes.Request{Lanes: []lanes.Lane{{Key: k, Limit: 1}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	hold(a, "gpu", "lock:file:/x", "lock:file:/y", "tool:read", "tenant:acme", "tenant:zeta")
	hold(b, "gpu")
	// One waiter on a's file key.
	s, err := lanes.NewSession(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Enqueue(ctx, lanes.Request{Lanes: []lanes.Lane{{Key: "lock:file:/x", Limit: 1}}}); err != nil {
		t.Fatal(err)
	}

	got := collect(t, reader)
	nsA, nsB := lanes.AttrNamespace.String("ns-a"), lanes.AttrNamespace.String("ns-b")
	class := lanes.AttrKeyClass.String
	for _, c := range []struct {
		name  string
		attrs []attribute.KeyValue
		want  float64
	}{
		{"lanes.holders", []attribute.KeyValue{nsA, class("other"), lanes.AttrKey.String("gpu")}, 1},
		{"lanes.holders", []attribute.KeyValue{nsB, class("other"), lanes.AttrKey.String("gpu")}, 1},
		{"lanes.holders", []attribute.KeyValue{nsA, class("other")}, 0}, // gpu is counted by name only
		{"lanes.holders", []attribute.KeyValue{nsA, class("file")}, 2},
		{"lanes.waiters", []attribute.KeyValue{nsA, class("file")}, 1},
		{"lanes.holders", []attribute.KeyValue{nsA, class("tenant")}, 2},
		{"lanes.holders", []attribute.KeyValue{nsA, class("tool"), lanes.AttrKey.String("tool:read")}, 1},
		{"lanes.holders", []attribute.KeyValue{nsA, class("tool")}, 0},
		{"lanes.holders", []attribute.KeyValue{nsA, class("concurrency")}, 0}, // idle classes too
		{"lanes.holders", []attribute.KeyValue{nsA, class("other"), lanes.AttrKey.String("idle")}, 0},
		{"lanes.waiters", []attribute.KeyValue{nsB, class("file")}, 0},
		{"lanes.leases.expired", []attribute.KeyValue{nsA}, 0},
		{"lanes.state.resets", []attribute.KeyValue{nsB}, 0},
	} {
		if p := find(got, c.name, c.attrs...); !p.present || p.value != c.want {
			t.Errorf("%s%v = %+v; want %v", c.name, c.attrs, p, c.want)
		}
	}
	if p := find(got, "lanes.wait.oldest", nsA, class("file")); !p.present || p.value <= 0 {
		t.Errorf("lanes.wait.oldest{ns-a, file} = %+v; want a positive wait", p)
	}
	for _, p := range got["lanes.holders"] {
		if k, ok := p.attrs.Value(lanes.AttrKey); ok && !slices.Contains([]string{"gpu", "tool:read", "idle"}, k.AsString()) {
			t.Errorf("lanes.holders reports key %q, which no pattern allows", k.AsString())
		}
	}
	// 7 classes and 2 exact keys per namespace: nothing grows with the keys.
	if n := len(got["lanes.holders"]); n != 2*(7+2)+1 {
		t.Errorf("%d lanes.holders series; want %d (two namespaces × (7 classes + gpu + idle), and tool:read)", n, 2*(7+2)+1)
	}

	if _, err := lanes.RegisterMetrics(mp, a, lanes.WithRawKeys("")); err == nil {
		t.Error("WithRawKeys(\"\") registered; want an error")
	}
}
