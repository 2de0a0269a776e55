-- names.lua: the key names every lease script starts from, and the server clock as the caller
-- estimates it. scripts/mod.rs puts it first, before the script's fast part (acquire_fast.lua,
-- release_fast.lua), which runs before fence.lua's and lib.lua's functions are built: the common
-- case of an uncontended acquire or release does not pay for building them.
--
-- KEYS[1] is the name's lock key `{prefix:name}:lock`. Every other key of the name shares its hash
-- tag and is derived from `base` (here and in lib.lua; keys.rs names the same keys for Rust, and a
-- test checks both agree), so a script touches one Redis Cluster slot. A waiter's wake list is named
-- after its token: the client that releases cannot know it up front, which is why the keys are
-- derived rather than passed.
--
-- KEYS[2], when given, is `{prefix:name}:never`, a key that never exists. It is there for Redis
-- Cluster: while the name's slot is being migrated, a script that reached a key the node no longer
-- holds would fail at that command and keep what it wrote before it (half a release). Declared, the
-- missing key makes the node refuse the whole script up front (`TRYAGAIN`), and the client sends it
-- again once the slot has moved. Outside a migration it costs nothing.
--
-- The lock key holds the holder's token, as every `SET NX PX` lock does, or `<token>:q` while
-- waiters are queued behind a leasehold holder (so that its release, which reads the lock anyway,
-- knows to hand over). A lock that other `SET NX PX` clients took is never rewritten.
--
-- The fence key holds the name's record, `<fence>:<flags>:<holder>:<released>`: the last fence
-- issued; flags that send an acquire that finds the lock free down the slow path (`q` waiters may be
-- queued, `g` an acquire was given up, `s` the name may be in use as a semaphore); the token the
-- fence was issued to (so a waiter can tell a leasehold holder from another client's lock); the token
-- a hand-over released (so a retried release hears "released"). A bare number, as Redlock and
-- earlier versions write, reads as a record with nothing but the fence.
local lock_key = KEYS[1]
local base = string.sub(lock_key, 1, -5)
-- Made where it is first needed (the release's fast part does not need it): lib.lua makes it for
-- the rest.
local fence_key

-- The server's clock in microseconds as the caller estimates it from an earlier reply (`hi` no
-- earlier than the server's clock now, `lo` no later), so that the common path sends no TIME. Each
-- script sets them from its arguments; a caller without a fresh estimate sends 0, and the script
-- reads TIME instead (`exact` 1). Only the fence's floor, the queue's arrival order, a waiter's
-- liveness and a hand-over's time use them; expiries are Redis's own, on its own clock.
local hi, lo, exact = 0, 0, 0
