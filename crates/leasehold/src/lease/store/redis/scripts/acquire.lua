-- acquire, second part (after acquire_fast.lua and lib.lua): the caller's own lease found again, the
-- lock taken but the record asking for more (a stale fence, waiters, a given-up token, a semaphore),
-- the first waiter behind a holder, and joining the queue.
--
-- No barging: while the queue is not empty a free lock goes to its first live waiter, here, and the
-- caller (unless that is the caller) is busy. Run twice (a retry after a reconnect) it must not see
-- its own lock as busy: the same token finds the lock it took, or was handed, and gets it back.
local ttl = tonumber(ARGV[2])
local block, lo_sent, first, slack, window, life = unpack_numbers(ARGV[5], 1, 6)
if exact == 0 then
  hi, lo = tonumber(hi_text), lo_sent
end
local keep_ms = tonumber(ARGV[4])

-- Taken: when a BLPOP follows, it must return at once, so it finds the grant on the wake list.
local function taken(fence, ttl_now)
  if block > 0 then
    notify(token, fence, ttl_now)
  end
  return {1, fence, ttl_now, hi, exact}
end

local function busy(pttl)
  return {0, pttl, hi, exact}
end

if not held then
  -- The first part set the lock and the record; the old record asks for more.
  local r = old and parse_record(old)
  if old and not r then
    -- A string leasehold did not write: put it back (without expiry, which the first part's write
    -- lost) and give the lock back.
    redis.call('SET', fence_key, old)
    redis.call('DEL', lock_key)
    foreign_string(fence_key, old, 'a fence record')
  end
  r = r or {fence = 0, flags = '', holder = '', released = ''}
  -- Gives the lock back and puts the old record back: nothing taken, nothing changed.
  local function undo()
    redis.call('DEL', lock_key)
    if old then
      redis.call('SET', fence_key, old, 'KEEPTTL')
    else
      redis.call('DEL', fence_key)
    end
  end
  if flagged(r, 'g') then
    if redis.call('ZSCORE', gone_key, token) then
      undo()
      return {2}
    end
    if redis.call('EXISTS', gone_key) == 0 then
      set_flag(r, 'g', false)
    end
  end
  if flagged(r, 's') then
    local permits = semaphore_in_use()
    if permits then
      undo()
      return {3, permits}
    end
    set_flag(r, 's', false)
  end
  if flagged(r, 'q') then
    local head, fence, head_first = hand_lock(r, window)
    if head then
      write_record(r, keep_ms)
      if head == token then
        -- hand_lock already put the grant on our wake list.
        return {1, fence, head_first, hi, exact}
      end
      if block > 0 then
        enqueue(token, first, block, slack, life)
      end
      return busy(head_first)
    end
    settle_queue_flag(r)
    if flagged(r, 'q') then
      -- Nobody live at the head within this script's budget; the queue still goes first.
      redis.call('DEL', lock_key)
      write_record(r, keep_ms)
      if block > 0 then
        enqueue(token, first, block, slack, life)
      end
      return busy(0)
    end
  end
  mint(r)
  r.holder = token
  write_record(r, keep_ms)
  return taken(r.fence, ttl)
end

if held == token or held == token .. ':q' then
  local r, existed = read_record()
  if not existed then
    -- Only when the retention is shorter than the time since this lease was taken.
    return redis.error_reply('LEASEHOLD the fence of this lease outlived its retention; acquire again')
  end
  return taken(r.fence, redis.call('PTTL', lock_key))
end

-- Held by someone else. The lock says whether waiters are queued behind it already.
local queued_behind = string.sub(held, -2) == ':q'
local pttl = -3
if block == 0 or not queued_behind then
  pttl = redis.call('PTTL', lock_key)
end
local r, existed
if not queued_behind then
  r, existed = read_record()
  if flagged(r, 'g') and redis.call('ZSCORE', gone_key, token) then
    return {2}
  end
end
if block > 0 then
  -- Joining comes first: a queue key leasehold did not write stops the script before it writes.
  if not enqueue(token, first, block, slack, life) and pttl == -3 then
    pttl = redis.call('PTTL', lock_key)
  end
  if not queued_behind then
    -- The first waiter: mark the lock (only a leasehold holder's, the one the record names) so that
    -- its release hands over, and the record so that an acquire that finds the lock free after an
    -- expiry does not jump the queue.
    if r.holder == held then
      redis.call('SET', lock_key, held .. ':q', 'XX', 'KEEPTTL')
    end
    if not flagged(r, 'q') then
      set_flag(r, 'q', true)
      write_record(r, (not existed) and math.max(keep_ms, life) or nil)
    end
  end
end
return busy(pttl)
