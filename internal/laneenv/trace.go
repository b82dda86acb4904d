package laneenv

import (
	"context"
	"slices"
	"strings"

	"go.opentelemetry.io/contrib/propagators/envcar"
	"go.opentelemetry.io/otel"
)

// WithTrace returns env (NAME=value items) with the trace context of ctx in
// the variables the global propagator (otel.GetTextMapPropagator) writes:
// TRACEPARENT, TRACESTATE and BAGGAGE for W3C's, named as OpenTelemetry's
// environment carriers name them, in place of any inherited ones. So a
// command run under a lane continues the trace of the span that runs it (a
// lanes.hold, an execute_tool). When the propagator writes nothing (none is
// set, or ctx carries no trace), env is returned as it is, so an inherited
// trace context passes through.
func WithTrace(ctx context.Context, env []string) []string {
	prop := otel.GetTextMapPropagator()
	var set []string
	prop.Inject(ctx, &envcar.Carrier{SetEnvFunc: func(k, v string) { set = append(set, k+"="+v) }})
	if len(set) == 0 {
		return env
	}
	var names []string // every variable the propagator owns, normalized
	norm := &envcar.Carrier{SetEnvFunc: func(k, _ string) { names = append(names, k) }}
	for _, f := range prop.Fields() {
		norm.Set(f, "")
	}
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(names, name) {
			out = append(out, kv)
		}
	}
	return append(out, set...)
}
