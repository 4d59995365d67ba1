-- slots v1: the raw slot amounts of one counter (a key's, or `*` for the pool), for
-- computing when a blocked request will fit again.
-- ARGV: prefix, pool, field, dim, slot_ms, slots.
-- Returns: now, current slot, then the amounts of slots current-slots .. current.
local prefix, pool, field, dim = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local slot_ms, slots = tonumber(ARGV[5]), tonumber(ARGV[6])
local now = server_now()
local cur = math.floor(now / slot_ms)
local out = { num(now), tostring(cur) }
local names = {}
for s = cur - slots, cur do
  names[#names + 1] = tostring(s)
end
local values = redis.call('HMGET', counter_key(prefix, pool, dim, field), unpack(names))
for _, v in ipairs(values) do
  out[#out + 1] = num(tonumber(v) or 0.0)
end
return out
