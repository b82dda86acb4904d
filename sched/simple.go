package sched

import (
	"context"

	"github.com/lanes-dev/lanes/lanes"
)

// Run runs one batch in one call, for the simple case (Cogitator's
// scheduleToolCalls): the calls of one model response with cfg and o, on
// lanes of their own in memory, by the rules of a Scheduler (safe calls
// together, barriers alone, calls on one key in written order, outcomes in
// call order). It returns once every body has returned, those cut off by a
// timeout included.
//
// Its lanes and run records end with it: calls of two Runs never exclude
// each other, and a run id does not outlive the call. For lanes shared by
// several runs or processes, make a Scheduler on one lanes.Session. Its
// errors are New's and Scheduler.Run's.
func Run(ctx context.Context, cfg Config, calls []Call, o Options) (*Result, error) {
	session, err := lanes.NewSession(ctx, lanes.NewMemory())
	if err != nil {
		return nil, err
	}
	s, err := New(cfg, session)
	if err != nil {
		_ = session.Close()
		return nil, err
	}
	res, err := s.Run(ctx, calls, o)
	s.Wait()
	if cerr := session.Close(); err == nil && cerr != nil {
		return res, cerr
	}
	return res, err
}
