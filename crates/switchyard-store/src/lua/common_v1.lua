-- Shared by the Switchyard quota scripts (v1). Prepended to each script before it is
-- loaded. One hash per counter: `<prefix>:q1:{<pool>}:<unit:window>:<field>`, where the
-- field is a key id or `*` (every key of the pool together). The hash holds one field
-- per slot number with that slot's amount, `sum` (the amounts of every stored slot) and
-- `lo` (the oldest slot stored). Reading a window costs one HMGET whatever its length:
-- slots that left the window are subtracted from `sum` and deleted as time passes. The
-- pool in braces keeps a pool's keys on one cluster slot. The clock is the Redis
-- server's, so gateways with skewed clocks agree.
local function server_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function counter_key(prefix, pool, dim, field)
  return prefix .. ':q1:{' .. pool .. '}:' .. dim .. ':' .. field
end

-- The record of one booking, by reservation id: `n` (its dimensions), per dimension i
-- (1-based) `b<i>` (the amount booked) and `s<i>` (the slot it is booked in); or only
-- `x` (a tombstone: released before it was booked, so it never will be). It expires.
local function booking_key(prefix, pool, rid)
  return prefix .. ':q1:{' .. pool .. '}:r:' .. rid
end

-- Where a window stands at `now`: the current slot, the fraction of it elapsed, and the
-- oldest slot still (partly) inside the window.
local function window_at(slot_ms, slots, now)
  local cur = math.floor(now / slot_ms)
  local first = cur - slots
  if first < 0 then first = 0 end
  return { cur = cur, elapsed = (now - cur * slot_ms) / slot_ms, first = first, slots = slots }
end

local function num(x)
  return string.format('%.17g', x)
end

-- Drops the slots older than the window from the counter; returns the sum of those
-- left and the straddling slot's amount. Slot numbers are below 2^53, so tostring
-- prints them exactly.
local function trimmed(ckey, w)
  local v = redis.call('HMGET', ckey, 'lo', 'sum', tostring(w.first))
  local lo = tonumber(v[1])
  if lo == nil then
    return 0.0, 0.0
  end
  local sum = tonumber(v[2]) or 0.0
  if lo < w.first then
    if w.first - lo > w.slots + 1 then
      -- Everything stored is older than the window.
      redis.call('DEL', ckey)
      return 0.0, 0.0
    end
    for s = lo, w.first - 1 do
      local old = redis.call('HGET', ckey, tostring(s))
      if old then
        sum = sum - tonumber(old)
        redis.call('HDEL', ckey, tostring(s))
      end
    end
    redis.call('HSET', ckey, 'lo', tostring(w.first), 'sum', num(sum))
  end
  return sum, tonumber(v[3]) or 0.0
end

-- The window estimate of one counter: every stored slot, less the part of the
-- straddling slot that has left the window. Exact for whole-number amounts; agrees with
-- the Rust SlidingCounter.
local function window_value(ckey, w)
  local sum, straddling = trimmed(ckey, w)
  if w.cur - w.slots ~= w.first then
    straddling = 0.0
  end
  return sum - straddling * w.elapsed
end

-- Adds `amount` (a string) to `slot` of a counter and keeps the hash alive for a window
-- and a bit.
local function add(ckey, slot, amount, slot_ms, w)
  trimmed(ckey, w)
  redis.call('HSETNX', ckey, 'lo', tostring(w.first))
  redis.call('HINCRBYFLOAT', ckey, tostring(slot), amount)
  redis.call('HINCRBYFLOAT', ckey, 'sum', amount)
  redis.call('PEXPIRE', ckey, (w.slots + 2) * slot_ms)
end
