package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/contrib/propagators/autoprop"
	"go.opentelemetry.io/contrib/propagators/envcar"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/lanes-dev/lanes/lanes"
)

// telemetryShutdown bounds the flush of spans and metrics at exit.
const telemetryShutdown = 5 * time.Second

// telemetry is what the standard OpenTelemetry variables set up for one
// run of lanectl: the global tracer and meter providers that lanes,
// redislane and sched report to, and the span of the command.
//
// Traces are on when OTEL_TRACES_EXPORTER names an exporter (otlp,
// console), or when it is unset and OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; metrics alike with
// OTEL_METRICS_EXPORTER (otlp, console, prometheus) and
// OTEL_EXPORTER_OTLP_METRICS_ENDPOINT. OTEL_SDK_DISABLED=true turns both
// off. The exporters (autoexport) and the SDK read the rest of the
// OTEL_* variables: endpoints, headers, protocol, OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, the sampler. Whatever they are, the trace
// context of TRACEPARENT (OTEL_PROPAGATORS: tracecontext and baggage by
// default) is the parent of the command's span, and passes on to the
// commands lock and batch run.
type telemetry struct {
	tp     *sdktrace.TracerProvider // nil when traces are off
	mp     *sdkmetric.MeterProvider // nil when metrics are off
	span   trace.Span               // the command's; nil before it starts
	stderr io.Writer
}

// startTelemetry sets telemetry up from getenv's OTEL_* variables and
// returns ctx with the trace context TRACEPARENT names. A variable the
// exporters refuse turns that signal off with one line on stderr: lanectl
// works on without it.
func startTelemetry(ctx context.Context, getenv func(string) string, stderr io.Writer) (context.Context, *telemetry) {
	t := &telemetry{stderr: stderr}
	prop := autoprop.NewTextMapPropagator()
	otel.SetTextMapPropagator(prop)
	ctx = prop.Extract(ctx, envCarrier(getenv))
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return ctx, t
	}
	if signalOn(getenv, "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
		t.errorsTo()
		exp, err := autoexport.NewSpanExporter(ctx)
		switch {
		case err != nil:
			fmt.Fprintf(stderr, "lanectl: traces off: %v\n", err)
		case !autoexport.IsNoneSpanExporter(exp):
			t.tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
			otel.SetTracerProvider(t.tp)
		}
	}
	if signalOn(getenv, "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") {
		t.errorsTo()
		r, err := autoexport.NewMetricReader(ctx)
		switch {
		case err != nil:
			fmt.Fprintf(stderr, "lanectl: metrics off: %v\n", err)
		case !autoexport.IsNoneMetricReader(r):
			t.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
			otel.SetMeterProvider(t.mp)
		}
	}
	return ctx, t
}

// signalOn reports whether the variables turn a signal on: its exporter
// named and not "none", or, unnamed, an OTLP endpoint given. Unlike a
// long-running service, lanectl sends nothing unless asked.
func signalOn(getenv func(string) string, exporter, endpoint string) bool {
	switch v := strings.TrimSpace(getenv(exporter)); v {
	case "":
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv(endpoint) != ""
	case "none":
		return false
	}
	return true
}

// errorsTo reports the first error of the exporters on stderr, in one
// line, and no more: a collector that is down should not flood a
// terminal.
func (t *telemetry) errorsTo() {
	var once sync.Once
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		once.Do(func() {
			fmt.Fprintf(t.stderr, "lanectl: telemetry: %s (further telemetry errors not shown)\n", strings.Join(strings.Fields(err.Error()), " "))
		})
	}))
}

// command starts the span of cmd ("lanectl lock"...), a child of the
// context TRACEPARENT named, and makes it the parent of what cmd does.
func (t *telemetry) command(cmd *cobra.Command, namespace string) {
	if t == nil || t.tp == nil {
		return
	}
	ctx, span := t.tp.Tracer(lanes.ScopeName+"/cmd/lanectl").Start(cmd.Context(), cmd.CommandPath(),
		trace.WithAttributes(lanes.AttrNamespace.String(namespace)))
	cmd.SetContext(ctx)
	t.span = span
}

// end ends the command's span with its exit status, and flushes and shuts
// down the providers, for up to telemetryShutdown.
func (t *telemetry) end(err error, code int) {
	if t == nil {
		return
	}
	if t.span != nil {
		t.span.SetAttributes(attribute.Int("process.exit.code", code))
		if code != exitOK && err != nil {
			t.span.SetStatus(codes.Error, err.Error())
		}
		t.span.End()
	}
	ctx, cancel := context.WithTimeout(context.Background(), telemetryShutdown)
	defer cancel()
	if t.tp != nil {
		_ = t.tp.Shutdown(ctx)
	}
	if t.mp != nil {
		_ = t.mp.Shutdown(ctx)
	}
}

// envCarrier reads a propagator's fields from the environment getenv
// gives, named as OpenTelemetry's environment carriers name them
// (traceparent is TRACEPARENT).
type envCarrier func(string) string

func (e envCarrier) Get(key string) string {
	var name string
	(&envcar.Carrier{SetEnvFunc: func(k, _ string) { name = k }}).Set(key, "")
	return e(name)
}
func (envCarrier) Set(string, string) {}
func (envCarrier) Keys() []string     { return nil }
