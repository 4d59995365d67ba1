-- add v1: adds `delta` per dimension to a slot of a key's and the pool's counters, while
-- that slot still counts (older slots count nowhere any more). Carries counts kept
-- elsewhere (a gateway's in-memory fallback) into Redis.
-- ARGV: prefix, pool, key, n, then 5 values per dimension: dim, slot, slot_ms, slots,
-- delta. Returns: now.
local prefix, pool, key = ARGV[1], ARGV[2], ARGV[3]
local n = tonumber(ARGV[4])
local now = server_now()
for i = 0, n - 1 do
  local b = 5 + i * 5
  local dim, slot = ARGV[b], tonumber(ARGV[b + 1])
  local slot_ms, slots = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  local delta = tonumber(ARGV[b + 4])
  local w = window_at(slot_ms, slots, now)
  if delta ~= 0 and slot >= w.first and slot <= w.cur then
    add(counter_key(prefix, pool, dim, key), slot, num(delta), slot_ms, w)
    add(counter_key(prefix, pool, dim, '*'), slot, num(delta), slot_ms, w)
  end
end
return num(now)
