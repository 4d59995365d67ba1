-- settle v2: moves the booking recorded under a reservation id to `target` per
-- dimension, in the slot it was booked in, while that slot still counts (older slots
-- count nowhere any more). Targets are absolute, so applying a settlement twice (a retry
-- after a timeout) changes nothing the second time. `last` = 1 ends the booking (its
-- record is deleted). An id with no booking (its reservation has not run yet, was
-- refused, or expired) gets a tombstone, so a reservation arriving later under it
-- books nothing.
-- ARGV: prefix, pool, key, id, ttl_ms, last, n, then 4 values per dimension:
--   dim, slot_ms, slots, target.
-- Returns: now.
local prefix, pool, key = ARGV[1], ARGV[2], ARGV[3]
local rid, ttl, last = ARGV[4], tonumber(ARGV[5]), ARGV[6] == '1'
local n = tonumber(ARGV[7])
local now = server_now()
local bkey = booking_key(prefix, pool, rid)
if redis.call('EXISTS', bkey) == 0 then
  redis.call('HSET', bkey, 'x', '1')
  redis.call('PEXPIRE', bkey, ttl)
  return num(now)
end
if redis.call('HEXISTS', bkey, 'x') == 1 then
  return num(now)
end
for i = 1, n do
  local b = 8 + (i - 1) * 4
  local dim, slot_ms, slots = ARGV[b], tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2])
  local target = tonumber(ARGV[b + 3])
  local v = redis.call('HMGET', bkey, 'b' .. i, 's' .. i)
  local booked, slot = tonumber(v[1]), tonumber(v[2])
  if booked and slot then
    local w = window_at(slot_ms, slots, now)
    local delta = target - booked
    if delta ~= 0 and slot >= w.first and slot <= w.cur then
      add(counter_key(prefix, pool, dim, key), slot, num(delta), slot_ms, w)
      add(counter_key(prefix, pool, dim, '*'), slot, num(delta), slot_ms, w)
    end
    redis.call('HSET', bkey, 'b' .. i, num(target))
  end
end
if last then
  redis.call('DEL', bkey)
else
  redis.call('PEXPIRE', bkey, ttl)
end
return num(now)
