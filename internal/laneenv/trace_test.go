package laneenv_test

import (
	"context"
	"slices"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/lanes-dev/lanes/internal/laneenv"
)

// WithTrace writes ctx's span as TRACEPARENT in place of an inherited one,
// drops an inherited TRACESTATE the span does not carry, and leaves the
// environment as it is when there is nothing to write.
func TestWithTrace(t *testing.T) {
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })

	inherited := []string{"PATH=/bin", "TRACEPARENT=00-11111111111111111111111111111111-2222222222222222-01", "TRACESTATE=a=b"}
	if got := laneenv.WithTrace(context.Background(), inherited); !slices.Equal(got, inherited) {
		t.Errorf("WithTrace(no span) = %v; want the environment as it is", got)
	}
	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	sid, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled,
	}))
	want := []string{"PATH=/bin", "TRACEPARENT=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	if got := laneenv.WithTrace(ctx, inherited); !slices.Equal(got, want) {
		t.Errorf("WithTrace(span) = %v; want %v", got, want)
	}
}
