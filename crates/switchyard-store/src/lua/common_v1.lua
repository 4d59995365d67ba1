-- Shared by the Switchyard quota scripts (v1). Prepended to each script before it is
-- loaded. One hash per counter: `<prefix>:q1:{<pool>}:<unit:window>:<field>`, where the
-- field is a key id or `*` (every key of the pool together), holding one hash field
-- per slot number. The pool in braces keeps a pool's keys on one cluster slot. The
-- clock is the Redis server's, so gateways with skewed clocks agree.
local function server_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function counter_key(prefix, pool, dim, field)
  return prefix .. ':q1:{' .. pool .. '}:' .. dim .. ':' .. field
end

-- Slot numbers are below 2^53, so tostring prints them exactly as integers.
local function slot_names(first, cur)
  local names = {}
  for s = first, cur do
    names[s - first + 1] = tostring(s)
  end
  return names
end

-- Where a window stands at `now`: the current slot, the fraction of it elapsed, the
-- oldest slot to read, and the names of the slots to read.
local function window_at(slot_ms, slots, now)
  local cur = math.floor(now / slot_ms)
  local first = cur - slots
  if first < 0 then first = 0 end
  return {
    cur = cur,
    elapsed = (now - cur * slot_ms) / slot_ms,
    first = first,
    slots = slots,
    names = slot_names(first, cur),
  }
end

-- The window estimate of one counter, summed in the same order as the Rust
-- SlidingCounter: slots oldest first, the straddling one weighted by the part still
-- inside the window.
local function window_value(ckey, w)
  local values = redis.call('HMGET', ckey, unpack(w.names))
  local total = 0.0
  local straddling = w.cur - w.slots
  for i, v in ipairs(values) do
    local x = tonumber(v) or 0.0
    if w.first + i - 1 == straddling then
      total = total + x * (1 - w.elapsed)
    else
      total = total + x
    end
  end
  return total
end

-- Adds `amount` to a slot of a counter, keeps the hash alive for a window and a bit,
-- and drops slots that have left the window so the hash stays bounded.
local function add(ckey, slot, amount, slot_ms, slots, cur)
  redis.call('HINCRBYFLOAT', ckey, tostring(slot), amount)
  redis.call('PEXPIRE', ckey, (slots + 2) * slot_ms)
  if redis.call('HLEN', ckey) > slots + 1 then
    for _, f in ipairs(redis.call('HKEYS', ckey)) do
      if tonumber(f) < cur - slots then
        redis.call('HDEL', ckey, f)
      end
    end
  end
end

local function num(x)
  return string.format('%.17g', x)
end
