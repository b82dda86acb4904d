-- lib.lua: the bounds, the keyspace and the helpers shared by enqueue.lua,
-- heartbeat.lua, release.lua, inspect.lua, doctor.lua and record.lua;
-- package lua puts this file in front of each of them. docs/PROTOCOL.md
-- describes protocol 3.
--
-- KEYS (the same seven, in this order, for every lanes script; all share
-- the namespace's hash tag, e.g. lanes:{ns}:entries). Keys 1 to 6 are the
-- namespace's state: none carries a TTL, and each holds a marker (field or
-- member "\0") while the namespace is in use, so a key that vanished
-- (deleted, evicted) is seen by the next step that needs it, which resets
-- the state (see full below). Key 7 may vanish without harm.
--   1 entries   hash: entry id -> entry record (JSON, fields below)
--   2 lanes     hash: key -> key record, "<epoch> <limit> <token> <waiters>
--               <holder id> ...": the epoch it was written in (a record of
--               an earlier epoch keeps only its token), the limit its
--               holders and waiters share, the last fencing token issued
--               (never lost with the record), how many entries wait for the
--               key, and its holders in grant order. The marker "\0" holds
--               "<keyspace> <epoch> <frozen ms> <maxttl ms> <tombs ms>":
--               keyspace is KEYSPACE, the epoch changes when the state
--               is reset or first made, no grant happens before frozen,
--               maxttl is the longest TTL given, and no tombstone lives
--               past tombs.
--   3 queue     sorted set, scores 0: every lane's FIFO queue at once;
--               member = key .. "\0" .. seq (16 zero-padded digits) .. "\0" .. id
--   4 deadlines sorted set: every entry id scored by its deadline (ms,
--               Redis TIME); the marker "\0" scores -inf, so the first
--               member of an expiry query says the key is whole
--   5 nested    sorted set, scores 0: member = ancestor .. "\0" .. id for
--               every ancestor in an entry's lineage, and
--               " " .. ancestor .. "\0" .. id for every ancestor the entry
--               borrows a key from (ids hold no space, so the two never mix)
--   6 meta      hash: seq (the last sequence number), maxttl, frozen
--               (copies of the marker's, written at a reset), and the
--               counts expired (holders whose lease ran out), evicted
--               (waiters that expired), revoked (borrowers whose lender's
--               hold ended), resets
--   7 tombs     sorted set: tombstones, "s\0" .. id (released while its
--               enqueue was unsettled: an enqueue of the id is refused) and
--               "f\0" .. id (released by force), scored by when they lapse
-- ARGV[1] is always the protocol version, ARGV[2] the prefix of the
-- grant-hint channels: the owner id is appended to it, and the prefix
-- alone is the namespace's channel, where a reset is announced. Protocol
-- 3 is protocol 2 with flat replies (finish, and the lean steps); protocol
-- 4 is protocol 3 with a waiting status's holder TTL (first_deadline). The
-- keyspace is protocol 2's, and runners of the three share a namespace.
--
-- Entry record (the value in entries, without its id): {o = owner id,
-- h = host, p = pid, c = call id, t = tool, n = tenant (strings; c, t and
-- n absent when the request left them out), l = lineage (list of ids,
-- absent when empty), k = lanes (list of {key, limit}), s = "w" (waiting)
-- or "h" (held), q = sequence number (0: granted when it arrived),
-- e = enqueued (ms), g = granted (ms), x = tokens ({key = "decimal
-- token"}, once held), r = borrowed keys ({key = ancestor id}: keys taken
-- by re-entry, neither queued nor held by the entry itself; absent when
-- none), b = 1 when nested entries borrow from it (absent otherwise),
-- v = 1 when it was revoked (it borrowed a key from a lease that ended),
-- z = 1 when its hold ended while revoked borrowers still hold (it keeps
-- its slots for them); an entry with v or z is gone to its owner}.

-- The bounds. package lanes has the same constants (a test compares them).
local PROTOCOL = '4'
local KEYSPACE = '2' -- the version of the keyspace, the first field of the marker of lanes
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
local DEAD_MAX = 1000         -- expired waiters one step removes from the heads of queues, at most
local PURGE_ALL = 1000        -- holders of a key a step checks for leftovers even after a whole reap
local MAX_RATE_PER = 86400000 -- ms in a rate's window, at most (rate lanes, issue 15)
local RATE_LOG_MAX = 1000     -- slices of a rate's window: a grant in the last grant's slice joins its pair; past RATE_LOG_MAX + 1 pairs in the window the two oldest merge
local RATE_SCAN = 50          -- waiters of a rate key one hand-off looks at (grants go from its head)
local REVOKED_TOMB = 60000    -- ms a revoked entry's release is remembered ("v" tombstone)

-- The state of one step (a script run, or a call of the library's
-- functions, which keep this file loaded between calls): begin sets it.
local K_ENTRIES, K_LANES, K_QUEUE, K_DEADLINES, K_NESTED, K_META, K_TOMBS
local WAKE
local NOW, NOW_US -- the Redis clock, in ms and in µs
local EPOCH, FROZEN, MAXTTL, TOMBS -- from the marker
local ERAW, KRAW, KREC, dirty -- entries and key records read; keys whose record changed
local checked -- full has looked at every state key
-- entries granted by this step, which their owners must be told about, and
-- {owner, id} pairs of entries removed or taken over on someone else's
-- behalf, which their former owners must be told about
local granted, told
local expired -- entries this step removed as expired
local REAPED -- a reap of this step removed every expired entry
local DEAD -- expired waiters this step may still remove from queue heads
local MORE -- the step left expired entries it could not remove: ask again
-- removals put off by a step that removes many entries (gather): queue
-- members, and ids whose record and deadline go; drain issues them
local PENDING
-- writes put off by a lean enqueue (putoff): entry records and deadlines,
-- issued by flush in one command per key
local PUT
local PURGED -- keys whose holders this step checked for expired ones (purge)
local FORCING -- the lifetime (ms) of the tombstones of an operator's release under way, else nil
local RATES, RDIRTY, RSPENT -- rate logs read; rate keys whose log changed; rate keys a grant spent on

-- begin starts a step: it checks KEYS (nkeys of them, 7 unless given) and
-- the protocol, reads the clock and forgets what an earlier step of the
-- same library left. It returns an error reply, or nil.
local function begin(KEYS, ARGV, nkeys)
  nkeys = nkeys or 7
  if #KEYS ~= nkeys then
    return redis.error_reply('LANES_BADARG keys expected ' .. nkeys .. ' keys, got ' .. #KEYS)
  end
  if ARGV[1] ~= PROTOCOL then
    return redis.error_reply('LANES_VERSION ' .. PROTOCOL .. ' ' .. tostring(ARGV[1]))
  end
  K_ENTRIES, K_LANES, K_QUEUE, K_DEADLINES, K_NESTED, K_META, K_TOMBS =
    KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
  WAKE = ARGV[2]
  local t = redis.call('TIME')
  NOW_US = tonumber(t[1]) * 1000000 + tonumber(t[2])
  NOW = math.floor(NOW_US / 1000)
  EPOCH, FROZEN, MAXTTL, TOMBS = nil, nil, nil, nil
  ERAW, KRAW, KREC, dirty = {}, {}, {}, {}
  checked, granted, told, expired = false, {}, {}, 0
  REAPED, DEAD, MORE = false, DEAD_MAX, false
  PENDING, PUT, PURGED, FORCING = nil, nil, {}, nil
  RATES, RDIRTY, RSPENT = {}, {}, {}
end

-- Input checks, the same rules as package lanes.
local function utf8_ok(s)
  -- valid UTF-8 without control characters (C0, DEL, C1); printable ASCII
  -- is, and an anchored pattern says so at the least cost
  if string.find(s, '^[\32-\126]*$') then return true end
  if string.find(s, '[%z\1-\31\127]') then return false end
  if not string.find(s, '[\128-\255]') then return true end
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
  return type(v) == 'string' and #v >= 1 and #v <= MAX_ID_LEN and string.find(v, '^[\33-\126]+$') ~= nil
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
  return key .. '\0' .. string.format('%016d', seq) .. '\0' .. id
end
local function lo(key) return '[' .. key .. '\0' end
local function hi(key) return '(' .. key .. '\1' end
local function dec(n) return string.format('%d', n) end


-- Entries: an entry record is stored without its id, the hash field
-- already names it.
local function load(id)
  local raw = ERAW[id]
  if raw == nil then
    raw = redis.call('HGET', K_ENTRIES, id) or false
    ERAW[id] = raw
  end
  if not raw then return nil end
  -- A record that does not decode, or lacks what every step relies on
  -- (edited by hand, written by another version), is taken for absent:
  -- its keys' records drop it as a leftover, and doctor reports it.
  local ok, e = pcall(cjson.decode, raw)
  if not ok or type(e) ~= 'table' or type(e.k) ~= 'table' or (e.s ~= 'w' and e.s ~= 'h')
      or type(e.o) ~= 'string' or type(e.q) ~= 'number' or (e.s == 'h' and type(e.x) ~= 'table') then
    return nil
  end
  for _, kl in ipairs(e.k) do
    if type(kl) ~= 'table' or type(kl[1]) ~= 'string' or type(kl[2]) ~= 'number' then return nil end
  end
  e.id = id
  return e
end

-- mcall runs cmd on key with the members of list as arguments, in pieces
-- small enough for unpack (Lua's C stack takes about 8,000 values), and
-- returns the replies joined in order. first, when given, is the first
-- argument of every piece (HMGET's marker field), and its reply comes
-- first, once.
local function mcall(cmd, key, list, first)
  if #list == 0 and not first then return {} end
  if #list <= 1000 then -- one piece: the reply as it is
    if first then return redis.call(cmd, key, first, unpack(list)) end
    return redis.call(cmd, key, unpack(list))
  end
  local out = {}
  if first then out[1] = false end
  local i = 1
  repeat
    local piece = {}
    if first then piece[1] = first end
    for j = i, math.min(#list, i + 999) do piece[#piece + 1] = list[j] end
    local got = redis.call(cmd, key, unpack(piece))
    local from = 1
    if first then
      if i == 1 then out[1] = got[1] end
      from = 2
    end
    for j = from, #got do out[#out + 1] = got[j] end
    i = i + 1000
  until i > #list
  return out
end

-- plain_json is the record of e (without its id) in the form the lean
-- steps write and read (plain_rec): its fields in the order o h p c t n k
-- s q e g x, no space, tokens in lane order. Only for a plain entry (no
-- field but those, so no lineage, borrowing, lending or end; no rate
-- lane) whose strings JSON writes as their bytes and whose numbers are
-- whole, not negative and exact in a double; nil for any other, which
-- cjson writes. Both are the same JSON object, read by field name. So an
-- entry a general step wrote can take a lean step next: on a key that
-- never goes idle, each hand-off writes the next holder's record, and
-- the lean steps would otherwise never find one they read.
local PLAIN_FIELDS = {o = true, h = true, p = true, c = true, t = true, n = true,
                      k = true, s = true, q = true, e = true, g = true, x = true}
local PLAIN_OPTIONAL = {'c', 't', 'n'}
local function plain_str(v) return type(v) == 'string' and not string.find(v, '[%c"\\]') end
local function plain_num(v) return type(v) == 'number' and v >= 0 and 1 / v > 0 and v < 1e14 and v % 1 == 0 end -- 1 / v: not -0, which cjson writes "-0"; below 1e14: cjson writes 14 digits
-- size is the number of fields of the table t, or nil when t is no table.
local function size(t)
  if type(t) ~= 'table' then return nil end
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end
local function plain_json(e)
  for f in pairs(e) do
    if not PLAIN_FIELDS[f] then return nil end
  end
  local k = e.k
  local n = size(k)
  if not (n and n > 0 and n == #k and plain_str(e.o) and plain_str(e.h) and plain_num(e.p)
      and plain_num(e.q) and plain_num(e.e)) then
    return nil
  end
  local out = {'{"o":"', e.o, '","h":"', e.h, '","p":', dec(e.p)}
  for _, f in ipairs(PLAIN_OPTIONAL) do
    local v = e[f]
    if v ~= nil then
      if not plain_str(v) then return nil end
      out[#out + 1] = ',"' .. f .. '":"' .. v .. '"'
    end
  end
  out[#out + 1] = ',"k":['
  for i = 1, #k do
    local kl = k[i]
    -- [key, limit]: a rate lane has five elements
    if size(kl) ~= 2 or not plain_str(kl[1]) or kl[1] == '' or not plain_num(kl[2]) then return nil end
    out[#out + 1] = (i > 1 and ',["' or '["') .. kl[1] .. '",' .. dec(kl[2]) .. ']'
  end
  out[#out + 1] = '],"s":"' .. tostring(e.s) .. '","q":' .. dec(e.q) .. ',"e":' .. dec(e.e)
  if e.s == 'w' then
    if e.g ~= nil or e.x ~= nil then return nil end
  elseif e.s == 'h' then
    local x = e.x
    if not plain_num(e.g) or size(x) ~= #k then return nil end -- a token per lane, no other
    out[#out + 1] = ',"g":' .. dec(e.g) .. ',"x":{'
    for i = 1, #k do
      local tok = x[k[i][1]]
      if type(tok) ~= 'string' or not string.find(tok, '^[1-9]%d*$') then return nil end
      out[#out + 1] = (i > 1 and ',"' or '"') .. k[i][1] .. '":"' .. tok .. '"'
    end
    out[#out + 1] = '}'
  else
    return nil
  end
  out[#out + 1] = '}'
  return table.concat(out)
end

-- json is cjson's form of the record e. A number cjson cannot write (an
-- infinity, read from 1e400 or 400 digits written by hand; nan) is
-- written 0, in e too: a step that failed at a store would leave the
-- writes it made before it, which Redis does not undo (a break-it review
-- stranded a waiter so).
local function json(e)
  local ok, raw = pcall(cjson.encode, e)
  if ok then return raw end
  local function fix(t, depth)
    for k, v in pairs(t) do
      if type(v) == 'number' and (v ~= v or v == math.huge or v == -math.huge) then
        t[k] = 0
      elseif type(v) == 'table' and depth < 8 then
        fix(v, depth + 1)
      end
    end
  end
  fix(e, 0)
  return cjson.encode(e)
end

local function store(e)
  local id = e.id
  e.id = nil
  local raw = plain_json(e) or json(e)
  e.id = id
  if PUT then
    PUT.e[#PUT.e + 1] = id
    PUT.e[#PUT.e + 1] = raw
  else
    redis.call('HSET', K_ENTRIES, id, raw)
  end
  ERAW[id] = raw
end

-- putoff makes store and a grant's new deadline wait for flush, which
-- writes them in one command per key: only for a step that reads no
-- deadline after it grants (the lean enqueue).
local function putoff() PUT = {e = {}, d = {}} end

-- forget removes the entry id's record and deadline; unqueue removes a
-- member of queue. Between gather() and drain(), both are put off and
-- drain issues them in one command per key (a release of many ids costs
-- three commands, not three per id). Nothing between the two reads queue
-- or deadlines for an entry removed meanwhile: a removed entry is absent
-- from ERAW at once, and no step adds back what it removed.
local function forget(id)
  ERAW[id] = false
  if PENDING then
    PENDING.e[#PENDING.e + 1] = id
    return
  end
  redis.call('HDEL', K_ENTRIES, id)
  redis.call('ZREM', K_DEADLINES, id)
end

local function unqueue(m)
  if PENDING then
    PENDING.q[#PENDING.q + 1] = m
    return
  end
  redis.call('ZREM', K_QUEUE, m)
end

local function gather() PENDING = PENDING or {q = {}, e = {}} end

-- mrun runs cmd on key with the arguments of list (members, or field and
-- value pairs), in pieces small enough for unpack.
local function mrun(cmd, key, list)
  if #list <= 1000 then
    if #list > 0 then redis.call(cmd, key, unpack(list)) end
    return
  end
  for i = 1, #list, 1000 do
    redis.call(cmd, key, unpack(list, i, math.min(#list, i + 999)))
  end
end

local function drain()
  local p = PENDING
  PENDING = nil
  if not p then return end
  mrun('ZREM', K_QUEUE, p.q)
  mrun('HDEL', K_ENTRIES, p.e)
  mrun('ZREM', K_DEADLINES, p.e)
end

local mark_line
-- entomb leaves a tombstone of kind ("s" or "f") for id, lapsing after ms.
local function entomb(id, kind, ms)
  redis.call('ZADD', K_TOMBS, dec(NOW + ms), kind .. '\0' .. id)
  if NOW + ms > TOMBS then
    TOMBS = NOW + ms
    redis.call('HSET', K_LANES, '\0', mark_line())
  end
end

-- tombed reports whether id has a live tombstone of kind.
local function tombed(id, kind)
  if NOW >= TOMBS then return false end
  return tonumber(redis.call('ZSCORE', K_TOMBS, kind .. '\0' .. id) or '0') > NOW
end

-- untombed reports whether no id of ids has a tombstone (s, f or v,
-- lapsed or not): true at once while none can live (NOW >= TOMBS), else
-- one ZMSCORE. An enqueue takes a lean path only then: the general path
-- refuses an id settled since ("t") and clears the others' tombstones as
-- it makes the entry (clear_tombs), so a request with any is its to take,
-- and one with none is taken as when no tombstone lives. (Before, every
-- enqueue of the namespace took the general path while a tombstone
-- lived: for an hour after an operator's release by force.)
local function untombed(ids)
  if NOW >= TOMBS then return true end
  local ms = {}
  for i = 1, #ids do
    local id = ids[i]
    ms[3 * i - 2], ms[3 * i - 1], ms[3 * i] = 's\0' .. id, 'f\0' .. id, 'v\0' .. id
  end
  local got = mcall('ZMSCORE', K_TOMBS, ms)
  for i = 1, #ms do
    if got[i] then return false end
  end
  return true
end

-- clear_tombs removes the tombstones of a forced release or a revocation
-- of an earlier entry of id, as a new entry of id is made: its release is
-- not told of them.
local function clear_tombs(id)
  if NOW < TOMBS then redis.call('ZREM', K_TOMBS, 'f\0' .. id, 'v\0' .. id) end
end

-- whole returns s when it is a whole number of at least 0 in digits, the
-- digits of one written with a decimal point and zeros after it ("1.0"),
-- or nil.
local function whole(s)
  return string.match(s, '^%d+$') or string.match(s, '^(%d+)%.0*$')
end

-- words returns the words of s, split on white space.
local function words(s)
  local out = {}
  for x in string.gmatch(s, '%S+') do out[#out + 1] = x end
  return out
end

-- Key records, read and changed through a cache, written once by flush.
local function kget(key)
  local r = KREC[key]
  if r then return r end
  local raw = KRAW[key]
  if raw == nil then raw = redis.call('HGET', K_LANES, key) or false end
  r = {l = 0, t = 0, w = 0, h = {}}
  if raw then
    local ep, l, t, w, rest = string.match(raw, '^(%S+) (%d+) (%d+) (%d+)(.*)$')
    if not ep then
      -- Edited by hand (a number malformed or below 0, other spacing): a
      -- record of this epoch is read as well as its words read, with the
      -- holders it names, never as an idle key. A limit that is no whole
      -- number of at least 1 reads as the count of those holders, at
      -- least 1 (nothing more is granted there until one leaves), a token
      -- as 0 (the clock keeps new ones above the old), a count as 0.
      ep, l, t, w, rest = string.match(raw, '^%s*(%S+)%s+(%S+)%s+(%S+)%s+(%S+)(.*)$')
      if ep then
        local hs = words(rest)
        l, t, w = whole(l), whole(t) or '0', whole(w) or '0'
        if not l or tonumber(l) < 1 then l = tostring(math.max(#hs, 1)) end
        rest = #hs > 0 and ' ' .. table.concat(hs, ' ') or ''
      end
    end
    r.t = tonumber(t) or 0
    if ep == EPOCH then
      r.l, r.w = tonumber(l), tonumber(w)
      if #rest > 1 and string.byte(rest) == 32 and not string.find(rest, '%s', 2) then
        r.h[1] = string.sub(rest, 2) -- one holder, the common case
      elseif rest ~= '' then
        for id in string.gmatch(rest, '%S+') do r.h[#r.h + 1] = id end
      end
    end
  end
  KREC[key] = r
  return r
end

local function kput(key) dirty[key] = true end

-- prefetch reads the records of keys not read yet, in one command.
local function prefetch(keys)
  local want = {}
  for _, key in ipairs(keys) do
    if KRAW[key] == nil and not KREC[key] then want[#want + 1] = key end
  end
  if #want == 0 then return end
  local got = mcall('HMGET', K_LANES, want)
  for i, key in ipairs(want) do KRAW[key] = got[i] end
end

local function idle(r) return #r.h == 0 and r.w == 0 end

local function flush()
  drain()
  if PUT then
    mrun('HSET', K_ENTRIES, PUT.e)
    mrun('ZADD', K_DEADLINES, PUT.d)
    PUT = nil
  end
  local args = {}
  for key in pairs(dirty) do
    local r = KREC[key]
    args[#args + 1] = key
    args[#args + 1] = string.format('%s %d %d %d', EPOCH, r.l, r.t, r.w)
      .. (#r.h > 0 and ' ' .. table.concat(r.h, ' ') or '')
    if #args >= 2000 then
      redis.call('HSET', K_LANES, unpack(args))
      args = {}
    end
  end
  if #args > 0 then redis.call('HSET', K_LANES, unpack(args)) end
  dirty = {}
end

-- drop_holder removes id from the holders of the key record r, and counts
-- the holders this step removed from r (r.f: scan tells a waiter of that
-- key it does not grant to look again).
local function drop_holder(r, id)
  for i, h in ipairs(r.h) do
    if h == id then
      table.remove(r.h, i)
      r.f = (r.f or 0) + 1
      return
    end
  end
end

-- Rate lanes (issue 15). A lane {key, limit, rate limit, window ms, cost}
-- (the last three absent without a rate) spends cost units of its key's
-- rate at each grant: at most rate limit units in any window of that many
-- ms. Each rate key keeps a sliding log of (grant µs, cost), oldest first,
-- in the lanes hash under "\1" .. key (a lane key holds no control
-- character, so the two never mix): "<rate limit> <window ms> <µs> <cost>
-- ...", the rate of the key's last grant. A pair counts against a rate
-- while its µs plus that rate's window is at or after NOW_US (TIME
-- truncates to the µs: counting the last µs too makes the bound exact for
-- any real window of the rate's length); a write drops the
-- pairs past the log's own window; a grant in the same slice of the
-- window (its RATE_LOG_MAX-th part) as the last joins its pair at the
-- later µs, and past RATE_LOG_MAX + 1 pairs within the window the two
-- oldest merge into one at the later µs (their units leave later than
-- they would: the bound holds, more strictly). The log lives while the
-- key has holders or waiters or units in the window, and binds no one by
-- itself: while the key has holders or waiters its rate is the one they
-- carry (one key, one rate), and a request on an idle key may name
-- another, decided before the room under it, under which the pairs within
-- its window count. It is not part of the epoch's state: a reset keeps it, as it keeps the fencing tokens.
-- On a rate key grants go strictly in FIFO order: only the head of the
-- key's queue may be granted it.

local function rfield(key) return '\1' .. key end

-- rget returns key's rate log {lim, per, u = {{µs, cost}, ...}}, as
-- stored: its units are counted against the window of the rate a lane
-- names (rate_spent), so that a new rate on an idle key counts every unit
-- the log holds within its own window. A log holding units past its own
-- window is marked to be written pruned (rate_flush). false when key has
-- none.
local function rget(key)
  local r = RATES[key]
  if r ~= nil then return r end
  r = false
  local raw = redis.call('HGET', K_LANES, rfield(key))
  if raw then
    local n = {}
    for d in string.gmatch(raw, '%d+') do n[#n + 1] = tonumber(d) end
    if #n >= 2 then
      r = {lim = n[1], per = n[2], u = {}}
      for i = 3, #n - 1, 2 do r.u[#r.u + 1] = {n[i], n[i + 1]} end
      if #r.u > 0 and r.u[1][1] + r.per * 1000 < NOW_US then RDIRTY[key] = true end
    end
  end
  RATES[key] = r
  return r
end

-- rate_spent returns the units of the log r granted within the window of
-- per ms that ends at NOW_US (its last µs included), and the index of the
-- oldest of them.
local function rate_spent(r, per)
  local spent, first = 0, #r.u + 1
  for i = #r.u, 1, -1 do
    if r.u[i][1] + per * 1000 < NOW_US then break end
    spent, first = spent + r.u[i][2], i
  end
  return spent, first
end

-- rate_recorded returns the rate limit and window key is in use with
-- while it has holders or waiters: the rate they carry (they all agree;
-- 0 0: none, whatever units the log keeps), or nil when it is idle, or
-- none of them has a record, and free to take any (as limits, DESIGN.md
-- invariant 9).
local function rate_recorded(key)
  local kr = kget(key)
  if idle(kr) then return nil end
  local function rate_of(id)
    local e = id and load(id)
    if not e then return nil end
    for _, kl in ipairs(e.k) do
      if kl[1] == key then return kl[3] or 0, kl[4] or 0 end
    end
  end
  for i = 1, math.min(#kr.h, 3) do
    local lim, per = rate_of(kr.h[i])
    if lim then return lim, per end
  end
  if kr.w > 0 then
    local m = redis.call('ZRANGEBYLEX', K_QUEUE, lo(key), hi(key), 'LIMIT', '0', '1')[1]
    return rate_of(m and string.match(string.sub(m, #key + 2), '^%d+%z(.+)$'))
  end
  return nil
end

-- rate_room reports whether lane kl's rate lets an entry with ahead
-- entries queued before it on kl's key be granted now: none ahead, and
-- its cost fits in the window of kl's rate (the one in force: on an idle
-- key the request's own, not the one the log was last written with). It
-- changes nothing.
local function rate_room(kl, ahead)
  if not kl[3] then return true end
  if ahead > 0 then return false end
  local r = rget(kl[1])
  return not r or rate_spent(r, kl[4]) + kl[5] <= kl[3]
end

-- rate_prune drops the pairs of the log r past the window of its rate.
local function rate_prune(r)
  local _, first = rate_spent(r, r.per)
  if first > 1 then
    local u = {}
    for i = first, #r.u do u[#u + 1] = r.u[i] end
    r.u = u
  end
end

-- rate_spend spends the cost of each rate lane the granted entry e holds
-- in its own right, at NOW_US, under kl's rate.
local function rate_spend(e, kl)
  if not kl[3] then return end
  local key = kl[1]
  local r = rget(key)
  if not r then
    r = {lim = kl[3], per = kl[4], u = {}}
    RATES[key] = r
  end
  r.lim, r.per = kl[3], kl[4]
  -- A grant in the same slice of the window (its RATE_LOG_MAX-th part) as
  -- the key's last one joins its pair, at the later µs; the pairs past the
  -- window go before the two oldest merge (a break-it review found units
  -- carried forward for as long as more than RATE_LOG_MAX grants came per
  -- window, even past their window: a rate used at 30% stalled).
  local slice = r.per * 1000 / RATE_LOG_MAX
  local last = r.u[#r.u]
  if last and math.floor(last[1] / slice) == math.floor(NOW_US / slice) then
    last[1], last[2] = math.max(last[1], NOW_US), last[2] + kl[5]
  else
    r.u[#r.u + 1] = {NOW_US, kl[5]}
  end
  if #r.u > RATE_LOG_MAX + 1 then rate_prune(r) end
  if #r.u > RATE_LOG_MAX + 1 then
    r.u[2][2] = r.u[2][2] + r.u[1][2]
    table.remove(r.u, 1)
  end
  RDIRTY[key], RSPENT[key] = true, true
end

-- rate_wait returns, for the waiting entry e, how many ms from NOW a rate
-- it waits for could have room (rounded up): at the head of a key's queue,
-- when its cost fits; behind it, when the next units leave the window. 0
-- when no rate holds it back. A pair of µs t leaves a window of per ms at
-- t + per * 1000 + 1.
local function rate_wait(e)
  local wait = 0
  for _, kl in ipairs(e.k) do
    local r = kl[3] and not (e.r and e.r[kl[1]]) and rget(kl[1])
    local spent, first = 0, 1
    if r then spent, first = rate_spent(r, kl[4]) end
    if r and first <= #r.u then
      local at = r.u[first][1] + kl[4] * 1000 + 1
      local ahead = redis.call('ZLEXCOUNT', K_QUEUE, lo(kl[1]), '(' .. qmember(kl[1], e.q, e.id))
      if ahead == 0 then
        local over = spent + kl[5] - kl[3]
        at = NOW_US
        for i = first, #r.u do
          if over <= 0 then break end
          over = over - r.u[i][2]
          at = r.u[i][1] + kl[4] * 1000 + 1
        end
      end
      wait = math.max(wait, math.ceil((at - NOW_US) / 1000))
    end
  end
  return wait
end

-- rate_view is a key's window for inspect.lua: {rate limit, window ms,
-- units spent, ms the oldest units leave the window (0: none)}, or {}.
local function rate_view(key)
  local r = rget(key)
  if not r then return {} end
  local spent, first = rate_spent(r, r.per)
  return {r.lim, r.per, spent, first <= #r.u and math.ceil((r.u[first][1] + r.per * 1000 + 1) / 1000) or 0}
end

-- rate_flush writes the rate logs that changed, without the units past
-- the window of the rate they were last written with; a log left empty on
-- an idle key is removed.
local function rate_flush()
  for key in pairs(RDIRTY) do
    local r = RATES[key]
    if r then rate_prune(r) end
    if r and (#r.u > 0 or not idle(kget(key))) then
      local parts = {r.lim, r.per}
      for _, u in ipairs(r.u) do
        parts[#parts + 1] = dec(u[1])
        parts[#parts + 1] = u[2]
      end
      redis.call('HSET', K_LANES, rfield(key), table.concat(parts, ' '))
    else
      redis.call('HDEL', K_LANES, rfield(key))
    end
  end
  RDIRTY = {}
end

-- The namespace's state: the six state keys (STATE) exist together (each
-- holds a marker), or none does.

mark_line = function()
  return KEYSPACE .. ' ' .. EPOCH .. ' ' .. dec(FROZEN) .. ' ' .. dec(MAXTTL) .. ' ' .. dec(TOMBS)
end

-- The value of the field "\2" of lanes: longer than Redis's default
-- hash-max-listpack-value (64 bytes), so that Redis keeps the hash in its
-- hashtable encoding from the first write (it never converts back). In
-- the listpack encoding, which Redis keeps up to hash-max-listpack-entries
-- fields (512 by default in Redis 7), a field is found by a linear search,
-- and a namespace of a few hundred keys (a record is never removed) would
-- pay for it on every read and write. (A literal: the library's load runs
-- no code of string.)
local HASHTABLE_PAD = 'a value longer than 64 bytes keeps this hash in the hashtable encoding'

local function mark()
  redis.call('HSET', K_ENTRIES, '\0', '')
  redis.call('HSET', K_LANES, '\0', mark_line(), '\2', HASHTABLE_PAD)
  redis.call('ZADD', K_QUEUE, 0, '\0')
  redis.call('ZADD', K_DEADLINES, '-inf', '\0')
  redis.call('ZADD', K_NESTED, 0, '\0')
  redis.call('HSET', K_META, '\0', '')
  ERAW, KRAW, KREC, dirty = {}, {}, {}, {}
end

local reset
do -- (reset's helper: a local of this block alone, Lua takes 200 locals at once)
-- granted_in_state reports whether entries, whole (its marker), holds a
-- record of an entry that was granted (among the first 100 fields HSCAN
-- gives): a reset removes every entry and no grant happens while a freeze
-- runs, so such a record proves that the freeze of the last reset, and of
-- every reset before it, had ended when it was granted.
local function granted_in_state()
  if redis.call('HEXISTS', K_ENTRIES, '\0') == 0 then return false end
  local page = redis.call('HSCAN', K_ENTRIES, '0', 'COUNT', 100)[2]
  for i = 2, #page, 2 do
    if string.find(page[i], '"s":"h"', 1, true) then return true end
  end
  return false
end

-- reset makes an empty state with a new epoch. No grant happens before
-- every lease the lost state could still hold has run out, nor before a
-- freeze already running ends: the latest deadline known, else (when the
-- deadlines are what vanished) now plus the longest TTL given, else
-- MAX_TTL; and at least the freeze of the marker or of meta's copy (when
-- both copies vanished: now plus that TTL, unless an entry of the state
-- was granted, granted_in_state). The fencing tokens stay in the key
-- records. Every owner is told on the namespace's channel and finds its
-- entries gone.
function reset()
  local untl = NOW
  local meta = redis.call('HEXISTS', K_META, '\0') == 1 -- meta's copy of the freeze is known
  if FROZEN then untl = math.max(untl, FROZEN) end
  if meta then untl = math.max(untl, tonumber(redis.call('HGET', K_META, 'frozen') or '0') or 0) end
  -- deadlines is whole while it holds its marker (a key written again
  -- without it lost the deadlines it had).
  local deadlines = redis.call('ZSCORE', K_DEADLINES, '\0') ~= false
  local last = redis.call('ZREVRANGEBYSCORE', K_DEADLINES, '+inf', '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if #last == 2 and last[1] ~= '\0' then untl = math.max(untl, tonumber(last[2]) or untl) end
  if not MAXTTL or MAXTTL == 0 then MAXTTL = tonumber(redis.call('HGET', K_META, 'maxttl') or '0') or 0 end
  if not deadlines or (not FROZEN and not meta and not granted_in_state()) then
    -- The deadlines, or both copies of a freeze that may be running,
    -- vanished: a lease may run for as long as the longest TTL given (a
    -- break-it review found a namespace that lost lanes and meta frozen
    -- for MAX_TTL while deadlines held its one lease's deadline, 2s on).
    local ttl = MAXTTL
    if ttl == 0 then ttl = MAX_TTL end
    untl = math.max(untl, NOW + ttl)
  end
  redis.call('UNLINK', K_ENTRIES, K_QUEUE, K_DEADLINES, K_NESTED)
  EPOCH, FROZEN = dec(NOW_US), untl
  TOMBS = tonumber(TOMBS) or 0
  local last = redis.call('ZREVRANGEBYSCORE', K_TOMBS, '+inf', '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if #last == 2 then TOMBS = math.max(TOMBS, tonumber(last[2])) end
  mark()
  redis.call('HSET', K_META, 'frozen', dec(FROZEN), 'maxttl', dec(MAXTTL))
  redis.call('HINCRBY', K_META, 'resets', 1)
  redis.call('PUBLISH', WAKE, cjson.encode({reset = EPOCH}))
end
end

-- read_marker parses the marker of lanes, or fails on another version.
-- The last marker parsed, and its fields: a library's functions keep them
-- between calls, and most steps find the marker unchanged.
local MARKED, MARKED_AS
local function read_marker(raw)
  if raw == MARKED then
    EPOCH, FROZEN, MAXTTL, TOMBS = MARKED_AS[1], MARKED_AS[2], MARKED_AS[3], MARKED_AS[4]
    return
  end
  local v, ep, fr, mx, tb = string.match(raw, '^(%S+) (%S+) (%d+) (%d+) (%d+)$')
  if v ~= KEYSPACE then
    return redis.error_reply('LANES_VERSION ' .. PROTOCOL .. ' data:' .. tostring(string.match(raw, '^%S*')))
  end
  EPOCH, FROZEN, MAXTTL, TOMBS = ep, tonumber(fr), tonumber(mx), tonumber(tb)
  MARKED, MARKED_AS = raw, {EPOCH, FROZEN, MAXTTL, TOMBS}
end

-- markers counts the state keys that hold their marker (a key that
-- vanished and was written again since, without its marker, counts as
-- missing), and returns the marker of lanes.
local function markers()
  local m = redis.call('HGET', K_LANES, '\0')
  local n = m and 1 or 0
  n = n + redis.call('HEXISTS', K_ENTRIES, '\0') + redis.call('HEXISTS', K_META, '\0')
  for _, k in ipairs({K_QUEUE, K_DEADLINES, K_NESTED}) do
    if redis.call('ZSCORE', k, '\0') then n = n + 1 end
  end
  return n, m
end

-- full makes sure every state key is there with its marker; a namespace
-- with some of them missing is reset (with nothing of it, made when
-- create). It returns an error reply for a namespace of another protocol,
-- and leaves EPOCH nil for a namespace with no state (when not create).
local function full(create)
  if checked and (EPOCH or not create) then return end
  checked = true
  local n, m = markers()
  local STATE = {K_ENTRIES, K_LANES, K_QUEUE, K_DEADLINES, K_NESTED, K_META}
  if n == #STATE then
    if not EPOCH then return read_marker(m) end
    return
  end
  if n == 0 then
    if redis.call('EXISTS', unpack(STATE)) == 0 then
      if not create then
        EPOCH = nil
        return
      end
      EPOCH, FROZEN, MAXTTL, TOMBS = dec(NOW_US), 0, 0, 0
      local last = redis.call('ZREVRANGEBYSCORE', K_TOMBS, '+inf', '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
      if #last == 2 then TOMBS = tonumber(last[2]) end
      mark()
      redis.call('PUBLISH', WAKE, cjson.encode({reset = EPOCH}))
      return
    end
    if redis.call('EXISTS', K_META) == 0 then
      -- Keys without a marker, and no meta: the state of protocol 1.
      return redis.error_reply('LANES_VERSION ' .. PROTOCOL .. ' data:1 (lanectl doctor --repair removes it once no older client holds an entry)')
    end
  end
  if m then
    local err = read_marker(m)
    if err then return err end
  end
  reset()
end

-- open reads, in two commands, the markers of entries and lanes with the
-- records of ids and keys the step needs; a missing marker means the state
-- is not whole (or not there): full decides. more, when given, is called
-- between the two reads (the entries read, load works) with the list of
-- keys and returns it, with the keys the step found it needs too (a
-- release: the keys of the entries it removes). It returns an error reply
-- or nil; a step that went through full (checked) must not rely on what
-- more saw. read, when given, is the reply of HMGET entries \0 <ids> that
-- the same script run made already (lean_release's), taken for the first.
local function open(create, keys, ids, more, read)
  local ents = read or mcall('HMGET', K_ENTRIES, ids, '\0')
  if ents[1] then
    for i, id in ipairs(ids) do ERAW[id] = ents[i + 1] end
    if more then keys = more(keys) end
  end
  local got = mcall('HMGET', K_LANES, keys, '\0')
  if got[1] and ents[1] then
    local err = read_marker(got[1])
    if err then return err end
    for i, key in ipairs(keys) do KRAW[key] = got[i + 1] end
    return nil
  end
  ERAW = {}
  return full(create)
end

-- confirm is full for a step whose open found the markers of entries and
-- lanes, and whose expiry query found deadlines whole (whole): the same
-- script run read those three already, so it reads only the markers of
-- queue, nested and meta, and runs full when one is missing.
local function confirm(create, whole)
  if EPOCH and whole and not checked then
    checked = true
    if redis.call('ZSCORE', K_QUEUE, '\0') and redis.call('ZSCORE', K_NESTED, '\0')
        and redis.call('HEXISTS', K_META, '\0') == 1 then
      return nil
    end
    checked = false
  end
  return full(create)
end

-- note_ttl records ttl as the longest TTL in use when it is.
local function note_ttl(ttl)
  if ttl > MAXTTL then
    MAXTTL = ttl
    redis.call('HSET', K_LANES, '\0', mark_line())
    redis.call('HSET', K_META, 'maxttl', ttl)
  end
end


local function borrowed(e, key)
  return e.r and e.r[key]
end

-- tokenize mints key's next fencing token in r. A token is above every
-- token issued before for key, and at least the Redis clock in ms times
-- 1024 (counted in µs: 1.024 per µs): a counter lost with the data (a
-- restart without persistence, a failover to a lagging replica) resumes
-- above every token it issued before the loss, as long as the clock does
-- not go back and fewer than one token per µs was issued on average.
local function next_token(t) return math.max(t + 1, math.floor(NOW_US * 1.024)) end
local function tokenize(r)
  r.t = next_token(r.t)
  return dec(r.t)
end

-- grant makes the entry e a holder of every key it named and mints one
-- token per key. queued: e is in the queues (else it was never put in
-- them, and gets its deadline dl).
local function grant(e, queued, dl, hint)
  local tokens = {}
  for _, kl in ipairs(e.k) do
    local key = kl[1]
    local a = borrowed(e, key)
    if a then
      local anc = load(a) -- the lender's slot and token
      tokens[key] = anc and anc.x and anc.x[key] or '0'
    else
      local r = kget(key)
      if queued then
        redis.call('ZREM', K_QUEUE, qmember(key, e.q, e.id))
        r.w = math.max(r.w - 1, 0) -- (below 0 only from a count edited by hand)
        r.a = (r.a or 0) + 1 -- the waiters scan granted on r in this step
      end
      r.l = kl[2]
      r.h[#r.h + 1] = e.id
      tokens[key] = tokenize(r)
      kput(key)
      rate_spend(e, kl) -- rate lanes
    end
  end
  if not queued then
    if PUT then
      PUT.d[#PUT.d + 1] = dec(dl)
      PUT.d[#PUT.d + 1] = e.id
    else
      redis.call('ZADD', K_DEADLINES, dec(dl), e.id)
    end
  end
  e.s, e.g, e.x = 'h', NOW, tokens
  store(e)
  if hint then granted[#granted + 1] = e end
end

-- ended reports whether e's hold ended while it keeps its slots: a lender
-- kept for its revoked borrowers (z), or a revoked borrower (v). Its owner
-- is told it is gone; it is never renewed, nor lent from.
local function ended(e) return e.z or e.v end

-- lent lists the members of nested that name e's borrowers.
local function lent(e)
  return redis.call('ZRANGEBYLEX', K_NESTED, '[ ' .. e.id .. '\0', '( ' .. e.id .. '\1')
end

-- extend_lenders raises the deadline of each kept lender of e (and of
-- theirs, up the lineage) to dl, when dl is later: a kept lender's
-- deadline is the latest of its holding borrowers', a borrower kept for
-- borrowers of its own included, so that it keeps its slots as long as
-- they do. A lender is one while nested links it to e: an entry that took
-- the id of a lender removed since is none.
local function extend_lenders(e, dl)
  for _, a in pairs(e.r or {}) do
    local z = redis.call('ZSCORE', K_NESTED, ' ' .. a .. '\0' .. e.id) and load(a)
    if z and z.z and dl > tonumber(redis.call('ZSCORE', K_DEADLINES, a) or '0') then
      redis.call('ZADD', K_DEADLINES, dec(dl), a)
      extend_lenders(z, dl)
    end
  end
end

-- remove takes e out of the namespace and notes its keys in touched
-- (DESIGN.md invariant 10). A holder that lends keys to nested entries
-- ends first: its waiting borrowers join those keys' queues at their own
-- sequence numbers, its holding borrowers are revoked (their owners are
-- told, and they are gone to them), and while any of them holds, e keeps
-- its slots (z), until the last one is released or expires (e's deadline
-- is then the latest of theirs, and raised with theirs: extend_lenders).
-- So the next holder of a key is granted only after each borrower's owner
-- was told, or its lease ran out. A borrower's removal removes a lender so
-- kept once it lends to no holder.
local remove
remove = function(e, touched)
  if e.s == 'h' and e.b and not e.z then
    local held, revoked = {}, 0
    for _, m in ipairs(lent(e)) do
      local b = load(string.sub(m, #e.id + 3))
      if not b or not b.r then
        redis.call('ZREM', K_NESTED, m)
      elseif b.s == 'h' then
        held[#held + 1] = b
        if not ended(b) then
          b.v = 1
          store(b)
          revoked = revoked + 1
          told[#told + 1] = {b.o, b.id}
        end
      else
        for key, a in pairs(b.r) do
          if a == e.id then
            b.r[key] = nil
            redis.call('ZADD', K_QUEUE, '0', qmember(key, b.q, b.id))
            for _, kl in ipairs(b.k) do
              if kl[1] == key then
                local r = kget(key)
                r.w, r.l = r.w + 1, kl[2]
                kput(key)
                touched[key] = kl[2]
              end
            end
          end
        end
        if next(b.r) == nil then b.r = nil end
        store(b)
        redis.call('ZREM', K_NESTED, m)
      end
    end
    if revoked > 0 then redis.call('HINCRBY', K_META, 'revoked', revoked) end
    if #held > 0 then
      local dl = 0
      for _, b in ipairs(held) do dl = math.max(dl, tonumber(redis.call('ZSCORE', K_DEADLINES, b.id) or '0')) end
      e.z = 1
      store(e)
      redis.call('ZADD', K_DEADLINES, dec(dl), e.id)
      extend_lenders(e, dl)
      if dl <= NOW then
        -- kept with a deadline that passed already (its borrowers'
        -- expiries not reaped yet): a purge of its keys later in this
        -- step looks at their holders again
        for _, kl in ipairs(e.k) do PURGED[kl[1]] = nil end
      end
      return
    end
  end
  if e.l then
    for _, a in ipairs(e.l) do
      redis.call('ZREM', K_NESTED, a .. '\0' .. e.id)
    end
  end
  local lenders
  for _, kl in ipairs(e.k) do
    local key = kl[1]
    local a = borrowed(e, key)
    if a then
      -- a lender still, unless it was removed (and its id maybe taken since)
      if redis.call('ZREM', K_NESTED, ' ' .. a .. '\0' .. e.id) == 1 then
        lenders = lenders or {}
        lenders[#lenders + 1] = a
      end
    else
      local r = kget(key)
      if e.s == 'h' then
        drop_holder(r, e.id)
      else
        unqueue(qmember(key, e.q, e.id))
        r.w = math.max(r.w - 1, 0) -- (below 0 only from a count edited by hand)
        r.g = math.min(r.g or e.q, e.q) -- the first waiter that left r in this step (scan)
        r.gs = r.gs or {} -- and each one's sequence number (scan)
        r.gs[#r.gs + 1] = e.q
      end
      kput(key)
      touched[key] = kl[2]
    end
  end
  forget(e.id)
  if e.s == 'h' and e.b then
    -- A kept lender that goes (its deadline passed, or an operator
    -- released it): its revoked borrowers, told already, go with it.
    local ms = lent(e)
    redis.call('ZREMRANGEBYLEX', K_NESTED, '[ ' .. e.id .. '\0', '( ' .. e.id .. '\1')
    for _, m in ipairs(ms) do
      local b = load(string.sub(m, #e.id + 3))
      if b then
        -- taken by an operator's release: its owner's release learns it
        if FORCING then entomb(b.id, 'f', FORCING) end
        remove(b, touched)
      end
    end
  end
  for _, a in ipairs(lenders or {}) do
    local z = load(a)
    if z and z.z then
      local busy = false
      for _, m in ipairs(lent(z)) do
        local b = load(string.sub(m, #z.id + 3))
        if b and b.s == 'h' then busy = true break end
      end
      if not busy then remove(z, touched) end
    end
  end
end

-- release_entry removes the entry id for by (its owner's id, or "" for an
-- operator) and returns what it was to that caller: "h" or "w"; "g" when
-- it is not there or has ended (gone to its owner; a lender kept for its
-- revoked borrowers stays); "l" when it has ended revoked (its lender's
-- hold ended first: the lease was lost, DESIGN.md invariant 10), and for
-- REVOKED_TOMB after, while the tombstone "v\0id" it leaves lives; "f" when
-- an operator released it since (a tombstone "f\0id" lives). An
-- operator's release leaves that tombstone for tomb ms (0: none) and
-- tells the owner. Every script that releases goes through here.
local function release_entry(id, by, tomb, touched)
  local e
  if EPOCH then e = load(id) end
  if not e or (by ~= '' and e.o ~= by) then
    if by ~= '' and EPOCH and tombed(id, 'f') then return 'f' end
    if by ~= '' and EPOCH and tombed(id, 'v') then return 'l' end
    return 'g'
  end
  local was = e.s
  if by ~= '' and ended(e) then
    -- gone to its owner: released by force since, revoked, or ended
    was = tombed(id, 'f') and 'f' or e.v and 'l' or 'g'
    if e.z then return was end -- a lender kept for its revoked borrowers stays
    -- a later try of this release (its reply lost) is told "l" too
    if was == 'l' then entomb(id, 'v', REVOKED_TOMB) end
  end
  if by == '' and tomb > 0 then FORCING = tomb end
  remove(e, touched)
  FORCING = nil
  if e.o ~= by then told[#told + 1] = {e.o, e.id} end
  if by == '' and tomb > 0 then entomb(id, 'f', tomb) end
  return was
end

-- alive reports whether the entry id's deadline has not passed.
local function alive(id)
  local dl = redis.call('ZSCORE', K_DEADLINES, id)
  return dl and tonumber(dl) > NOW
end

-- expire removes e, whose deadline passed, and counts it (unless it had
-- ended).
local expire
expire = function(e, touched)
  if e.z then
    -- An ended lender: each holding borrower whose deadline passed goes
    -- first, and one that ends kept for borrowers of its own raises e's
    -- deadline (extend_lenders); then e stays if raised, and is gone if a
    -- borrower's removal took it.
    for _, m in ipairs(lent(e)) do
      local b = load(string.sub(m, #e.id + 3))
      if b and b.s == 'h' and not alive(b.id) then expire(b, touched) end
    end
    e = load(e.id)
    if not e or alive(e.id) then return end
  end
  if not ended(e) then -- an ended lease was counted as revoked, or released
    redis.call('HINCRBY', K_META, e.s == 'h' and 'expired' or 'evicted', '1')
  end
  expired = expired + 1
  remove(e, touched)
end

-- purge removes the holders of key whose deadline passed (a holder is
-- never counted once its lease ran out), and notes what that frees.
local function purge(key, touched)
  local r = kget(key)
  if #r.h == 0 or PURGED[key] then return r end
  PURGED[key] = true -- within one step (one NOW), once is enough
  local dls = mcall('ZMSCORE', K_DEADLINES, r.h)
  local dead = {}
  for i, id in ipairs(r.h) do
    if not dls[i] or tonumber(dls[i]) <= NOW then dead[#dead + 1] = id end
  end
  for _, id in ipairs(dead) do
    local e = load(id)
    if e then
      expire(e, touched)
    else
      drop_holder(r, id) -- a leftover without a record
      kput(key)
    end
  end
  return r
end

-- stale reports whether the holders of a key record may include one that
-- is gone: expired (the step's reap did not reach every expired entry),
-- or without a record (deleted or damaged by hand). Checking costs a
-- look at every holder, so on a key of more than PURGE_ALL holders it
-- happens only when the reap left expired entries (a record lost by hand
-- there waits for doctor --repair).
local function stale(r)
  return #r.h > 0 and (not REAPED or #r.h <= PURGE_ALL)
end

-- eligible: on every key of the waiting entry e, its holders plus the
-- entries queued before e are fewer than the limit (DESIGN.md invariant 2).
local function eligible(e)
  for _, kl in ipairs(e.k) do
    local key, limit = kl[1], kl[2]
    if not borrowed(e, key) then
      local ahead = redis.call('ZLEXCOUNT', K_QUEUE, lo(key), '(' .. qmember(key, e.q, e.id))
      if #kget(key).h + ahead >= limit then return false end
      if not rate_room(kl, ahead) then return false end -- rate lanes
    end
  end
  return true
end

-- by_seq orders candidates {seq, id, ...} by arrival.
local function by_seq(a, b) return a[1] < b[1] end

-- scan grants the waiters that became eligible on the touched keys, in
-- arrival order across all of them (DESIGN.md invariant 2: on every key,
-- an earlier waiter is granted, and gets its token, before a later one).
-- Only the first (limit - holders) live waiters of a key can be eligible
-- on it, and a grant frees nothing, so it gathers those of each key, sorts
-- them by sequence number, and grants each that is eligible then. An
-- expired holder or waiter found on the way is removed (its keys join the
-- scan). Nothing is granted while the namespace is frozen.
local function scan(touched)
  drain()
  local done, budget = {}, SCAN_MAX * 4
  -- leftover removes m, a member of key's queue that no waiter owns (edited
  -- by hand, or left behind): the waiters the key counts are then those
  -- its queue holds (a leftover may have been counted or not; a review
  -- found one counted twice over, granting past a holder and stranding a
  -- waiter).
  local function leftover(key, m)
    redis.call('ZREM', K_QUEUE, m)
    kget(key).w = redis.call('ZLEXCOUNT', K_QUEUE, lo(key), hi(key))
    kput(key)
  end
  local cands, seen = {}, {}
  while budget > 0 do
    local keys = {}
    for key in pairs(touched) do
      if not done[key] then keys[#keys + 1] = key end
    end
    if #keys == 0 then break end
    table.sort(keys)
    for _, key in ipairs(keys) do
      done[key] = true
      local r = kget(key)
      if r.w > 0 and stale(r) then r = purge(key, touched) end
      local room = touched[key] - #r.h
      if room > RATE_SCAN and r.w > 0 and rget(key) then room = RATE_SCAN end -- rate lanes: grants go from the head
      local looked, from, stop = 0, lo(key), false
      while not stop and room > 0 and r.w > 0 and FROZEN <= NOW and looked < SCAN_MAX and budget > 0 do
        local members = redis.call('ZRANGEBYLEX', K_QUEUE, from, hi(key), 'LIMIT', '0', dec(math.min(room, SCAN_MAX) + 2))
        if #members == 0 then break end
        for _, m in ipairs(members) do
          from = '(' .. m
          local seq, id = string.match(string.sub(m, #key + 2), '^(%d+)%z(.+)$')
          if (not seq or #seq ~= 16) and DEAD > 0 then
            -- A member in another form than qmember writes (edited by
            -- hand: no sequence number, or one of another width, which
            -- sorts out of its place; counted ahead of its own entry, a
            -- break-it review found it wedged the key): it becomes its
            -- entry's own when it names a waiter of this key with that
            -- number (read further on when it sorts after this one, else
            -- at the next scan), and is a leftover otherwise.
            DEAD = DEAD - 1
            local e, own = seq and load(id), false
            if e and e.s == 'w' and e.q == tonumber(seq) then
              for _, kl in ipairs(e.k) do
                if kl[1] == key and not borrowed(e, key) then own = true end
              end
            end
            if own then
              redis.call('ZREM', K_QUEUE, m)
              redis.call('ZADD', K_QUEUE, '0', qmember(key, e.q, id))
            else
              leftover(key, m)
            end
          elseif not seq or #seq ~= 16 then
            MORE, stop = true, true
            break
          elseif alive(id) then
            looked, budget, room = looked + 1, budget - 1, room - 1
            if not seen[id] then
              seen[id] = true
              cands[#cands + 1] = {tonumber(seq), id, key, m}
            end
            if room == 0 or looked >= SCAN_MAX or budget == 0 then break end
          elseif DEAD > 0 then
            -- An expired waiter ahead stands in no one's way: removed, up
            -- to DEAD_MAX a step; the rest wait for the next step, which
            -- the caller asks for at once (MORE).
            DEAD = DEAD - 1
            local e = load(id)
            if e then
              expire(e, touched)
              for _, kl in ipairs(e.k) do -- its other keys may have room now
                if kl[1] ~= key then done[kl[1]] = nil end
              end
            else
              leftover(key, m) -- no record
            end
          else
            MORE, stop = true, true
            break
          end
        end
      end
    end
  end
  table.sort(cands, by_seq)
  local crossed = {} -- per key a holder or waiter left: place (holders plus waiters before) of the members that may have crossed the limit, by member
  for _, c in ipairs(cands) do
    local e = load(c[2])
    if e and e.s == 'w' and eligible(e) then
      grant(e, true, nil, true)
    elseif e and e.s == 'w' then
      -- A waiter of several keys not granted (another key holds it back)
      -- that came within a key's room in this step, where before the step
      -- its place there (the holders plus the waiters before it) was at
      -- the limit or past it: its holder TTL (the latest of its keys'
      -- first deadlines) may have been that key's holder's, or 0, and the
      -- holder of another key sends no hint when its lease runs out. Its
      -- owner is told to look again (reviews saw dead holders taken over
      -- 13 s late when a holder of the other key left, and 18 s late when
      -- a waiter before it did; another, every waiter within a churning
      -- semaphore's room told at each release, when none had crossed).
      -- Its place before the step is its place now plus the holders (f)
      -- and the waiters before it (d) that left the key; a grant moves a
      -- waiter before it to the holders, which leaves its place as it is.
      -- The waiters that may have crossed are the last f plus D (every
      -- waiter that left) places within the room: one read per key a step.
      local keys = 0
      for _, kl in ipairs(e.k) do
        if not borrowed(e, kl[1]) then keys = keys + 1 end
      end
      for _, kl in ipairs(e.k) do
        local key = kl[1]
        local r = keys > 1 and kget(key)
        if r and (r.f or r.gs) and not borrowed(e, key) then
          local f, d, gs = r.f or 0, 0, r.gs or {}
          for _, q in ipairs(gs) do
            if q < e.q then d = d + 1 end
          end
          local at = crossed[key]
          if at == nil then
            at = {}
            local from, upto = math.max(kl[2] - f - #gs, #r.h), math.min(kl[2], PURGE_ALL + #r.h)
            if upto > from then
              local ms = redis.call('ZRANGEBYLEX', K_QUEUE, lo(key), hi(key), 'LIMIT', dec(from - #r.h), dec(upto - from))
              for j, m in ipairs(ms) do at[m] = from + j - 1 end
            end
            crossed[key] = at
          end
          local p = at[qmember(key, e.q, e.id)]
          if p and p + f + d >= kl[2] then
            told[#told + 1] = {e.o, e.id}
            break
          end
        end
      end
    elseif not e then
      -- A member whose entry has no record, or one that does not decode
      -- (edited by hand), though its deadline lives: a leftover, which
      -- counted ahead of every waiter behind it until the deadline passed
      -- (a break-it review found a key stalled so).
      leftover(c[3], c[4])
    end
  end
  -- A waiter that moved up to the limit on a key with holders (the
  -- holders plus the waiters before it exactly the limit), a waiter
  -- before it having left in this step, or a holder whose slot no waiter
  -- was granted: its holder TTL was 0 (it waited behind others), and a
  -- holder whose runner died sends no hint. Its owner is told to look
  -- again, one waiter a key (a review saw a dead holder taken over 14 s
  -- late after the waiter ahead cancelled). A hand-off (a holder's slot
  -- granted to the next) tells no one: that would add a step to each.
  local moved = {}
  for key in pairs(touched) do
    local r = kget(key)
    r.u = (r.f or 0) > (r.a or 0) -- a holder left whose slot no waiter was granted
    if (r.g or r.u) and r.w > 0 then moved[#moved + 1] = {key, r.g} end
    r.g, r.gs = nil, nil
  end
  table.sort(moved, function(x, y) return x[1] < y[1] end)
  for _, mk in ipairs(moved) do
    local key, g = mk[1], mk[2]
    local r = kget(key)
    local i = r.l - #r.h
    if #r.h > 0 and #r.h <= PURGE_ALL and i >= 0 and i < PURGE_ALL then
      local m, seq, id = redis.call('ZRANGEBYLEX', K_QUEUE, lo(key), hi(key), 'LIMIT', dec(i), '1')[1]
      if m then seq, id = string.match(string.sub(m, #key + 2), '^(%d+)%z(.+)$') end
      if seq and ((g and tonumber(seq) > g) or r.u) then
        local w = load(id)
        if w and w.s == 'w' then told[#told + 1] = {w.o, w.id} end
      end
    end
  end
  if next(RSPENT) then
    -- rate lanes: a grant on a rate key made the next of its queue the head
    local again = {}
    for key in pairs(RSPENT) do again[key] = kget(key).l end
    RSPENT = {}
    scan(again)
  end
end

-- expiring returns the ids whose deadline passed (at most REAP_MAX), from
-- the one query that also says the deadlines key is whole (its marker,
-- scored -inf, comes first). whole is false when it is not.
local REAP_LIMIT -- REAP_MAX + 1 as an argument, made at the first call
local function expiring()
  REAP_LIMIT = REAP_LIMIT or dec(REAP_MAX + 1)
  local ids = redis.call('ZRANGEBYSCORE', K_DEADLINES, '-inf', dec(NOW), 'LIMIT', '0', REAP_LIMIT)
  if ids[1] ~= '\0' then return {}, false end
  table.remove(ids, 1)
  return ids, true
end

-- reap removes up to REAP_MAX entries whose deadline passed, and grants
-- what that frees. ids: those expiring returned, when the step asked
-- already. It returns whether it removed every expired one, and how many
-- expired entries the step removed so far.
local function reap(ids)
  if not ids then ids = expiring() end
  local touched = {}
  for _, id in ipairs(ids) do
    local e = load(id)
    if not e then
      redis.call('ZREM', K_DEADLINES, id)
    elseif not (e.z and alive(id)) then -- an ended lender raised meanwhile stays
      expire(e, touched)
    end
  end
  local all = #ids < REAP_MAX
  REAPED = REAPED or all
  MORE = MORE or not all
  scan(touched)
  return all, expired
end

-- status is what a step tells the caller about e: {id, "h", {key, token, ...},
-- seq} or {id, "w", {key, position, ...}, seq} (positions only when asked;
-- last: e is known to be last on each key it waits for, so its position is
-- the key's waiter count, and no query is needed).
local function status(e, positions, last)
  local detail = {}
  if e.s == 'h' then
    for _, kl in ipairs(e.k) do
      detail[#detail + 1] = kl[1]
      detail[#detail + 1] = e.x[kl[1]]
    end
    return {e.id, 'h', detail, e.q}
  end
  local wait = rate_wait(e) -- rate lanes: when to poll, as no hint comes
  if positions then
    for _, kl in ipairs(e.k) do
      if not borrowed(e, kl[1]) then
        detail[#detail + 1] = kl[1]
        detail[#detail + 1] = last and kget(kl[1]).w
          or redis.call('ZLEXCOUNT', K_QUEUE, lo(kl[1]), '[' .. qmember(kl[1], e.q, e.id))
      end
    end
  end
  return {e.id, 'w', detail, e.q, wait, e} -- finish adds its holder TTL (first_deadline)
end

local finish
do -- (finish's helpers: locals of this block alone)
-- queue_place returns the place, from 1, of the waiter id in the queue of
-- key when it is among the first limit (at most PURGE_ALL) of it, else
-- nil; heads memoizes each key's first places within one finish.
local function queue_place(key, limit, id, heads)
  local at = heads[key]
  if not at then
    at = {}
    local m = redis.call('ZRANGEBYLEX', K_QUEUE, lo(key), hi(key), 'LIMIT', 0, math.min(limit, PURGE_ALL))
    for i, member in ipairs(m) do at[string.sub(member, #key + 19)] = i end -- key \0 seq (16) \0 id
    heads[key] = at
  end
  return at[id]
end

-- first_deadline returns the earliest deadline still ahead (ms of the Redis
-- clock) of the holders of key, or false when it has none, or more than
-- PURGE_ALL (then none is looked at); seen memoizes it per key within one
-- finish. A waiting status carries its holder TTL, the latest such
-- deadline less NOW over the keys where one holder's end makes room for
-- it, when that would grant it: on every key it queues on, its place is
-- within the first limit (queue_place) and the holders and waiters before
-- it are at most the limit; and no rate holds it back. A holder whose
-- runner died sends no hint, so that waiter polls when its lease runs out
-- (issue 12); the others wait for a hint or their heartbeat (break-it
-- reviews: 10,000 waiters behind a 100 ms holder all polling took 94% of
-- Redis's CPU; then the first 1,000 waiters of a full semaphore of 1,000
-- polling cost its holders their leases; a holder on a rate-only lane, or
-- beside a rate that held the waiter for a minute, made it poll for
-- nothing). The latest, not the earliest: a waiter of two keys would
-- otherwise poll at every renewal of a short lease on one while a long one
-- holds the other (a review: 500 such waiters, 25,000 commands/s). A
-- holder that leaves one of its keys without granting it tells it to look
-- again instead (scan), so that it learns the other key's deadline. A
-- deadline at or before NOW belongs to an entry a bounded reap left (more
-- is set) or a lender kept for its borrowers: not a time to poll at.
local function first_deadline(key, seen)
  local v = seen[key]
  if v == nil then
    v = false
    local h = kget(key).h
    if #h > 0 and #h <= PURGE_ALL then
      local dls = mcall('ZMSCORE', K_DEADLINES, h)
      for i = 1, #h do
        local d = tonumber(dls[i])
        if d and d > NOW and (not v or d < v) then v = d end
      end
    end
    seen[key] = v
  end
  return v
end

-- finish writes the key records that changed and publishes one hint per
-- owner, a JSON list: {"id", "q": sequence number, "x": tokens, "g": grant
-- time (ms)} for each of its entries this step granted (the owner may take
-- the grant from it without asking), and {"id"} for each removed or taken
-- over by someone else (the owner asks).
function finish(out, was)
  flush()
  if next(RDIRTY) then rate_flush() end -- rate lanes
  if #granted > 0 or #told > 0 then
    local by, order = {}, {}
    local function add(o, msg)
      if not by[o] then
        by[o] = {}
        order[#order + 1] = o
      end
      table.insert(by[o], msg)
    end
    local once = {} -- an id told once a step, and not beside its grant
    for _, e in ipairs(granted) do
      add(e.o, {id = e.id, q = e.q, x = e.x, g = e.g})
      once[e.o .. '\0' .. e.id] = true
    end
    for _, t in ipairs(told) do
      local k = t[1] .. '\0' .. t[2]
      if not once[k] then
        once[k] = true
        add(t[1], {id = t[2]})
      end
    end
    for _, o in ipairs(order) do
      redis.call('PUBLISH', WAKE .. o, cjson.encode(by[o]))
    end
  end
  -- The reply, a flat list (protocol 3, docs/PROTOCOL.md: Redis turns
  -- each Lua table of a reply into an array at a cost of its own, and a
  -- list of lists cost more than an uncontended step's work, issue 12).
  local r = {EPOCH or ''}
  if out then
    -- enqueue.lua's and heartbeat.lua's: more, then per status (status(),
    -- {id, code, {message, ...}} for a refusal, {id, "g", {}} for an
    -- entry gone) its id, state, seq, wait ms, holder TTL ms, n, and its n
    -- values
    r[2] = MORE and 1 or 0
    local seen, heads = {}, {}
    for _, st in ipairs(out) do
      local d, n, e, ttl = st[3], #r, st[6], 0
      if e and (st[5] or 0) == 0 then -- (a rate holds it back: its wait says when to poll)
        -- its place on each key: the one its reply gives (an enqueue's:
        -- a request queued last counts the key's waiters, as a lean
        -- step does), else its place in the queue
        local first, given = false, #d > 0 and {} -- (a heartbeat's status gives none)
        for j = 1, #d, 2 do given[d[j]] = d[j + 1] end
        for _, kl in ipairs(e.k) do
          local key, limit = kl[1], kl[2]
          if not borrowed(e, key) then
            local p = given and given[key]
            if not p then
              p = queue_place(key, limit, e.id, heads)
            elseif p > limit or p > PURGE_ALL then
              p = nil
            end
            -- before it on key: holders and waiters; one holder's end
            -- must make room for it, on each key that has none
            local before = p and #kget(key).h + p - 1
            if not p or before > limit then
              first = false
              break
            end
            if before == limit then
              local v = first_deadline(key, seen)
              if not v then
                first = false
                break
              end
              if not first or v > first then first = v end
            end
          end
        end
        if first then ttl = first - NOW end
      end
      r[n + 1], r[n + 2], r[n + 3], r[n + 4], r[n + 5], r[n + 6] = st[1], st[2], st[4] or 0, st[5] or 0, ttl, #d
      for j = 1, #d do r[n + 6 + j] = d[j] end
    end
  elseif was then
    -- release.lua's and record.lua's: the state of each id, in order, then
    -- the ids the step granted
    for i = 1, #was do r[i + 1] = was[i] end
    for i, e in ipairs(granted) do r[#was + 1 + i] = e.id end
  end
  return r
end
end

-- Lean steps (issue 12). The common steps are taken whole before begin
-- and without the general machinery: an enqueue of plain requests, an
-- owner's release of plain holders with the hand-off to the plain waiters
-- that frees, and an owner's release of plain waiters that frees nothing.
-- A plain request is new (no entry of its id), names neither lineage nor
-- rates, and comes in the form the Go client writes
-- (lean_requests); a plain entry has a record in the form lean steps
-- write (plain_rec): it neither lends (b), borrows (r), has a lineage (l)
-- nor has ended (v, z). A lean step does what the general path would do
-- for the same state and gives the same reply and hints, reading and
-- writing records as strings. Anything else, found before its first
-- write, makes it return nil, and the general path takes the step from
-- the start. It runs only while nothing has expired, and checks the
-- markers where the general path would, but for a hand-off (see
-- lean_release).

local lean_enqueue, lean_release, lean_read
do -- (the lean steps' helpers: locals of this block alone)
  -- The strings lean steps found valid: the last TTL, and keys, request
  -- fields and owners (at most VALID_MAX, then forgotten; an owner id with
  -- the host and pid it came with, also free of the bytes JSON escapes, as
  -- {host, pid, the start of its entry records}). A library's functions
  -- keep them between calls: a namespace's steps come from a few owners.
  local LEAN_TTLS, LEAN_TTL
  local VKEY, VFIELD, VOWN, VALID_N = {}, {}, {}, 0
  local VALID_MAX = 1000
  -- Enqueue steps of more requests, and releases of more holders, go to
  -- the general path: there the work per request is less (cjson reads a
  -- long list faster than patterns). A release of waiters alone (Close,
  -- cancelled waits) is lean up to MAX_STEP_REQUESTS ids (lean_leave).
  local LEAN_STEP = 100

  local function remember(set, s, v)
    if VALID_N >= VALID_MAX then VKEY, VFIELD, VOWN, VALID_N = {}, {}, {}, 0 end
    set[s], VALID_N = v or true, VALID_N + 1
  end
  local function lean_key(s)
    if VKEY[s] then return true end
    if not key_ok(s) then return false end
    remember(VKEY, s)
    return true
  end
  local function lean_field(s)
    if VFIELD[s] then return true end
    if not field_ok(s) then return false end
    remember(VFIELD, s)
    return true
  end

  -- What plain_rec and lean_keys make of the records and key records lean
  -- steps wrote, by their bytes (a parse depends on them alone, and
  -- patterns cost more than a lookup), put in as a step writes them: the
  -- next step on the key or entry most often reads what the last one
  -- wrote. (A record read is not put in: the step that reads it most
  -- often writes it anew.) A library's functions keep them between calls.
  -- A value is never changed once in.
  -- SEEDS_CHECKED, true in the tests' copy of the library alone
  -- (leanfuzz_test.go), makes each value a lean step puts in as it writes
  -- be checked against a parse of the bytes it wrote (an error on a
  -- difference).
  local SEEDS_CHECKED = false
  local function same(a, b)
    if type(a) ~= 'table' or type(b) ~= 'table' then return a == b end
    for k, v in pairs(a) do
      if not same(v, b[k]) then return false end
    end
    for k in pairs(b) do
      if a[k] == nil then return false end
    end
    return true
  end
  local function seed_check(parse, raw, v)
    if SEEDS_CHECKED and not same(parse(raw), v) then error('lean seed differs from its parse: ' .. raw) end
  end
  -- A cache (t: bytes -> value) holds at most VALID_MAX values and
  -- CACHE_BYTES of the bytes they are keyed by, none longer than
  -- CACHE_ITEM, then is emptied: a key record grows by a holder at a time,
  -- and keeping each of its lengths would cost memory with the square of
  -- its holders.
  local CACHE_ITEM, CACHE_BYTES = 512, 262144
  local function cache() return {t = {}, n = 0, b = 0} end
  local function put(c, raw, v)
    local n = #raw
    if n > CACHE_ITEM then return end
    if c.n >= VALID_MAX or c.b + n > CACHE_BYTES then c.t, c.n, c.b = {}, 0, 0 end
    c.t[raw], c.n, c.b = v, c.n + 1, c.b + n
  end
  -- entry records (plain_rec), key records (lean_keys), one-request
  -- enqueues by the bytes after the id (lean_requests)
  local RECS, LINES, TAILS = cache(), cache(), cache()
  -- canon reports whether the digits s are a number as a step writes it
  -- (no leading zero): the lean steps copy what they read, and leave any
  -- other form to the general path, which rewrites it.
  local function canon(s) return #s == 1 or string.byte(s) ~= 48 end

  -- num is dec for a count: the small ones (below 1,000) are formatted
  -- once.
  local NUMS = {}
  local function num(n)
    local v = NUMS[n]
    if v then return v end
    v = dec(n)
    if n >= 0 and n < 1000 then NUMS[n] = v end
    return v
  end
  -- int is tonumber for a limit's digits (the same few, again and again).
  local INTS, INTS_N = {}, 0
  local function int(s)
    local v = INTS[s]
    if v then return v end
    v = tonumber(s)
    if INTS_N >= VALID_MAX then INTS, INTS_N = {}, 0 end
    INTS[s], INTS_N = v, INTS_N + 1
    return v
  end

  -- lean_requests parses the requests of an enqueue (ARGV[7]) when they are
  -- plain and in the form the Go client writes: [{"id":"…","k":[["key",
  -- limit],…]} with "c", "t" and "n" after "k" when given, in that order],
  -- no space, strings without a quote or backslash (their JSON is then their
  -- bytes), limits in plain decimal. It returns, per request, {id, lanes
  -- {{key, limit string, limit}, …}, the JSON of its lanes, the JSON of its
  -- fields from "c" on}, or nil for anything else (which cjson may still
  -- read: the general path decides).
  local LP_REQ = '^{"id":"([^"\\]+)","k":%[()'
  local LP_LANE = '^%["([^"\\]+)",([1-9]%d*)%]()'
  local LP_FIELDS = {'^,"c":"[^%c"\\]*"()', '^,"t":"[^%c"\\]*"()', '^,"n":"[^%c"\\]*"()'}
  local parse_requests
  -- lean_requests keeps in TAILS what parse_requests made of a step of one
  -- request, by the bytes after its id (',"k":[…]…}]', which alone decide
  -- the rest): {lanes, lanes JSON, fields JSON}. A client sends the same
  -- few again and again with new ids.
  local function lean_requests(s)
    -- the id: up to the first quote, and without a backslash, as LP_REQ
    -- reads it
    if string.find(s, '[{"id":"', 1, true) ~= 1 then return nil end
    local q = string.find(s, '"', 9, true)
    if not q or q == 9 then return nil end
    local id, tail = string.sub(s, 9, q - 1), string.sub(s, q)
    if string.find(id, '\\', 1, true) then return nil end
    local v = TAILS.t[tail]
    if v then
      if v[4] then return nil, id, v end -- one request of one lane, checked
      local reqs = {{id, v[1], v[2], v[3]}}
      seed_check(parse_requests, s, reqs)
      return reqs
    end
    local reqs = parse_requests(s)
    if reqs and #reqs == 1 then
      local r = reqs[1]
      local lanes = r[2]
      -- a lone lane whose key, limit and fields pass enqueue.lua's checks
      -- is marked so (v[4]): the next step with these bytes skips them
      local one = #lanes == 1 and lean_key(lanes[1][1]) and lanes[1][3] <= MAX_LIMIT
      if one and r[4] ~= '' then
        for f in string.gmatch(r[4], '":"([^"]*)"') do
          if not lean_field(f) then one = false end
        end
      end
      local v = {lanes, r[3], r[4], one or nil}
      put(TAILS, tail, v)
      if one then return nil, id, v end
    end
    return reqs
  end
  function parse_requests(s)
    if string.byte(s, 1) ~= 91 then return nil end -- [
    local reqs, pos = {}, 2
    while #reqs < LEAN_STEP do
      local id, p = string.match(s, LP_REQ, pos)
      if not id then return nil end
      local lanes, from, c = {}, p, nil
      repeat
        local key, lim, q = string.match(s, LP_LANE, p)
        if not key or #lanes == MAX_LANES then return nil end
        lanes[#lanes + 1] = {key, lim, int(lim)}
        c, p = string.byte(s, q), q + 1
      until c ~= 44 -- ,
      if c ~= 93 then return nil end -- ]
      local lanes_json, f = string.sub(s, from, p - 2), p
      if string.byte(s, p) == 44 then
        for i = 1, 3 do p = string.match(s, LP_FIELDS[i], p) or p end
      end
      if string.byte(s, p) ~= 125 then return nil end -- }
      reqs[#reqs + 1] = {id, lanes, lanes_json, string.sub(s, f, p - 1)}
      c, pos = string.byte(s, p + 1), p + 2
      if c == 93 then
        if pos <= #s then return nil end
        return reqs
      end
      if c ~= 44 then return nil end
    end
    return nil
  end

  -- plain_rec parses the record raw of a plain entry in the form lean steps
  -- write: {"o":"…","h":"…","p":pid(,"c":"…")(,"t":"…")(,"n":"…"),"k":[["key",
  -- limit],…],"s":"w","q":seq,"e":ms} for a waiter, and for a holder
  -- "s":"h", then ,"g":ms,"x":{"key":"token",…} (one token per lane, in
  -- lane order) before the last }. cjson reads it as any JSON. It returns
  -- {owner, state, seq string, enqueued string, lanes {{key, limit string,
  -- limit}, …}, the record up to the end of its lanes}, or nil for a record
  -- of any other form (written by cjson, or not plain).
  -- A record's head, up to the end of its lanes (the first '],"s":"': no
  -- string of a plain record holds a quote), is parsed once for all the
  -- records that share it (HEADS: {owner, lanes}, or false for a head
  -- that does not parse): the waiters of one owner on one key differ in
  -- their sequence numbers and times alone, and a release of a thousand
  -- of them parses one head.
  local parse_rec, HEADS = nil, cache()
  local function plain_rec(raw)
    if not raw then return nil end
    return RECS.t[raw] or parse_rec(raw)
  end
  function parse_rec(raw)
    local q = string.find(raw, '],"s":"', 1, true)
    if not q then return nil end
    local head = string.sub(raw, 1, q)
    local h = HEADS.t[head]
    if h == nil then
      h = false
      -- (strings without a control byte and numbers of at most 14
      -- digits, as plain_json writes them and cjson writes a number
      -- exactly: the general path writes any other in cjson's form. The
      -- patterns cover every byte of the record, so one with a NUL,
      -- written by hand, parses to nothing, as cjson reads no record
      -- there and the general path takes the entry for absent)
      local o, pid, p = string.match(head, '^{"o":"([^%c"\\]*)","h":"[^%c"\\]*","p":(%d+)()')
      if o and canon(pid) and #pid <= 14 then
        for i = 1, 3 do p = string.match(head, LP_FIELDS[i], p) or p end
        if string.sub(head, p, p + 5) == ',"k":[' then
          p = p + 6
          local lanes, c = {}, nil
          repeat
            local key, lim, nq = string.match(head, '^%["([^%c"\\]+)",(%d+)%]()', p)
            if not key or not canon(lim) or #lim > 14 then
              lanes = nil
              break
            end
            lanes[#lanes + 1] = {key, lim, int(lim)}
            c, p = string.byte(head, nq), nq + 1
          until c ~= 44
          if lanes and c == 93 and p == q + 1 then h = {o, lanes} end
        end
      end
      put(HEADS, head, h)
    end
    if not h then return nil end
    local lanes = h[2]
    local s, seq, enq
    s, seq, enq, q = string.match(raw, '^,"s":"([wh])","q":(%d+),"e":(%d+)()', q + 1)
    if not s or not (canon(seq) and canon(enq)) or #seq > 14 or #enq > 14 then return nil end
    if s == 'w' then
      if q ~= #raw then return nil end -- the last }
    else
      local g
      g, q = string.match(raw, '^,"g":(%d+),"x":{()', q)
      if not g or not canon(g) or #g > 14 then return nil end
      for i = 1, #lanes do
        local key, tok, nq = string.match(raw, '^"([^%c"\\]+)":"(%d+)"()', q)
        if key ~= lanes[i][1] or not canon(tok) then return nil end
        local c = string.byte(raw, nq)
        q = nq + 1
        if c ~= (i < #lanes and 44 or 125) then return nil end
      end
      if q ~= #raw then return nil end
    end
    if string.byte(raw, #raw) ~= 125 then return nil end
    return {h[1], s, seq, enq, lanes, head}
  end

  -- rec_wrote records what plain_rec makes of the record a lean step
  -- writes, of the parts it writes it from: head (up to the end of its
  -- lanes), state "w" or "h", seq and enqueued (strings). Only for a record
  -- plain_rec reads: its caller checks the numbers it formatted (a token
  -- past 2^63, edited by hand, formats as a negative number; a seq read
  -- from a meta edited by hand may be no whole number).
  local function rec_wrote(raw, owner, state, seq, enq, lanes, head)
    local v = {owner, state, seq, enq, lanes, head}
    seed_check(parse_rec, raw, v)
    put(RECS, raw, v)
  end

  -- parse_line parses a key record: epoch, limit, token, waiters, holders
  -- (" id …"), holder count; nothing for a record not in the form flush
  -- writes. (LINES keeps the same in a table, with waiters as a number.)
  local function parse_line(raw)
    local ep, l, tk, w, rest = string.match(raw, '^(%S+) (%d+) (%d+) (%d+)(.*)$')
    if not ep or not (canon(l) and canon(tk) and canon(w)) then return end
    local n = 0
    if rest ~= '' then
      -- " id id …" as flush writes it, no other spacing or white space
      -- (edited by hand: the general path reads it)
      if string.byte(rest) ~= 32 or string.byte(rest, -1) == 32 or string.find(rest, '  ', 1, true) or string.find(rest, '[^%S ]') then return end
      n = 1
      if string.find(rest, ' ', 2, true) then n = select(2, string.gsub(rest, ' ', ' ')) end
    end
    return ep, l, tk, w, rest, n
  end
  local function line_table(raw)
    local ep, l, tk, w, rest, n = parse_line(raw)
    if ep then return {ep, l, tk, w, rest, n, tonumber(w)} end
  end

  -- lean_keys reads, in one command with the marker of lanes, the records
  -- of keys (a list): per key {token string, waiters, holders (" id …"),
  -- holder count, limit string (nil for an idle key)}. It returns nil when
  -- the marker is missing or names another protocol, or a record does not
  -- parse (the general path decides).
  -- With one, a key, it reads that key's record alone and returns its
  -- state itself.
  local function lean_keys(keys, one)
    local got
    if one then got = redis.call('HMGET', K_LANES, '\0', one) else got = mcall('HMGET', K_LANES, keys, '\0') end
    if not got[1] or read_marker(got[1]) then return nil end
    local ks = not one and {}
    for i = 1, one and 1 or #keys do
      local st = {'0', 0, '', 0, nil}
      local raw = got[i + 1]
      if raw then
        local v = LINES.t[raw]
        if v then
          st[1] = v[3]
          if v[1] == EPOCH and (v[4] ~= '0' or v[5] ~= '') then
            st[2], st[3], st[4], st[5] = v[7], v[5], v[6], v[2]
          end
        else
          local ep, l, tk, w, rest, n = parse_line(raw)
          if not ep then return nil end
          st[1] = tk
          if ep == EPOCH and (w ~= '0' or rest ~= '') then
            st[2], st[3], st[4], st[5] = tonumber(w), rest, n, l
          end
        end
      end
      if one then return st end
      ks[keys[i]] = st
    end
    return ks
  end

  -- The last second, ms and deadline the clock gave and their forms (steps
  -- come many to a ms).
  local CLOCK_S, CLOCK_SN, CLOCK_MS, CLOCK_MSS, CLOCK_DL, CLOCK_DLS
  -- lean_clock starts a lean step on KEYS and ARGV (the names of the
  -- state keys and the hint channels) and reads the Redis clock; lean_whole
  -- says whether deadlines is whole and nothing has expired (as expiring,
  -- which a lean step needs to find empty).
  local function lean_clock(KEYS, ARGV)
    K_ENTRIES, K_LANES, K_QUEUE, K_DEADLINES, K_NESTED, K_META, K_TOMBS =
      KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
    WAKE = ARGV[2]
    local t = redis.call('TIME')
    if t[1] ~= CLOCK_S then CLOCK_S, CLOCK_SN = t[1], tonumber(t[1]) * 1000000 end
    NOW_US = CLOCK_SN + tonumber(t[2])
    NOW = math.floor(NOW_US / 1000)
    if NOW ~= CLOCK_MS then CLOCK_MS, CLOCK_MSS = NOW, dec(NOW) end
    return CLOCK_MSS
  end
  -- lean_deadline is the deadline of a lease of ttl ms granted now, as a
  -- string.
  local function lean_deadline(ttl)
    local dl = NOW + ttl
    if dl ~= CLOCK_DL then CLOCK_DL, CLOCK_DLS = dl, dec(dl) end
    return CLOCK_DLS
  end
  local function lean_whole(now)
    local d = redis.call('ZRANGEBYSCORE', K_DEADLINES, '-inf', now, 'LIMIT', '0', '2')
    return d[1] == '\0' and not d[2]
  end

  -- lean_token mints the next token of the key state st (tokenize).
  local function lean_token(st)
    st[1] = dec(next_token(tonumber(st[1])))
    return st[1]
  end

  -- lean_line is the key record of st (what parse_line makes of it goes
  -- in LINES, when it parses: no count or token formatted negative, which
  -- only a state edited by hand leads to: below 0, or past 2^63).
  local function lean_line(st)
    local w = num(st[2])
    local raw = EPOCH .. ' ' .. st[5] .. ' ' .. st[1] .. ' ' .. w .. st[3]
    if string.byte(w) ~= 45 and string.byte(st[1]) ~= 45 then -- -
      local v = {EPOCH, st[5], st[1], w, st[3], st[4], st[2]}
      seed_check(line_table, raw, v)
      put(LINES, raw, v)
    end
    return raw
  end

  -- lean_confirm is confirm for a lean step: the markers of queue, nested
  -- and meta, and the last sequence number (nil when a marker is missing,
  -- or the number is not a whole number from 0 to MAX_SEQ: the general
  -- path reads it again from the queue).
  local function lean_confirm()
    if not (redis.call('ZSCORE', K_QUEUE, '\0') and redis.call('ZSCORE', K_NESTED, '\0')) then return nil end
    local m = redis.call('HMGET', K_META, '\0', 'seq')
    if not m[1] then return nil end
    local seq = tonumber(m[2] or '0')
    if not seq or seq < 0 or seq > MAX_SEQ or seq ~= math.floor(seq) then return nil end
    return seq
  end

  -- lean_live reports whether every id of list has a deadline that has
  -- not passed (purge's test: a purge removes none). With nothing expired,
  -- only the id "\0" (deadlines' marker, scored -inf; a holder so named
  -- only by hand) fails it having one. Then, for each key state st that
  -- lean_holders gave ids of list, it sets st[6] to the earliest of their
  -- deadlines (first_deadline).
  local function lean_live(list, sts)
    if #list == 0 then return true end
    local dls = mcall('ZMSCORE', K_DEADLINES, list)
    for i = 1, #list do
      if not dls[i] or tonumber(dls[i]) <= NOW then return false end
    end
    if not sts then return true end -- (a release's: no table made for nothing)
    for _, st in ipairs(sts) do
      local first = tonumber(dls[st[6]])
      for i = st[6] + 1, st[7] do
        local d = tonumber(dls[i])
        if d < first then first = d end
      end
      st[6] = first
    end
    return true
  end

  -- lean_holders appends to list the holder ids of st that a purge would
  -- look at (stale, after a reap that found nothing expired), and, when
  -- sts is given, st to sts, with the place of its first and last id in
  -- list as st[6], st[7] (lean_live).
  local function lean_holders(list, st, sts)
    if st[4] > 0 and st[4] <= PURGE_ALL then
      local first = #list + 1
      for id in string.gmatch(st[3], '%S+') do list[#list + 1] = id end
      if sts then
        st[6], st[7] = first, #list
        sts[#sts + 1] = st
      end
    end
  end

  -- lean_wait is the holder TTL (ms, 0 for none) of a request a lean step
  -- queued on lanes (each {key, limit string, limit}) at places (its
  -- place on each, in order), from the key states ks the step leaves, by
  -- finish's rule (first_deadline): among the first limit waiters (at most
  -- PURGE_ALL) on each key with at most limit before it, and the latest
  -- over the keys where exactly limit are of their earliest deadline: of
  -- the holders the step started with
  -- (st[6], from lean_live) and, when the step granted the key (st[8]), of
  -- its grants (dl; a grant behind the request left room, so only one
  -- before it counts). A key of more than PURGE_ALL holders is not looked
  -- at.
  local function lean_wait(ks, lanes, places, dl)
    local first
    for j = 1, #lanes do
      local st, p, limit = ks[lanes[j][1]], places[j], lanes[j][3]
      local before = st[4] + p - 1
      if p > limit or p > PURGE_ALL or before > limit then return 0 end
      if before == limit then
        if st[4] > PURGE_ALL then return 0 end
        local v = st[6]
        if st[8] and (not v or dl < v) then v = dl end
        if not v then return 0 end
        if not first or v > first then first = v end
      end
    end
    return first and first - NOW or 0
  end

  do -- (lean_enqueue's parts, locals of this block: Lua takes 200 locals at once)
  local lean_one, lean_decide
  local LEAN_HEAD -- the start of an entry record of this step's owner, host and pid
  -- lean_enqueue is enqueue.lua's step when its requests are plain: each,
  -- in order, is granted at once when every key it names has room for it
  -- behind all that hold or wait, else queued on each of them. It returns
  -- the reply, or nil (a request that is not plain or not new, a limit or
  -- rate that disagrees, a holder without a deadline or record, a marker
  -- missing, a frozen namespace, a tombstone alive, a longer TTL than any
  -- before: the general path's to decide).
  function lean_enqueue(KEYS, ARGV)
    if #KEYS ~= 7 or ARGV[1] ~= PROTOCOL or not ARGV[7] then return nil end
    local owner, host, pid = ARGV[4], ARGV[5], ARGV[6]
    local o = VOWN[owner]
    if not o or o[1] ~= host or o[2] ~= pid then
      if not (id_ok(owner) and field_ok(host) and not string.find(owner, '["\\]') and not string.find(host, '["\\]')
          and (pid == '0' or string.find(pid, '^[1-9]%d*$')) and #pid <= 10 and tonumber(pid) <= 4294967295) then
        return nil
      end
      o = {host, pid, '{"o":"' .. owner .. '","h":"' .. host .. '","p":' .. pid}
      remember(VOWN, owner, o)
    end
    LEAN_HEAD = o[3]
    if ARGV[3] ~= LEAN_TTLS then
      local ttl = int_in(ARGV[3], 1, MAX_TTL)
      if not ttl then return nil end
      LEAN_TTLS, LEAN_TTL = ARGV[3], ttl
    end
    local reqs, id, one = lean_requests(ARGV[7])
    if one then
      if not id_ok(id) then return nil end
      return lean_one(KEYS, ARGV, id, one)
    end
    if not reqs then return nil end
    -- The checks of enqueue.lua, which every request passes here.
    local ids, seen, keys, limits, total, dup = {}, #reqs > 1 and {}, {}, {}, 0, false
    for i = 1, #reqs do
      local r = reqs[i]
      local id, lanes = r[1], r[2]
      if not id_ok(id) or (seen and seen[id]) then return nil end
      if seen then seen[id] = true end
      ids[i] = id
      total = total + #lanes
      for j = 1, #lanes do
        local key, lim = lanes[j][1], lanes[j][3]
        if not lean_key(key) or lim > MAX_LIMIT then return nil end
        for m = 1, j - 1 do
          if lanes[m][1] == key then return nil end
        end
        if limits[key] then
          dup = true
          if limits[key] ~= lanes[j][2] then return nil end -- LANES_LIMIT
        else
          keys[#keys + 1] = key
          limits[key] = lanes[j][2]
        end
      end
      local f = r[4]
      if f ~= '' then
        for v in string.gmatch(f, '":"([^"]*)"') do
          if not lean_field(v) then return nil end
        end
      end
    end
    if total > MAX_STEP_LANES then return nil end

    local nowS = lean_clock(KEYS, ARGV)
    local ents = mcall('HMGET', K_ENTRIES, ids, '\0')
    if not ents[1] then return nil end
    for i = 1, #ids do
      if ents[i + 1] then return nil end
    end
    local ks = lean_keys(keys)
    if not ks or FROZEN > NOW or LEAN_TTL > MAXTTL or not lean_whole(nowS) then return nil end
    return lean_decide(owner, reqs, ids, keys, limits, dup, ks, nowS)
  end

  -- lean_one is lean_enqueue's step for one new request of one lane (v:
  -- what lean_requests keeps of its bytes after the id, checked), decided
  -- as lean_decide would with no table made but its reply's (on a busy
  -- key, one list of the holders to look at): granted at once on an idle
  -- key, or where the limit leaves room behind those that hold and wait,
  -- else queued. On a busy key the record of its first holder comes with
  -- the entry's own read (the key's record is read first).
  function lean_one(KEYS, ARGV, id, v)
    local nowS = lean_clock(KEYS, ARGV)
    local lane = v[1][1]
    local key = lane[1]
    local st = lean_keys(nil, key)
    if not st or FROZEN > NOW or LEAN_TTL > MAXTTL then return nil end
    local first = st[5] and string.match(st[3], '^ (%S+)')
    local ents
    if first then
      ents = redis.call('HMGET', K_ENTRIES, '\0', id, first)
    else
      ents = redis.call('HMGET', K_ENTRIES, '\0', id)
    end
    if not ents[1] or ents[2] or not lean_whole(nowS) then return nil end
    local seq
    if st[5] then
      -- A key with holders or waiters keeps its limit, and the rate its
      -- first holder carries must be none (lean_decide's checks).
      if st[5] ~= lane[2] or st[4] == 0 then return nil end
      local e = plain_rec(ents[3])
      if not e then return nil end
      local has = false
      for _, kl in ipairs(e[5]) do
        if kl[1] == key then has = true end
      end
      if not has then return nil end
      seq = lean_confirm()
      if not seq or seq + 1 > MAX_SEQ then return nil end
      local stay, sts = {}, {}
      lean_holders(stay, st, sts)
      if not lean_live(stay, sts) then return nil end
    end
    if NOW < TOMBS and not untombed({id}) then return nil end
    local rec0 = LEAN_HEAD .. v[3] .. ',"k":[' .. v[2] .. ']'
    if st[4] + st[2] < lane[3] then
      st[5], st[3], st[4] = lane[2], st[3] .. ' ' .. id, st[4] + 1
      local tok = lean_token(st)
      local rec = rec0 .. ',"s":"h","q":0,"e":' .. nowS .. ',"g":' .. nowS .. ',"x":{"' .. key .. '":"' .. tok .. '"}}'
      if string.byte(tok) ~= 45 then rec_wrote(rec, ARGV[4], 'h', '0', nowS, v[1], rec0) end -- -
      redis.call('HSET', K_ENTRIES, id, rec)
      redis.call('ZADD', K_DEADLINES, lean_deadline(LEAN_TTL), id)
      redis.call('HSET', K_LANES, key, lean_line(st))
      return {EPOCH, 0, id, 'h', 0, 0, 0, 2, key, tok}
    end
    seq = seq + 1
    st[2] = st[2] + 1
    local qs = tostring(seq) -- as cjson writes it (a seq from a meta edited by hand may be no whole number)
    local rec = rec0 .. ',"s":"w","q":' .. qs .. ',"e":' .. nowS .. '}'
    if seq >= 0 and seq % 1 == 0 then rec_wrote(rec, ARGV[4], 'w', qs, nowS, v[1], rec0) end
    redis.call('HSET', K_ENTRIES, id, rec)
    redis.call('ZADD', K_DEADLINES, lean_deadline(LEAN_TTL), id)
    redis.call('ZADD', K_QUEUE, '0', qmember(key, seq, id))
    redis.call('HSET', K_LANES, key, lean_line(st))
    redis.call('HSET', K_META, 'seq', dec(seq))
    -- its holder TTL (lean_wait, inline: no step grant stands before it)
    local p, lim, ttl = st[2], lane[3], 0
    if p <= lim and p <= PURGE_ALL and st[4] + p - 1 == lim and st[4] <= PURGE_ALL and st[6] then ttl = st[6] - NOW end
    return {EPOCH, 0, id, 'w', seq, 0, ttl, 2, key, p}
  end

  -- lean_decide is the rest of a lean enqueue, from its reads: ks, the
  -- records of keys (lean_keys), and the clock nowS.
  function lean_decide(owner, reqs, ids, keys, limits, dup, ks, nowS)
    -- A key with holders or waiters keeps its limit, and the rate its
    -- holders carry must be none (rate_recorded reads the first holder's
    -- record); then the general path confirms the state and purges.
    local seq, firsts, stay, sts = 0, {}, {}, {}
    for i = 1, #keys do
      local st = ks[keys[i]]
      if st[5] then
        if st[5] ~= limits[keys[i]] then return nil end -- LANES_LIMIT
        if st[4] == 0 then return nil end -- waiters alone: their rate is the head's
        firsts[#firsts + 1] = string.match(st[3], '^ (%S+)')
        lean_holders(stay, st, sts)
      end
    end
    if #firsts > 0 or dup then
      if #firsts > 0 then
        local got = mcall('HMGET', K_ENTRIES, firsts)
        local j = 0
        for i = 1, #keys do
          local st = ks[keys[i]]
          if st[5] then
            j = j + 1
            local e = plain_rec(got[j])
            if not e then return nil end
            local has = false
            for _, kl in ipairs(e[5]) do
              if kl[1] == keys[i] then has = true end
            end
            if not has then return nil end
          end
        end
      end
      seq = lean_confirm()
      if not seq or seq + #reqs > MAX_SEQ or not lean_live(stay, sts) then return nil end
    end

    -- last, as in enqueue.lua: its one command is for a step lean otherwise
    if not untombed(ids) then return nil end

    -- Decided: grants and queue places in order, then the writes.
    local out, recs, dls, members, seq0, waits = {EPOCH, 0}, {}, {}, {}, seq, {}
    local dl = lean_deadline(LEAN_TTL)
    local head = LEAN_HEAD
    for i = 1, #reqs do
      local r = reqs[i]
      local id, lanes = r[1], r[2]
      local now = true
      for j = 1, #lanes do
        local st = ks[lanes[j][1]]
        if st[4] + st[2] >= lanes[j][3] then
          now = false
          break
        end
      end
      local rec0 = head .. r[4] .. ',"k":[' .. r[3] .. ']'
      local rec
      -- its status: id, state, seq, wait, holder TTL, 2 per lane, then
      -- key and token (held) or position (waiting), lane by lane
      local o = #out
      out[o + 1], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = id, 0, 0, 0, 2 * #lanes
      if now then
        local x, plain = {}, true
        for j = 1, #lanes do
          local key = lanes[j][1]
          local st = ks[key]
          st[5], st[3], st[4], st[8] = lanes[j][2], st[3] .. ' ' .. id, st[4] + 1, true
          local tok = lean_token(st)
          out[o + 5 + 2 * j], out[o + 6 + 2 * j] = key, tok
          x[j] = '"' .. key .. '":"' .. tok .. '"'
          if string.byte(tok) == 45 then plain = false end
        end
        rec = rec0 .. ',"s":"h","q":0,"e":' .. nowS .. ',"g":' .. nowS .. ',"x":{' .. table.concat(x, ',') .. '}}'
        if plain then rec_wrote(rec, owner, 'h', '0', nowS, lanes, rec0) end
        out[o + 2] = 'h'
      else
        seq = seq + 1
        for j = 1, #lanes do
          local key = lanes[j][1]
          local st = ks[key]
          st[5], st[2] = lanes[j][2], st[2] + 1
          members[#members + 1] = '0'
          members[#members + 1] = qmember(key, seq, id)
          out[o + 5 + 2 * j], out[o + 6 + 2 * j] = key, st[2] -- last on each key: its place is the count
        end
        local n = #waits -- its holder TTL, once the step's grants are known
        waits[n + 1], waits[n + 2] = o + 5, lanes
        local qs = tostring(seq) -- as cjson writes it (a seq from a meta edited by hand may be no whole number)
        rec = rec0 .. ',"s":"w","q":' .. qs .. ',"e":' .. nowS .. '}'
        if seq >= 0 and seq % 1 == 0 then rec_wrote(rec, owner, 'w', qs, nowS, lanes, rec0) end
        out[o + 2], out[o + 3] = 'w', seq
      end
      recs[2 * i - 1], recs[2 * i] = id, rec
      dls[2 * i - 1], dls[2 * i] = dl, id
    end
    local dlN = tonumber(dl)
    for i = 1, #waits, 2 do
      local o, lanes, places = waits[i], waits[i + 1], {}
      for j = 1, #lanes do places[j] = out[o + 1 + 2 * j] end
      out[o] = lean_wait(ks, lanes, places, dlN)
    end
    mrun('HSET', K_ENTRIES, recs)
    mrun('ZADD', K_DEADLINES, dls)
    mrun('ZADD', K_QUEUE, members)
    local lines = {}
    for i = 1, #keys do
      lines[2 * i - 1], lines[2 * i] = keys[i], lean_line(ks[keys[i]])
    end
    mrun('HSET', K_LANES, lines)
    if seq ~= seq0 then redis.call('HSET', K_META, 'seq', dec(seq)) end
    return out
  end

  end

  -- lean_drop takes the holder id out of the holders " a b …" of st; false
  -- when st does not name it.
  local function lean_drop(st, id)
    local h = st[3]
    if h == ' ' .. id then
      st[3] = ''
    else
      local a, b = string.find(h .. ' ', ' ' .. id .. ' ', 1, true)
      if not a then return false end
      st[3] = string.sub(h, 1, a - 1) .. string.sub(h, b)
    end
    st[4] = st[4] - 1
    return true
  end

  -- lean_leave is lean_release's step when every id is a plain waiter of
  -- the caller's (es, their records; ks, the records of their keys, a
  -- list): each leaves its keys' queues, its entry and its deadline, and
  -- each key's record counts one waiter less. It is taken only where the
  -- general path's scan grants nobody and its purge finds nothing: on each
  -- key that keeps waiters, holders that have a deadline fill the limit.
  -- So a cancelled wait, or Session.Close of many waiters behind another
  -- owner's holder, costs no cjson; on a key whose holders fill its limit
  -- it reads the head of the queue, and tells the waiter that becomes
  -- next, when one that leaves was before it, to look again (scan's rule).
  -- It returns the reply, or nil (a marker missing, a lane whose limit is
  -- not its key's, a record that counts fewer waiters than leave, room on
  -- a key that keeps waiters, a holder of such a key without a deadline,
  -- a next waiter whose member or record is not of the lean form).
  local function lean_leave(ids, es, keys, ks, gone)
    local leaving, members, live, tell, leavingm, first = {}, {}, {}, {}, nil, {}
    table.sort(keys) -- the hints in key order, as scan's
    for i, e in ipairs(es) do
      local seq = tonumber(e[3])
      for _, kl in ipairs(e[5]) do
        local key = kl[1]
        local st = ks[key]
        if not st[5] or kl[3] ~= int(st[5]) then return nil end
        leaving[key] = (leaving[key] or 0) + 1
        first[key] = math.min(first[key] or seq, seq)
        members[#members + 1] = qmember(key, seq, ids[i])
      end
    end
    for _, key in ipairs(keys) do
      local st = ks[key]
      st[2] = st[2] - leaving[key]
      if st[2] < 0 then return nil end
      if st[2] > 0 then
        -- the general path's scan of the key: its purge looks at the
        -- holders, then a waiter behind may take the room left
        if int(st[5]) > st[4] then return nil end
        -- its holders exactly the limit: the waiter next once these
        -- leave, when one of them was before it, is told to look again,
        -- as the general path's scan tells it (its holder TTL was 0)
        if int(st[5]) == st[4] and st[4] > 0 then
          local ms = redis.call('ZRANGEBYLEX', K_QUEUE, lo(key), hi(key), 'LIMIT', '0', dec(leaving[key] + 1))
          if not leavingm then
            leavingm = {}
            for _, m in ipairs(members) do leavingm[m] = true end
          end
          local next_m
          for _, m in ipairs(ms) do
            if not leavingm[m] then
              next_m = m
              break
            end
          end
          if next_m then
            local seq, wid = string.match(string.sub(next_m, #key + 2), '^(%d+)%z(.+)$')
            if not (seq and #seq == 16 and id_ok(wid)) or string.find(wid, '["\\]') then return nil end
            if tonumber(seq) > first[key] then
              local o = string.match(redis.call('HGET', K_ENTRIES, wid) or '', '^{"o":"([^"\\]+)".*,"s":"w"')
              if not o then return nil end
              tell[#tell + 1] = {o, wid}
            end
          end
        end
        lean_holders(live, st)
      end
    end
    -- A holder this step releases (a key record naming a waiter as its
    -- holder, by hand): the general path's purge, after the removals,
    -- finds it without a deadline and frees its slot.
    for _, id in ipairs(live) do
      if gone[id] then return nil end
    end
    -- it changes queue: the markers, as a hand-off reads them
    if not lean_confirm() or not lean_live(live) then return nil end
    mrun('ZREM', K_QUEUE, members)
    mrun('HDEL', K_ENTRIES, ids)
    mrun('ZREM', K_DEADLINES, ids)
    local lines, out = {}, {EPOCH}
    for i, key in ipairs(keys) do
      lines[2 * i - 1], lines[2 * i] = key, lean_line(ks[key])
    end
    mrun('HSET', K_LANES, lines)
    for i = 1, #ids do out[i + 1] = 'w' end
    if #tell > 0 then -- one message an owner, each id once
      local by, order, seen = {}, {}, {}
      for _, t in ipairs(tell) do
        if not seen[t[2]] then
          seen[t[2]] = true
          if not by[t[1]] then
            by[t[1]] = {}
            order[#order + 1] = t[1]
          end
          table.insert(by[t[1]], '{"id":"' .. t[2] .. '"}')
        end
      end
      for _, o in ipairs(order) do
        redis.call('PUBLISH', WAKE .. o, '[' .. table.concat(by[o], ',') .. ']')
      end
    end
    return out
  end

  local LEAN_READ -- what lean_release read of entries, for the general path
  do -- (lean_release's parts, locals of this block)
  local lean_freed
  -- waits reports whether the entry record raw (or false) names the state
  -- "w" where the lean form puts it (a quick look, before any parse).
  local function waits(raw) return string.find(raw or '', '],"s":"w"', 1, true) ~= nil end

  -- lean_release is release.lua's step when an owner releases plain
  -- holders of its own (tombstone lifetime 0): each leaves its key records,
  -- its entry and its deadline; on a key with waiters, the first waiters the
  -- freed slots let in (scan) are granted, in arrival order across the
  -- keys, when each is a live plain waiter of that key alone, and their
  -- owners get grant hints. Or, when every id is a plain waiter of the
  -- caller's, lean_leave's step. It returns the reply, or nil (an entry
  -- that is not a plain entry of the caller's, holders and waiters
  -- together, more than LEAN_STEP holders, a key record that does not name
  -- a holder, a waiter of another kind, a queue member without a live
  -- entry, a remaining holder without a deadline, a marker missing, a
  -- frozen namespace, more room than RATE_SCAN: the general path's to
  -- decide).
  function lean_release(KEYS, ARGV)
    LEAN_READ = nil
    if #KEYS ~= 7 or ARGV[1] ~= PROTOCOL or ARGV[4] ~= '0' then return nil end
    local by, n = ARGV[3], #ARGV - 4
    if n < 1 or n > MAX_STEP_REQUESTS or (not VOWN[by] and not id_ok(by)) then return nil end
    if n == 1 then
      -- One id, the common step: a holder of one key that nobody waits
      -- for is released with no table made but the reply's.
      local id = ARGV[5]
      if not id_ok(id) then return nil end
      local nowS = lean_clock(KEYS, ARGV)
      local ents = redis.call('HMGET', K_ENTRIES, '\0', id)
      LEAN_READ = ents
      if not ents[1] then return nil end
      local e = plain_rec(ents[2])
      if not e or e[1] ~= by then return nil end
      if e[2] ~= 'h' or #e[5] > 1 then return lean_freed(by, {id}, {[id] = true}, nowS, ents) end
      local kl = e[5][1]
      local key = kl[1]
      local st = lean_keys(nil, key)
      if not st or not lean_whole(nowS) then return nil end
      if st[2] > 0 and (kl[3] ~= 1 or st[4] ~= 1) then
        return lean_freed(by, {id}, {[id] = true}, nowS, ents, {e}, {key}, {[key] = st})
      end
      if not st[5] or kl[3] ~= int(st[5]) or not lean_drop(st, id) then return nil end
      if st[2] == 0 then
        redis.call('HDEL', K_ENTRIES, id)
        redis.call('ZREM', K_DEADLINES, id)
        redis.call('HSET', K_LANES, key, lean_line(st))
        return {EPOCH, 'h'}
      end
      -- The sole holder of a key of limit 1 that others wait for: its slot
      -- passes to the head of the queue, as lean_freed passes it (the
      -- markers first; the head alive, a plain waiter of this key alone,
      -- of the sequence number its queue member names).
      if FROZEN > NOW or not lean_confirm() then return nil end
      local m = redis.call('ZRANGEBYLEX', K_QUEUE, lo(key), hi(key), 'LIMIT', '0', '3')[1]
      if not m then return nil end
      local seq, wid = string.match(string.sub(m, #key + 2), '^(%d+)%z(.+)$')
      if not seq or #seq ~= 16 or not id_ok(wid) or string.find(wid, '["\\]') or wid == id then return nil end
      local d = redis.call('ZSCORE', K_DEADLINES, wid)
      if not d or tonumber(d) <= NOW then return nil end
      local w = plain_rec(redis.call('HGET', K_ENTRIES, wid))
      if not w or w[2] ~= 'w' or #w[5] ~= 1 or w[5][1][1] ~= key or w[5][1][3] ~= 1 or tonumber(w[3]) ~= tonumber(seq) then return nil end
      redis.call('HDEL', K_ENTRIES, id)
      redis.call('ZREM', K_DEADLINES, id)
      st[2], st[3], st[4] = st[2] - 1, ' ' .. wid, 1
      local tok = lean_token(st)
      local x = '"x":{"' .. key .. '":"' .. tok .. '"}'
      local rec = w[6] .. ',"s":"h","q":' .. w[3] .. ',"e":' .. w[4] .. ',"g":' .. nowS .. ',' .. x .. '}'
      if string.byte(tok) ~= 45 then rec_wrote(rec, w[1], 'h', w[3], w[4], w[5], w[6]) end -- -
      redis.call('ZREM', K_QUEUE, m)
      redis.call('HSET', K_ENTRIES, wid, rec)
      redis.call('HSET', K_LANES, key, lean_line(st))
      redis.call('PUBLISH', WAKE .. w[1], '[{"id":"' .. wid .. '","q":' .. w[3] .. ',' .. x .. ',"g":' .. nowS .. '}]')
      return {EPOCH, 'h', wid}
    end
    local ids = {}
    for i = 5, #ARGV do ids[i - 4] = ARGV[i] end
    local gone = {}
    for i = 1, n do
      local id = ids[i]
      if gone[id] or not id_ok(id) then return nil end
      gone[id] = true
    end
    local nowS = lean_clock(KEYS, ARGV)
    local ents = mcall('HMGET', K_ENTRIES, ids, '\0')
    LEAN_READ = ents
    if not ents[1] then return nil end
    return lean_freed(by, ids, gone, nowS, ents)
  end

  -- lean_freed is the rest of lean_release, from its read of entries
  -- (ents: the reply of HMGET entries \0 <ids>): ids, as a list and a set
  -- (gone), released by the owner by. es, keys and ks, when given, are the
  -- records of holders ids, their keys and the keys' records, read already.
  function lean_freed(by, ids, gone, nowS, ents, es, keys, ks)
    local n = #ids
    local state = 'h' -- that of every id
    if not es then
      -- Holders and waiters together, or many holders, go general before
      -- any other work: told by the bytes where a record in the lean form
      -- names its state (the parse below decides the rest), the last id's
      -- first (a Session lists its newest entries first, and its holders
      -- are most often its oldest).
      if n > 1 then
        local w = waits(ents[2])
        if (not w and n > LEAN_STEP) or waits(ents[n + 1]) ~= w then return nil end
        for i = 3, n do
          if waits(ents[i]) ~= w then return nil end
        end
      end
      local seen
      es, keys, seen, state = {}, {}, {}, nil
      for i = 1, n do
        local e = plain_rec(ents[i + 1])
        if not e or e[1] ~= by then return nil end
        state = state or e[2]
        if e[2] ~= state or (state == 'h' and n > LEAN_STEP) then return nil end
        es[i] = e
        for _, kl in ipairs(e[5]) do
          if not seen[kl[1]] then
            seen[kl[1]] = true
            keys[#keys + 1] = kl[1]
          end
        end
      end
      ks = lean_keys(keys)
      if not ks or not lean_whole(nowS) then return nil end
    end
    if state == 'w' then return lean_leave(ids, es, keys, ks, gone) end
    -- The holders each key keeps once es are gone, and the limit each
    -- released lane names (scan counts its room from it).
    local limit, handoff, freed = {}, false, {}
    for i = 1, n do
      for _, kl in ipairs(es[i][5]) do
        local st = ks[kl[1]]
        if not st[5] or kl[3] ~= int(st[5]) or not lean_drop(st, ids[i]) then return nil end
        limit[kl[1]] = kl[3]
        freed[kl[1]] = (freed[kl[1]] or 0) + 1
        if st[2] > 0 then handoff = true end
      end
    end
    -- The waiters scan would grant: on each key with waiters, in key order,
    -- the first members up to its room, each alive and plain.
    local cands = {}
    if handoff then
      -- The markers of queue, nested and meta, as the general path's
      -- confirm reads them before a hand-off: one missing resets the
      -- state there, and a grant here would answer from a state that is
      -- not whole (invariant 13; lean_break_test.go).
      if FROZEN > NOW or not lean_confirm() then return nil end
      table.sort(keys)
      local live = {}
      for _, key in ipairs(keys) do
        local st = ks[key]
        if st[2] > 0 then
          lean_holders(live, st) -- a purge looks at them
          local room = limit[key] - st[4]
          -- a freed slot that no waiter takes, with waiters left (more
          -- holders than the limit, by hand): the general path's scan
          -- tells the waiter at the limit to look again
          if room > RATE_SCAN or (room < freed[key] and st[2] > room) then return nil end
          if room > 0 then
            local ms = redis.call('ZRANGEBYLEX', K_QUEUE, lo(key), hi(key), 'LIMIT', '0', dec(room + 2))
            -- fewer members than the record counts: the queue lost some;
            -- more to grant than it counts: the record was edited
            if #ms < math.min(room, st[2]) or math.min(room, #ms) > st[2] then return nil end
            for j = 1, math.min(room, #ms) do
              local seq, id = string.match(string.sub(ms[j], #key + 2), '^(%d+)%z(.+)$')
              -- not an id, or one JSON escapes, or a member of another
              -- form than qmember writes (edited by hand: the general
              -- path's scan mends it)
              if not seq or #seq ~= 16 or not id_ok(id) or string.find(id, '["\\]') then return nil end
              cands[#cands + 1] = {tonumber(seq), id, key, ms[j]}
              live[#live + 1] = id
            end
          end
        end
      end
      if #cands > SCAN_MAX * 4 or not lean_live(live) then return nil end
      -- A remaining holder this step releases (a key record naming it
      -- twice, by hand): the general path's purge finds it gone.
      for _, id in ipairs(live) do
        if gone[id] then return nil end
      end
      if #cands > 0 then
        local wids = {}
        for i, c in ipairs(cands) do wids[i] = c[2] end
        local got = mcall('HMGET', K_ENTRIES, wids)
        for i, c in ipairs(cands) do
          local w = plain_rec(got[i])
          if not w or w[2] ~= 'w' or #w[5] ~= 1 or w[5][1][1] ~= c[3] or w[5][1][3] ~= limit[c[3]] or tonumber(w[3]) ~= c[1] then return nil end
          c[5] = w
        end
      end
    end

    -- Decided: the removals, then the grants in arrival order.
    local out = {EPOCH} -- then each id's state, then the ids granted
    for i = 1, n do out[i + 1] = 'h' end
    mrun('HDEL', K_ENTRIES, ids)
    mrun('ZREM', K_DEADLINES, ids)
    if #cands > 0 then
      table.sort(cands, by_seq)
      local recs, members, hints, owners = {}, {}, {}, {}
      for i, c in ipairs(cands) do
        local id, key, w = c[2], c[3], c[5]
        local st = ks[key]
        st[2], st[3], st[4] = st[2] - 1, st[3] .. ' ' .. id, st[4] + 1
        local tok = lean_token(st)
        local x = '"x":{"' .. key .. '":"' .. tok .. '"}'
        recs[2 * i - 1] = id
        recs[2 * i] = w[6] .. ',"s":"h","q":' .. w[3] .. ',"e":' .. w[4] .. ',"g":' .. nowS .. ',' .. x .. '}'
        if string.byte(tok) ~= 45 then rec_wrote(recs[2 * i], w[1], 'h', w[3], w[4], w[5], w[6]) end
        members[i], out[n + 1 + i] = c[4], id
        local o = w[1]
        if not hints[o] then
          hints[o] = {}
          owners[#owners + 1] = o
        end
        table.insert(hints[o], '{"id":"' .. id .. '","q":' .. w[3] .. ',' .. x .. ',"g":' .. nowS .. '}')
      end
      mrun('ZREM', K_QUEUE, members)
      mrun('HSET', K_ENTRIES, recs)
      local lines = {}
      for _, key in ipairs(keys) do
        lines[#lines + 1] = key
        lines[#lines + 1] = lean_line(ks[key])
      end
      mrun('HSET', K_LANES, lines)
      for _, o in ipairs(owners) do
        redis.call('PUBLISH', WAKE .. o, '[' .. table.concat(hints[o], ',') .. ']')
      end
    else
      local lines = {}
      for _, key in ipairs(keys) do
        lines[#lines + 1] = key
        lines[#lines + 1] = lean_line(ks[key])
      end
      mrun('HSET', K_LANES, lines)
    end
    return out
  end
  end
  -- lean_read is, after lean_release returned nil, what it read of
  -- entries (the reply of HMGET entries \0 <ids>, or nil when it read
  -- nothing), for the general path's open to take instead of reading it
  -- again: the same ids, read by the same script run.
  function lean_read()
    local read = LEAN_READ
    LEAN_READ = nil
    return read
  end
end

