-- release.lua: remove entries whatever their state (a holder's slots pass
-- on, a waiter leaves every queue), then grant the waiters that frees.
-- Used for release, for cancel, and for `lanectl release --force`.
--
-- KEYS: the nine of lib.lua.
-- ARGV: [1] hint channel prefix, [2] the caller's owner id ("" for an
--       operator), [3...] entry ids.
-- Reply: {{state per id: "h", "w" or "g" (not there)}, {ids granted}}.
-- A caller removes only its own entries: another owner's is reported "g"
-- and left alone. An operator ("") removes any entry, and their owners get
-- a hint with those ids, so a lease released by force learns it at once.

reap()

local by = ARGV[2]
local touched, was, ids = {}, {}, {}
for i = 3, #ARGV do
  local e = load(ARGV[i])
  if e and (by == '' or e.o == by) then
    was[#was + 1] = e.s
    remove(e, touched)
    if e.o ~= by then told[#told + 1] = {e.o, e.id} end
  else
    was[#was + 1] = 'g'
  end
end
scan(touched)

for _, e in ipairs(granted) do ids[#ids + 1] = e.id end
finish(false)
return {was, ids}
