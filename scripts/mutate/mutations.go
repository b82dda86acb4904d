package main

// The curated mutations: each plants one realistic bug, named after the
// rule it breaks, and names the packages (and, where the package is slow,
// the tests) whose fast tests must catch it. An edit is an exact text
// replacement; when its old text is not in the file exactly once, the
// mutation is reported broken and make mutate fails, so a rewrite of the
// code shows here instead of passing silently. Update the edit with the
// code it targets.

// slow are the tests of a package that make mutate skips (go test -skip):
// load tests no mutation needs, which would only make every run longer.
var slow = map[string]string{
	"./sched": "^TestLargeAdmissionsInBoundedSteps$", // 1200 calls on each backend
}

var mutations = []Mutation{
	// sched: DESIGN.md section 5.
	{
		Name: "sched/outcome-order",
		What: "outcomes come back in completion order, not call order (rule 7)",
		Edits: []Edit{{
			File: "sched/run.go",
			Old: `		if len(st.results) == 1 && st.results[0] != nil {
			r.outcomes[i] = *st.results[0]
		}`,
			New: `		if len(st.results) == 1 && st.results[0] != nil {
			k := 0 // the first slot not yet filled: completion order
			for k < len(r.outcomes)-1 && r.outcomes[k].Status != "" {
				k++
			}
			r.outcomes[k] = *st.results[0]
		}`,
		}},
		Pkgs: []string{"./sched"},
	},
	{
		Name: "sched/timeout-from-enqueue",
		What: "a tool's timeout counts from the batch's enqueue, not from the body's start (rule 6)",
		Edits: []Edit{{
			File: "sched/run.go",
			Old:  `limit, c2 = context.WithTimeoutCause(body, st.tool.Timeout, errToolTimeout)`,
			New:  `limit, c2 = context.WithDeadlineCause(body, r.start.Add(st.tool.Timeout), errToolTimeout)`,
		}},
		Pkgs: []string{"./sched"},
	},
	{
		Name: "sched/unsafe-joins-phase",
		What: "an unsafe call shares the phase of the safe calls around it instead of being a barrier (rule 3)",
		Edits: []Edit{{
			File: "sched/run.go",
			Old: `		flush()
		cur = jobs
		flush()`,
			New: `		cur = append(cur, jobs...)`,
		}},
		Pkgs: []string{"./sched"},
	},
	{
		Name: "sched/safe-on-error",
		What: "a Safe function that fails makes its call safe, not unsafe (rule 3)",
		Edits: []Edit{{
			File: "sched/run.go",
			Old:  `	return err == nil && ok`,
			New:  `	return err != nil || ok`,
		}},
		Pkgs: []string{"./sched"},
	},
	{
		Name: "sched/turn-lane-off-by-one",
		What: "the turn lane admits one call more than max_concurrent_tools (rule 4)",
		Edits: []Edit{{
			File: "sched/run.go",
			Old:  `if r.admit.Err() == nil && next < len(phase) && active < r.turn() {`,
			New:  `if r.admit.Err() == nil && next < len(phase) && active <= r.turn() {`,
		}},
		Pkgs: []string{"./sched"},
	},
	{
		Name: "sched/timed-out-releases-lanes",
		What: "a timed-out call gives its lanes back at once, while its body still runs (rule 6)",
		Edits: []Edit{{
			File: "sched/run.go",
			Old: `			go func() {
				defer r.s.stragglers.Done()
				<-results
				cleanup()
			}()`,
			New: `			cleanup()
			go func() {
				defer r.s.stragglers.Done()
				<-results
			}()`,
		}},
		Pkgs: []string{"./sched"},
	},
	{
		Name: "sched/fan-out-never-stops",
		What: `fan_out.on_error = "stop" starts the operations after a failed one anyway (rule 9)`,
		Edits: []Edit{{
			File: "sched/run.go",
			Old:  `	if bad && st.tool.FanOut != nil && st.tool.FanOut.OnError == Stop {`,
			New:  `	if bad && st.tool.FanOut != nil && st.tool.FanOut.OnError == Stop && false {`,
		}},
		Pkgs: []string{"./sched"},
	},
	{
		Name: "sched/idempotent-flipped",
		What: "a call cut off in flight is called safe to retry when its tool is not idempotent (rule 8)",
		Edits: []Edit{{
			File: "sched/run.go",
			Old:  `	if t.Idempotent {`,
			New:  `	if !t.Idempotent {`,
		}},
		Pkgs: []string{"./sched"},
	},

	// fencing: a resource refuses a holder that lost its lease.
	{
		Name: "fencing/memory-refuses-equal",
		What: "MemoryGuard refuses a token equal to the highest seen (a holder checking twice is refused)",
		Edits: []Edit{{
			File: "fencing/memory.go",
			Old:  `if h := g.highest[resource]; t < h {`,
			New:  `if h := g.highest[resource]; t <= h && h != 0 {`,
		}},
		Pkgs: []string{"./fencing"},
	},
	{
		Name: "fencing/file-keeps-first-token",
		What: "FileGuard records only the first token it sees, so a later stale token passes",
		Edits: []Edit{{
			File: "fencing/file.go",
			Old:  `	if t > high {`,
			New:  `	if high == 0 {`,
		}},
		Pkgs: []string{"./fencing"},
	},

	// ---------------------------------------------------------------------
	// PENDING: the Lua and lanes-core mutations. They target scripts/lua/
	// and lanes/ (session.go, memory.go, lease.go), which are being
	// rewritten; they are added here once the rewrite lands, each as an
	// edit of the Lua script and, where the rule lives there too, of
	// lanes/memory.go, run against ./lanes and ./redislane (the
	// conformance suite on memory, miniredis and real Redis) and
	// ./integration -run '^TestChaos' where a chaos scenario guards it:
	//
	//   core/fifo-latest-first   several waiters eligible in one step are
	//                            granted latest-first (lib.lua scan, memory
	//                            scan): caught by ReleaseOfSeveralGrantsIn-
	//                            QueueOrder, ExpiriesTogetherGrantInQueue-
	//                            Order, ClosedSessionHandsOffInQueueOrder
	//                            (verified on a scratch copy; the edits were
	//                            lib.lua "for _, m in ipairs(members) do" ->
	//                            "for i = #members, 1, -1 do local m =
	//                            members[i]", memory.go "range
	//                            slices.Clone(q[...])" -> "range
	//                            slices.Backward(slices.Clone(q[...]))")
	//   core/limit-check         holders + entries ahead compared with <=
	//                            the limit, not <
	//   core/token-increment     a grant path reuses the last token
	//   core/heartbeat-waiters   a heartbeat renews holders only
	//                            (LiveWaiterIsNeverEvicted)
	//   core/handoff-hint        release.lua publishes no grant hint
	//                            (HandoffAtDefaultTTLByHint; verified on a
	//                            scratch copy: "granted = {}" before
	//                            release.lua's finish)
	//   core/reaping             expired holders are not reaped, or only
	//                            holders (DeadHolderExpires, DeadWaiterIs-
	//                            Purged, TestChaosKilledClients)
	//   core/re-entry            a lineage's holder is not lent its slot
	//                            (ReentryAlongLineage)
	//   core/cycle-refusal       a wait-for cycle is not refused
	//                            (LockCycleFailsFast, LockCycleInABatch)
	// ---------------------------------------------------------------------
}
