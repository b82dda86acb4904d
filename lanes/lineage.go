package lanes

import "context"

type lineageKey struct{}

// WithLineage returns a context that carries lineage, the entry ids of the
// calls that led here, outermost first. A tool body that starts a nested run
// (a sub-agent, a scheduler run) passes the context it was given, and the
// nested run's requests name this lineage (DESIGN.md section 5, rule 11).
//
// The scheduler (sched) and lanectl batch's command tools read it with
// LineageFrom; Session.Acquire and Session.Enqueue do not: a request sent
// to a Session directly names its lineage in Request.Lineage, e.g.
// Request{Lineage: lanes.LineageFrom(ctx)}. Safe for concurrent use.
func WithLineage(ctx context.Context, lineage []string) context.Context {
	return context.WithValue(ctx, lineageKey{}, append([]string(nil), lineage...))
}

// LineageFrom returns the lineage ctx carries, or nil.
func LineageFrom(ctx context.Context) []string {
	l, _ := ctx.Value(lineageKey{}).([]string)
	return append([]string(nil), l...)
}
