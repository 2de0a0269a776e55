-- release, second part (after release_fast.lua and lib.lua): the lock was ours, with waiters queued
-- behind it (it held `<token>:q`). The first live waiter gets it: the lock is set to its token, its
-- fence minted, its grant pushed to its wake list. The record keeps the token released here, for a
-- retried release. With nobody live, the lock is released as the first part does and the record's
-- queue flag is dropped once the queue is empty. When the script read the server's clock (the caller
-- had no estimate), it replies {1, seconds, microseconds} instead of 1, as renew.lua does, so that the
-- caller learns it.
local window, retention_ms = unpack_numbers(ARGV[2], 4, 5)

local function released()
  if exact == 1 then
    return {1, math.floor(hi / 1000000), hi % 1000000}
  end
  return 1
end

-- The next holder's record, written before the old one is read (one command for both); what the old
-- one says that this write did not (a higher fence, another flag, a given-up head) is put right after.
-- Returns whether `head` got the lock (false: it had given up). `written`: the fast part wrote the
-- record already, and this is what it held before.
local function hand_to(head, first, written)
  local r = {fence = hi, flags = 'q', holder = head, released = token}
  local old
  if written then
    old = written.old
  else
    old = redis.call('SET', fence_key, record_text(r), 'PX', retention_ms, 'GET')
  end
  local prev = old and parse_record(old)
  if old and not prev then
    redis.call('SET', fence_key, old)
    foreign_string(fence_key, old, 'a fence record')
  end
  if prev then
    local fix = false
    if prev.fence >= r.fence then
      r.fence = fence_after(prev.fence, hi, false)
      fix = true
    end
    for _, flag in ipairs({'g', 's'}) do
      if flagged(prev, flag) then
        set_flag(r, flag, true)
        fix = true
      end
    end
    if flagged(prev, 'g') and redis.call('ZSCORE', gone_key, head) then
      r.holder = prev.holder
      write_record(r, retention_ms)
      return false
    end
    if fix then
      write_record(r, retention_ms)
    end
  end
  redis.call('SET', lock_key, head .. ':q', 'PX', first)
  notify(head, r.fence, first)
  return true
end

if pending and hand_to(pending.head, pending.first, pending) then
  return released()
end
while true do
  local head, first = pop_live(window)
  if not head then
    break
  end
  if hand_to(head, first) then
    return released()
  end
end
redis.call('RENAME', lock_key, released_key)
local r, existed = read_record()
if existed then
  settle_queue_flag(r)
  r.released = token
  write_record(r, nil)
end
return released()
