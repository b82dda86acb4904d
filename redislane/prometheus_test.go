package redislane_test

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/lanes-dev/lanes/lanes"
)

// scrapeMetrics reads url with the Prometheus text parser, as Prometheus
// would.
func scrapeMetrics(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mf, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	return mf
}

// series returns the metrics of family whose label ns is the namespace.
func series(mf map[string]*dto.MetricFamily, family, ns string) []*dto.Metric {
	var out []*dto.Metric
	for _, m := range mf[family].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "lanes_namespace" && l.GetValue() == ns {
				out = append(out, m)
			}
		}
	}
	return out
}

// quantile estimates the q-quantile of a histogram from its cumulative
// buckets as PromQL's histogram_quantile does: linearly within the bucket
// the rank falls in.
func quantile(q float64, h *dto.Histogram) float64 {
	rank := q * float64(h.GetSampleCount())
	lower, below := 0.0, 0.0
	for _, b := range h.GetBucket() {
		count := float64(b.GetCumulativeCount())
		if count >= rank {
			if count == below {
				return b.GetUpperBound()
			}
			return lower + (b.GetUpperBound()-lower)*(rank-below)/(count-below)
		}
		lower, below = b.GetUpperBound(), count
	}
	return math.Inf(1)
}

// An operator's view of two runners' metrics on the real Redis server
// (LANES_REDIS_URL, else 127.0.0.1:6379), namespaces of their own: one
// process's Sessions export through OpenTelemetry's Prometheus exporter,
// scraped over HTTP. The counters exist, at 0, before the first grant; the
// wait histogram's p50 (computed from its buckets) is close to the waits
// measured; lanes_namespace keeps the two namespaces' waits on the same
// key apart.
func TestRealRedisPrometheusWaitQuantile(t *testing.T) {
	c := realClient(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	defer mp.Shutdown(ctx)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	session := func() (*lanes.Session, string) {
		b := newBackend(t, c)
		s, err := lanes.NewSession(ctx, b, lanes.WithMeterProvider(mp))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s, b.Namespace()
	}
	busy, nsBusy := session()
	idle, nsIdle := session()

	before := scrapeMetrics(t, srv.URL)
	for _, ns := range []string{nsBusy, nsIdle} {
		grants := series(before, "lanes_grants_total", ns)
		if len(grants) != 1 || grants[0].GetCounter().GetValue() != 0 {
			t.Errorf("before any grant, lanes_grants_total{lanes_namespace=%q} = %v; want one series at 0", ns, grants)
		}
	}

	// Busy: nine callers queue on gpu (limit 1) at once, each holding it
	// for 30ms: they wait about 0, 30, ... 240ms.
	const callers, hold = 9, 30 * time.Millisecond
	gpu := []lanes.Lane{{Key: "gpu", Limit: 1}}
	tickets, err := busy.Enqueue(ctx, slices.Repeat([]lanes.Request{{Lanes: gpu}}, callers)...)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waits := make([]float64, callers)
	var wg sync.WaitGroup
	for i, tk := range tickets {
		wg.Go(func() {
			l, err := tk.Wait(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			waits[i] = time.Since(start).Seconds()
			time.Sleep(hold)
			_ = l.Release(ctx)
		})
	}
	wg.Wait()
	// Idle: three callers, no one else on gpu in that namespace.
	for range 3 {
		l, err := idle.Acquire(ctx, lanes.Request{Lanes: gpu})
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Release(ctx)
	}

	after := scrapeMetrics(t, srv.URL)
	slices.Sort(waits)
	median := waits[callers/2]
	for _, c := range []struct {
		ns     string
		grants float64
		check  func(p50 float64) bool
		want   string
	}{
		{nsBusy, callers, func(p50 float64) bool { return p50 > median/2.5 && p50 < median*2.5 }, "within 2.5× of the measured median"},
		{nsIdle, 3, func(p50 float64) bool { return p50 < 0.01 }, "under 10ms"},
	} {
		if g := series(after, "lanes_grants_total", c.ns); len(g) != 1 || g[0].GetCounter().GetValue() != c.grants {
			t.Errorf("lanes_grants_total{lanes_namespace=%q} = %v; want %v", c.ns, g, c.grants)
		}
		var granted *dto.Histogram
		for _, m := range series(after, "lanes_wait_duration_seconds", c.ns) {
			for _, l := range m.GetLabel() {
				if l.GetName() == "lanes_outcome" && l.GetValue() == "granted" {
					granted = m.GetHistogram()
				}
			}
		}
		if granted == nil || granted.GetSampleCount() != uint64(c.grants) {
			t.Fatalf("lanes_wait_duration_seconds{lanes_namespace=%q,lanes_outcome=granted} = %v; want %v waits", c.ns, granted, c.grants)
		}
		if n := len(granted.GetBucket()); n < 20 {
			t.Errorf("lanes_wait_duration_seconds has %d buckets; want the 21 from 100µs to 10 min", n)
		}
		if p50 := quantile(0.5, granted); !c.check(p50) {
			t.Errorf("namespace %s: p50 of lanes_wait_duration_seconds = %.4fs; want %s (waits measured %v)", c.ns, p50, c.want, waits)
		} else {
			t.Logf("namespace %s: p50 %.4fs from the buckets; measured median of the busy one %.4fs", c.ns, p50, median)
		}
	}
}
