-- release.lua: remove entries whatever their state (a holder's slots pass
-- on, a waiter leaves every queue), then grant the waiters that frees.
-- Used for release, for cancel, and for `lanectl release --force`.
--
-- KEYS: the seven of lib.lua.
-- ARGV: [1] hint channel prefix, [2...] entry ids.
-- Reply: {{state per id: "h", "w" or "g" (not there)}, {ids granted}}.

reap()

local touched, was = {}, {}
for i = 2, #ARGV do
  local e = load(ARGV[i])
  if e then
    was[#was + 1] = e.s
    remove(e, touched)
  else
    was[#was + 1] = 'g'
  end
end
scan(touched)

local ids = {}
for _, e in ipairs(granted) do ids[#ids + 1] = e.id end
finish()
return {was, ids}
