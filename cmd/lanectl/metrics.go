package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/lanes-dev/lanes/lanes"
)

// metricsKeysEnv names the variable that gives `watch` its allow-list of
// raw keys when --metrics-key does not: patterns separated by commas.
const metricsKeysEnv = "LANES_METRICS_KEYS"

// metricsOptions are watch's flags for the namespace's metrics.
type metricsOptions struct {
	addr string   // --metrics-addr: where to serve /metrics; "" for nowhere
	keys []string // --metrics-key: the keys reported by name (lanes.WithRawKeys)
}

// serveMetrics reports the metrics of b's namespace (lanes.RegisterMetrics)
// on the namespace's behalf: to Prometheus at http://ADDR/metrics when
// --metrics-addr names an address, through OpenTelemetry's Prometheus
// exporter on a registry of its own, and to the exporter the OTEL_*
// variables set up, if any. It says where it serves on stderr. The
// returned function stops it all.
func (o *watchOptions) serveMetrics(ctx context.Context, b lanes.Backend, stderr io.Writer) (func(), error) {
	keys := o.metrics.keys
	if len(keys) == 0 {
		if v := o.global.getenv(metricsKeysEnv); v != "" {
			keys = strings.Split(v, ",")
		}
	}
	opts := []lanes.MetricsOption{lanes.WithRawKeys(keys...)}
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if t := o.global.telemetry; t != nil && t.mp != nil {
		reg, err := lanes.RegisterMetrics(t.mp, b, opts...)
		if err != nil {
			return nil, usageErrorf("--metrics-key: %s", describe(err))
		}
		stops = append(stops, func() { _ = reg.Unregister() })
	}
	if o.metrics.addr == "" {
		return stop, nil
	}
	addr, shutdown, err := servePrometheus(ctx, o.metrics.addr, func(mp metric.MeterProvider) (metric.Registration, error) {
		return lanes.RegisterMetrics(mp, b, opts...)
	})
	if err != nil {
		stop()
		return nil, err
	}
	stops = append(stops, shutdown)
	fmt.Fprintf(stderr, "watch: metrics of namespace %s at http://%s/metrics\n", o.global.namespace, addr)
	return stop, nil
}

// servePrometheus serves, at http://addr/metrics, the metrics that
// register reports to a meter provider read by OpenTelemetry's Prometheus
// exporter, and returns the address it listens on.
func servePrometheus(ctx context.Context, addr string, register func(metric.MeterProvider) (metric.Registration, error)) (string, func(), error) {
	promReg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(promReg))
	if err != nil {
		return "", nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	reg, err := register(mp)
	if err != nil {
		_ = mp.Shutdown(context.Background())
		var inv *lanes.InvalidError
		if errors.As(err, &inv) {
			return "", nil, usageErrorf("--metrics-key: %s", describe(err))
		}
		return "", nil, err
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		_ = reg.Unregister()
		_ = mp.Shutdown(context.Background())
		return "", nil, &exitError{code: exitCannotListen, err: fmt.Errorf("watch cannot listen on --metrics-addr %s: %w", addr, err)}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(promReg, promhttp.HandlerOpts{Registry: promReg}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = reg.Unregister()
		_ = mp.Shutdown(ctx)
	}, nil
}
