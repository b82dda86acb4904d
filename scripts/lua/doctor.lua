-- doctor.lua: check one page of a namespace's state for inconsistencies
-- between its keys, and with "repair" fix them; or reap expired entries
-- (`lanectl doctor`, `lanectl gc`). Every page is one bounded step; a page
-- is consistent in itself, and pages follow one another while other steps
-- run, which can only make an entry look fine that changed meanwhile.
--
-- KEYS: the seven of lib.lua.
-- ARGV: [1] protocol, [2] hint channel prefix, [3] what: "entries",
--       "queue", "deadlines", "nested", "lanes" (the state key to walk) or
--       "reap" (repair mode only), [4] "check" or "repair", [5] cursor (HSCAN/ZSCAN, "0" to
--       start), [6] count (1 to MAX_STEP_REQUESTS).
-- Reply: {epoch ("" when the namespace has no state), next cursor ("0":
--        done), {problem, ...}, {repair done, ...}, reaped}. Each problem
--        is one line naming the entry or member and what is wrong.
-- Repairs: a member of queue, deadlines or nested whose entry is gone, or
--        that its entry does not account for, is removed; a key record's
--        holder that is no holder of the key is dropped, and its count of
--        waiters set to its queue's; an entry whose own record disagrees
--        with the keys that index it (a holder its key record does not
--        list, say) cannot be mended safely, so the namespace is reset (see
--        lib.lua). "reap" removes up to REAP_MAX expired entries and grants
--        what that frees.
-- Errors: LANES_BADARG <field> <what>; LANES_VERSION <protocol> <other>.

local err = begin(KEYS, ARGV)
if err then return err end

local what, mode, cursor = ARGV[3], ARGV[4], ARGV[5]
local count = int_in(ARGV[6], 1, MAX_STEP_REQUESTS)
local walks = {entries = K_ENTRIES, queue = K_QUEUE, deadlines = K_DEADLINES, nested = K_NESTED,
  lanes = K_LANES, reap = true}
if not walks[what] then return badarg('what', 'must be entries, queue, deadlines, nested, lanes or reap') end
if mode ~= 'check' and mode ~= 'repair' then return badarg('mode', 'must be check or repair') end
if not string.find(cursor or '', '^%d+$') then return badarg('cursor', 'must be a scan cursor') end
if not count then return badarg('count', 'must be a whole number from 1 to ' .. MAX_STEP_REQUESTS) end
if what == 'reap' and mode ~= 'repair' then return badarg('mode', 'reap removes entries: it runs in repair mode only') end

err = full(false)
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
local function shown(m) return (string.gsub(m, '%z', '|')) end

local broken = false -- an entry's record disagrees with its index: reset
local function lane_of(e, key)
  for _, kl in ipairs(e.k) do
    if kl[1] == key then return kl end
  end
end
local function holds(key, id)
  for _, h in ipairs(kget(key).h) do
    if h == id then return true end
  end
  return false
end

local scan_
if what == 'entries' or what == 'lanes' then
  scan_ = redis.call('HSCAN', walks[what], cursor, 'COUNT', count)
else
  scan_ = redis.call('ZSCAN', walks[what], cursor, 'COUNT', count)
end
local items = scan_[2]
for i = 1, #items, 2 do
  local m = items[i]
  if m ~= '\0' then
    if what == 'entries' then
      local raw = items[i + 1]
      do
        local ok, e = pcall(cjson.decode, raw)
        if not ok or type(e) ~= 'table' or type(e.k) ~= 'table' or (e.s ~= 'h' and e.s ~= 'w') then
          problem('entry ' .. m .. ': its record does not decode')
          broken = true
        else
          e.id = m
          if not redis.call('ZSCORE', K_DEADLINES, m) then
            problem('entry ' .. m .. ': it has no deadline')
            broken = true
          end
          for _, kl in ipairs(e.k) do
            local key = kl[1]
            local a = borrowed(e, key)
            local kr = kget(key)
            if a then
              local linked = redis.call('ZSCORE', K_NESTED, ' ' .. a .. '\0' .. m)
              if not linked and (e.z or e.v) then
                -- an ended borrower whose lender an operator removed: it
                -- keeps the lender's name, and nothing holds the key for it
              elseif not linked or not holds(key, a) then
                problem('entry ' .. m .. ': borrows key "' .. key .. '" from ' .. a .. ', which does not hold it or does not list it')
                broken = true
              end
            elseif e.s == 'h' and not holds(key, m) then
              problem('entry ' .. m .. ': holds key "' .. key .. '" but is not among its holders')
              broken = true
            elseif e.s == 'w' and not redis.call('ZSCORE', K_QUEUE, qmember(key, e.q, m)) then
              problem('entry ' .. m .. ': waits for key "' .. key .. '" but is not in its queue')
              broken = true
            end
            if not a and (idle(kr) or kr.l ~= kl[2]) then
              problem('entry ' .. m .. ': key "' .. key .. '" has limit ' .. (idle(kr) and 'none' or kr.l) .. ' recorded, the entry ' .. kl[2])
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
      end
    elseif what == 'queue' then
      local key, seq, id = string.match(m, '^(.-)%z(%d+)%z([^%z]+)$')
      local e = id and load(id)
      local kl = e and lane_of(e, key)
      if not e then
        fix(K_QUEUE, m, 'queue member "' .. shown(m) .. '": no such entry')
      elseif not kl or borrowed(e, key) or e.s ~= 'w' or tonumber(seq) ~= e.q then
        fix(K_QUEUE, m, 'queue member "' .. shown(m) .. '": entry ' .. id .. ' does not account for it')
      end
    elseif what == 'deadlines' then
      if not load(m) then fix(K_DEADLINES, m, 'deadline of ' .. m .. ': no such entry') end
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
        fix(K_NESTED, m, 'nested member "' .. shown(m) .. '": entry ' .. tostring(id) .. ' does not account for it')
      end
    elseif what == 'lanes' and (string.byte(m, 1) or 0) < 32 then
      -- a rate key's log (rate lanes, lib.lua), the pad "\2", or an empty
      -- field (a lane key is 1 byte at least): no lane key, no holders or
      -- waiters to check
    elseif what == 'lanes' then
      KRAW[m] = items[i + 1]
      local r = kget(m)
      local keep = {}
      for _, id in ipairs(r.h) do
        local e = load(id)
        if e and e.s == 'h' and lane_of(e, m) and not borrowed(e, m) then
          keep[#keep + 1] = id
        else
          problem('key "' .. m .. '": holder ' .. id .. ' does not hold it')
        end
      end
      local n = redis.call('ZLEXCOUNT', K_QUEUE, lo(m), hi(m))
      if n ~= r.w then problem('key "' .. m .. '": counts ' .. r.w .. ' waiters, its queue has ' .. n) end
      if mode == 'repair' and (#keep ~= #r.h or n ~= r.w) then
        r.h, r.w = keep, n
        kput(m)
        repairs[#repairs + 1] = 'mended the record of key "' .. m .. '"'
      end
    end
  end
end
if broken and mode == 'repair' then
  reset()
  repairs[#repairs + 1] = 'reset the namespace: its entries disagreed with their index'
  return {EPOCH, '0', problems, repairs, 0}
end
finish()
return {EPOCH, scan_[1], problems, repairs, 0}
