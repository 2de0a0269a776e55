#!/usr/bin/env bash
# redis-server instructions per Lua operation and per redis.call, as the lease scripts use them
# (docs/benchmarks.md, "The lean hot path, sixth step"). Starts redis-server under callgrind on port
# 6420, runs each operation 20,000 times in one EVAL loop between two callgrind dumps, and prints the
# instructions per iteration (the loop's own ~100 included). Needs valgrind, redis-server, redis-cli
# and redis-benchmark on PATH; writes /tmp/lua-ops.out.*.
set -euo pipefail
PORT=6420 N=20000
rm -f /tmp/lua-ops.out*
valgrind --tool=callgrind --callgrind-out-file=/tmp/lua-ops.out redis-server --port $PORT \
  --save "" --appendonly no >/dev/null 2>&1 &
trap 'redis-cli -p $PORT shutdown nosave >/dev/null 2>&1 || true' EXIT
for _ in $(seq 150); do redis-cli -p $PORT ping >/dev/null 2>&1 && break; sleep 0.2; done
# Instructions since the previous dump.
since() {
  callgrind_control -d >/dev/null 2>&1
  grep -m1 '^summary\|^totals' "$(ls -t /tmp/lua-ops.out.* | head -1)" | awk '{print $2}'
}
loop() {
  since >/dev/null
  redis-cli -p $PORT EVAL "local n=0 for i=1,$N do $2 end return n" 0 \
    "1733240000123456,1733240000120000,60000,3600000,1733239990000000" "tok-abcdefghijklmnop,30000" >/dev/null
  echo "$1: $(( $(since) / N ))"
}
loop "loop alone" "n=n+1"
loop "string.match, 5 captures" "local a,b,c,d,e = string.match(ARGV[1], '^(%d+),(%d+),%d+,(%d+),(%d+),(%d+)\$')"
loop "string.find plain x4 + string.sub x5" "local s=ARGV[1] local a=string.find(s, ',', 1, true) local b=string.find(s, ',', a+1, true) local c=string.find(s, ',', b+1, true) local d=string.find(s, ',', c+1, true) local x1,x2,x3,x4,x5=string.sub(s,1,a-1),string.sub(s,a+1,b-1),string.sub(s,b+1,c-1),string.sub(s,c+1,d-1),string.sub(s,d+1)"
loop "string.match, 2 captures" "local a,b = string.match(ARGV[2], '^([^,]+),(%d+)\$')"
loop "concatenation of 4" "local s = ARGV[1] .. ':q:' .. ARGV[2] .. ':x'"
loop "tonumber of 16 digits" "local v = tonumber('1733240000123456')"
loop "GET" "local v = redis.call('GET', 'lt:k')"
loop "SET" "redis.call('SET', 'lt:k', 'v')"
loop "SET PX" "redis.call('SET', 'lt:k', 'v', 'PX', '60000')"
loop "SET PX, a Lua number" "redis.call('SET', 'lt:k', 'v', 'PX', 60000)"
loop "SET PXAT" "redis.call('SET', 'lt:k', 'v', 'PXAT', '4733240000123')"
loop "SET PX GET" "local v = redis.call('SET', 'lt:k', 'v', 'PX', '60000', 'GET')"
loop "SET NX PX GET (held)" "local v = redis.call('SET', 'lt:k', 'v', 'NX', 'PX', '60000', 'GET')"
loop "PEXPIRE" "redis.call('PEXPIRE', 'lt:k', '60000')"
loop "PEXPIREAT" "redis.call('PEXPIREAT', 'lt:k', '4733240000123')"
loop "PTTL" "local v = redis.call('PTTL', 'lt:k')"
loop "LPUSH" "redis.call('LPUSH', 'lt:l', 'x')"
loop "ZADD (new member)" "redis.call('ZADD', 'lt:z', i, 'm'..i)"
loop "ZPOPMIN" "redis.call('ZPOPMIN', 'lt:z')"
loop "TIME" "redis.call('TIME')"
SHA=$(redis-cli -p $PORT SCRIPT LOAD "return 1")
since >/dev/null
redis-benchmark -p $PORT -n 2000 -c 1 -q EVALSHA "$SHA" 0 >/dev/null 2>&1
echo "EVALSHA of 'return 1', no keys or arguments, per request: $(( $(since) / 2000 ))"
since >/dev/null
redis-benchmark -p $PORT -n 2000 -c 1 -q EVALSHA "$SHA" 1 '{lh:bench-name}:lock' tok-abcdefghijklmnopqrstuv \
  30000 1733240000123456 60000 '5000,1733240000120000,30000,2000,60000,3600000,600000' >/dev/null 2>&1
echo "EVALSHA of 'return 1', one key and five arguments, per request: $(( $(since) / 2000 ))"
since >/dev/null
redis-benchmark -p $PORT -n 2000 -c 1 -q PING >/dev/null 2>&1
echo "PING per request: $(( $(since) / 2000 ))"
