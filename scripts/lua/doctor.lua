-- doctor.lua: check one page of a namespace's state for inconsistencies
-- between its keys, and with "repair" fix them; or reap expired entries
-- (`lanectl doctor`, `lanectl gc`). Every page is one bounded step; a page
-- is consistent in itself, and pages follow one another while other steps
-- run, which can only make an entry look fine that changed meanwhile.
--
-- KEYS: the ten of lib.lua.
-- ARGV: [1] protocol, [2] hint channel prefix, [3] what: "entries",
--       "holds", "queue", "held", "waiting", "nested", "limits" (the
--       state key to walk) or "reap", [4] "check" or "repair", [5] cursor
--       (HSCAN/ZSCAN, "0" to start), [6] count (1 to MAX_STEP_REQUESTS).
-- Reply: {epoch ("" when the namespace has no state), next cursor ("0":
--        done), {problem, ...}, {repair done, ...}, reaped}. Each problem
--        is one line naming the entry or member and what is wrong.
-- Repairs: a member of holds, queue, held, waiting or nested whose entry is
--        gone, or that its entry does not account for, is removed; a limit
--        recorded for a key with neither holders nor waiters is
--        forgotten; an entry whose own record disagrees with the keys that
--        index it (a held entry missing from holds, say) cannot be mended
--        safely, so the namespace is reset (see lib.lua). "reap" removes up
--        to REAP_MAX expired entries and grants what that frees.
-- Errors: LANES_BADARG <field> <what>; LANES_VERSION <protocol> <other>.

local what, mode, cursor = ARGV[3], ARGV[4], ARGV[5]
local count = int_in(ARGV[6], 1, MAX_STEP_REQUESTS)
local walks = {entries = K_ENTRIES, holds = K_HOLDS, queue = K_QUEUE, held = K_HELD,
  waiting = K_WAITING, nested = K_NESTED, limits = K_LIMITS, reap = true}
if not walks[what] then return badarg('what', 'must be entries, holds, queue, held, waiting, nested, limits or reap') end
if mode ~= 'check' and mode ~= 'repair' then return badarg('mode', 'must be check or repair') end
if not count then return badarg('count', 'must be a whole number from 1 to ' .. MAX_STEP_REQUESTS) end
if not string.find(cursor or '', '^%d+$') then return badarg('cursor', 'must be a scan cursor') end

local _, err = check(false)
if err then return err end
if not EPOCH then return {'', '0', {}, {}, 0} end

