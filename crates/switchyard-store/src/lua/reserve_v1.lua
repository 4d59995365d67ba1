-- reserve v1: decides every dimension of a pool for one key and, when all admit, books
-- the cost on each. All or nothing, in one atomic step.
-- ARGV: prefix, pool, key, threshold, n, then 9 values per dimension:
--   dim, slot_ms, slots, limit, cost, cap (-1 = none), fair_share,
--   policy (0 hard, 1 soft, 2 burst), signal (-1 = none)
-- Returns: admitted (0/1), now, then per dimension: consumed, total, slot.
-- The rules mirror switchyard_core::quota::decide::judge line by line.
local prefix, pool, key = ARGV[1], ARGV[2], ARGV[3]
local threshold = tonumber(ARGV[4])
local n = tonumber(ARGV[5])
local now = server_now()
local dims = {}
local admitted = 1
for i = 0, n - 1 do
  local b = 6 + i * 9
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
if admitted == 1 then
  for _, d in ipairs(dims) do
    if d.cost ~= 0 then
      add(d.kkey, d.cur, num(d.cost), d.slot_ms, d.w)
      add(d.tkey, d.cur, num(d.cost), d.slot_ms, d.w)
    end
  end
end
local out = { admitted, num(now) }
for _, d in ipairs(dims) do
  out[#out + 1] = num(d.mine)
  out[#out + 1] = num(d.total)
  out[#out + 1] = tostring(d.cur)
end
return out
