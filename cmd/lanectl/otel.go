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
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
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
		exp, err := spanExporter(ctx, getenv, stderr)
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
		r, err := metricReader(ctx, getenv, stderr)
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

// spanExporter is autoexport's, but for OTEL_TRACES_EXPORTER=console, whose
// spans go to stderr: lanectl's stdout carries what scripts read (--json,
// --reply, the command's own output), which spans would break.
func spanExporter(ctx context.Context, getenv func(string) string, stderr io.Writer) (sdktrace.SpanExporter, error) {
	switch v := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); v {
	case "console":
		return stdouttrace.New(stdouttrace.WithWriter(stderr))
	case "", "otlp", "none":
		exp, err := autoexport.NewSpanExporter(ctx)
		return exp, named(getenv, "OTEL_TRACES_EXPORTER", err)
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q names no exporter lanectl has (otlp, console or none)", v)
	}
}

// metricReader is autoexport's, but for OTEL_METRICS_EXPORTER=console,
// which writes to stderr as spanExporter's does (and reads no
// OTEL_METRICS_PRODUCERS: lanectl registers no producer).
func metricReader(ctx context.Context, getenv func(string) string, stderr io.Writer) (sdkmetric.Reader, error) {
	switch v := strings.TrimSpace(getenv("OTEL_METRICS_EXPORTER")); v {
	case "console":
		exp, err := stdoutmetric.New(stdoutmetric.WithWriter(stderr))
		if err != nil {
			return nil, err
		}
		return sdkmetric.NewPeriodicReader(exp), nil
	case "", "otlp", "prometheus", "none":
		r, err := autoexport.NewMetricReader(ctx)
		return r, named(getenv, "OTEL_METRICS_EXPORTER", err)
	default:
		return nil, fmt.Errorf("OTEL_METRICS_EXPORTER=%q names no exporter lanectl has (otlp, console, prometheus or none)", v)
	}
}

// named puts the variable that chose the exporter, and its value, before
// the exporter's error, when both are there: OTEL_TRACES_EXPORTER="otlp":
// invalid OTLP protocol...
func named(getenv func(string) string, variable string, err error) error {
	if v := getenv(variable); v != "" && err != nil {
		return fmt.Errorf("%s=%q: %w", variable, v, err)
	}
	return err
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
