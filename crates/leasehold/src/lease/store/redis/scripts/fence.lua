-- fence.lua: the server clock and the fence rule, written once for every lease script on Redis: it
-- comes before lib.lua (the single-server, Sentinel and Cluster scripts) and begins each of Redlock's scripts
-- (scripts/redlock.rs joins it in at compile time, as scripts/mod.rs does lib.lua).

-- The server's clock, read once per script (microseconds since 1970 are ~2^51: exact in a Lua double).
local clock_us
local function now_us()
  if not clock_us then
    local t = redis.call('TIME')
    clock_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return clock_us
end

-- The fence after `stored`: max(stored + 1, proposal, server time in microseconds when `floor`).
-- Strictly above the stored value, and (with the floor) above every fence issued before the key was
-- lost (a restart or failover, or the retention passed) as long as the server clock has not stepped
-- back by more than the time since. `proposal` (nil: none) is a Redlock client's, so that a fence
-- recorded on a majority stays above what any of them recorded before. Reads and writes nothing but
-- the clock: run twice, it answers the same.
local function fence_after(stored, proposal, floor)
  local fence = stored + 1
  if proposal and proposal > fence then
    fence = proposal
  end
  if floor and now_us() > fence then
    fence = now_us()
  end
  return fence
end
