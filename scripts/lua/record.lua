-- record.lua: store what one call of a run came to, so that the run,
-- restarted with the same run id, does not run the call again (DESIGN.md
-- section 5, rule 7); and, in the same atomic step, release the caller's
-- entries that held the call's lanes, as release.lua does (a call's
-- outcome and its lanes' hand-off are never seen apart).
--
-- KEYS: the seven of lib.lua, then [8] the run's records: a hash,
--       <prefix>:{ns}:run:<run id>, call id -> value, kept for the
--       retention after its last record.
-- ARGV: [1] protocol, [2] hint channel prefix, [3] the caller's owner id,
--       [4] call id (1 to MAX_FIELD_LEN bytes), [5] value (any bytes, at
--       most 1 MiB), [6] retention (ms, 1 to 2592000000: 30 days),
--       [7...] 0 to MAX_STEP_REQUESTS entry ids to release.
-- Reply: {epoch ("" when the namespace has no state), {state per id: "h",
--        "w", "g", "l" or "f"}, {ids granted}}, sent flat as release.lua's.
-- Errors: LANES_BADARG <field> <what>; LANES_VERSION <protocol> <other>.

local err = begin(KEYS, ARGV, 8) -- the seven of lib.lua and the run's records
if err then return err end

local by, call, value = ARGV[3], ARGV[4], ARGV[5]
if not id_ok(by) then return badarg('owner', 'id must be 1 to ' .. MAX_ID_LEN .. ' bytes of printable ASCII without spaces') end
if type(call) ~= 'string' or call == '' or not field_ok(call) then
  return badarg('call', 'a call id is 1 to ' .. MAX_FIELD_LEN .. ' bytes of UTF-8 without control characters')
end
if type(value) ~= 'string' or #value > 1048576 then return badarg('value', 'at most 1 MiB') end
local retention = int_in(ARGV[6], 1, 2592000000)
if not retention then return badarg('retention', 'must be a whole number of ms from 1 to 2592000000') end
if #ARGV - 6 > MAX_STEP_REQUESTS then return badarg('ids', 'a step takes at most ' .. MAX_STEP_REQUESTS .. ' ids') end
for i = 7, #ARGV do
  if not id_ok(ARGV[i]) then return badarg('id', 'an entry id is 1 to ' .. MAX_ID_LEN .. ' bytes of printable ASCII without spaces') end
end

local list = {}
for i = 7, #ARGV do list[#list + 1] = ARGV[i] end
err = open(false, {}, list) or full(false)
if err then return err end
if EPOCH then reap() end -- an entry past its deadline is gone, not released
local touched, was = {}, {}
for _, id in ipairs(list) do
  was[#was + 1] = release_entry(id, by, 0, touched)
end
if EPOCH then scan(touched) end
redis.call('HSET', KEYS[8], call, value)
redis.call('PEXPIRE', KEYS[8], retention)

return finish(nil, was)
