-- release.lua: remove entries whatever their state (a holder's slots pass
-- on, a waiter leaves every queue), then grant the waiters that frees.
-- Used for release, for cancel, for settling a step whose reply was lost,
-- and for `lanectl release --force`.
--
-- KEYS: the seven of lib.lua.
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
-- Reply (sent flat, lib.lua's finish: epoch, the states, the ids granted):
--        {epoch ("" when the namespace has no state), {state per id: "h",
--        "w", "g" (not there), "l" (ended revoked: its lender's hold ended
--        before this release, so the lease was lost) or "f" (not there:
--        released by force)}, {ids granted}}.
-- Errors: LANES_BADARG <field> <what>; LANES_VERSION <protocol> <other>.

local lean = lean_release(KEYS, ARGV) -- the common step, lean (lib.lua)
if lean then return lean end
local read = lean_read() -- what it read of entries, if anything
local err = begin(KEYS, ARGV)
if err then return err end

local by = ARGV[3]
if by ~= '' and not id_ok(by) then return badarg('owner', 'id must be 1 to ' .. MAX_ID_LEN .. ' bytes of printable ASCII without spaces') end
local tomb = int_in(ARGV[4], 0, MAX_TTL)
if not tomb then return badarg('tombstone', 'lifetime must be a whole number of ms from 0 to ' .. MAX_TTL) end
if #ARGV < 5 or #ARGV - 4 > MAX_STEP_REQUESTS then return badarg('ids', 'a step takes 1 to ' .. MAX_STEP_REQUESTS .. ' ids') end
for i = 5, #ARGV do
  if not id_ok(ARGV[i]) then return badarg('id', 'an entry id is 1 to ' .. MAX_ID_LEN .. ' bytes of printable ASCII without spaces') end
end

local list = {}
for i = 5, #ARGV do list[#list + 1] = ARGV[i] end

-- The lean path: an owner releasing leases it holds, that lend nothing,
-- borrow nothing and were not nested, on keys nobody waits for, while
-- nothing has expired: each holder leaves its key records, its entry and
-- its deadline, and nothing is scanned. The entries are read first, so
-- that the records of their keys come with the marker of lanes.
local es, plain, seen = {}, by ~= '' and tomb == 0, {}
err = open(false, {}, list, function(keys)
  for _, id in ipairs(list) do
    if not plain then break end
    local e = load(id)
    if seen[id] or not e or e.o ~= by or e.s ~= 'h' or e.b or e.l or e.r then
      plain = false
    else
      seen[id] = true
      es[#es + 1] = e
      for _, kl in ipairs(e.k) do keys[#keys + 1] = kl[1] end
    end
  end
  return keys
end, read)
if err then return err end
local exp, whole = {}, false
if EPOCH then exp, whole = expiring() end
local lean = plain and not checked and EPOCH and whole and #exp == 0
for _, e in ipairs(es) do
  if not lean then break end
  for _, kl in ipairs(e.k) do
    if kget(kl[1]).w > 0 then lean = false end
  end
end
if lean then
  local was = {}
  gather()
  for i, e in ipairs(es) do
    was[i] = 'h'
    remove(e, {})
  end
  return finish(nil, was)
end

err = confirm(by ~= '' and tomb > 0, whole) -- a settle's tombstones need a state to live in
if err then return err end
local touched, was = {}, {}
if EPOCH then reap(whole and exp or nil) end -- an entry past its deadline is gone, not released
gather() -- the removals go in one command per key, before the scan
local first = {}
for _, id in ipairs(list) do
  if first[id] then
    -- An id named twice is released once, its later places gone (removed
    -- again, a lender kept for its borrowers left a borrower granted from
    -- no one: the differential test found it).
    was[#was + 1] = 'g'
  else
    was[#was + 1] = release_entry(id, by, by == '' and tomb or 0, touched)
    first[id] = true
    if by ~= '' and tomb > 0 then entomb(id, 's', tomb) end
  end
end
if EPOCH then scan(touched) end

return finish(nil, was)
