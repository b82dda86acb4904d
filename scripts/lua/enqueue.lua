-- enqueue.lua: place a batch of requests in their lanes' queues, in order,
-- in one atomic step, and grant those that are eligible.
--
-- KEYS: the nine of lib.lua.
-- ARGV: [1] hint channel prefix, [2] TTL (ms), [3] owner id, [4] host,
--       [5] pid, [6] requests as a JSON list of
--       {"id": entry id, "k": [[key, limit], ...], "c": call id,
--        "t": tool, "n": tenant, "l": [lineage ids]} ("l" absent when empty):
--       1 to 1000 requests and 4096 lanes in all; ids without spaces or
--       NUL; keys non-empty strings without NUL; limits whole numbers from
--       1 to 2^30. Anything else is refused before any change.
-- Reply: one status per request, in order: {id, "h", {key, token, ...}, seq},
--        {id, "w", {key, position from 1, ...}, seq}, or {id, "e", {message}}
--        when that one request is refused. An id that exists already is
--        not enqueued again: for the same owner (a retry) it keeps its
--        place and state and renews its deadline; a waiting entry of
--        another owner passes to this owner, keeping its place, and the old
--        owner gets a hint; a held entry of another owner is refused ("e").
--        A request whose lineage holds a key takes it by re-entry: no queue,
--        no slot, the ancestor's token (DESIGN.md invariant 10). A waiting
--        request that would close a wait-for cycle through nested calls is
--        not enqueued: {id, "c", {cycle in words, JSON {entries, keys}}}
--        (invariant 11); the batch's other requests are.
-- Errors: LANES_BADARG <what>; LANES_LIMIT <recorded> <requested> <key>
--        when a key's recorded limit differs; then nothing is enqueued.

local ttl, pid = tonumber(ARGV[2]), tonumber(ARGV[5])
if not ttl or ttl <= 0 or not pid then
  return redis.error_reply('LANES_BADARG TTL and pid must be numbers')
end
local owner, host = ARGV[3], ARGV[4]
if owner == '' or string.find(owner, '[%s%z]') then
  return redis.error_reply('LANES_BADARG owner id must be non-empty, without spaces')
end
local decoded, reqs = pcall(cjson.decode, ARGV[6] or '')
if not decoded or type(reqs) ~= 'table' or #reqs == 0 or #reqs > 1000 then
  return redis.error_reply('LANES_BADARG requests must be a JSON list of 1 to 1000 requests')
end
local function text(v) return type(v) == 'string' and v ~= '' and not string.find(v, '%z') end
local function id_ok(v) return text(v) and not string.find(v, '%s') end
local lanes_total = 0
for i, r in ipairs(reqs) do
  if type(r) ~= 'table' or not id_ok(r.id) or type(r.k) ~= 'table' or #r.k == 0 then
    return redis.error_reply('LANES_BADARG request ' .. i .. ': needs an id without spaces and at least one lane')
  end
  for _, kl in ipairs(r.k) do
    local limit = type(kl) == 'table' and kl[2]
    if type(kl) ~= 'table' or not text(kl[1]) or type(limit) ~= 'number'
      or limit < 1 or limit > 1073741824 or limit ~= math.floor(limit) then
      return redis.error_reply('LANES_BADARG request ' .. i .. ': a lane must be [key, limit from 1 to 2^30]')
    end
  end
  lanes_total = lanes_total + #r.k
  for _, f in ipairs({'c', 't', 'n'}) do
    if r[f] ~= nil and type(r[f]) ~= 'string' then
      return redis.error_reply('LANES_BADARG request ' .. i .. ': ' .. f .. ' must be a string')
    end
  end
  if r.l ~= nil then
    if type(r.l) ~= 'table' then
      return redis.error_reply('LANES_BADARG request ' .. i .. ': lineage must be a list of ids')
    end
    for _, a in ipairs(r.l) do
      if not id_ok(a) then
        return redis.error_reply('LANES_BADARG request ' .. i .. ': lineage must be a list of ids')
      end
    end
  end
end
if lanes_total > 4096 then
  return redis.error_reply('LANES_BADARG a step takes at most 4096 lanes, this one ' .. lanes_total)
end

reap()

-- Check every limit before changing anything (DESIGN.md invariant 9), and
-- note the keys that are idle (no limit recorded: no holder, no waiter).
local batch, existing, idle = {}, {}, {}
for _, r in ipairs(reqs) do
  existing[r.id] = load(r.id) or false
  if not existing[r.id] then
    for _, kl in ipairs(r.k) do
      local key, limit = kl[1], kl[2]
      local rec = batch[key]
      if not rec then
        local v = redis.call('HGET', K_LIMITS, key)
        if v then rec = tonumber(v) else idle[key] = true end
      end
      if rec and rec ~= limit then
        finish(false)
        return redis.error_reply(string.format('LANES_LIMIT %d %d %s', rec, limit, key))
      end
      batch[key] = limit
    end
  end
end

local out = {}
for i, r in ipairs(reqs) do
  local e = existing[r.id]
  if e and e.o ~= owner and e.s == 'h' then
    out[i] = {r.id, 'e', {string.format('entry %s is held by another owner (%s pid %s); entry ids must be unique per call',
      r.id, e.h or '?', tostring(e.p))}}
  elseif e then
    if e.o ~= owner then
      told[#told + 1] = {e.o, e.id} -- its old owner learns it is gone
      e.o, e.h, e.p = owner, host, pid
      store(e)
    end
    redis.call('ZADD', K_DEADLINES, NOW + ttl, r.id)
    out[i] = status(e, true)
  else
    local seq = redis.call('INCR', K_SEQ)
    e = {id = r.id, o = owner, h = host, p = pid, c = r.c, t = r.t, n = r.n,
         l = r.l, k = r.k, s = 'w', q = seq, e = NOW}
    for _, a in ipairs(r.l or {}) do
      redis.call('ZADD', K_NESTED, 0, a .. '\0' .. r.id)
    end
    -- Eligible at once when, on each key it queues for, the holders and
    -- the waiters (all of them arrived before it) leave room: then it is
    -- granted without ever being queued.
    local queued, room = {}, true
    for _, kl in ipairs(r.k) do
      local key, limit = kl[1], kl[2]
      local holder
      for j = #(r.l or {}), 1, -1 do -- the nearest ancestor that holds key
        if redis.call('ZSCORE', K_HOLDS, key .. '\0' .. r.l[j]) then
          holder = r.l[j]
          break
        end
      end
      if holder then
        e.r = e.r or {}
        e.r[key] = holder
      else
        queued[#queued + 1] = key
        if room and not idle[key] then
          room = redis.call('ZLEXCOUNT', K_HOLDS, lo(key), hi(key))
            + redis.call('ZLEXCOUNT', K_QUEUE, lo(key), hi(key)) < limit
        end
      end
      if idle[key] then redis.call('HSET', K_LIMITS, key, limit) end
      idle[key] = nil -- not idle for the batch's later requests
    end
    redis.call('ZADD', K_DEADLINES, NOW + ttl, r.id)
    local words, entries, keys
    if room then
      grant(e, false, true)
    else
      for _, key in ipairs(queued) do
        redis.call('ZADD', K_QUEUE, 0, qmember(key, seq, r.id))
      end
      store(e)
      if r.l and #r.l > 0 then words, entries, keys = cycle(e) end
    end
    if words then
      local touched = {}
      remove(e, touched)
      scan(touched)
      out[i] = {r.id, 'c', {words, cjson.encode({entries = entries, keys = keys})}}
    else
      out[i] = status(e, true)
    end
  end
end

finish(false)
return out
