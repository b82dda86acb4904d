-- enqueue.lua: place a batch of requests in their lanes' queues, in order,
-- in one atomic step, and grant those that are eligible.
--
-- KEYS: the seven of lib.lua.
-- ARGV: [1] protocol, [2] hint channel prefix, [3] TTL (ms, 1 to MAX_TTL),
--       [4] owner id, [5] host, [6] pid, [7] requests as a JSON list of
--       {"id": entry id, "k": [[key, limit], ...], "c": call id,
--        (a lane with a rate: [key, limit, rate limit 1 to MAX_LIMIT,
--        window ms 1 to MAX_RATE_PER, cost 1 to the rate limit]),
--        "t": tool, "n": tenant, "l": [lineage ids]} ("l" absent when empty):
--       1 to MAX_STEP_REQUESTS requests with distinct ids and
--       MAX_STEP_LANES lanes in all, each within the bounds of lib.lua.
--       Anything else is refused before any change.
-- Reply (sent flat, lib.lua's finish: epoch, more, then per status id,
--        state, seq, wait, n and n values):
--        {epoch, statuses, more}: one status per request, in order
--        (more as heartbeat.lua's):
--        {id, "h", {key, token, ...}, seq}, {id, "w", {key, position from
--        1, ...}, seq} (then wait ms when a rate holds it back), or, when that one request is refused and nothing
--        of it changed: {id, "e", {message}} (another owner holds the id),
--        {id, "x", {message}} (the id names another request: other lanes
--        or another lineage), {id, "t", {message}} (the id was released
--        since: a late copy of a settled step; or its entry ended, revoked
--        or kept for revoked borrowers), {id, "b", {message}} (an
--        ancestor it would borrow a key from lends to MAX_BORROWERS nested
--        entries already), {id, "c", {cycle in words, JSON {entries,
--        keys}}} (it would close a wait-for cycle through nested calls,
--        DESIGN.md invariant 11).
--        An id that exists already with the same lanes and lineage is not
--        enqueued again: for the same owner (a retry) it keeps its place and
--        state and its deadline is renewed; a waiting entry of another owner
--        passes to this owner, keeping its place, and the old owner gets a
--        hint. A request whose lineage holds a key takes it by re-entry: no
--        queue, no slot, the lender's token (invariant 10).
-- Errors: LANES_BADARG <field> <what>; LANES_VERSION <protocol> <other>;
--        LANES_LIMIT <recorded> <requested> <key> when a key's recorded
--        limit differs; LANES_RATE <recorded limit> <recorded ms>
--        <requested limit> <requested ms> <key> when the rate a key is in
--        use with differs (0 0: none); LANES_EXHAUSTED when sequence numbers would pass
--        MAX_SEQ while entries wait. Then nothing is enqueued.

local lean = lean_enqueue(KEYS, ARGV) -- the common step, lean (lib.lua)
if lean then return lean end
local err = begin(KEYS, ARGV)
if err then return err end

local ttl = int_in(ARGV[3], 1, MAX_TTL)
if not ttl then return badarg('ttl', 'must be a whole number of ms from 1 to ' .. MAX_TTL) end
local owner, host = ARGV[4], ARGV[5]
if not id_ok(owner) then return badarg('owner', 'id must be 1 to ' .. MAX_ID_LEN .. ' bytes of printable ASCII without spaces') end
if not field_ok(host) then return badarg('host', 'must be at most ' .. MAX_FIELD_LEN .. ' bytes of UTF-8 without control characters') end
local pid = int_in(ARGV[6], 0, 4294967295)
if not pid then return badarg('pid', 'must be a whole number from 0 to 2^32-1') end
local decoded, reqs = pcall(cjson.decode, ARGV[7] or '')
if not decoded or type(reqs) ~= 'table' or #reqs == 0 or #reqs > MAX_STEP_REQUESTS then
  return badarg('requests', 'must be a JSON list of 1 to ' .. MAX_STEP_REQUESTS .. ' requests')
end
-- the optional string fields of a request (call id, tool, tenant)
local REQUEST_FIELDS = {'c', 't', 'n'}
-- at names request i in a refusal.
local function at(i) return 'request ' .. i .. ': ' end
do
  -- (the checks allocate little per request unless they refuse it)
  local lanes_total, ids = 0, {}
  for i, r in ipairs(reqs) do
    if type(r) ~= 'table' or not id_ok(r.id) then
      return badarg('id', at(i) .. 'an entry id is 1 to ' .. MAX_ID_LEN .. ' bytes of printable ASCII without spaces')
    end
    if ids[r.id] then return badarg('id', at(i) .. 'entry id ' .. r.id .. ' appears twice in one step') end
    ids[r.id] = true
    if type(r.k) ~= 'table' or #r.k == 0 or #r.k > MAX_LANES then
      return badarg('lanes', at(i) .. 'a request names 1 to ' .. MAX_LANES .. ' lanes')
    end
    local keys = #r.k > 1 and {} -- to find a key named twice
    for _, kl in ipairs(r.k) do
      if type(kl) ~= 'table' or not key_ok(kl[1]) then
        return badarg('key', at(i) .. 'a key is 1 to ' .. MAX_KEY_LEN .. ' bytes of UTF-8 without control characters')
      end
      if type(kl[2]) ~= 'number' or not int_in(kl[2], 1, MAX_LIMIT) then
        return badarg('limit', at(i) .. 'key ' .. kl[1] .. ': a limit is a whole number from 1 to ' .. MAX_LIMIT)
      end
      if keys then
        if keys[kl[1]] then return badarg('key', at(i) .. 'key ' .. kl[1] .. ' is named twice') end
        keys[kl[1]] = true
      end
      -- rate lanes: [key, limit, rate limit, window ms, cost]
      if #kl > 2 and (#kl ~= 5 or not int_in(kl[3], 1, MAX_LIMIT) or not int_in(kl[4], 1, MAX_RATE_PER)
          or not int_in(kl[5], 1, kl[3])) then
        return badarg('rate', at(i) .. 'key ' .. kl[1] .. ': a rate is a limit from 1 to ' .. MAX_LIMIT .. ', a window of 1 to '
          .. MAX_RATE_PER .. ' ms and a cost from 1 to the limit')
      end
    end
    lanes_total = lanes_total + #r.k
    for _, f in ipairs(REQUEST_FIELDS) do
      if not field_ok(r[f]) then
        return badarg('field', at(i) .. f .. ' must be at most ' .. MAX_FIELD_LEN .. ' bytes of UTF-8 without control characters')
      end
    end
    if r.l ~= nil then
      if type(r.l) ~= 'table' or #r.l > MAX_LINEAGE then
        return badarg('lineage', at(i) .. 'a lineage is a list of at most ' .. MAX_LINEAGE .. ' entry ids')
      end
      for _, a in ipairs(r.l) do
        if not id_ok(a) or a == r.id then
          return badarg('lineage', at(i) .. 'a lineage holds entry ids other than the request\'s own')
        end
      end
      if #r.l == 0 then r.l = nil end
    end
  end
  if lanes_total > MAX_STEP_LANES then
    return badarg('step', 'a step takes at most ' .. MAX_STEP_LANES .. ' lanes, this one ' .. lanes_total)
  end
