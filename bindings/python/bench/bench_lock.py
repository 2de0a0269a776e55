"""Benchmark of the Python package beside redis-py's Lock, in one run on one Redis.

    python bench/bench_lock.py [--redis redis://127.0.0.1:6379] [--seconds 3] [--leases 10000]

Build the package in release mode for it (`maturin build --release`, then pip install the wheel):
a debug build measures the debug build. What it measures:

* uncontended: acquire + release cycles per second on one name, one thread, leasehold and redis-py's
  `Lock` (SET NX PX + a Lua release) in windows taken in turn (leasehold, redis-py, leasehold, ...),
  each row the sum of its windows;
* contended: two processes of two threads each take and release one name in a loop (waiting in the
  queue); same-client share is the fraction of hand-overs whose next holder is in the same process as
  the last (50 % is even; 100 % is one process starving the other), and the cross-process hand-over
  latency is from just before the releaser sends its release to the next holder's acquire returning;
* many leases: one process holds N leases (TTL 3 s, renewed by the core) for 10 s; every lease must
  still be held at the end, and the process's CPU time and resident memory are reported.

Prints a table and, with --json, the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import statistics
import sys
import threading
import time
import uuid
from typing import Any, Dict, List, Tuple

import leasehold


def leasehold_cycles(url: str, prefix: str, seconds: float) -> int:
    client = leasehold.LeaseClient.connect(url, key_prefix=prefix)
    n = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        client.acquire("uncontended", ttl=10).release()
        n += 1
    return n


def redis_py_cycles(url: str, prefix: str, seconds: float) -> int:
    import redis

    r = redis.Redis.from_url(url)
    n = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        lock = r.lock(f"{prefix}:redis-py-uncontended", timeout=10)
        if not lock.acquire(blocking=False):
            raise RuntimeError("uncontended redis-py lock was busy")
        lock.release()
        n += 1
    return n


def uncontended(url: str, seconds: float, windows: int) -> Dict[str, float]:
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    # Warm both up (connections, script loads) outside the windows.
    leasehold_cycles(url, prefix, 0.3)
    redis_py_cycles(url, prefix, 0.3)
    totals = {"leasehold": [0, 0.0], "redis-py Lock": [0, 0.0]}
    order = [("leasehold", leasehold_cycles), ("redis-py Lock", redis_py_cycles)]
    for w in range(windows):
        for name, fn in order if w % 2 == 0 else reversed(order):
            started = time.perf_counter()
            totals[name][0] += fn(url, prefix, seconds / windows)
            totals[name][1] += time.perf_counter() - started
    return {name: n / t for name, (n, t) in totals.items()}


def contender(url: str, prefix: str, seconds: float, out: "multiprocessing.Queue[Any]", who: int) -> None:
    client = leasehold.LeaseClient.connect(url, key_prefix=prefix)
    events: List[Tuple[int, int, int, int]] = []  # (acquired_ns, release_sent_ns, process, fence)
    guard = threading.Lock()
    end = time.monotonic() + seconds

    def loop() -> None:
        while time.monotonic() < end:
            try:
                lease = client.acquire("contended", ttl=5, wait=2)
            except leasehold.Busy:
                continue
            acquired = time.time_ns()
            released = time.time_ns()  # just before the release is sent
            lease.release()
            with guard:
                events.append((acquired, released, who, lease.fence))

    threads = [threading.Thread(target=loop) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put(events)


def contended(url: str, seconds: float) -> Dict[str, float]:
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    ctx = multiprocessing.get_context("spawn")
    queue: "multiprocessing.Queue[Any]" = ctx.Queue()
    procs = [ctx.Process(target=contender, args=(url, prefix, seconds, queue, i)) for i in range(2)]
    for p in procs:
        p.start()
    events = [e for _ in procs for e in queue.get(timeout=seconds + 120)]
    for p in procs:
        p.join(30)
    events.sort(key=lambda e: e[3])  # by fence: the order the store granted them
    same = cross = 0
    latencies: List[float] = []
    for prev, nxt in zip(events, events[1:]):
        if prev[2] == nxt[2]:
            same += 1
        else:
            cross += 1
            latencies.append((nxt[0] - prev[1]) / 1e6)
    latencies.sort()
    p99 = latencies[int(0.99 * (len(latencies) - 1))] if latencies else float("nan")
    return {
        "acquisitions": len(events),
        "per_second": len(events) / seconds,
        "same_client_share": same / max(1, same + cross),
        "cross_client_p50_ms": statistics.median(latencies) if latencies else float("nan"),
        "cross_client_p99_ms": p99,
    }


def many_leases(url: str, count: int, hold: float) -> Dict[str, float]:
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    client = leasehold.LeaseClient.connect(url, key_prefix=prefix)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    leases = [client.acquire(f"many-{i}", ttl=3) for i in range(count)]
    acquire_s = time.perf_counter() - started
    cpu0 = time.process_time()
    time.sleep(hold)
    cpu_while_held = time.process_time() - cpu0
    lost = sum(1 for l in leases if l.lost.is_set())
    held = sum(1 for i in client.list("many-*") if i["held"])
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for l in leases:
        l.release()
    return {
        "leases": count,
        "acquire_seconds": acquire_s,
        "held_for_seconds": hold,
        "lost": lost,
        "held_in_redis_at_the_end": held,
        "cpu_seconds_while_held": cpu_while_held,
        "max_rss_growth_mib": (rss_after - rss_before) / 1024,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--redis", default=os.environ.get("LEASEHOLD_TEST_REDIS_URL", "redis://127.0.0.1:6379"))
    ap.add_argument("--seconds", type=float, default=3.0, help="per measurement (default 3)")
    ap.add_argument("--windows", type=int, default=6, help="uncontended windows taken in turn")
    ap.add_argument("--leases", type=int, default=10_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    figures: Dict[str, Any] = {"uncontended_cycles_per_second": uncontended(args.redis, args.seconds, args.windows)}
    figures["contended"] = contended(args.redis, args.seconds)
    figures["many_leases"] = many_leases(args.redis, args.leases, 10.0)
    u = figures["uncontended_cycles_per_second"]
    u["ratio"] = u["leasehold"] / u["redis-py Lock"]
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(f"uncontended acquire+release /s: leasehold {u['leasehold']:.0f}, "
              f"redis-py Lock {u['redis-py Lock']:.0f} (x{u['ratio']:.2f})")
        c = figures["contended"]
        print(f"contended, 2 processes x 2 threads: {c['per_second']:.0f} acquisitions/s, same-client share "
              f"{100 * c['same_client_share']:.1f} %, cross-client hand-over p50 {c['cross_client_p50_ms']:.2f} ms, "
              f"p99 {c['cross_client_p99_ms']:.2f} ms")
        m = figures["many_leases"]
        print(f"{m['leases']} leases held {m['held_for_seconds']:.0f} s (TTL 3 s): lost {m['lost']}, held in Redis at "
              f"the end {m['held_in_redis_at_the_end']}, CPU while held {m['cpu_seconds_while_held']:.2f} s, "
              f"max RSS growth {m['max_rss_growth_mib']:.1f} MiB, acquired in {m['acquire_seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
