package main

// The curated mutations: each plants one realistic bug, named after the
// rule it breaks, and names the packages (and, where the package is slow,
// the tests) whose fast tests must catch it. An edit is an exact text
// replacement; when its old text is not in the file exactly once, the
// mutation is reported broken and make mutate fails, so a rewrite of the
// code shows here instead of passing silently. TestEveryMutationApplies
// (mutations_test.go) checks the same in a fraction of a second without
// running any tests, so go test ./... (make test) fails on such a rewrite
// too. Update the edit with the code it targets, so that it plants the same
// bug (its What), and run it alone: go run ./scripts/mutate -run NAME.

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
			File: "sched/settle.go",
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
			File: "sched/exec.go",
			Old:  `limit, c2 = context.WithTimeoutCause(body, ceiling, errToolTimeout)`,
			New:  `limit, c2 = context.WithDeadlineCause(body, r.start.Add(ceiling), errToolTimeout)`,
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
			Old: `next < len(phase) && active < r.turn() {
			n := min(r.turn()-active, len(phase)-next)`,
			New: `next < len(phase) && active <= r.turn() {
			n := min(r.turn()-active+1, len(phase)-next)`,
		}},
		Pkgs: []string{"./sched"},
	},
	{
		Name: "sched/timed-out-releases-lanes",
		What: "a timed-out call gives its lanes back at once, while its body still runs (rule 6)",
		Edits: []Edit{{
			File: "sched/exec.go",
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
			File: "sched/settle.go",
			Old:  `	if bad && st.tool.FanOut != nil && st.tool.FanOut.OnError == Stop {`,
			New:  `	if bad && st.tool.FanOut != nil && st.tool.FanOut.OnError == Stop && false {`,
		}},
		Pkgs: []string{"./sched"},
	},
	{
		Name: "sched/idempotent-flipped",
		What: "a call cut off in flight is called safe to retry when its tool is not idempotent (rule 8)",
		Edits: []Edit{{
			File: "sched/exec.go",
			Old:  `	if t.Idempotent {`,
			New:  `	if !t.Idempotent {`,
		}},
		Pkgs: []string{"./sched"},
	},
	{
		Name: "sched/rerun-idempotent-flipped",
		What: "a call a stopped run left in flight is called safe to retry on the next run when its tool is not idempotent (rule 8)",
		Edits: []Edit{{
			File: "sched/records.go",
			Old: `		if t.Idempotent {
			o.Status, o.Code = SafeToRetry, CodeSafeToRetry`,
			New: `		if !t.Idempotent {
			o.Status, o.Code = SafeToRetry, CodeSafeToRetry`,
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
	// lanes core: DESIGN.md section 3. Each plants the bug in the Lua
	// scripts and, where the rule lives there too, in the memory backend;
	// the conformance suite (memory, miniredis, real Redis) must catch it.
	{
		Name: "core/fifo-latest-first",
		What: "waiters eligible in one step are granted latest first (invariant 2)",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `local function by_seq(a, b) return a[1] < b[1] end`, New: `local function by_seq(a, b) return a[1] > b[1] end`},
			{File: "lanes/memory.go", Old: `slices.SortFunc(cands, func(a, b *memEntry) int { return cmp.Compare(a.seq, b.seq) })`, New: `slices.SortFunc(cands, func(a, b *memEntry) int { return cmp.Compare(b.seq, a.seq) })`},
		},
		Pkgs: []string{"./lanes", "./redislane"}, Run: "TestConformance",
	},
	{
		Name: "core/limit-check",
		What: "a waiter is eligible while holders plus those ahead equal the limit (invariant 1)",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `if #kget(key).h + ahead >= limit then return false end`, New: `if #kget(key).h + ahead > limit then return false end`},
			{File: "lanes/memory.go", Old: `if len(m.holders[l.Key])+ahead >= l.Limit || !m.rateRoom(l, ahead) {`, New: `if len(m.holders[l.Key])+ahead > l.Limit || !m.rateRoom(l, ahead) {`},
			// the lean steps: an enqueue's room, a hand-off's room
			{File: "scripts/lua/lib.lua", Old: `if st[4] + st[2] >= lanes[j][3] then`, New: `if st[4] + st[2] > lanes[j][3] then`},
			{File: "scripts/lua/lib.lua", Old: `local room = limit[key] - st[4]`, New: `local room = limit[key] - st[4] + 1`},
		},
		Pkgs: []string{"./lanes", "./redislane"}, Run: "TestConformance",
	},
	{
		Name: "core/token-increment",
		What: "a grant takes the key's last token again instead of a new one (invariant 5)",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `local function next_token(t) return math.max(t + 1, math.floor(NOW_US * 1.024)) end`, New: `local function next_token(t) return t > 0 and t or math.max(t + 1, math.floor(NOW_US * 1.024)) end`},
			{File: "lanes/memory.go", Old: `		m.tokens[l.Key]++
		e.tokens[l.Key] = m.tokens[l.Key]`, New: `		m.tokens[l.Key] = max(m.tokens[l.Key], 1)
		e.tokens[l.Key] = m.tokens[l.Key]`},
		},
		Pkgs: []string{"./lanes", "./redislane"}, Run: "TestConformance",
	},
	{
		Name: "core/heartbeat-waiters",
		What: "a heartbeat renews holders only: a live waiter is evicted (invariant 6)",
		Edits: []Edit{
			{File: "scripts/lua/heartbeat.lua", Old: `      redis.call('ZADD', K_DEADLINES, dl, id)`, New: `      if e.s == 'h' then redis.call('ZADD', K_DEADLINES, dl, id) end`},
			{File: "lanes/memory.go", Old: `			e.deadline = st.now.Add(ttl.Truncate(time.Millisecond))
			if !e.held {`, New: `			if e.held {
				e.deadline = st.now.Add(ttl.Truncate(time.Millisecond))
			}
			if !e.held {`},
		},
		Pkgs: []string{"./lanes", "./redislane"}, Run: "TestConformance",
	},
	{
		Name: "core/handoff-hint",
		What: "a release grants but publishes no hint: waiters learn at their next poll (section 4, hand-off)",
		Edits: []Edit{
			{File: "scripts/lua/release.lua", Old: `
return finish(nil, was)`, New: `
local g = granted
granted = {}
local r = finish(nil, was)
for _, e in ipairs(g) do r[#r + 1] = e.id end
return r`},
			{File: "scripts/lua/lib.lua", Old: `        redis.call('PUBLISH', WAKE .. o, '[' .. table.concat(hints[o], ',') .. ']')`, New: `        local _ = o`},
			{File: "lanes/memory.go", Old: `	for _, g := range st.granted {
		rel.Granted = append(rel.Granted, g.ID)
	}
	m.mu.Unlock()
	st.notify()`, New: `	for _, g := range st.granted {
		rel.Granted = append(rel.Granted, g.ID)
	}
	m.mu.Unlock()
	st.granted = nil
	st.notify()`},
		},
		Pkgs: []string{"./lanes", "./redislane"}, Run: "TestConformance",
	},
	{
		Name: "core/reaping",
		What: "expired holders are never reaped: a dead holder blocks its keys for good (invariant 6)",
		Edits: []Edit{
			// expire is the one way out for an expired entry (reap, purge,
			// a late heartbeat): it leaves holders in place.
			{File: "scripts/lua/lib.lua", Old: `expire = function(e, touched)
  if e.z then`, New: `expire = function(e, touched)
  if e.s == 'h' then return end
  if e.z then`},
			{File: "lanes/memory.go", Old: `		if !e.deadline.After(st.now) {
			due = append(due, e)
		}`, New: `		if !e.held && !e.deadline.After(st.now) {
			due = append(due, e)
		}`},
		},
		Pkgs: []string{"./lanes", "./redislane"}, Run: "TestConformance",
	},
	{
		Name: "core/re-entry",
		What: "a nested request does not borrow the key its lineage holds: it waits behind its own caller (invariant 10)",
		Edits: []Edit{
			{File: "scripts/lua/enqueue.lua", Old: `        if a and a.s == 'h' and a.x[key] and not borrowed(a, key)`, New: `        if false and a and a.s == 'h' and a.x[key] and not borrowed(a, key)`},
			{File: "lanes/nested.go", Old: `		if x := m.entries[a]; x != nil && x.held && !x.ended() && x.borrowed[key] == nil {`, New: `		if x := m.entries[a]; false && x != nil && x.held && !x.ended() && x.borrowed[key] == nil {`},
		},
		Pkgs: []string{"./lanes", "./redislane"}, Run: "TestConformance",
	},
	{
		Name: "core/cycle-refusal",
		What: "a request that closes a wait-for cycle is queued, not refused (invariant 11)",
		Edits: []Edit{
			{File: "scripts/lua/enqueue.lua", Old: `      if not now and r.l then`, New: `      if false then`},
			{File: "lanes/memory.go", Old: `	if !now && len(e.Lineage) > 0 {`, New: `	if false {`},
		},
		Pkgs: []string{"./lanes", "./redislane"}, Run: "TestConformance",
	},
	{
		Name: "core/borrower-outlives-lender",
		What: "a borrowed slot outlives the lease it borrows from (invariant 10)",
		Edits: []Edit{
			// A holder's removal neither revokes nor requeues its borrowers
			// (and is not kept for them), nor takes them with it when it
			// goes kept: they go on holding what it no longer does.
			{File: "scripts/lua/lib.lua", Old: `  if e.s == 'h' and e.b and not e.z then`, New: `  if false and e.s == 'h' and e.b and not e.z then`},
			{File: "scripts/lua/lib.lua", Old: `  if e.s == 'h' and e.b then
    -- A kept lender that goes`, New: `  if false and e.s == 'h' and e.b then
    -- A kept lender that goes`},
			{File: "lanes/memory.go", Old: `	if e.held && !e.kept && len(m.borrowers[e.ID]) > 0 {`, New: `	if false && e.held && !e.kept && len(m.borrowers[e.ID]) > 0 {`},
			{File: "lanes/memory.go", Old: `	if e.held {
		// A kept lender that goes`, New: `	if false && e.held {
		// A kept lender that goes`},
		},
		Pkgs: []string{"./lanes", "./redislane"}, Run: "TestConformance",
	},
	{
		Name: "core/kept-lender-deadline",
		What: "a lender kept for its borrowers keeps only the deadline it had, not its borrowers' later ones: a chain's keys pass while its last borrower's lease runs (invariant 10)",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `local function extend_lenders(e, dl)
`, New: `local function extend_lenders(e, dl)
  do return end
`},
			{File: "lanes/memory.go", Old: `func (m *Memory) extendLenders(e *memEntry) {
`, New: `func (m *Memory) extendLenders(e *memEntry) {
	if e != nil {
		return
	}
`},
		},
		Pkgs: []string{"./lanes", "./redislane"}, Run: "TestConformance|TestDifferential",
	},
	{
		Name: "core/id-binding",
		What: "an existing id answers for a request with other lanes (invariant 8)",
		Edits: []Edit{
			{File: "scripts/lua/enqueue.lua", Old: `local function same(e, r)
  if #e.k ~= #r.k`, New: `local function same(e, r)
  do return true end
  if #e.k ~= #r.k`},
			{File: "lanes/memory.go", Old: `func sameRequest(e *memEntry, r Request) bool {
	if len(e.Lanes)`, New: `func sameRequest(e *memEntry, r Request) bool {
	if e != nil {
		return true
	}
	if len(e.Lanes)`},
		},
		Pkgs: []string{"./lanes", "./redislane"}, Run: "TestConformance",
	},
	// The lean steps of lib.lua (issue 12): the common enqueue and release
	// taken without the general machinery, which must decide as it would.
	{
		Name: "lean/expiry-ignored",
		What: "a lean step runs while an entry has expired: an enqueue queues behind a dead holder instead of reaping it first (invariant 6)",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `    return d[1] == '\0' and not d[2]`, New: `    return d[1] == '\0'`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestConformance|TestDifferential",
	},
	{
		Name: "lean/rate-unchecked",
		What: "a lean enqueue joins a key whose holder carries a rate without one of its own: one key, two rates (invariant 9)",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `            if not e then return nil end
            local has = false`, New: `            if not e then e = {nil, nil, nil, nil, {{keys[i]}}} end
            local has = false`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestConformance|TestDifferential",
	},
	{
		Name: "lean/unconfirmed",
		What: "a lean enqueue that queues does not check the markers of queue, nested and meta: a vanished meta restarts sequence numbers and a new waiter overtakes the old (invariants 2, 13)",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `    if not (redis.call('ZSCORE', K_QUEUE, '\0') and redis.call('ZSCORE', K_NESTED, '\0')) then return nil end
    local m = redis.call('HMGET', K_META, '\0', 'seq')
    if not m[1] then return nil end`, New: `    local m = redis.call('HMGET', K_META, '\0', 'seq')`},
		},
		Pkgs: []string{"./redislane", "./integration"}, Run: "TestLean|TestStateKeyDeletedRealRedis",
	},
	{
		Name: "lean/handoff-unconfirmed",
		What: "a lean hand-off reads no marker of queue, nested and meta (as in ba9c7be): a waiter is granted from a state that lost nested or meta, where the general path resets (invariant 13)",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `      if FROZEN > NOW or not lean_confirm() then return nil end
      table.sort(keys)`, New: `      if FROZEN > NOW then return nil end
      table.sort(keys)`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestLeanHandoffAfter",
	},
	{
		Name: "lean/dead-waiter-granted",
		What: "a lean hand-off grants the queue member at the head without checking that its entry lives (a member whose entry has no deadline: a key granted to nobody alive)",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `if #cands > SCAN_MAX * 4 or not lean_live(live) then return nil end`, New: `if #cands > SCAN_MAX * 4 then return nil end`},
		},
		Pkgs: []string{"./redislane", "./integration"}, Run: "TestLean",
	},
	{
		Name: "lean/seed-miscounted",
		What: "a lean step puts in its cache of key records a holder count one above the record it wrote: the next lean step on the key finds it fuller than it is and queues a request the general path grants",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `local v = {EPOCH, st[5], st[1], w, st[3], st[4], st[2]}`, New: `local v = {EPOCH, st[5], st[1], w, st[3], st[4] + 1, st[2]}`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestLeanFuzz",
	},
	{
		Name: "lean/request-cache-fields",
		What: "a lean enqueue that finds its request in its cache (the bytes after the id seen before) takes its lanes but drops its fields: the entry loses its call id, tool and tenant",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `local reqs = {{id, v[1], v[2], v[3]}}`, New: `local reqs = {{id, v[1], v[2], ''}}`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestLeanFuzzScenarios",
	},
	{
		Name: "lean/cache-unbounded",
		What: "the lean steps' caches are bounded by entries alone: a key whose holders come one at a time keeps every length of its record, and the library's memory grows with the square of its holders",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `local CACHE_ITEM, CACHE_BYTES = 512, 262144`, New: `local CACHE_ITEM, CACHE_BYTES = 1e12, 1e15`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestLeanCachesBoundedByBytes",
	},
	{
		Name: "lean/one-fields-dropped",
		What: "the lean enqueue of one request of one lane writes its entry without the request's fields: the holder loses its call id, tool and tenant",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `local rec0 = LEAN_HEAD .. v[3] .. ',"k":['`, New: `local rec0 = LEAN_HEAD .. ',"k":['`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestLeanFuzz|TestConformance",
	},
	{
		Name: "lean/one-release-waiters-ignored",
		What: "the lean release of one holder takes its key for idle without looking at its waiters: the slot it frees is granted to nobody until a waiter's heartbeat finds it (invariant 2's hand-off)",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `      if st[2] > 0 and (kl[3] ~= 1 or st[4] ~= 1) then`, New: `      if false then`},
			{File: "scripts/lua/lib.lua", Old: `      if st[2] == 0 then
        redis.call('HDEL', K_ENTRIES, id)`, New: `      if true then
        redis.call('HDEL', K_ENTRIES, id)`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestLeanFuzz|TestConformance",
	},
	{
		Name: "lean/one-busy-holders-unchecked",
		What: "the lean enqueue of one request on a busy key counts a holder that lost its deadline: the general path purges it and grants the request, the lean one queues it behind nobody alive",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `      if not lean_live(stay, sts) then return nil end`, New: `      if false then return nil end`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestLeanFuzz",
	},
	{
		Name: "lean/holder-ttl-without-the-step's-grants",
		What: "a lean enqueue's waiting status tells the holder TTL of the holders its keys had before the step, not of one an earlier request of the same step was granted: a waiter behind it learns a later time than the first lease to run out before it, where the general path counts every holder the step leaves",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `        if st[8] and (not v or dl < v) then v = dl end`, New: `        if false then v = dl end`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestConformanceMiniredis/HolderTTL|TestLeanFuzz",
	},
	{
		Name: "core/holder-ttl-for-every-waiter",
		What: "every waiting status of a full key carries the holder TTL, not only the one a single holder's end would grant: every waiter of a key (of a semaphore, every one of its first limit) polls at its first holder's deadline (break-it reviews: 10,000 waiters behind a 100 ms holder took 94% of Redis's CPU and cost the holder its lease; a semaphore of 1,000 with 3,000 waiters lost all its holders)",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `            if not p or before > limit then`, New: `            if not p then`},
			{File: "scripts/lua/lib.lua", Old: `            if before == limit then`, New: `            if before >= limit then`},
			{File: "scripts/lua/lib.lua", Old: `      if p > limit or p > PURGE_ALL or before > limit then return 0 end
      if before == limit then`, New: `      if p > limit or p > PURGE_ALL then return 0 end
      if before >= limit then`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestConformanceMiniredis/HolderTTL",
	},
	{
		Name: "core/holder-ttl-where-holders-leave-room",
		What: "a waiting status carries the holder TTL of a key whose holders leave it room (a rate, or another key's waiters, holds it back): it polls at a holder's deadline, which can grant it nothing",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `            if before == limit then`, New: `            if #kget(key).h > 0 then`},
			{File: "scripts/lua/lib.lua", Old: `      if p > limit or p > PURGE_ALL or before > limit then return 0 end
      if before == limit then`, New: `      if p > limit or p > PURGE_ALL or before > limit then return 0 end
      if st[4] > 0 then`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestConformanceMiniredis/(HolderTTL|RateWaiterHasNoHolderTTL)",
	},
	{
		Name: "core/holder-ttl-earliest-of-its-keys",
		What: "a waiter of several held keys is told the earliest of their holders' first deadlines, not the latest: it polls at every renewal of a short lease on one key while a long one holds another, though no holder's end can grant it (a review: 500 such waiters, 25,000 commands/s)",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `              if not first or v > first then first = v end`, New: `              if not first or v < first then first = v end`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestConformanceMiniredis/HolderTTLOfSeveralKeys",
	},
	{
		Name: "lean/holder-ttl-earliest-of-its-keys",
		What: "a lean enqueue tells a waiter of several held keys the earliest of their holders' first deadlines, where the general path tells the latest",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `        if not v then return 0 end
        if not first or v > first then first = v end`, New: `        if not v then return 0 end
        if not first or v < first then first = v end`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestConformanceMiniredis/HolderTTLOfSeveralKeys",
	},
	{
		Name: "core/no-look-again-when-a-holder-leaves",
		What: "a holder that leaves one key of a waiter of several without granting it does not tell the waiter to look again: timed by that holder's deadline, it learns of a dead holder of its other key at its next heartbeat (a review: 13.4 s late)",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `          if p and p + f + d >= kl[2] then
            told[#told + 1] = {e.o, e.id}`, New: `          if false then
            told[#told + 1] = {e.o, e.id}`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestConformanceMiniredis/(HolderTTLOfSeveralKeys|DeadHolderOfOneKey|WaiterWithinRoom)",
	},
	{
		Name: "core/look-again-for-every-waiter-within-room",
		What: "a holder's removal tells every waiter of several keys within that key's room to look again, not only one whose holders and waiters ahead were exactly the limit before the step: each release of a churning semaphore makes every such waiter look (a review: releases 5 to 11 times slower)",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `          if p and p + f + d >= kl[2] then`, New: `          if true then`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestConformanceMiniredis/HolderTTLOfSeveralKeys",
	},
	{
		Name: "core/look-again-only-from-the-limit",
		What: "a waiter of several keys that comes within a key's room, not granted, is told to look again only where its place before the step was exactly the limit and only holders left before it (the rule before 2026-12-08): one that a waiter before it left for, or that was past the limit, keeps a holder TTL of the other key's later holder, or 0 (a review: a dead holder taken over 18.5 s late)",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `          if p and p + f + d >= kl[2] then`, New: `          if p and p + f == kl[2] then`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestConformanceMiniredis/WaiterWithinRoom",
	},
	{
		Name: "core/no-look-again-when-a-freed-slot-is-not-taken",
		What: "a waiter that moves up to the limit on a key because a holder left whose slot no waiter took is not told to look again: its holder TTL stays 0 and it learns of a dead holder at its next heartbeat",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `    r.u = (r.f or 0) > (r.a or 0) -- a holder left`, New: `    r.u = false -- a holder left`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestConformanceMiniredis/WaiterWithinRoom",
	},
	{
		Name: "core/look-again-at-each-hand-off",
		What: "a hand-off (a holder's slot granted to the next waiter) tells the waiter that moves up to the limit behind it to look again: a step more for every hand-off",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `    r.u = (r.f or 0) > (r.a or 0) -- a holder left`, New: `    r.u = (r.f or 0) > 0 -- a holder left`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestConformanceMiniredis/WaiterWithinRoom",
	},
	{
		Name: "core/no-look-again-when-a-waiter-ahead-leaves",
		What: "a waiter that moves up to the limit on a key with holders, a waiter ahead of it having left, is not told to look again: its holder TTL stays 0 and it learns of a dead holder at its next heartbeat (a review: 14 s late)",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `      if seq and ((g and tonumber(seq) > g) or r.u) then`, New: `      if seq and r.u then`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestConformanceMiniredis/(WaiterMovedUp|DeadHolderTakenOverAfter)",
	},
	{
		Name: "lean/leave-of-the-head-stays-lean",
		What: "a lean release of waiters that takes the head of a key whose holders fill its limit does not tell the waiter that moves up to look again, where the general path's scan tells it",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `            tell[#tell + 1] = {o, wid}`, New: `            local _ = o`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestConformanceMiniredis/(WaiterMovedUp|DeadHolderTakenOverAfter)",
	},
	{
		Name: "memory/no-look-again-when-a-waiter-ahead-leaves",
		What: "the memory backend does not tell a waiter that moved up to the limit to look again, where lib.lua does",
		Edits: []Edit{
			{File: "lanes/memory.go", Old: `			st.told = append(st.told, ownedHint{q[i].Owner.ID, Hint{ID: q[i].ID}})`, New: `			_ = q`},
		},
		Pkgs: []string{"./lanes"}, Run: "TestConformanceMemory/(WaiterMovedUp|DeadHolderTakenOverAfter)",
	},
	{
		Name: "memory/no-look-again-when-a-holder-leaves",
		What: "the memory backend does not tell a waiter of several keys to look again when a holder leaves one of them without granting it, where lib.lua does",
		Edits: []Edit{
			{File: "lanes/memory.go", Old: `	return look && keys > 1`, New: `	return false`},
		},
		Pkgs: []string{"./lanes"}, Run: "TestConformanceMemory/(HolderTTLOfSeveralKeys|DeadHolderOfOneKey|WaiterWithinRoom)",
	},
	{
		Name: "memory/look-again-only-from-the-limit",
		What: "the memory backend tells a waiter of several keys within a key's room to look again only where its place was exactly the limit and only holders left, where lib.lua tells it too when waiters before it left or it was past the limit",
		Edits: []Edit{
			{File: "lanes/memory.go", Old: `p < l.Limit && p+f+d >= l.Limit`, New: `p < l.Limit && p+f == l.Limit`},
		},
		Pkgs: []string{"./lanes"}, Run: "TestConformanceMemory/WaiterWithinRoom",
	},
	{
		Name: "memory/no-look-again-when-a-freed-slot-is-not-taken",
		What: "the memory backend does not tell the waiter that moved up to the limit behind a holder's slot no waiter took to look again, where lib.lua does",
		Edits: []Edit{
			{File: "lanes/memory.go", Old: `(st.freed[k] > st.taken[k] || (ok && q[i].seq > slices.Min(gone)))`, New: `(ok && q[i].seq > slices.Min(gone))`},
		},
		Pkgs: []string{"./lanes"}, Run: "TestConformanceMemory/WaiterWithinRoom",
	},
	{
		Name: "core/holder-ttl-beside-a-rate",
		What: "a waiting status carries a holder TTL though a rate holds the waiter back (on a lane with a limit and a rate, or on another of its keys): it polls at each holder deadline of a window in which it cannot be granted (a break-it review: 20 steps in 3 s of a waiter held a minute)",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `      if e and (st[5] or 0) == 0 then`, New: `      if e then`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestConformanceMiniredis/RateHeldWaiterHasNoHolderTTL",
	},
	{
		Name: "core/session-ignores-holder-ttl",
		What: "the Session polls a waiting entry only when a rate holds it back, not when its status gives a holder TTL: a waiter behind a holder whose runner died is granted at its next heartbeat, up to a third of its TTL after the lease ran out",
		Edits: []Edit{
			{File: "lanes/heartbeat.go", Old: `	if t := st.HolderTTL; t > 0 && (d == 0 || t < d) {`, New: `	if t := st.HolderTTL; false && t > 0 && (d == 0 || t < d) {`},
		},
		Pkgs: []string{"./lanes"}, Run: "TestConformanceMemory/DeadHolderTakenOverAtItsDeadline",
	},
	{
		Name: "lean/one-handoff-unconfirmed",
		What: "the lean release of the sole holder of a key of limit 1 hands its slot off without reading the markers of queue, nested and meta: a waiter is granted from a state that lost one, where the general path resets (invariant 13)",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `      if FROZEN > NOW or not lean_confirm() then return nil end
      local m = redis.call`, New: `      if FROZEN > NOW then return nil end
      local m = redis.call`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestLeanFuzzScenarios|TestLeanHandoffAfter",
	},
	{
		Name: "lean/one-handoff-dead-head",
		What: "the lean release of the sole holder of a key of limit 1 grants the head of the queue without looking at its deadline: a waiter whose deadline is gone (a state damaged or edited) is granted the key, where the general path drops it and grants the next",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `      if not d or tonumber(d) <= NOW then return nil end`, New: `      if false then return nil end`},
		},
		Pkgs: []string{"./redislane", "./integration"}, Run: "TestLean",
	},
	{
		Name: "lean/one-handoff-other-keys",
		What: "the lean release of the sole holder of a key of limit 1 grants the head of its queue though it waits for other keys too: it holds one of them (invariant 3, all keys at once)",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `if not w or w[2] ~= 'w' or #w[5] ~= 1 or w[5][1][1] ~= key or w[5][1][3] ~= 1`, New: `if not w or w[2] ~= 'w' or w[5][1][3] ~= 1`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestLeanFuzz|TestConformance",
	},
	{
		Name: "lean/head-end-unchecked",
		What: "the lean parse of a record takes a head whose lanes end before the first '],\"s\":\"' (bytes between them, by hand): a record cjson does not read is released by the lean step, where the general path finds no entry",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `          if lanes and c == 93 and p == q + 1 then h = {o, lanes} end`, New: `          if lanes and c == 93 then h = {o, lanes} end`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestLeanFuzzScenarios|TestLeanDamage",
	},
	{
		Name: "core/member-width-unmended",
		What: "the general scan takes a queue member of another width than qmember's (edited by hand) as it stands: counted ahead of its own entry, it leaves the key with no holder and its waiter never granted (invariant 13: no key wedged by leftovers)",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `          if (not seq or #seq ~= 16) and DEAD > 0 then`, New: `          if not seq and DEAD > 0 then`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestLeanReviewScenarios|TestGeneralPathOnEditedWaiter",
	},
	{
		Name: "core/unreadable-waiter-kept",
		What: "the general scan keeps the queue member of a waiter whose record is gone or does not decode while its deadline lives: every waiter behind it waits out that deadline",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `    elseif not e then
      -- A member whose entry has no record`, New: `    elseif false then
      -- A member whose entry has no record`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestGeneralPathOnEditedWaiter",
	},
	{
		Name: "core/infinite-number-stored",
		What: "a record holding a number cjson cannot write back (1e400, by hand) is stored as cjson writes it: the step fails there, after writes Redis does not undo, and strands a waiter",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `  local ok, raw = pcall(cjson.encode, e)
  if ok then return raw end`, New: `  local raw = cjson.encode(e)
  if raw then return raw end`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestLeanReviewScenarios|TestGeneralPathOnEditedWaiter",
	},
	{
		Name: "lean/member-width-taken",
		What: "the lean hand-off takes a queue member of another width than qmember's (edited by hand), where the general path mends it first",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `      if not seq or #seq ~= 16 or not id_ok(wid)`, New: `      if not seq or not id_ok(wid)`},
			{File: "scripts/lua/lib.lua", Old: `              if not seq or #seq ~= 16 or not id_ok(id)`, New: `              if not seq or not id_ok(id)`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestLeanReviewScenarios",
	},
	{
		Name: "lean/long-numbers-copied",
		What: "the lean parse of a record takes numbers of more than 14 digits (edited by hand), whose bytes it copies where the general path writes cjson's 14 digits",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `      if o and canon(pid) and #pid <= 14 then`, New: `      if o and canon(pid) then`},
			{File: "scripts/lua/lib.lua", Old: `or #seq > 14 or #enq > 14 then return nil end`, New: `then return nil end`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestLeanReviewScenarios",
	},
	{
		Name: "lean/control-bytes-copied",
		What: "the lean parse of a record takes strings with a control byte (edited by hand), whose bytes it copies where the general path writes cjson's escapes",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `local o, pid, p = string.match(head, '^{"o":"([^%c"\\]*)","h":"[^%c"\\]*","p":(%d+)()')`, New: `local o, pid, p = string.match(head, '^{"o":"([^"\\]*)","h":"[^"\\]*","p":(%d+)()')`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestLeanReviewScenarios",
	},
	{
		Name: "lean/general-cjson",
		What: "the general path writes every entry record with cjson, in an order the lean steps do not read: on a key that stays busy after a general step, no hand-off or enqueue behind a holder is lean again until the key goes idle",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `local raw = plain_json(e) or json(e)`, New: `local raw = json(e)`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestLeanStepsOnBusyKey",
	},
	{
		Name: "lean/plain-fields-unchecked",
		What: "the general path writes an entry in the lean form whatever its fields: the lineage, borrowed keys and ends of a nested entry are dropped from its record",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `    if not PLAIN_FIELDS[f] then return nil end`, New: `    if false then return nil end`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestLeanFuzz",
	},
	{
		Name: "lean/tombstone-unchecked",
		What: "the lean enqueues while tombstones live do not ask tombs about their ids: an id settled since is enqueued anew (a late copy of a settled step takes the key), and an id released by force keeps its tombstone",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `  if NOW >= TOMBS then return true end`, New: `  if true then return true end`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestLean",
	},
	{
		Name: "lean/leave-room-unchecked",
		What: "a lean release of waiters does not look for room on the keys that keep waiters: the waiter behind one that left is not granted where the general path grants it (invariant 2)",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `        if int(st[5]) > st[4] then return nil end`, New: `        if false then return nil end`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestLeanFuzzScenarios|TestLeanReleaseOfWaiters",
	},
	{
		Name: "lean/leave-holders-unchecked",
		What: "a lean release of waiters counts a holder that lost its deadline: the general path purges it and grants the next waiter, the lean one leaves the key held by nobody alive",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `    if not lean_confirm() or not lean_live(live) then return nil end
    mrun('ZREM', K_QUEUE, members)`, New: `    if not lean_confirm() then return nil end
    mrun('ZREM', K_QUEUE, members)`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestLeanFuzzScenarios",
	},
	{
		Name: "lean/leave-unconfirmed",
		What: "a lean release of waiters reads no marker of queue, nested and meta: it changes a state that lost one, where the general path resets (invariant 13)",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `    if not lean_confirm() or not lean_live(live) then return nil end
    mrun('ZREM', K_QUEUE, members)`, New: `    if not lean_live(live) then return nil end
    mrun('ZREM', K_QUEUE, members)`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestLeanFuzzScenarios",
	},
	{
		Name: "lean/leave-holder-leaving",
		What: "a lean release of waiters keeps a key record that names a leaving waiter as its holder (by hand): the general path's purge, after the removals, frees the slot and grants the next waiter",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `      if gone[id] then return nil end
    end
    -- it changes queue`, New: `      if false then return nil end
    end
    -- it changes queue`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestLeanFuzzScenarios",
	},
	{
		Name: "lean/record-nul",
		What: "the lean steps read an entry record with a NUL byte in its host (by hand), which cjson reads as no record: a lean release removes an entry the general path answers gone",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `'^{"o":"([^%c"\\]*)","h":"[^%c"\\]*","p":(%d+)()'`, New: `'^{"o":"([^%c"\\]*)","h":"[^"\\]*","p":(%d+)()'`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestLeanFuzzScenarios",
	},
	{
		Name: "lean/live-any-score",
		What: "the lean steps count as alive a holder whose deadline is any score, the -inf of deadlines' marker too (a holder named NUL, by hand): the general path's purge drops it and grants the waiter behind, the lean step keeps its slot",
		Edits: []Edit{
			{File: "scripts/lua/lib.lua", Old: `      if not dls[i] or tonumber(dls[i]) <= NOW then return false end`, New: `      if not dls[i] then return false end`},
		},
		Pkgs: []string{"./redislane"}, Run: "TestLeanFuzzScenarios",
	},
	{
		Name:  "core/stale-hint",
		What:  "a grant hint is taken after the waiter's local deadline passed (invariant 6)",
		Edits: []Edit{{File: "lanes/heartbeat.go", Old: `e.seq == h.Seq && time.Now().Before(e.deadline)`, New: `e.seq == h.Seq`}},
		Pkgs:  []string{"./lanes"},
	},
	{
		Name: "core/no-settle",
		What: "an enqueue whose reply was lost is not settled: what it made holds its keys with nobody to renew them (section 4)",
		Edits: []Edit{{File: "lanes/session.go", Old: `	if len(inBackend) > 0 {
		settled := s.settleLater(inBackend)`, New: `	if false {
		settled := s.settleLater(inBackend)`}},
		Pkgs: []string{"./lanes", "./redislane"}, Run: "TestConformance",
	},
	{
		Name: "core/settle-in-background",
		What: "an Acquire given up while its enqueue step had no answer returns before its settle: the caller sees its waiter still queued",
		Edits: []Edit{{File: "lanes/session.go", Old: `		if ctx.Err() != nil {
			// The caller gave up`, New: `		if false {
			// The caller gave up`}},
		Pkgs: []string{"./integration"}, Run: "TestAcquireGivenUpDuringEnqueueLeavesQueues",
	},
	{
		Name: "core/stale-beat",
		What: "a heartbeat's answer is applied by id: a late answer about a released entry grants or fails a new entry of the same id",
		Edits: []Edit{{File: "lanes/heartbeat.go", Old: `		e := es[i]
		if st.ID != e.id || s.entries[e.id] != e {`, New: `		e := s.entries[st.ID]
		if _ = es[i]; e == nil {`}},
		Pkgs: []string{"./integration"}, Run: "TestStaleHeartbeatAnswerSkipsNewEntryOfSameID",
	},
}
