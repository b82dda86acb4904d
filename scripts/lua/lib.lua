-- lib.lua: the bounds, the keyspace and the helpers shared by enqueue.lua,
-- heartbeat.lua, release.lua and inspect.lua; package lua puts this file
-- in front of each of them. docs/PROTOCOL.md describes protocol 2.
--
-- KEYS (the same ten, in this order, for every lanes script; all share the
-- namespace's hash tag, e.g. lanes:{ns}:entries). Keys 1 to 8 are the
-- namespace's state: none carries a TTL, and each holds a marker (field or
-- member "\0") while the namespace is in use, so a key that vanished
-- (deleted, evicted) is seen by the next step, which resets the state
-- (see check below). Keys 9 and 10 may vanish without harm.
--   1 entries   hash: entry id -> entry record (JSON, fields below)
--   2 queue     sorted set, scores 0: every lane's FIFO queue at once;
--               member = key .. "\0" .. seq (16 zero-padded digits) .. "\0" .. id
--   3 holds     sorted set, scores 0: member = key .. "\0" .. id for
--               every holder of a key in its own right (not by re-entry)
--   4 limits    hash: key -> limit, kept while the key has holders or waiters
--   5 held      sorted set: holder id scored by its deadline (ms, Redis TIME)
--   6 waiting   sorted set: waiter id scored by its deadline (ms)
--   7 nested    sorted set, scores 0: member = ancestor .. "\0" .. id for
--               every ancestor in an entry's lineage, and
--               " " .. ancestor .. "\0" .. id for every ancestor the entry
--               borrows a key from (ids hold no space, so the two never mix)
--   8 meta      hash: v (data version), epoch (changes when the state is
--               reset or first made), seq (the last sequence number),
--               frozen (ms: no grant before then), maxttl (the longest TTL
--               any entry was given or renewed with, ms), and the counts expired (holders
--               whose lease ran out), evicted (waiters that expired),
--               revoked (borrowers whose lender's hold ended), resets
--   9 tokens    hash: key -> last fencing token issued; never deleted; its
--               field "\0maxttl" repeats meta's maxttl, so that a state
--               lost whole while the tokens stayed is still frozen
--  10 tombs     sorted set: "s\0" .. id (released while its enqueue was
--               unsettled) and "f\0" .. id (released by force), scored by
--               when the tombstone lapses (ms)
-- ARGV[1] is always the protocol version, ARGV[2] the prefix of the
-- grant-hint channels: the owner id is appended to it, and the prefix
-- alone is the namespace's channel, where a reset is announced.
--
-- Entry record (the value in entries, without its id): {o = owner id,
-- h = host, p = pid, c = call id, t = tool, n = tenant (strings; c, t and
-- n absent when the request left them out), l = lineage (list of ids,
-- absent when empty), k = lanes
-- (list of {key, limit}), s = "w" (waiting) or "h" (held), q = sequence
-- number, e = enqueued (ms), g = granted (ms), x = tokens ({key = "decimal
-- token"}, once held), r = borrowed keys ({key = ancestor id}: keys taken by
-- re-entry, neither queued nor held by the entry itself; absent when none)}.

-- The bounds. package lanes has the same constants (a test compares them).
local PROTOCOL = '2'
local MAX_KEY_LEN = 512       -- bytes in a lane key
local MAX_ID_LEN = 256        -- bytes in an entry or owner id
local MAX_FIELD_LEN = 256     -- bytes in a call id, tool, tenant or host
local MAX_LANES = 64          -- lanes in one request
local MAX_LINEAGE = 64        -- ancestors in one request's lineage
local MAX_LIMIT = 1073741824  -- holders one lane may allow (2^30)
local MAX_STEP_REQUESTS = 1000 -- requests (or ids) in one step
local MAX_STEP_LANES = 4096   -- lanes in one enqueue step
local MAX_TTL = 3600000       -- ms
local MAX_SEQ = 99999999999999 -- sequence numbers stay exact in cjson's 14 digits
local CYCLE_VISITS = 200      -- entries one cycle search loads, at most
local MAX_BORROWERS = 500     -- nested entries that borrow from one holder, at most
local REAP_MAX = 100          -- expired entries one step removes, at most
local SCAN_MAX = 200          -- waiters one key's hand-off looks at, at most

if #KEYS ~= 10 and #KEYS ~= 11 then -- record.lua takes an eleventh: the run's records
  return redis.error_reply('LANES_BADARG keys expected 10 keys, got ' .. #KEYS)
end
if ARGV[1] ~= PROTOCOL then
  return redis.error_reply('LANES_VERSION ' .. PROTOCOL .. ' ' .. tostring(ARGV[1]))
end
local K_ENTRIES, K_QUEUE, K_HOLDS, K_LIMITS, K_HELD, K_WAITING, K_NESTED, K_META, K_TOKENS, K_TOMBS =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local WAKE = ARGV[2]

local NOW, NOW_US -- the Redis clock, in ms and in µs
do
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  NOW_US = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Input checks, the same rules as package lanes.
local function utf8_ok(s)
  -- valid UTF-8 without control characters (C0, DEL, C1)
  if string.find(s, '[%z\1-\31\127]') then return false end
  local i, n = 1, #s
  while i <= n do
    local c = string.byte(s, i)
    local len, min
    if c < 128 then len = 1
    elseif c >= 194 and c <= 223 then len, min = 2, 128
    elseif c >= 224 and c <= 239 then len, min = 3, 2048
    elseif c >= 240 and c <= 244 then len, min = 4, 65536
    else return false end
    if len > 1 then
      if i + len - 1 > n then return false end
      local cp = c % (2 ^ (7 - len))
      for j = i + 1, i + len - 1 do
        local b = string.byte(s, j)
        if b < 128 or b > 191 then return false end
        cp = cp * 64 + (b - 128)
      end
      if cp < min or cp > 1114111 or (cp >= 55296 and cp <= 57343) then return false end
      if cp >= 128 and cp <= 159 then return false end -- C1 controls
    end
    i = i + len
  end
  return true
end
-- ids: 1 to MAX_ID_LEN bytes of printable ASCII without spaces
local function id_ok(v)
  return type(v) == 'string' and #v >= 1 and #v <= MAX_ID_LEN and not string.find(v, '[^\33-\126]')
end
local function key_ok(v)
  return type(v) == 'string' and #v >= 1 and #v <= MAX_KEY_LEN and utf8_ok(v)
end
local function field_ok(v)
  return v == nil or (type(v) == 'string' and #v <= MAX_FIELD_LEN and utf8_ok(v))
end
-- a whole number in [lo, hi] given as a decimal string or a number
local function int_in(v, lo, hi)
  local n = tonumber(v)
  if type(v) == 'string' and not string.find(v, '^%-?%d+$') then return nil end
  if not n or n ~= math.floor(n) or n < lo or n > hi then return nil end
  return n
end
local function badarg(field, what)
  return redis.error_reply('LANES_BADARG ' .. field .. ' ' .. what)
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

local function deadlines(e)
  if e.s == 'h' then return K_HELD end
  return K_WAITING
end

-- The namespace's state: the eight state keys exist together (each holds a
-- marker), or none does. check returns the epoch, or nil for a namespace
-- with no state; it resets a namespace of which some keys vanished.
local STATE = {K_ENTRIES, K_QUEUE, K_HOLDS, K_LIMITS, K_HELD, K_WAITING, K_NESTED, K_META}
local EPOCH, FROZEN, MAXTTL

local function mark()
  redis.call('HSET', K_ENTRIES, '\0', '')
  redis.call('ZADD', K_QUEUE, 0, '\0')
  redis.call('ZADD', K_HOLDS, 0, '\0')
  redis.call('HSET', K_LIMITS, '\0', '0')
  redis.call('ZADD', K_HELD, '+inf', '\0')
  redis.call('ZADD', K_WAITING, '+inf', '\0')
  redis.call('ZADD', K_NESTED, 0, '\0')
end

-- reset makes an empty state with a new epoch. No grant happens before
-- every lease the lost state could still hold has run out: the latest
-- holder deadline, else (when the held key is what vanished) NOW plus the
-- longest TTL given, else MAX_TTL. Every owner is told on the namespace's
-- channel and finds its entries gone.
local function reset()
  local untl = NOW
  if redis.call('EXISTS', K_HELD) == 1 then
    local last = redis.call('ZREVRANGEBYSCORE', K_HELD, '+inf', '-inf', 'WITHSCORES', 'LIMIT', 0, 2)
    for i = 1, #last, 2 do
      if last[i] ~= '\0' then untl = math.max(untl, tonumber(last[i + 1]) or untl) end
    end
  else
    untl = NOW + (tonumber(redis.call('HGET', K_META, 'maxttl') or '')
      or tonumber(redis.call('HGET', K_TOKENS, '\0maxttl') or '') or MAX_TTL)
  end
  redis.call('UNLINK', K_ENTRIES, K_QUEUE, K_HOLDS, K_LIMITS, K_HELD, K_WAITING, K_NESTED)
  mark()
  local epoch = string.format('%.0f', NOW_US)
  redis.call('HSET', K_META, 'v', PROTOCOL, 'epoch', epoch, 'frozen', string.format('%.0f', untl))
  redis.call('HINCRBY', K_META, 'resets', 1)
  redis.call('PUBLISH', WAKE, cjson.encode({reset = epoch}))
  return epoch, untl
end

-- check reads the epoch and the end of a freeze. create: a namespace with
-- no state gets one (an enqueue), and is announced, since an owner that
-- holds entries of an earlier epoch must learn that they are gone.
local function check(create)
  local n = redis.call('EXISTS', unpack(STATE))
  if n == 0 then
    if not create then return nil end
    -- No state: a namespace never used, or one whose state was lost whole.
    -- Where the tokens stayed, leases of the lost state may still be held.
    local used = tonumber(redis.call('HGET', K_TOKENS, '\0maxttl') or '')
    mark()
    EPOCH, FROZEN, MAXTTL = string.format('%.0f', NOW_US), 0, 0
    redis.call('HSET', K_META, 'v', PROTOCOL, 'epoch', EPOCH)
    if used then
      FROZEN, MAXTTL = NOW + used, used
      redis.call('HSET', K_META, 'frozen', string.format('%.0f', FROZEN), 'maxttl', used, 'resets', 1)
    end
    redis.call('PUBLISH', WAKE, cjson.encode({reset = EPOCH}))
    return EPOCH
  end
  if n < #STATE then
    if redis.call('EXISTS', K_META) == 0 then
      -- Keys without a marker are the state of protocol 1, not ours.
      local marked = false
      for _, k in ipairs({K_ENTRIES, K_LIMITS}) do
        marked = marked or redis.call('HEXISTS', k, '\0') == 1
      end
      for _, k in ipairs({K_QUEUE, K_HOLDS, K_HELD, K_WAITING, K_NESTED}) do
        marked = marked or redis.call('ZSCORE', k, '\0') ~= false
      end
      if not marked then
        return nil, redis.error_reply('LANES_VERSION ' .. PROTOCOL .. ' data:1 (lanectl doctor --repair removes it once no older client holds an entry)')
      end
    end
    EPOCH, FROZEN = reset()
    MAXTTL = tonumber(redis.call('HGET', K_META, 'maxttl') or '0') or 0
    return EPOCH
  end
  local m = redis.call('HMGET', K_META, 'v', 'epoch', 'frozen', 'maxttl')
  if m[1] ~= PROTOCOL then
    return nil, redis.error_reply('LANES_VERSION ' .. PROTOCOL .. ' data:' .. tostring(m[1]))
  end
  EPOCH, FROZEN, MAXTTL = m[2], tonumber(m[3] or '0') or 0, tonumber(m[4] or '0') or 0
  return EPOCH
end

-- note_ttl records ttl as the longest TTL in use when it is.
local function note_ttl(ttl)
  if ttl > MAXTTL then
    MAXTTL = ttl
    redis.call('HSET', K_META, 'maxttl', ttl)
    redis.call('HSET', K_TOKENS, '\0maxttl', ttl)
  end
end

-- entries granted by this step, which their owners must be told about, and
-- {owner, id} pairs of entries removed or taken over on someone else's
-- behalf, which their former owners must be told about
local granted, told = {}, {}

local function borrowed(e, key)
  return e.r and e.r[key]
end

local function tokenize(key)
  -- A token is above every token issued before for key, and at least the
  -- Redis clock in ms times 1024 (counted in µs: 1.024 per µs): a counter
  -- lost with the data (a restart without persistence, a failover to a
  -- lagging replica) resumes above every token it issued before the loss,
  -- as long as the clock does not go back and fewer than one token per µs
  -- was issued on average.
  local tok = redis.call('HINCRBY', K_TOKENS, key, 1)
  local floor = math.floor(NOW_US * 1.024)
  if tok < floor then
    tok = floor
    redis.call('HSET', K_TOKENS, key, string.format('%.0f', tok))
  end
  return string.format('%.0f', tok)
end

-- grant makes the entry e a holder of every key it named and mints one
-- token per key. queued: e is in the queues (else it was never put in
-- them); dl: its deadline.
local function grant(e, queued, dl, hint)
  local tokens = {}
  for _, kl in ipairs(e.k) do
    local key = kl[1]
    local a = borrowed(e, key)
    if a then
      local anc = load(a) -- the lender's slot and token
      tokens[key] = anc and anc.x and anc.x[key] or '0'
    else
      if queued then redis.call('ZREM', K_QUEUE, qmember(key, e.q, e.id)) end
      redis.call('ZADD', K_HOLDS, 0, key .. '\0' .. e.id)
      tokens[key] = tokenize(key)
    end
  end
  if queued then redis.call('ZREM', K_WAITING, e.id) end
  redis.call('ZADD', K_HELD, dl, e.id)
  e.s, e.g, e.x = 'h', NOW, tokens
  store(e)
  if hint then granted[#granted + 1] = e end
end

-- remove takes e out of the namespace and notes its keys in touched. A
-- holder's borrowers lose the keys they borrowed from it: a borrower that
-- holds is removed as well (its owner is told), one that waits joins those
-- keys' queues at its own sequence number (DESIGN.md invariant 10).
local remove
remove = function(e, touched)
  for _, a in ipairs(e.l or {}) do
    redis.call('ZREM', K_NESTED, a .. '\0' .. e.id)
  end
  for _, kl in ipairs(e.k) do
    local key = kl[1]
    local a = borrowed(e, key)
    if a then
      redis.call('ZREM', K_NESTED, ' ' .. a .. '\0' .. e.id)
    else
      if e.s == 'h' then
        redis.call('ZREM', K_HOLDS, key .. '\0' .. e.id)
      else
        redis.call('ZREM', K_QUEUE, qmember(key, e.q, e.id))
      end
      touched[key] = kl[2]
    end
  end
  redis.call('HDEL', K_ENTRIES, e.id)
  redis.call('ZREM', deadlines(e), e.id)
  if e.s ~= 'h' then return end
  local lo_b, hi_b = '[ ' .. e.id .. '\0', '( ' .. e.id .. '\1'
  local revoked = 0
  for _, m in ipairs(redis.call('ZRANGEBYLEX', K_NESTED, lo_b, hi_b)) do
    local b = load(string.sub(m, #e.id + 3))
    if b and b.r then
      if b.s == 'h' then
        revoked = revoked + 1
        told[#told + 1] = {b.o, b.id}
        for key, a in pairs(b.r) do
          if a == e.id then b.r[key] = nil end -- its member goes below
        end
        remove(b, touched)
      else
        for key, a in pairs(b.r) do
          if a == e.id then
            b.r[key] = nil
            redis.call('ZADD', K_QUEUE, 0, qmember(key, b.q, b.id))
            for _, kl in ipairs(b.k) do
              if kl[1] == key then touched[key] = kl[2] end
            end
          end
        end
        if next(b.r) == nil then b.r = nil end
        store(b)
      end
    end
  end
  redis.call('ZREMRANGEBYLEX', K_NESTED, lo_b, hi_b)
  if revoked > 0 then redis.call('HINCRBY', K_META, 'revoked', revoked) end
end

-- expire removes e, whose deadline passed, and counts it.
local expired = 0
local function expire(e, touched)
  redis.call('HINCRBY', K_META, e.s == 'h' and 'expired' or 'evicted', 1)
  expired = expired + 1
  remove(e, touched)
end

-- alive reports whether the waiter id's deadline has not passed.
local function alive(id)
  local dl = redis.call('ZSCORE', K_WAITING, id)
  return dl and tonumber(dl) > NOW
end

-- eligible: on every key of the waiting entry e, its holders plus the
-- entries queued before e are fewer than the limit (DESIGN.md invariant 2).
local function eligible(e)
  for _, kl in ipairs(e.k) do
    local key, limit = kl[1], kl[2]
    if not borrowed(e, key) then
      local held = redis.call('ZLEXCOUNT', K_HOLDS, lo(key), hi(key))
      local ahead = redis.call('ZLEXCOUNT', K_QUEUE, lo(key), '(' .. qmember(key, e.q, e.id))
      if held + ahead >= limit then return false end
    end
  end
  return true
end

-- scan grants the waiters that became eligible on the touched keys, in
-- arrival order across all of them (DESIGN.md invariant 2: on every key,
-- an earlier waiter is granted, and gets its token, before a later one),
-- and forgets the limit of keys left with neither holders nor waiters.
-- Only the first (limit - holders) live waiters of a key can be eligible
-- on it, and a grant frees nothing, so it gathers those of each key, sorts
-- them by sequence number, and grants each that is eligible then. A waiter
-- found expired on the way is removed (its keys join the scan). Nothing is
-- granted while the namespace is frozen.
local function scan(touched)
  local done, budget = {}, SCAN_MAX * 4
  local cands, seen, keyed = {}, {}, {}
  while budget > 0 do
    local keys = {}
    for key in pairs(touched) do
      if not done[key] then keys[#keys + 1] = key end
    end
    if #keys == 0 then break end
    table.sort(keys)
    for _, key in ipairs(keys) do
      done[key] = true
      local held = redis.call('ZLEXCOUNT', K_HOLDS, lo(key), hi(key))
      local room = touched[key] - held
      local looked, from = 0, lo(key)
      local k = {held = held} -- live: a live waiter seen; empty: the queue seen empty
      keyed[key] = k
      while room > 0 and FROZEN <= NOW and looked < SCAN_MAX and budget > 0 do
        local members = redis.call('ZRANGEBYLEX', K_QUEUE, from, hi(key), 'LIMIT', 0, room)
        if #members == 0 then
          k.empty = true
          break
        end
        for _, m in ipairs(members) do
          looked, budget = looked + 1, budget - 1
          from = '(' .. m
          local seq, id = string.match(string.sub(m, #key + 2), '^(%d+)%z(.+)$')
          if alive(id) then
            room = room - 1
            k.live = true
            if not seen[id] then
              seen[id] = true
              cands[#cands + 1] = {tonumber(seq), id}
            end
          else
            local e = load(id)
            if e then
              expire(e, touched)
              for _, kl in ipairs(e.k) do -- its other keys may have room now
                if kl[1] ~= key then done[kl[1]] = nil end
              end
            else
              redis.call('ZREM', K_QUEUE, m) -- a leftover without a record
            end
          end
        end
      end
    end
  end
  table.sort(cands, function(a, b) return a[1] < b[1] end)
  for _, c in ipairs(cands) do
    local e = load(c[2])
    if e and e.s == 'w' and eligible(e) then
      grant(e, true, redis.call('ZSCORE', K_WAITING, e.id), true)
    end
  end
  -- A key with neither holders nor waiters forgets its limit: one whose
  -- queue was seen empty and that had no holder (nothing was granted on
  -- it then), or, not looked at, one that counts none.
  for key, k in pairs(keyed) do
    if k.held == 0 and not k.live then
      if k.empty or (redis.call('ZLEXCOUNT', K_HOLDS, lo(key), hi(key)) == 0
          and redis.call('ZLEXCOUNT', K_QUEUE, lo(key), hi(key)) == 0) then
        redis.call('HDEL', K_LIMITS, key)
      end
    end
  end
end

-- reap removes up to REAP_MAX entries whose deadline passed, holders
-- first (a dead holder blocks its keys; a dead waiter only those behind
-- it, and scan passes over it), and grants what that frees. It returns
-- whether it removed every expired one, and how many expired entries
-- the step removed so far.
local function reap()
  local touched, left = {}, REAP_MAX
  for _, k in ipairs({K_HELD, K_WAITING}) do
    local ids = redis.call('ZRANGEBYSCORE', k, '-inf', NOW, 'LIMIT', 0, left)
    for _, id in ipairs(ids) do
      local e = load(id)
      if e then expire(e, touched) else redis.call('ZREM', k, id) end
    end
    left = left - #ids
    if left == 0 then break end
  end
  scan(touched)
  return left > 0, expired
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

-- finish publishes one hint per owner, a JSON list: {"id", "q": sequence
-- number, "x": tokens, "g": grant time (ms)} for each of its entries this
-- step granted (the owner may take the grant from it without asking), and
-- {"id"} for each removed or taken over by someone else (the owner asks).
local function finish()
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
end
