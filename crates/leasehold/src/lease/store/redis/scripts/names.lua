-- names.lua: the key names of a lease, derived once for every lease script. scripts/mod.rs joins it
-- in at compile time after fence.lua and before the script's fast part (acquire_fast.lua,
-- release_fast.lua), which runs before lib.lua's functions are defined: the common case of an
-- uncontended acquire or release does not pay for building the library (measured ~4 µs of Redis CPU
-- per call, docs/benchmarks.md).
--
-- KEYS[1] is the name's lock key `{prefix:name}:lock`. Every other key of the name shares its hash
-- tag and is derived here (keys.rs names the same keys for Rust, and a test checks both agree), so a
-- script touches one Redis Cluster slot. A waiter's wake list is named after its token: the client
-- that releases cannot know it up front, which is why the keys are derived rather than passed.
local lock_key = KEYS[1]
local base = string.sub(lock_key, 1, -5)
local fence_key = base .. 'fence'
local queue_key = base .. 'queue'
local waiters_key = base .. 'waiters'
local gone_key = base .. 'gone'
local released_key = base .. 'released'
local forced_key = base .. 'forced'
-- A semaphore (more than one permit): its number of permits, its holders (token -> expiry, server
-- ms) and their fences (token -> fence).
local permits_key = base .. 'permits'
local holders_key = base .. 'holders'
local held_key = base .. 'held'
-- A note its holder wrote beside the lock (note.lua, which names it on its own).
local note_key = base .. 'note'

-- KEYS[2], when given, is `{prefix:name}:never`, a key that never exists. It is there for Redis
-- Cluster: while the name's slot is being migrated, a script that reached a key the node no longer
-- holds would fail at that command and keep what it wrote before it (half a release). Declared, the
-- missing key makes the node refuse the whole script up front (`TRYAGAIN`), and the client sends it
-- again once the slot has moved. Outside a migration it costs nothing.
