-- inspect.lua: the holders and waiters of some keys, or of every key that
-- has any. It expires what is due first, so it shows no dead entry.
--
-- KEYS: the nine of lib.lua.
-- ARGV: [1] hint channel prefix, [2...] keys (none: every key).
-- Reply: {now (ms), {{key, limit, {{entry JSON, deadline ms, id}, ...},
--        {{entry JSON, deadline ms, id}, ...}}, ...}, {expired, evicted}}:
--        holders in id order, waiters in queue order; keys with neither are
--        left out; the counts of the stats key last.

reap()

local keys = {}
if #ARGV > 1 then
  for i = 2, #ARGV do keys[#keys + 1] = ARGV[i] end
else
  keys = redis.call('HKEYS', K_LIMITS)
end
table.sort(keys)

local out = {}
for _, key in ipairs(keys) do
  local limit = redis.call('HGET', K_LIMITS, key)
  if limit then
    local holders, waiters = {}, {}
    for _, m in ipairs(redis.call('ZRANGEBYLEX', K_HOLDS, lo(key), hi(key))) do
      local id = string.sub(m, #key + 2)
      holders[#holders + 1] = {redis.call('HGET', K_ENTRIES, id), redis.call('ZSCORE', K_DEADLINES, id), id}
    end
    for _, m in ipairs(redis.call('ZRANGEBYLEX', K_QUEUE, lo(key), hi(key))) do
      local id = string.sub(m, #key + 19)
      waiters[#waiters + 1] = {redis.call('HGET', K_ENTRIES, id), redis.call('ZSCORE', K_DEADLINES, id), id}
    end
    out[#out + 1] = {key, tonumber(limit), holders, waiters}
  end
end

local stats = {}
for _, f in ipairs({'expired', 'evicted'}) do
  stats[#stats + 1] = tonumber(redis.call('HGET', K_STATS, f) or '0')
end

finish(false)
return {NOW, out, stats}
