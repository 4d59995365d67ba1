-- peek v1: the key's and the pool's window values per dimension, without booking.
-- ARGV: prefix, pool, key, n, then 3 values per dimension: dim, slot_ms, slots.
-- Returns: now, then per dimension: consumed, total.
local prefix, pool, key = ARGV[1], ARGV[2], ARGV[3]
local n = tonumber(ARGV[4])
local now = server_now()
local out = { num(now) }
for i = 0, n - 1 do
  local b = 5 + i * 3
  local dim, slot_ms, slots = ARGV[b], tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2])
  local w = window_at(slot_ms, slots, now)
  local mine = window_value(counter_key(prefix, pool, dim, key), w)
  local total = window_value(counter_key(prefix, pool, dim, '*'), w)
  out[#out + 1] = num(mine)
  out[#out + 1] = num(total)
end
return out
