-- Shared by the Switchyard quota scripts (v1). Prepended to each script before it is
-- loaded. Slot hashes are `<prefix>:q1:{<pool>}:<unit:window>:<slot>`, fields `<key id>`
-- and `*` (every key together); the pool in braces keeps a pool's keys on one cluster
-- slot. The clock is the Redis server's, so gateways with skewed clocks agree.
local function server_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function slot_key(prefix, pool, dim, slot)
  return prefix .. ':q1:{' .. pool .. '}:' .. dim .. ':' .. string.format('%d', slot)
end

-- The window estimate, summed in the same order as the Rust SlidingCounter: slots
-- oldest first, the straddling one weighted by the part still inside the window.
local function window_values(prefix, pool, key, dim, slot_ms, slots, now)
  local cur = math.floor(now / slot_ms)
  local elapsed = (now - cur * slot_ms) / slot_ms
  local first = cur - slots
  if first < 0 then first = 0 end
  local mine, total = 0.0, 0.0
  for s = first, cur do
    local v = redis.call('HMGET', slot_key(prefix, pool, dim, s), key, '*')
    local k = tonumber(v[1]) or 0.0
    local a = tonumber(v[2]) or 0.0
    if s + slots == cur then
      mine = mine + k * (1 - elapsed)
      total = total + a * (1 - elapsed)
    else
      mine = mine + k
      total = total + a
    end
  end
  return mine, total, cur
end

local function num(x)
  return string.format('%.17g', x)
end
