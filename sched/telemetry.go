package sched

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/lanes-dev/lanes/internal/otelx"
	"github.com/lanes-dev/lanes/lanes"
)

// Option configures New.
type Option func(*Scheduler)

// WithTracerProvider sets where the scheduler's spans go: one "lanes.batch"
// span per Run, and one "execute_tool {tool}" span per execution, a child
// of its lease's "lanes.hold" span, each with lanes.namespace (the
// session's) and, for an execution that did not end ok, error.type (its
// Status). Default: the global provider; until one is set, the scheduler
// spends nothing on spans.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(s *Scheduler) { s.tracer = otelx.NewTracer(tp, lanes.ScopeName) }
}

// Attribute keys of the scheduler's spans, beside those of package lanes.
const (
	attrOperationName = attribute.Key("gen_ai.operation.name")
	attrRunID         = attribute.Key("lanes.run_id")
	attrCalls         = attribute.Key("lanes.calls")
	attrOperation     = attribute.Key("lanes.operation")
	attrErrorType     = attribute.Key("error.type")
)

// startBatch starts the span of one Run.
func (s *Scheduler) startBatch(ctx context.Context, calls []Call, o Options) (context.Context, trace.Span) {
	if !s.tracer.On() {
		return ctx, nil
	}
	ctx, span := s.tracer.Start(ctx, "lanes.batch")
	if span.IsRecording() {
		span.SetAttributes(lanes.AttrNamespace.String(s.session.Namespace()), attrRunID.String(o.RunID), attrCalls.Int(len(calls)))
		if o.Tenant != "" {
			span.SetAttributes(lanes.AttrTenant.String(o.Tenant))
		}
	}
	return ctx, span
}

// startTool starts the span of one execution, a child of hold's span.
func (s *Scheduler) startTool(ctx, hold context.Context, c Call, op int) (context.Context, trace.Span) {
	if !s.tracer.On() {
		return ctx, nil
	}
	ctx = trace.ContextWithSpan(ctx, trace.SpanFromContext(hold))
	ctx, span := s.tracer.Start(ctx, "execute_tool "+c.Tool)
	if span.IsRecording() {
		span.SetAttributes(lanes.AttrNamespace.String(s.session.Namespace()),
			attrOperationName.String("execute_tool"), lanes.AttrToolName.String(c.Tool),
			lanes.AttrCallID.String(c.ID), attrOperation.Int(op))
	}
	return ctx, span
}

// endTool ends an execution's span with its outcome.
func endTool(span trace.Span, o Outcome) {
	if span == nil {
		return
	}
	if span.IsRecording() {
		span.SetAttributes(lanes.AttrOutcome.String(string(o.Status)))
		if len(o.Tokens) > 0 {
			span.SetAttributes(lanes.AttrTokens.String(tokenList(o.Tokens)))
		}
		if o.Status != OK {
			msg := string(o.Status)
			if o.Err != nil {
				msg = o.Err.Error()
			}
			span.SetAttributes(attrErrorType.String(string(o.Status)))
			span.SetStatus(codes.Error, msg)
		}
	}
	span.End()
}

// endBatch ends a Run's span with how many calls ended how.
func endBatch(span trace.Span, res *Result) {
	if span == nil {
		return
	}
	if span.IsRecording() && res != nil {
		count := map[Status]int{}
		for _, o := range res.Outcomes {
			count[o.Status]++
		}
		for st, n := range count {
			if st == "" {
				st = "not_run"
			}
			span.SetAttributes(attribute.Int("lanes.outcomes."+string(st), n))
		}
	}
	span.End()
}

func tokenList(tokens map[string]uint64) string {
	out := ""
	for k, v := range tokens {
		if out != "" {
			out += ","
		}
		out += k + "=" + strconv.FormatUint(v, 10)
	}
	return out
}
