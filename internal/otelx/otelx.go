// Package otelx tells the packages of lanes whether anyone receives their
// spans and metrics, so that, until an OpenTelemetry provider is set, they
// spend nothing on them.
package otelx

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// The global providers as they are before anyone sets one.
var (
	defaultTracerProvider = otel.GetTracerProvider()
	defaultMeterProvider  = otel.GetMeterProvider()
)

// Tracer is a tracer and whether it was given explicitly.
type Tracer struct {
	trace.Tracer
	own bool
}

// GlobalTracer returns the global tracer of scope: it records once a
// global provider is set.
func GlobalTracer(scope string) Tracer { return Tracer{Tracer: otel.Tracer(scope)} }

// NewTracer returns the tracer of scope from tp.
func NewTracer(tp trace.TracerProvider, scope string) Tracer {
	return Tracer{Tracer: tp.Tracer(scope), own: true}
}

// On reports whether anything receives the spans: a provider given
// explicitly, or a global one set since the program started.
func (t Tracer) On() bool { return t.own || otel.GetTracerProvider() != defaultTracerProvider }

// Meter is a meter and whether it was given explicitly.
type Meter struct {
	metric.Meter
	own bool
}

// GlobalMeter returns the global meter of scope.
func GlobalMeter(scope string) Meter { return Meter{Meter: otel.Meter(scope)} }

// NewMeter returns the meter of scope from mp.
func NewMeter(mp metric.MeterProvider, scope string) Meter {
	return Meter{Meter: mp.Meter(scope), own: true}
}

// On reports whether anything receives the metrics.
func (m Meter) On() bool { return m.own || otel.GetMeterProvider() != defaultMeterProvider }
