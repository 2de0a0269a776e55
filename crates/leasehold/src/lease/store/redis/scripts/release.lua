-- release, second part (after release_fast.lua and lib.lua): the lock was ours and is released, and
-- someone is queued: hand the lock to the first live waiter, if any.
hand_lock(tonumber(ARGV[3]), tonumber(ARGV[4]))
return 1
