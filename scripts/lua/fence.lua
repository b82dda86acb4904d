-- fence.lua: check a fencing token against the highest one seen for a
-- resource and, when it is not lower, record it as the highest.
--
-- KEYS[1]  lanes:fence:{<namespace>}  a hash: field = resource, value = the
--          highest token seen for it, as canonical decimal text (no sign, no
--          leading zero, 1 .. 18446744073709551615). Never expired.
-- ARGV[1]  resource: the hash field (non-empty bytes)
-- ARGV[2]  token presented, canonical decimal text (as ARGV[2] of every
--          caller: Lua numbers are doubles and cannot hold every uint64)
--
-- Reply:   status "OK": the token is equal to or higher than the highest
--          seen; it is now the recorded highest.
-- Errors:  "LANES_STALE <highest>"  the token is lower than <highest>;
--                                   nothing changed
--          "LANES_BADARG <field> <what>"  ARGV is malformed; nothing changed
--          "LANES_CORRUPT <value>"  the stored highest is not a canonical
--                                   token; nothing changed
--
-- Tokens are compared as digit strings, never as Lua numbers: a longer
-- string is larger; two strings of equal length are compared in two halves
-- of at most 10 digits each, which doubles hold exactly.

local MAX = "18446744073709551615"

-- cmp returns -1, 0 or 1 as canonical decimal a is below, equal to or above b.
local function cmp(a, b)
  if #a ~= #b then
    if #a < #b then return -1 end
    return 1
  end
  if a == b then return 0 end
  local ha = tonumber(string.sub(a, 1, -11)) or 0
  local hb = tonumber(string.sub(b, 1, -11)) or 0
  if ha ~= hb then
    if ha < hb then return -1 end
    return 1
  end
  local la = tonumber(string.sub(a, -10))
  local lb = tonumber(string.sub(b, -10))
  if la < lb then return -1 end
  return 1
end

-- canonical reports whether s is a token: 1 .. MAX in canonical decimal.
local function canonical(s)
  if type(s) ~= "string" or #s > #MAX or not string.match(s, "^[1-9][0-9]*$") then
    return false
  end
  return cmp(s, MAX) <= 0
end

local resource = ARGV[1]
local token = ARGV[2]
if resource == nil or resource == "" then
  return redis.error_reply("LANES_BADARG resource is empty")
end
if not canonical(token) then
  return redis.error_reply("LANES_BADARG token is not canonical decimal from 1 to " .. MAX)
end

local highest = redis.call("HGET", KEYS[1], resource)
if highest then
  if not canonical(highest) then
    return redis.error_reply("LANES_CORRUPT " .. string.sub(highest, 1, 40))
  end
  local c = cmp(token, highest)
  if c < 0 then
    return redis.error_reply("LANES_STALE " .. highest)
  end
  if c == 0 then
    return redis.status_reply("OK")
  end
end
redis.call("HSET", KEYS[1], resource, token)
return redis.status_reply("OK")
