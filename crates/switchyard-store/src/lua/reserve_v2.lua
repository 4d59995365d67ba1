-- reserve v2: decides every dimension of a pool for one key and, when all admit, books
-- the cost on each. All or nothing, in one atomic step. The booking is recorded under
-- its reservation id (see `booking_key`), for settle v2 to move or release by id, once.
-- An id released before this script ran (the gateway gave up waiting for it) holds a
-- tombstone: nothing is booked and the answer is 0. An id already booked is not booked
-- again.
-- ARGV: prefix, pool, key, threshold, id, ttl_ms, n, then 9 values per dimension:
--   dim, slot_ms, slots, limit, cost, cap (-1 = none), fair_share,
--   policy (0 hard, 1 soft, 2 burst), signal (-1 = none)
-- Returns: admitted (0/1), now, then per dimension: consumed, total, slot.
-- The rules mirror switchyard_core::quota::decide::judge line by line.
local prefix, pool, key = ARGV[1], ARGV[2], ARGV[3]
local threshold = tonumber(ARGV[4])
local rid, ttl = ARGV[5], tonumber(ARGV[6])
local n = tonumber(ARGV[7])
local now = server_now()
local dims = {}
local admitted = 1
for i = 0, n - 1 do
  local b = 8 + i * 9
  local d = {
    dim = ARGV[b], slot_ms = tonumber(ARGV[b + 1]), slots = tonumber(ARGV[b + 2]),
    limit = tonumber(ARGV[b + 3]), cost = tonumber(ARGV[b + 4]), cap = tonumber(ARGV[b + 5]),
    fair = tonumber(ARGV[b + 6]), policy = tonumber(ARGV[b + 7]), signal = tonumber(ARGV[b + 8]),
  }
  d.kkey = counter_key(prefix, pool, d.dim, key)
  d.tkey = counter_key(prefix, pool, d.dim, '*')
  local w = window_at(d.slot_ms, d.slots, now)
  d.w = w
  d.cur = w.cur
  d.mine = window_value(d.kkey, w)
  d.total = window_value(d.tkey, w)
  local known = d.limit > 0
  local sig = d.signal
  if sig < 0 then sig = 0 end
  if sig > 1 then sig = 1 end
  local total = d.total
  local used = sig
  if known then
    total = math.max(d.total, sig * d.limit)
    used = math.max(total / d.limit, sig)
  end
  local blocked = false
  if d.cap >= 0 and (d.mine >= d.cap or d.mine + d.cost > d.cap) then
    blocked = true
  elseif known and (total >= d.limit or total + d.cost > d.limit) then
    blocked = true
  elseif known and used >= threshold and d.policy == 0 and d.mine + d.cost > d.fair then
    blocked = true
  end
  if blocked then admitted = 0 end
  dims[i + 1] = d
end
local bkey = booking_key(prefix, pool, rid)
local seen = redis.call('EXISTS', bkey) == 1
if seen then
  admitted = redis.call('HEXISTS', bkey, 'x') == 1 and 0 or 1
elseif admitted == 1 then
  redis.call('HSET', bkey, 'n', tostring(n))
  for i, d in ipairs(dims) do
    if d.cost ~= 0 then
      add(d.kkey, d.cur, num(d.cost), d.slot_ms, d.w)
      add(d.tkey, d.cur, num(d.cost), d.slot_ms, d.w)
    end
    redis.call('HSET', bkey, 'b' .. i, num(d.cost), 's' .. i, tostring(d.cur))
  end
  redis.call('PEXPIRE', bkey, ttl)
end
local out = { admitted, num(now) }
for _, d in ipairs(dims) do
  out[#out + 1] = num(d.mine)
  out[#out + 1] = num(d.total)
  out[#out + 1] = tostring(d.cur)
end
return out
