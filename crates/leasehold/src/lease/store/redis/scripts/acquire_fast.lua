-- acquire, first part: the common case, a free lock with nothing queued, answered in three commands
-- (the lock's `SET NX PX GET`, the record's `SET GET`), before lib.lua's functions are built. Every
-- other case goes on in acquire.lua with what was read here, so no command is sent twice, except the
-- common join of a waiter behind a holder with others queued, and a try there (at the end), answered
-- here too.
-- KEYS[1] lock (KEYS[2] the never-existing key, on a Redis Cluster)
-- ARGV[1] token, ARGV[2] ttl ms, ARGV[3] the server clock's estimate µs, no earlier than it (0: none,
-- TIME is read), ARGV[4] how long the record is kept ms (the retention, at least the TTL), ARGV[5] what
-- the fast part reads only when it waits and the second part reads, packed: "<block ms: 0 when the
-- caller does not wait, else the length of the BLPOP of the caller's wake list that follows this
-- script in the same pipeline>,<the estimate, no later than the clock µs>,<the first TTL the caller
-- wants if a release hands it the lock ms>,<slack added to a refreshing waiter's liveness ms>,<how
-- long a waiter counts as live after joining the queue ms>,<life of the queue ms>,<fence retention
-- ms>"
--
-- Returns the fence, as a bulk string of digits, when this part took the lock on the caller's
-- estimate: the fence is the estimate, the TTL the one asked for. Otherwise (here when the script read
-- TIME, or in the second part) {1, fence, ttl ms the lock has now, server µs, exact} taken; {0, pttl,
-- server µs, exact} busy (pttl -1: held without expiry, -3: not read, 0: free but the queue goes
-- first); {2} the caller gave up on this token before this arrived (nothing done); {3, permits} the
-- name is in use as a semaphore of that many permits (nothing done). `server µs` is the clock the
-- script went by: the server's (exact 1) or the caller's estimate (exact 0).
--
-- The common case allocates as little as Lua allows (each string an argument or a script makes costs
-- Redis CPU): no number is parsed, the old fence is compared with the estimate as digits (the shorter
-- is the smaller; of two as long, the one that sorts first), and the reply is the argument itself.
local token = ARGV[1]
local hi_text = ARGV[3]
fence_key = base .. 'fence'
if hi_text == '0' then
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
  old = redis.pcall('SET', fence_key, hi_text .. '::' .. token .. ':', 'PX', ARGV[4], 'GET')
  if type(old) == 'table' and old.err then
    -- Not a string at all: nothing was written to it; give the lock back and say so.
    redis.call('DEL', lock_key)
    return old
  end
  -- Above the old record's fence, and the old record had no flags (`<fence>::...`)? A record of
  -- another shape (a bare number, flags, something leasehold did not write) goes to the second part.
  local newer = not old
  if old then
    local _, colons = string.find(old, '^%d+::')
    if colons then
      local digits = colons - 2
      newer = digits < #hi_text or (digits == #hi_text and string.sub(old, 1, digits) < hi_text)
    end
  end
  if newer then
    if string.byte(ARGV[5]) ~= 48 then
      -- Waiting (block is not "0"): the BLPOP that follows must return at once, so it finds this on
      -- the wake list.
      local lo_text = exact == 0 and string.match(ARGV[5], '^%d+,(%d+)') or hi_text
      local wake = base .. 'wake:' .. token
      redis.call('LPUSH', wake, hi_text .. ',' .. lo_text .. ',' .. ARGV[2])
      redis.call('PEXPIRE', wake, ARGV[2])
    end
    if exact == 0 then
      return hi_text
    end
    return {1, hi, tonumber(ARGV[2]), hi, exact}
  end
end

-- A try behind a holder that already has others queued (the first step of a waiting acquire that finds
-- the name busy, mostly): busy, with the holder's TTL, which is all the second part would do here.
if held and string.byte(ARGV[5]) == 48 and string.sub(held, -2) == ':q'
    and held ~= token .. ':q' then
  local pttl = redis.call('PTTL', lock_key)
  if exact == 1 then
    return {0, pttl, hi, 1}
  end
  return {0, pttl, tonumber(hi_text), 0}
end

-- The common join, still before lib.lua: a waiter behind a holder that already has others queued
-- (the lock holds `<holder>:q`, not the caller's own) takes its place in the queue, or refreshes it,
-- as lib.lua's `enqueue` does, and is told busy; nothing else is read. On the caller's estimate, or
-- on the server's clock read above when the caller had none (a waiter that never takes the lock at
-- once learns the clock only from its releases, so it is without an estimate now and then).
if held and string.byte(ARGV[5]) ~= 48 and string.sub(held, -2) == ':q'
    and held ~= token .. ':q' then
  local block, first, slack, life = string.match(ARGV[5], '^(%d+),%d+,(%d+),(%d+),%d+,(%d+),')
  if block then
    local queue_key = base .. 'queue'
    local added = redis.call('ZADD', queue_key, 'NX', hi_text, token .. ',' .. first)
    redis.call('PEXPIRE', queue_key, life)
    local pttl = -3
    if added == 0 then
      redis.call('SET', base .. 'alive:' .. token, '1', 'PX', tonumber(block) + tonumber(slack))
      if redis.call('PTTL', fence_key) < tonumber(life) then
        redis.call('PEXPIRE', fence_key, life)
      end
      pttl = redis.call('PTTL', lock_key)
    end
    if exact == 1 then
      return {0, pttl, hi, 1}
    end
    return {0, pttl, tonumber(hi_text), 0}
  end
end