local problems, repairs = {}, {}
local function problem(s) problems[#problems + 1] = s end

if what == 'reap' then
  local all, n = reap()
  finish()
  return {EPOCH, all and '0' or '1', {}, {}, n}
end

-- fix removes a stray member of key k in repair mode.
local function fix(k, member, why)
  problem(why)
  if mode == 'repair' then
    redis.call('ZREM', k, member)
    repairs[#repairs + 1] = 'removed ' .. why
  end
end

local broken = false -- an entry's record disagrees with its index: reset
local function lane_of(e, key)
  for _, kl in ipairs(e.k) do
    if kl[1] == key then return kl end
  end
end

local scan
if what == 'entries' or what == 'limits' then
  scan = redis.call('HSCAN', walks[what], cursor, 'COUNT', count)
else
  scan = redis.call('ZSCAN', walks[what], cursor, 'COUNT', count)
end
local items = scan[2]
for i = 1, #items, 2 do
  local m = items[i]
  if m ~= '\0' then
    if what == 'entries' then
      local ok, e = pcall(cjson.decode, items[i + 1])
      if not ok or type(e) ~= 'table' or type(e.k) ~= 'table' or (e.s ~= 'h' and e.s ~= 'w') then
        problem('entry ' .. m .. ': its record does not decode')
        broken = true
      else
        e.id = m
        local mine, other = K_WAITING, K_HELD
        if e.s == 'h' then mine, other = K_HELD, K_WAITING end
        if not redis.call('ZSCORE', mine, m) or redis.call('ZSCORE', other, m) then
          problem('entry ' .. m .. ' (' .. (e.s == 'h' and 'held' or 'waiting') .. '): its deadline is not where its state says')
          broken = true
        end
        for _, kl in ipairs(e.k) do
          local key = kl[1]
          local a = borrowed(e, key)
          if a then
            if not redis.call('ZSCORE', K_NESTED, ' ' .. a .. '\0' .. m) or not redis.call('ZSCORE', K_HOLDS, key .. '\0' .. a) then
              problem('entry ' .. m .. ': borrows key "' .. key .. '" from ' .. a .. ', which does not hold it or does not list it')
              broken = true
            end
          elseif e.s == 'h' and not redis.call('ZSCORE', K_HOLDS, key .. '\0' .. m) then
            problem('entry ' .. m .. ': holds key "' .. key .. '" but is not among its holders')
            broken = true
          elseif e.s == 'w' and not redis.call('ZSCORE', K_QUEUE, qmember(key, e.q, m)) then
            problem('entry ' .. m .. ': waits for key "' .. key .. '" but is not in its queue')
            broken = true
          end
          if not a and tonumber(redis.call('HGET', K_LIMITS, key) or '0') ~= kl[2] then
            problem('entry ' .. m .. ': key "' .. key .. '" has limit ' .. tostring(redis.call('HGET', K_LIMITS, key)) .. ' recorded, the entry ' .. kl[2])
            broken = true
          end
        end
        for _, a in ipairs(e.l or {}) do
          if not redis.call('ZSCORE', K_NESTED, a .. '\0' .. m) then
            problem('entry ' .. m .. ': its ancestor ' .. a .. ' does not list it')
            broken = true
          end
        end
      end
    elseif what == 'holds' or what == 'queue' then
      local key, id, seq
      if what == 'holds' then
        key, id = string.match(m, '^(.-)%z([^%z]+)$')
      else
        key, seq, id = string.match(m, '^(.-)%z(%d+)%z([^%z]+)$')
      end
      local e = id and load(id)
      local kl = e and lane_of(e, key)
      if not e then
        fix(walks[what], m, what .. ' member "' .. string.gsub(m, '%z', '|') .. '": no such entry')
      elseif not kl or borrowed(e, key) or (what == 'holds') ~= (e.s == 'h') or (seq and tonumber(seq) ~= e.q) then
        fix(walks[what], m, what .. ' member "' .. string.gsub(m, '%z', '|') .. '": entry ' .. id .. ' does not account for it')
      end
    elseif what == 'held' or what == 'waiting' then
      local e = load(m)
      if not e then
        fix(walks[what], m, what .. ' deadline of ' .. m .. ': no such entry')
      elseif (what == 'held') ~= (e.s == 'h') then
        fix(walks[what], m, what .. ' deadline of ' .. m .. ': the entry is ' .. (e.s == 'h' and 'held' or 'waiting'))
      end
    elseif what == 'nested' then
      local lends = string.sub(m, 1, 1) == ' '
      local a, id = string.match(lends and string.sub(m, 2) or m, '^([^%z]+)%z([^%z]+)$')
      local e = id and load(id)
      local ok = e ~= nil
      if ok and lends then
        ok = false
        for _, x in pairs(e.r or {}) do ok = ok or x == a end
      elseif ok then
        ok = false
        for _, x in ipairs(e.l or {}) do ok = ok or x == a end
      end
      if not ok then
        fix(K_NESTED, m, 'nested member "' .. string.gsub(m, '%z', '|') .. '": entry ' .. tostring(id) .. ' does not account for it')
      end
    elseif what == 'limits' then
      if redis.call('ZLEXCOUNT', K_HOLDS, lo(m), hi(m)) + redis.call('ZLEXCOUNT', K_QUEUE, lo(m), hi(m)) == 0 then
        problem('limit of key "' .. m .. '": recorded while it has neither holders nor waiters')
        if mode == 'repair' then
          redis.call('HDEL', K_LIMITS, m)
          repairs[#repairs + 1] = 'forgot the limit of key "' .. m .. '"'
        end
      end
    end
  end
end
if broken and mode == 'repair' then
  local epoch = reset()
  repairs[#repairs + 1] = 'reset the namespace: its entries disagreed with their index'
  return {epoch, '0', problems, repairs, 0}
end
finish()
return {EPOCH, scan[1], problems, repairs, 0}
