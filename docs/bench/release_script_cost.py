"""Redis-side cost of S2's two steps: leasehold's scripts against the S2 floor's.

The hand-over release: each call releases a lock that has one waiter queued, so both scripts take
their hand-over path (leasehold: compare, pop the queue's head, write the fence record, the lock and
the grant, expire the grant; the floor: pop, write, push). The join: a waiter that finds the lock
held with others queued takes its place in the queue (leasehold: `SET NX PX GET` finds it held,
`ZADD NX`, `PEXPIRE` of the queue; the floor: `SET NX` finds it held, `RPUSH`). The state is set up before each call in a pipeline of plain
commands; the figure is `EVALSHA`'s own microseconds per call from `INFO commandstats` (the set-up is
not counted, nor the network). Run against a redis-server nobody else uses (its command statistics
are read), e.g. `redis-server --port 6390 --save ''`:

    python docs/bench/release_script_cost.py --port 6390 --calls 20000 --rounds 3

Needs redis-py (`pip install redis`). Prints one line per step and round, leasehold's and the
floor's measured in turn.
"""

import argparse
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "crates/leasehold/src/lease/store/redis/scripts"
FLOOR = ROOT / "crates/leasehold-lab/src/bench/floor_release.lua"


def lua(*parts: str) -> str:
    return "".join((SCRIPTS / p).read_text() for p in parts)


# The same concatenations as RELEASE_LUA and ACQUIRE_LUA in scripts/mod.rs.
RELEASE = lua("names.lua", "release_fast.lua", "fence.lua", "lib.lua", "release.lua")
ACQUIRE = lua("names.lua", "acquire_fast.lua", "fence.lua", "lib.lua") + (
    "local function semaphore_in_use()\n" + lua("lib_more.lua")
    + "return semaphore_in_use()\nend\n" + lua("acquire.lua"))
FLOOR_ACQUIRE = ROOT / "crates/leasehold-lab/src/bench/floor_acquire.lua"


def evalsha_usec(r: redis.Redis) -> tuple[int, int]:
    s = r.info("commandstats").get("cmdstat_evalsha", {"calls": 0, "usec": 0})
    return s["calls"], s["usec"]


def run(r: redis.Redis, script: str, calls: int, setup, call_args) -> float:
    sha = r.script_load(script)
    c0, u0 = evalsha_usec(r)
    for i in range(calls):
        p = r.pipeline(transaction=False)
        setup(p, i)
        p.execute()
        r.execute_command("EVALSHA", sha, *call_args(i))
    c1, u1 = evalsha_usec(r)
    return (u1 - u0) / (c1 - c0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=6390)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    r = redis.Redis(port=a.port)
    t = r.time()
    now = t[0] * 1_000_000 + t[1]

    def lh_setup(p, i):
        b = f"cost-lh{i % 64}:"
        p.set(b + "lock", "T:q", px=30_000)  # held by T, with waiters
        p.delete(b + "queue", b + "wake:H")
        p.zadd(b + "queue", {"H,2000": now})  # one waiter, H, joined now
        p.set(b + "fence", f"{now - 1000}:q:T:", px=60_000)  # T's record

    def lh_args(i):
        # KEYS[1] lock; ARGV token, then: estimate hi, lo, permit memory, live window, retention,
        # earliest live join.
        return [1, f"cost-lh{i % 64}:lock", "T", f"{now + 10},{now},1000,10000,60000,{now - 5000}"]

    def floor_setup(p, i):
        b = f"cost-fl{i % 64}:"
        p.set(b + "lock", "T")
        p.delete(b + "queue", b + "wake:H")
        p.rpush(b + "queue", "H")

    def floor_args(i):
        b = f"cost-fl{i % 64}:"
        return [2, b + "lock", b + "queue", b + "wake:"]

    def lh_join_setup(p, i):
        b = f"cost-lj{i % 64}:"
        p.set(b + "lock", "T:q", px=30_000)
        p.delete(b + "queue")
        p.set(b + "fence", f"{now - 1000}:q:T:", px=60_000)

    def lh_join_args(i):
        # KEYS[1] lock; ARGV token, ttl ms, estimate µs, retention ms, then: block ms, estimate lo,
        # first TTL ms, liveness slack ms, live window ms, queue life ms, fence retention ms.
        return [1, f"cost-lj{i % 64}:lock", "W", 2000, now, 60000,
                f"500,{now},2000,1000,10000,60000,60000"]

    def floor_join_setup(p, i):
        b = f"cost-fj{i % 64}:"
        p.set(b + "lock", "T")
        p.delete(b + "queue")

    def floor_join_args(i):
        b = f"cost-fj{i % 64}:"
        return [3, b + "lock", b + "queue", b + "wake:W", "W"]

    for n in range(1, a.rounds + 1):
        us_lh = run(r, RELEASE, a.calls, lh_setup, lh_args)
        assert r.get("cost-lh1:lock") == b"H:q", "leasehold's release did not hand over"
        us_fl = run(r, FLOOR.read_text(), a.calls, floor_setup, floor_args)
        assert r.get("cost-fl1:lock") == b"H", "the floor's release did not hand over"
        print(f"round {n}: hand-over release: leasehold {us_lh:.2f} µs/call, floor {us_fl:.2f} "
              f"µs/call, ratio {us_lh / us_fl:.2f}")
        us_lh = run(r, ACQUIRE, a.calls, lh_join_setup, lh_join_args)
        assert r.zscore("cost-lj1:queue", "W,2000") is not None, "leasehold's join did not queue"
        us_fl = run(r, FLOOR_ACQUIRE.read_text(), a.calls, floor_join_setup, floor_join_args)
        assert r.lrange("cost-fj1:queue", 0, -1) == [b"W"], "the floor's join did not queue"
        print(f"round {n}: join: leasehold {us_lh:.2f} µs/call, floor {us_fl:.2f} µs/call, "
              f"ratio {us_lh / us_fl:.2f}")


if __name__ == "__main__":
    main()
