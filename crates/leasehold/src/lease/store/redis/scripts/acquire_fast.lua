-- acquire, first part: the common case, a free lock with nothing queued, answered in three commands
-- (the lock's `SET NX PX GET`, the record's `SET GET`), before lib.lua's functions are built. Every
-- other case goes on in acquire.lua with what was read here, so no command is sent twice.
-- KEYS[1] lock (KEYS[2] the never-existing key, on a Redis Cluster)
-- ARGV[1] token, ARGV[2] ttl ms, ARGV[3] block ms: 0 when the caller does not wait, else the length of
-- the BLPOP of the caller's wake list that follows this script in the same pipeline, ARGV[4] the
-- server clock's estimate µs, no earlier than it (0: none, TIME is read), ARGV[5] how long the record
-- is kept ms (the retention, at least the TTL), ARGV[6] what only the second part reads, packed:
-- "<the estimate, no later than the clock µs>,<the first TTL the caller wants if a release hands it
-- the lock ms>,<slack added to a refreshing waiter's liveness ms>,<how long a waiter counts as live
-- after joining the queue ms>,<life of the queue ms>,<fence retention ms>"

-- Returns {1, fence, ttl ms the lock has now, server µs, exact} taken; {0, pttl, server µs, exact}
-- busy (pttl -1: held without expiry, -3: not read, 0: free but the queue goes first); {2} the
-- caller gave up on this token before this arrived (nothing done); {3, permits} the name is in use as
-- a semaphore of that many permits (nothing done). `server µs` is the clock the script went by: the
-- server's (exact 1) or the caller's estimate (exact 0).
local token = ARGV[1]
local ttl = tonumber(ARGV[2])
local block = tonumber(ARGV[3])
hi = tonumber(ARGV[4])
local hi_text = ARGV[4]
if hi <= 0 then
  -- No estimate: the server's clock (fence.lua's now_us is not built yet on this path).
  local t = redis.call('TIME')
  hi = tonumber(t[1]) * 1000000 + tonumber(t[2])
  lo, exact, hi_text = hi, 1, string.format('%d', hi)
end

-- false when the lock was free and is now ours; else the lock as it was (nothing written).
local held = redis.call('SET', lock_key, token, 'NX', 'PX', ARGV[2], 'GET')
local old
if not held then
  -- The record for this lease, written before the old one is read (one command for both): its fence
  -- is the clock's estimate, which is above the old fence unless the acquisitions outran it.
  old = redis.pcall('SET', fence_key, hi_text .. '::' .. token .. ':', 'PX', ARGV[5], 'GET')
  if type(old) == 'table' and old.err then
    -- Not a string at all: nothing was written to it; give the lock back and say so.
    redis.call('DEL', lock_key)
    return old
  end
  local stored = old and (string.match(old, '^(%d+)::[^:]*:[^:]*$') or string.match(old, '^(%d+)$'))
  if not old or (stored and tonumber(stored) < hi) then
    if block > 0 then
      -- The BLPOP that follows must return at once: it finds this on the wake list.
      if exact == 0 then
        lo = tonumber(string.match(ARGV[6], '^%d+'))
      end
      local wake = base .. 'wake:' .. token
      redis.call('LPUSH', wake, hi_text .. ',' .. string.format('%d', lo) .. ',' .. ARGV[2])
      redis.call('PEXPIRE', wake, ARGV[2])
    end
    return {1, hi, ttl, hi, exact}
  end
end
