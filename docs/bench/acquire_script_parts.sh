#!/usr/bin/env bash
# Redis's own time (INFO commandstats usec per call) of leasehold's acquire script built up part by
# part, beside the minimal lock's acquire, and of building lib.lua on a release's slow path (docs/benchmarks.md, "The eighth look"). Each variant is
# loaded from the repository's Lua files and run 100,000 times by redis-benchmark on a fresh name
# each call (the free-name case of S1; `__rand_int__` makes the names), one connection, on a private
# redis-server on port 6421. Prints one line per variant and round. Needs redis-server, redis-cli
# and redis-benchmark on PATH; run from the repository's root.
set -euo pipefail
PORT=6421 N=100000 ROUNDS=${1:-3}
DIR=crates/leasehold/src/lease/store/redis/scripts
WORK=$(mktemp -d)
redis-server --port $PORT --save "" --appendonly no >/dev/null 2>&1 &
trap 'redis-cli -p $PORT shutdown nosave >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
for _ in $(seq 100); do redis-cli -p $PORT ping >/dev/null 2>&1 && break; sleep 0.1; done

echo 'return 1' >"$WORK/1-evalsha-alone.lua"
{ cat $DIR/names.lua; echo "redis.call('SET', lock_key, ARGV[1], 'NX', 'PX', ARGV[2], 'GET') return ARGV[3]"; } \
  >"$WORK/2-lock-write.lua"
{ cat $DIR/names.lua; echo "local token = ARGV[1]
redis.call('SET', lock_key, token, 'NX', 'PX', ARGV[2], 'GET')
redis.pcall('SET', base .. 'fence', ARGV[3] .. '::' .. token .. ':', 'PX', ARGV[4], 'GET')
return ARGV[3]"; } >"$WORK/3-lock-and-record-writes.lua"
{ cat $DIR/names.lua $DIR/acquire_fast.lua; echo 'return 9'; } >"$WORK/4-fast-part.lua"
# Not leasehold's script: what the acquire would cost if it only read the record (a design where the
# token carries its fence and the record is written at release), for comparison with 3.
{ cat $DIR/names.lua; echo "local token = ARGV[1]
redis.call('SET', lock_key, token, 'NX', 'PX', ARGV[2], 'GET')
redis.pcall('GET', base .. 'fence')
return ARGV[3]"; } >"$WORK/6-what-if-record-read-not-written.lua"
# The whole script, as scripts/mod.rs joins it.
{ cat $DIR/names.lua $DIR/acquire_fast.lua $DIR/fence.lua $DIR/lib.lua
  printf 'local function semaphore_in_use()\n'; cat $DIR/lib_more.lua
  printf 'return semaphore_in_use()\nend\n'; cat $DIR/acquire.lua; } >"$WORK/5-whole-acquire.lua"

# What a release that leaves the fast part pays before release.lua's own steps: building fence.lua's
# and lib.lua's functions (7 against 8), measured with a hand-over's packed argument.
{ cat $DIR/names.lua; echo "fence_key = base .. 'fence' return 1"; } >"$WORK/7-release-names-only.lua"
{ cat $DIR/names.lua; echo "fence_key = base .. 'fence'"; cat $DIR/fence.lua $DIR/lib.lua; echo 'return 1'; } \
  >"$WORK/8-release-names-fence-and-lib-built.lua"

R() { redis-cli -p $PORT "$@"; }
usec() { R info commandstats | grep "^cmdstat_$1:" | sed 's/.*usec_per_call=\([0-9.]*\).*/\1/'; }
for round in $(seq "$ROUNDS"); do
  for f in "$WORK"/[1-6]-*.lua; do
    R flushall >/dev/null
    sha=$(R -x script load <"$f")
    R config resetstat >/dev/null
    # Arguments as acquire_at sends them on the try path with a clock estimate (no TIME).
    redis-benchmark -p $PORT -n $N -c 1 -r 100000000 -q EVALSHA "$sha" 1 "{bench:__rand_int__}:lock" \
      "tok__rand_int__" 30000 1765000000000000 30000 "0,1764999999999000,30000,50,1000,60000,30000" \
      >/dev/null
    echo "round $round  $(basename "$f" .lua): $(usec evalsha) us per call"
  done
  for f in "$WORK"/[78]-*.lua; do
    sha=$(R -x script load <"$f")
    R config resetstat >/dev/null
    redis-benchmark -p $PORT -n $N -c 1 -q EVALSHA "$sha" 1 "{bench:x}:lock" tok \
      "1765000000000000,1764999999999000,10000,1000,30000,1764999999000000" >/dev/null
    echo "round $round  $(basename "$f" .lua): $(usec evalsha) us per call"
  done
  R flushall >/dev/null
  R config resetstat >/dev/null
  redis-benchmark -p $PORT -n $N -c 1 -r 100000000 -q SET "bench-min:__rand_int__" "tok__rand_int__" \
    NX PX 30000 >/dev/null
  echo "round $round  the minimal lock's acquire (SET NX PX, no script): $(usec set) us per call"
done
