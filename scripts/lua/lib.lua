-- lib.lua: helpers shared by enqueue.lua, heartbeat.lua, release.lua and
-- inspect.lua; package lua puts this file in front of each of them.
--
-- KEYS (the same nine, in this order, for every lanes script; all share
-- the namespace's hash tag, e.g. lanes:{ns}:entries):
--   1 entries    hash: entry id -> entry record (JSON, fields below)
--   2 queue      sorted set, all scores 0: every lane's FIFO queue at once;
--                member = key .. "\0" .. seq (16 zero-padded digits) .. "\0" .. id
--   3 holds      sorted set, all scores 0: member = key .. "\0" .. id
--   4 limits     hash: key -> limit, kept while the key has holders or waiters
--   5 deadlines  sorted set: entry id scored by its deadline (ms, Redis TIME)
--   6 tokens     hash: key -> last fencing token issued; never deleted
--   7 seq        string: the last sequence number; never deleted
--   8 nested     sorted set, all scores 0: member = ancestor .. "\0" .. id
--                for every ancestor in an entry's lineage
--   9 stats      hash: counts since the namespace was first used: expired
--                (holders whose lease expired), evicted (waiters that
--                expired); never deleted
-- ARGV[1] is always the prefix of the grant-hint channels; the owner id
-- is appended to it.
--
-- Entry record (the value in entries, without its id): {o = owner id, h = host, p = pid, c = call id,
-- t = tool, n = tenant, l = lineage (list of ids, absent when empty),
-- k = lanes (list of {key, limit}), s = "w" (waiting) or "h" (held),
-- q = sequence number, e = enqueued (ms), g = granted (ms),
-- x = tokens ({key = "decimal token"}, once held), r = borrowed keys
-- ({key = ancestor id}: keys taken by re-entry, neither queued nor held
-- by the entry itself; absent when none)}.

if #KEYS ~= 9 then
  return redis.error_reply('LANES_BADARG expected 9 keys, got ' .. #KEYS)
end
local K_ENTRIES, K_QUEUE, K_HOLDS, K_LIMITS, K_DEADLINES, K_TOKENS, K_SEQ, K_NESTED, K_STATS =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local CYCLE_MAX = 10000 -- entries a cycle search visits, at most
local WAKE = ARGV[1]
local REAP_MAX = 100 -- expired entries removed by one step, at most

local NOW
do
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function qmember(key, seq, id)
  return key .. '\0' .. string.format('%016.0f', seq) .. '\0' .. id
end
local function lo(key) return '[' .. key .. '\0' end
local function hi(key) return '(' .. key .. '\1' end

-- An entry record is stored without its id, the hash field already names it.
local function load(id)
  local raw = redis.call('HGET', K_ENTRIES, id)
  if not raw then return nil end
  local e = cjson.decode(raw)
  e.id = id
  return e
end

local function store(e)
  local id = e.id
  e.id = nil
  redis.call('HSET', K_ENTRIES, id, cjson.encode(e))
  e.id = id
end

-- entries granted by this step, which their owners must be told about, and
-- {owner, id} pairs of entries removed or taken over on someone else's
-- behalf, which their former owners must be told about
local granted, told = {}, {}

local function borrowed(e, key)
  return e.r and e.r[key]
end

-- eligible: on every key of the waiting entry e, its holders plus the
-- entries queued before e are fewer than the limit (DESIGN.md invariant 2).
-- A borrowed key needs no room while the ancestor still holds it; once the
-- ancestor let go, e joins that key's queue at its own sequence number.
local function eligible(e)
  for _, kl in ipairs(e.k) do
    local key, limit = kl[1], kl[2]
    local a = borrowed(e, key)
    if a and not redis.call('ZSCORE', K_HOLDS, key .. '\0' .. a) then
      e.r[key] = nil
      if next(e.r) == nil then e.r = nil end
      redis.call('ZADD', K_QUEUE, 0, qmember(key, e.q, e.id))
      store(e)
      a = nil
    end
    if not a then
    local held = redis.call('ZLEXCOUNT', K_HOLDS, lo(key), hi(key))
    local ahead = redis.call('ZLEXCOUNT', K_QUEUE, lo(key), '(' .. qmember(key, e.q, e.id))
    if held + ahead >= limit then return false end
    end
  end
  return true
end

-- grant moves e from every queue (unqueued: it was never put in them) to
-- the holders and mints one token per key.
local function grant(e, hint, unqueued)
  local tokens = {}
  for _, kl in ipairs(e.k) do
    local key = kl[1]
    local a = borrowed(e, key)
    if a then
      local anc = load(a) -- the ancestor's slot and token
      tokens[key] = anc and anc.x and anc.x[key] or '0'
    else
    if not unqueued then redis.call('ZREM', K_QUEUE, qmember(key, e.q, e.id)) end
    redis.call('ZADD', K_HOLDS, 0, key .. '\0' .. e.id)
    -- A token is above every token issued before for key, and above the
    -- Redis clock in ms times 1024: a counter lost with the data (a restart
    -- without persistence, a failover to a lagging replica) resumes above
    -- every token it issued before the loss.
    local tok = redis.call('HINCRBY', K_TOKENS, key, 1)
    if tok < NOW * 1024 then
      tok = NOW * 1024
      redis.call('HSET', K_TOKENS, key, string.format('%.0f', tok))
    end
    tokens[key] = string.format('%.0f', tok)
    end
  end
  e.s, e.g, e.x = 'h', NOW, tokens
  store(e)
  if hint then granted[#granted + 1] = e end
end

-- remove takes e out of the namespace and notes its keys in touched.
local function remove(e, touched)
  for _, a in ipairs(e.l or {}) do
    redis.call('ZREM', K_NESTED, a .. '\0' .. e.id)
  end
  for _, kl in ipairs(e.k) do
    local key = kl[1]
    if not borrowed(e, key) then -- a borrowed key is neither queued nor held
      if e.s == 'h' then
        redis.call('ZREM', K_HOLDS, key .. '\0' .. e.id)
      else
        redis.call('ZREM', K_QUEUE, qmember(key, e.q, e.id))
      end
      touched[key] = kl[2]
    end
  end
  redis.call('HDEL', K_ENTRIES, e.id)
  redis.call('ZREM', K_DEADLINES, e.id)
end

-- scan grants, on each touched key, the waiters that became eligible, and
-- forgets the limit of keys left with neither holders nor waiters. Only the
-- first (limit - holders) waiters of a key can be eligible on it, and a
-- grant frees nothing, so one pass per key is enough.
local function scan(touched)
  local keys = {}
  for key in pairs(touched) do keys[#keys + 1] = key end
  table.sort(keys)
  for _, key in ipairs(keys) do
    local held = redis.call('ZLEXCOUNT', K_HOLDS, lo(key), hi(key))
    local room = touched[key] - held
    local seen = 0
    if room > 0 then
      local members = redis.call('ZRANGEBYLEX', K_QUEUE, lo(key), hi(key), 'LIMIT', 0, room)
      seen = #members
      for _, m in ipairs(members) do
        local id = string.sub(m, #key + 19)
        local e = load(id)
        -- An expired entry that this step did not reap (more than REAP_MAX
        -- were due) is never granted; a later step removes it.
        local dl = redis.call('ZSCORE', K_DEADLINES, id)
        if e and dl and tonumber(dl) > NOW and eligible(e) then
          grant(e, true)
          held = held + 1
        end
      end
    end
    -- With no holder left, nothing was granted; an empty first look at the
    -- queue means it is empty: the key is idle and its limit is forgotten.
    if held == 0 and seen == 0 and (room > 0 or redis.call('ZLEXCOUNT', K_QUEUE, lo(key), hi(key)) == 0) then
      redis.call('HDEL', K_LIMITS, key)
    end
  end
end

-- reap removes entries whose deadline passed, holders and waiters alike,
-- and grants what that frees.
local function reap()
  local touched = {}
  local ids = redis.call('ZRANGEBYSCORE', K_DEADLINES, '-inf', NOW, 'LIMIT', 0, REAP_MAX)
  for _, id in ipairs(ids) do
    local e = load(id)
    if e then
      redis.call('HINCRBY', K_STATS, e.s == 'h' and 'expired' or 'evicted', 1)
      remove(e, touched)
    else
      redis.call('ZREM', K_DEADLINES, id)
    end
  end
  scan(touched)
end

-- status is what a step tells the caller about e: {id, "h", {key, token, ...},
-- seq} or {id, "w", {key, position, ...}, seq} (positions only when asked).
local function status(e, positions)
  local detail = {}
  if e.s == 'h' then
    for _, kl in ipairs(e.k) do
      detail[#detail + 1] = kl[1]
      detail[#detail + 1] = e.x[kl[1]]
    end
    return {e.id, 'h', detail, e.q}
  end
  if positions then
    for _, kl in ipairs(e.k) do
      if not borrowed(e, kl[1]) then
        detail[#detail + 1] = kl[1]
        detail[#detail + 1] = redis.call('ZLEXCOUNT', K_QUEUE, lo(kl[1]), '[' .. qmember(kl[1], e.q, e.id))
      end
    end
  end
  return {e.id, 'w', detail, e.q}
end

-- waits_for lists what entry x waits for, as {id, kind, key}: kind "h" a
-- holder and "q" an entry queued before x on a key x is queued on; kind "n"
-- a nested call started under x, which x cannot finish before.
local function waits_for(x)
  local out = {}
  if x.s == 'w' then
    for _, kl in ipairs(x.k) do
      local key = kl[1]
      if not borrowed(x, key) then
        for _, m in ipairs(redis.call('ZRANGEBYLEX', K_HOLDS, lo(key), hi(key))) do
          out[#out + 1] = {string.sub(m, #key + 2), 'h', key}
        end
        for _, m in ipairs(redis.call('ZRANGEBYLEX', K_QUEUE, lo(key), '(' .. qmember(key, x.q, x.id))) do
          out[#out + 1] = {string.sub(m, #key + 19), 'q', key}
        end
      end
    end
  end
  for _, m in ipairs(redis.call('ZRANGEBYLEX', K_NESTED, lo(x.id), hi(x.id))) do
    out[#out + 1] = {string.sub(m, #x.id + 2), 'n', ''}
  end
  return out
end

local function wait_words(from, kind, key, to)
  if kind == 'n' then return from .. ' waits for its nested call ' .. to end
  if kind == 'h' then return from .. ' waits for key "' .. key .. '" held by ' .. to end
  return from .. ' waits for key "' .. key .. '" behind ' .. to
end

-- cycle searches, breadth first, whether the waiting entry r waits (through
-- holders, earlier waiters and nested calls) for one of its own ancestors,
-- which wait for r (DESIGN.md invariant 11). It returns the shortest such
-- cycle in words, its entries and its keys, or nil.
local function cycle(r)
  local ancestor = {}
  for _, a in ipairs(r.l or {}) do ancestor[a] = true end
  local prev, seen = {}, {[r.id] = true}
  local queue, head = {r}, 1
  while head <= #queue and head <= CYCLE_MAX do
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
        local ye = load(y)
        if ye then queue[#queue + 1] = ye end
      end
    end
  end
  return nil
end

-- finish publishes one hint per owner, a JSON list: {"id", "q": sequence
-- number, "x": tokens, "g": grant time (ms)} for each of its entries this
-- step granted (the
-- owner may take the grant from it without asking), {"id"} for each removed
-- or taken over by someone else (the owner asks). When extend is set (a
-- heartbeat: every live process runs one each TTL/3) it sets the
-- safety-net TTL of every state key to a minute past the latest deadline,
-- so a namespace whose every process died is cleaned up even if nobody
-- calls again. (A key created after the last heartbeat, or an entry whose
-- process died before its first heartbeat, waits for the next heartbeat
-- or step of its namespace.) Tokens, seq and stats never expire.
local function finish(extend)
  local by, order = {}, {}
  local function add(o, msg)
    if not by[o] then
      by[o] = {}
      order[#order + 1] = o
    end
    table.insert(by[o], msg)
  end
  for _, e in ipairs(granted) do add(e.o, {id = e.id, q = e.q, x = e.x, g = e.g}) end
  for _, t in ipairs(told) do add(t[1], {id = t[2]}) end
  for _, o in ipairs(order) do
    redis.call('PUBLISH', WAKE .. o, cjson.encode(by[o]))
  end
  if not extend then return end
  local last = redis.call('ZRANGE', K_DEADLINES, -1, -1, 'WITHSCORES')
  if #last == 2 then
    local want = math.max(tonumber(last[2]) - NOW, 0) + 60000
    for _, k in ipairs({K_ENTRIES, K_QUEUE, K_HOLDS, K_LIMITS, K_DEADLINES, K_NESTED}) do
      redis.call('PEXPIRE', k, want)
    end
  end
end
