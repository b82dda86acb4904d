-- heartbeat.lua: renew the deadlines of one process's entries and report
-- their state; a process runs it for all its entries every heartbeat, and
-- for hinted waiters at once. It never re-creates an entry that is gone.
--
-- KEYS: the nine of lib.lua.
-- ARGV: [1] hint channel prefix, [2] TTL (ms), [3] owner id,
--       [4...] entry ids.
-- Reply: one status per id, in order: {id, "h", {key, token, ...}, seq},
--        {id, "w", {}, seq} or {id, "g", {}} (gone: expired, released, or
--        taken over by another owner; then it is not renewed).
-- Errors: LANES_BADARG <what>.

local ttl = tonumber(ARGV[2])
if not ttl or ttl <= 0 then
  return redis.error_reply('LANES_BADARG TTL must be a positive number')
end

reap()

local owner = ARGV[3]
local out = {}
for i = 4, #ARGV do
  local id = ARGV[i]
  local e = load(id)
  if e and e.o == owner then
    redis.call('ZADD', K_DEADLINES, NOW + ttl, id)
    out[#out + 1] = status(e, false)
  else
    out[#out + 1] = {id, 'g', {}}
  end
end

finish(true)
return out
