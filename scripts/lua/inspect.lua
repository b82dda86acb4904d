-- inspect.lua: the holders and waiters of some keys, one bounded page at
-- a time. It removes expired entries first (at most REAP_MAX), so it shows
-- no dead entry unless more were due.
--
-- KEYS: the seven of lib.lua.
-- ARGV: [1] protocol, [2] hint channel prefix, [3] budget: the most
--       entries (holders and waiters) this page returns, 1 to
--       MAX_STEP_REQUESTS, [4...] pairs of key and cursor ("" from the
--       key's head, else a next this script returned for the key).
-- Reply: {now (ms), epoch ("" when the namespace has no state),
--        {{key, limit (0: neither holders nor waiters), holder count,
--          waiter count, {{entry JSON, deadline ms, id}, ...holders},
--          {{entry JSON, deadline ms, id}, ...waiters}, next[, rate]}, ...}
--        (rate, only for a key with a rate: {rate limit, window ms, units
--        spent, ms the oldest units leave the window (0: none)}, see
--        lib.lua), (one per
--        key asked, in order), {expired, evicted, revoked, resets, frozen
--        until (ms), reset (1: this run found part of the state lost and
--        reset it, ending every lease and waiter; else 0)}}. Holders come in grant order, then waiters in queue
--        order, at most the budget in all. A cursor "" starts at the key's
--        head; next is "" when the key is done, else the cursor to go on
--        with: "h" or "w" and the member to go on after (holders or
--        waiters), "w" alone (waiters from the first), or "\0": the budget
--        ran out before the key, ask again with the same cursor. A cursor
--        that does not belong to the key is refused.
-- Errors: LANES_BADARG <field> <what>; LANES_VERSION <protocol> <other>.

local err = begin(KEYS, ARGV)
if err then return err end

local budget = int_in(ARGV[3], 1, MAX_STEP_REQUESTS)
if not budget then return badarg('budget', 'must be a whole number from 1 to ' .. MAX_STEP_REQUESTS) end
if (#ARGV - 3) % 2 ~= 0 or #ARGV - 3 > 2 * MAX_STEP_REQUESTS then
  return badarg('keys', 'pairs of key and cursor, at most ' .. MAX_STEP_REQUESTS)
end
for i = 4, #ARGV, 2 do
  local key, cursor = ARGV[i], ARGV[i + 1]
  if not key_ok(key) then return badarg('key', 'a key is 1 to ' .. MAX_KEY_LEN .. ' bytes of UTF-8 without control characters') end
  local phase, after = string.sub(cursor, 1, 1), string.sub(cursor, 2)
  if cursor ~= '' and ((phase ~= 'h' and phase ~= 'w') or (phase == 'h' and after == '')
      or (after ~= '' and string.sub(after, 1, #key + 1) ~= key .. '\0')) then
    return badarg('cursor', 'a cursor is "", or one that inspect.lua returned for the same key')
  end
end

err = full(false)
if err then return err end
if not EPOCH then return {NOW, '', {}, {0, 0, 0, 0, 0, 0}} end
-- A reset takes the script's own clock as the new epoch: no earlier run
-- can have made that one (a read that reset says so: lanectl status).
local was_reset = EPOCH == dec(NOW_US)
reap()

local function entry(id)
  local raw = redis.call('HGET', K_ENTRIES, id)
  if not raw or string.sub(raw, 1, 1) ~= '{' then raw = '{}' end
  return {raw, redis.call('ZSCORE', K_DEADLINES, id) or '0', id}
end

local out = {}
for i = 4, #ARGV, 2 do
  local key, cursor = ARGV[i], ARGV[i + 1]
  local phase, after = string.sub(cursor, 1, 1), string.sub(cursor, 2)
  local r = kget(key)
  local limit = 0
  if not idle(r) then limit = r.l end
  local holders, waiters, nxt = {}, {}, ''
  local nh, nw = 0, 0
  if limit > 0 then
    nh, nw = #r.h, r.w
    if budget == 0 then
      nxt = '\0' -- not reached: ask again with the same cursor
    else
      if phase ~= 'w' then
        local from = 1 -- holders in grant order, after the one the cursor names
        if phase == 'h' then
          local last = string.sub(after, #key + 2)
          for j, id in ipairs(r.h) do
            if id == last then from = j + 1 end
          end
        end
        local upto = math.min(#r.h, from + budget - 1)
        for j = from, upto do holders[#holders + 1] = entry(r.h[j]) end
        if upto < #r.h then nxt = 'h' .. key .. '\0' .. r.h[upto] end
        budget = budget - #holders
        phase, after = 'w', ''
      end
      if nxt == '' and budget == 0 and nw > 0 then
        nxt = 'w'
      elseif nxt == '' and nw > 0 then
        local from = lo(key)
        if after ~= '' then from = '(' .. after end
        local ms = redis.call('ZRANGEBYLEX', K_QUEUE, from, hi(key), 'LIMIT', 0, budget + 1)
        for j = 1, math.min(#ms, budget) do
          waiters[#waiters + 1] = entry(string.sub(ms[j], #key + 19))
        end
        if #ms > budget then nxt = 'w' .. ms[budget] end
        budget = budget - #waiters
      end
    end
  end
  local row = {key, limit, nh, nw, holders, waiters, nxt}
  local rv = rate_view(key) -- rate lanes: a rate key's window, as an eighth element
  if #rv > 0 then row[8] = rv end
  out[#out + 1] = row
end

local m = redis.call('HMGET', K_META, 'expired', 'evicted', 'revoked', 'resets')
local stats = {}
for i = 1, 4 do stats[i] = tonumber(m[i] or '0') or 0 end
stats[5] = FROZEN
stats[6] = was_reset and 1 or 0
finish()
return {NOW, EPOCH, out, stats}
