-- heartbeat.lua: renew the deadlines of one process's entries and report
-- their state; a process runs it for all its entries every heartbeat, and
-- for hinted waiters at once. It never re-creates an entry that is gone,
-- and never renews one whose deadline passed. It also polls: it first
-- removes expired entries (holders first, at most REAP_MAX), then grants
-- the waiters that became eligible on the keys its waiting entries name,
-- so that a grant whose hint was lost, an expired holder or the end of a
-- freeze costs at most one heartbeat interval.
--
-- KEYS: the seven of lib.lua.
-- ARGV: [1] protocol, [2] hint channel prefix, [3] TTL (ms, 1 to MAX_TTL),
--       [4] owner id, [5...] 1 to MAX_STEP_REQUESTS entry ids.
-- Reply (sent flat, as enqueue.lua's):
--        {epoch ("" when the namespace has no state), statuses, more}:
--        one status per id, in order: {id, "h", {key, token, ...}, seq},
--        {id, "w", {}, seq} ({id, "w", {}, seq, wait ms} when a rate holds
--        it back: poll it then, lib.lua), {id, "f", {}} (gone: an operator
--        released it by force, and its tombstone "f\0id" lives) or {id, "g",
--        {}} (gone otherwise: expired, released, taken over by another owner,
--        or ended; then it is not renewed);
--        more is 1 when the step left expired entries it could not remove
--        within its bounds (REAP_MAX, DEAD_MAX): a waiter asks again at
--        once, else 0.
-- Errors: LANES_BADARG <field> <what>; LANES_VERSION <protocol> <other>.

local err = begin(KEYS, ARGV)
if err then return err end

local ttl = int_in(ARGV[3], 1, MAX_TTL)
if not ttl then return badarg('ttl', 'must be a whole number of ms from 1 to ' .. MAX_TTL) end
local owner = ARGV[4]
if not id_ok(owner) then return badarg('owner', 'id must be 1 to ' .. MAX_ID_LEN .. ' bytes of printable ASCII without spaces') end
if #ARGV < 5 or #ARGV - 4 > MAX_STEP_REQUESTS then return badarg('ids', 'a step takes 1 to ' .. MAX_STEP_REQUESTS .. ' ids') end
for i = 5, #ARGV do
  if not id_ok(ARGV[i]) then return badarg('id', 'an entry id is 1 to ' .. MAX_ID_LEN .. ' bytes of printable ASCII without spaces') end
end

local out = {}
local ids = {}
for i = 5, #ARGV do ids[#ids + 1] = ARGV[i] end
err = open(false, {}, ids) or full(false)
if err then return err end
if not EPOCH then
  for i = 5, #ARGV do out[#out + 1] = {ARGV[i], 'g', {}} end
  return finish(out)
end
note_ttl(ttl)
redis.call('ZREMRANGEBYSCORE', K_TOMBS, '-inf', dec(NOW)) -- lapsed tombstones
local all = reap()

local mine, touched = {}, {}
local dl = dec(NOW + ttl)
for i = 5, #ARGV do
  local id = ARGV[i]
  local e = load(id)
  if e and e.o == owner and not ended(e) then -- an ended entry is gone to its owner
    if not all and not alive(id) then
      expire(e, touched) -- its deadline passed: it is not renewed
    else
      redis.call('ZADD', K_DEADLINES, dl, id)
      mine[id] = e
      if e.s == 'w' then
        for _, kl in ipairs(e.k) do
          if not borrowed(e, kl[1]) then touched[kl[1]] = kl[2] end
        end
      end
    end
  end
end
scan(touched)

local now = {}
for _, g in ipairs(granted) do now[g.id] = g end
for i = 5, #ARGV do
  local id = ARGV[i]
  local e = now[id] or mine[id]
  if e and e.o == owner and not ended(e) then
    out[#out + 1] = status(e, false)
  else
    out[#out + 1] = {id, tombed(id, 'f') and 'f' or 'g', {}} -- "f": its owner learns why
  end
end

return finish(out)