end

-- The lean path: a step whose requests are all new (no entry, no
-- tombstone of their ids), without lineage, on keys with neither holders nor waiters,
-- each named once in the step, while nothing has expired and nothing is
-- frozen, is granted whole from what two reads gave (the markers of lanes
-- and entries with the records), in at most one write per key, entry and
-- deadline.
local keys, ids, count = {}, {}, {}
for _, r in ipairs(reqs) do
  ids[#ids + 1] = r.id
  for _, kl in ipairs(r.k) do
    if not count[kl[1]] then
      keys[#keys + 1] = kl[1]
      count[kl[1]] = 0
    end
    count[kl[1]] = count[kl[1]] + 1
  end
end
err = open(true, keys, ids)
if err then return err end
local exp, whole = expiring()
local lean = whole and #exp == 0 and FROZEN <= NOW
for _, r in ipairs(reqs) do
  if not lean then break end
  if ERAW[r.id] or r.l then lean = false end
  for _, kl in ipairs(r.k) do
    if kl[3] then lean = false end -- rate lanes take the full path
    if count[kl[1]] > 1 or not idle(kget(kl[1])) then lean = false end
  end
end
-- last: the one command it may cost is for a step that is lean otherwise
-- (a retry of an existing entry never reads tombs, as on the general path)
if lean and untombed(ids) then
  note_ttl(ttl)
  putoff() -- nothing reads a deadline after a grant here
  local out = {}
  for i, r in ipairs(reqs) do
    local e = {id = r.id, o = owner, h = host, p = pid, c = r.c, t = r.t, n = r.n,
               k = r.k, s = 'w', q = 0, e = NOW}
    grant(e, false, NOW + ttl, false)
    out[i] = status(e, true)
  end
  return finish(out)
end

err = confirm(true, whole)
if err then return err end
note_ttl(ttl)
reap(whole and exp or nil) -- expired entries go before anything is decided

-- same reports whether the stored entry e was made by request r: the same
-- lanes (keys and limits, in any order) and the same lineage.
local function same(e, r)
  if #e.k ~= #r.k or #(e.l or {}) ~= #(r.l or {}) then return false end
  local lim = {}
  for _, kl in ipairs(e.k) do lim[kl[1]] = kl end
  for _, kl in ipairs(r.k) do
    local o = lim[kl[1]]
    if not o or o[2] ~= kl[2] or o[3] ~= kl[3] or o[4] ~= kl[4] or o[5] ~= kl[5] then return false end
  end
  for i, a in ipairs(e.l or {}) do
    if r.l[i] ~= a then return false end
  end
  return true
end

-- An existing entry past its deadline is gone first; then check every
-- limit before changing anything (DESIGN.md invariant 9). A key's limit is
-- recorded while it has holders or waiters.
local batch, rates, existing, settled, gone = {}, {}, {}, {}, {}
for _, r in ipairs(reqs) do
  local e = load(r.id)
  if e and not alive(r.id) then
    -- Past its deadline: gone, and this request is a new one; unless it
    -- lends to holders, which keeps it (ended): then the id is taken.
    expire(e, gone)
    e = load(r.id)
  end
  existing[r.id] = e or false
  settled[r.id] = not e and tombed(r.id, 's')
end
scan(gone)
for _, r in ipairs(reqs) do
  if not existing[r.id] then
    for _, kl in ipairs(r.k) do
      local key, limit = kl[1], kl[2]
      local rec = batch[key]
      if not rec then
        local kr = kget(key)
        if not idle(kr) then rec = kr.l end
      end
      if rec and rec ~= limit then
        finish() -- what the reap above granted is still told
        return redis.error_reply(string.format('LANES_LIMIT %d %d %s', rec, limit, key))
      end
      batch[key] = limit
      -- rate lanes: one key, one rate (0 0: none)
      local rl, rp
      if rates[key] then
        rl, rp = rates[key][1], rates[key][2]
      else
        rl, rp = rate_recorded(key)
      end
      if rl and (rl ~= (kl[3] or 0) or rp ~= (kl[4] or 0)) then
        finish()
        return redis.error_reply(string.format('LANES_RATE %d %d %d %d %s', rl, rp, kl[3] or 0, kl[4] or 0, key))
      end
      rates[key] = {kl[3] or 0, kl[4] or 0}
    end
  end
end

-- waits_for lists what entry x waits for, as {id, kind, key}: kind "h" a
-- holder of a key x is queued on, "q" the entry queued just before x on it
-- (which waits for the rest: reachability is the same as through every
-- entry ahead, and the search stays small); kind "n" a nested call
-- started under x, which x cannot finish before. A new request (x.new) is
-- behind the last entry of each queue.
local function waits_for(x)
  local out = {}
  local function add(list, kind, key, skip)
    for _, m in ipairs(list) do
      if m ~= '\0' then out[#out + 1] = {string.sub(m, skip), kind, key} end
    end
  end
  if x.s == 'w' then
    for _, kl in ipairs(x.k) do
      local key = kl[1]
      if not borrowed(x, key) then
        local hs = {}
        for j, h in ipairs(kget(key).h) do hs[j] = h end
        table.sort(hs) -- by id, as the memory backend reads them
        for j = 1, math.min(#hs, CYCLE_VISITS) do out[#out + 1] = {hs[j], 'h', key} end
        local from = hi(key)
        if not x.new then from = '(' .. qmember(key, x.q, x.id) end
        add(redis.call('ZREVRANGEBYLEX', K_QUEUE, from, lo(key), 'LIMIT', '0', '1'), 'q', key, #key + 19)
      end
    end
  end
  if not x.new then
    add(redis.call('ZRANGEBYLEX', K_NESTED, lo(x.id), hi(x.id), 'LIMIT', '0', dec(CYCLE_VISITS)), 'n', '', #x.id + 2)
  end
  return out
end

local function wait_words(from, kind, key, to)
  if kind == 'n' then return from .. ' waits for its nested call ' .. to end
  if kind == 'h' then return from .. ' waits for key "' .. key .. '" held by ' .. to end
  return from .. ' waits for key "' .. key .. '" behind ' .. to
end

-- cycle searches, breadth first, whether the new waiting request r waits
-- (through holders, earlier waiters and nested calls) for one of its own
-- ancestors, which wait for r (DESIGN.md invariant 11). It loads at most
-- CYCLE_VISITS entries. It returns the shortest such cycle found, in
-- words, its entries and its keys, or nil.
local function cycle(r)
  local ancestor = {}
  for _, a in ipairs(r.l or {}) do ancestor[a] = true end
  local prev, seen = {}, {[r.id] = true}
  local queue, head, visits = {r}, 1, 0
  while head <= #queue do
    local x = queue[head]
    head = head + 1
    for _, ed in ipairs(waits_for(x)) do
      local y = ed[1]
      if not seen[y] then
        seen[y] = true
        prev[y] = {x.id, ed[2], ed[3]}
        if ancestor[y] then
          local steps, cur = {}, y
          while cur ~= r.id do
            table.insert(steps, 1, {cur, prev[cur][2], prev[cur][3]})
            cur = prev[cur][1]
          end
          local words, entries, keys, from = {}, {r.id}, {}, r.id
          for _, s in ipairs(steps) do
            words[#words + 1] = wait_words(from, s[2], s[3], s[1])
            entries[#entries + 1] = s[1]
            if s[3] ~= '' then keys[#keys + 1] = s[3] end
            from = s[1]
          end
          words[#words + 1] = wait_words(from, 'n', '', r.id)
          return table.concat(words, '; '), entries, keys
        end
        if visits < CYCLE_VISITS then
          visits = visits + 1
          local ye = load(y)
          if ye then queue[#queue + 1] = ye end
        end
      end
    end
  end
  return nil
end

-- Sequence numbers stay below MAX_SEQ: past it they start again from 1
-- when no entry waits (only waiters' order rests on them); while entries
-- wait, the step is refused before any change. seq is the last number
-- taken; the step writes it back once, at its end.
local seq = tonumber(redis.call('HGET', K_META, 'seq') or '0')
local seq0 = seq
if not seq or seq < 0 or seq > MAX_SEQ or seq ~= math.floor(seq) then
  -- Edited by hand (a break-it review: "abc" failed the step after its
  -- reap's grants, half done, and every general enqueue after it; "inf"
  -- refused every enqueue while entries waited): the
  -- last number taken is read again from the queue, above every waiter's,
  -- and written back.
  seq, seq0 = 0, -1
  for _, m in ipairs(redis.call('ZRANGE', K_QUEUE, 0, -1)) do
    seq = math.max(seq, tonumber(string.match(m, '%z(%d+)%z') or '0'))
  end
end
if seq + #reqs > MAX_SEQ then
  if redis.call('ZCARD', K_QUEUE) > 1 then
    finish()
    return redis.error_reply('LANES_EXHAUSTED sequence numbers ran out while entries wait')
  end
  seq, seq0 = 0, -1
end

-- room reports whether every key of r's queued lanes has room for one more
-- entry behind all that hold or wait.
local function room(queued)
  for _, kl in ipairs(queued) do
    local key, limit = kl[1], kl[2]
    local r = kget(key)
    if #r.h + r.w >= limit then
      if not stale(r) then return false end
      -- An expired holder the reap did not reach (more than REAP_MAX were
      -- due), or one without a record, counts no more; the waiters its
      -- slot frees are granted first.
      local touched = {}
      r = purge(key, touched)
      scan(touched)
      r = kget(key)
      if #r.h + r.w >= limit then return false end
    end
    if not rate_room(kl, r.w) then return false end -- rate lanes
  end
  return true
end

local out = {}
for i, r in ipairs(reqs) do
  local e = existing[r.id]
  if e and not same(e, r) then
    out[i] = {r.id, 'x', {'entry ' .. r.id .. ' exists with other lanes or another lineage; an entry id names one request'}}
  elseif e and ended(e) then
    out[i] = {r.id, 't', {'entry ' .. r.id .. ' ended since this enqueue was sent (its lease was revoked, or released)'}}
  elseif e and e.o ~= owner and e.s == 'h' then
    out[i] = {r.id, 'e', {string.format('entry %s is held by another owner (%s pid %s); entry ids must be unique per call',
      r.id, e.h or '?', tostring(e.p))}}
  elseif e then
    if e.o ~= owner then
      told[#told + 1] = {e.o, e.id} -- its old owner learns it is gone
      e.o, e.h, e.p = owner, host, pid
      store(e)
    end
    redis.call('ZADD', K_DEADLINES, dec(NOW + ttl), r.id)
    out[i] = status(e, true)
  elseif settled[r.id] then
    out[i] = {r.id, 't', {'entry ' .. r.id .. ' was released before this enqueue arrived'}}
  else
    e = {id = r.id, o = owner, h = host, p = pid, c = r.c, t = r.t, n = r.n,
         l = r.l, k = r.k, s = 'w', q = 0, e = NOW}
    -- A key a request's lineage holds is borrowed from the nearest such
    -- ancestor; the others are queued.
    local queued, lenders, overlent = {}, {}, nil
    for _, kl in ipairs(r.k) do
      local key = kl[1]
      -- The nearest ancestor that holds key in its own right: its record
      -- has a token for key not borrowed (the lineage is short; the key's
      -- holders may be many). An ended or expired holder lends nothing.
      local lender
      for j = #(r.l or {}), 1, -1 do
        local a = load(r.l[j])
        if a and a.s == 'h' and a.x[key] and not borrowed(a, key) and not ended(a) and alive(a.id) then
          lender = r.l[j]
          break
        end
      end
      if lender then
        if not lenders[lender] and redis.call('ZLEXCOUNT', K_NESTED, '[ ' .. lender .. '\0', '( ' .. lender .. '\1') >= MAX_BORROWERS then
          overlent = lender
        end
        e.r = e.r or {}
        e.r[key] = lender
        lenders[lender] = true
      else
        queued[#queued + 1] = kl
      end
    end
    if overlent then
      out[i] = {r.id, 'b', {'entry ' .. overlent .. ' already lends its keys to ' .. MAX_BORROWERS .. ' nested entries'}}
    else
      local now = FROZEN <= NOW and room(queued)
      local words, entries, keys
      if not now and r.l then
        e.new = true
        words, entries, keys = cycle(e)
        e.new = nil
      end
      if words then
        out[i] = {r.id, 'c', {words, cjson.encode({entries = entries, keys = keys})}}
      else
        clear_tombs(r.id)
        for _, a in ipairs(r.l or {}) do
          redis.call('ZADD', K_NESTED, '0', a .. '\0' .. r.id)
        end
        for a in pairs(lenders) do
          redis.call('ZADD', K_NESTED, '0', ' ' .. a .. '\0' .. r.id)
          local lender = load(a)
          if lender and not lender.b then
            lender.b = 1 -- its release ends or requeues its borrowers
            store(lender)
          end
        end
        if now then
          grant(e, false, NOW + ttl, false)
        else
          seq = seq + 1
          e.q = seq
          for _, kl in ipairs(queued) do
            redis.call('ZADD', K_QUEUE, '0', qmember(kl[1], e.q, r.id))
            local kr = kget(kl[1])
            kr.w, kr.l = kr.w + 1, kl[2]
            kput(kl[1])
          end
          store(e)
          redis.call('ZADD', K_DEADLINES, dec(NOW + ttl), r.id)
        end
        -- A new waiter has the highest sequence number: it is last on
        -- every key it is queued on, its position that key's count.
        out[i] = status(e, true, not now)
      end
    end
  end
end

if seq ~= seq0 then redis.call('HSET', K_META, 'seq', dec(seq)) end
return finish(out)
