-- release.lua: remove entries whatever their state (a holder's slots pass
-- on, a waiter leaves every queue), then grant the waiters that frees.
-- Used for release, for cancel, for settling a step whose reply was lost,
-- and for `lanectl release --force`.
--
-- KEYS: the ten of lib.lua.
-- ARGV: [1] protocol, [2] hint channel prefix, [3] the caller's owner id
--       ("" for an operator), [4] tombstone lifetime (ms, 0 to MAX_TTL),
--       [5...] 1 to MAX_STEP_REQUESTS entry ids.
-- A caller removes only its own entries: another owner's is reported "g"
-- and left alone. An operator ("") removes any entry; its owner gets a
-- hint, and a tombstone "f\0id" lives for the given lifetime, so that the
-- owner's own release learns it was forced ("f"). A caller that gives a
-- lifetime (it settles a step whose outcome it did not see) leaves a
-- tombstone "s\0id" for each id, present or not, and enqueue.lua refuses
-- those ids meanwhile: a late copy of the step cannot bring them back.
-- Reply: {epoch ("" when the namespace has no state), {state per id: "h",
--        "w", "g" (not there) or "f" (not there: released by force)},
--        {ids granted}}.
-- Errors: LANES_BADARG <field> <what>; LANES_VERSION <protocol> <other>.

local by = ARGV[3]
if by ~= '' and not id_ok(by) then return badarg('owner', 'id must be 1 to ' .. MAX_ID_LEN .. ' bytes of printable ASCII without spaces') end
local tomb = int_in(ARGV[4], 0, MAX_TTL)
if not tomb then return badarg('tombstone', 'lifetime must be a whole number of ms from 0 to ' .. MAX_TTL) end
if #ARGV < 5 or #ARGV - 4 > MAX_STEP_REQUESTS then return badarg('ids', 'a step takes 1 to ' .. MAX_STEP_REQUESTS .. ' ids') end
for i = 5, #ARGV do
  if not id_ok(ARGV[i]) then return badarg('id', 'an entry id is 1 to ' .. MAX_ID_LEN .. ' bytes of printable ASCII without spaces') end
end

local _, err = check(false)
if err then return err end
if EPOCH then reap() end -- an entry past its deadline is gone, not released
local touched, was, ids = {}, {}, {}
for i = 5, #ARGV do
  local id = ARGV[i]
  local e = EPOCH and load(id)
  if e and (by == '' or e.o == by) then
    was[#was + 1] = e.s
    remove(e, touched)
    if e.o ~= by then told[#told + 1] = {e.o, e.id} end
    if by == '' and tomb > 0 then redis.call('ZADD', K_TOMBS, NOW + tomb, 'f\0' .. id) end
  elseif by ~= '' and tonumber(redis.call('ZSCORE', K_TOMBS, 'f\0' .. id) or '0') > NOW then
    was[#was + 1] = 'f'
  else
    was[#was + 1] = 'g'
  end
  if by ~= '' and tomb > 0 then redis.call('ZADD', K_TOMBS, NOW + tomb, 's\0' .. id) end
end
if EPOCH then scan(touched) end

for _, e in ipairs(granted) do ids[#ids + 1] = e.id end
finish()
return {EPOCH or '', was, ids}
