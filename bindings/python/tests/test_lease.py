"""The lease from Python on a real Redis: exclusion, fences, the context managers (sync and async),
release on an exception, waiting in the queue, semaphores, status/list/force_release, and the lost
signal (forced release, a black-holed connection)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import leasehold
from conftest import REDIS_URL, wait_until


def test_a_lease_excludes_and_its_fence_rises(client: leasehold.LeaseClient) -> None:
    with client.lease("job", ttl=5) as first:
        assert first.fence > 0
        assert 0 < first.remaining <= 5
        assert first.stop_by > time.monotonic()
        with pytest.raises(leasehold.Busy) as busy:
            client.acquire("job", ttl=5)
        assert "job" in str(busy.value) and "busy" in str(busy.value)
        status = client.status("job")
        assert status["held"] and status["fence"] == first.fence
    assert not client.status("job")["held"], "leaving the block released it"
    with client.lease("job", ttl=5) as second:
        assert second.fence > first.fence


def test_an_exception_in_the_block_releases_the_lease(client: leasehold.LeaseClient) -> None:
    with pytest.raises(ZeroDivisionError):
        with client.lease("boom", ttl=30):
            1 / 0
    assert not client.status("boom")["held"]


def test_a_waiter_is_handed_the_lease_on_release(client: leasehold.LeaseClient) -> None:
    holder = client.acquire("queue", ttl=10)
    got = {}

    def wait() -> None:
        started = time.monotonic()
        with client.lease("queue", ttl=10, wait=10) as lease:
            got["fence"] = lease.fence
            got["waited"] = time.monotonic() - started

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.5)
    assert "fence" not in got, "the waiter must not get a held lease"
    holder.release()
    t.join(10)
    assert got["fence"] > holder.fence
    # Woken by the release (not by the 10 s TTL): well under the TTL even on a loaded machine.
    assert got["waited"] < 5, got


def test_a_wait_that_runs_out_is_busy(client: leasehold.LeaseClient) -> None:
    with client.lease("slow", ttl=10):
        started = time.monotonic()
        with pytest.raises(leasehold.Busy):
            client.acquire("slow", ttl=10, wait=0.3)
        assert time.monotonic() - started >= 0.3


def test_async_with_and_an_awaitable_lost(client: leasehold.LeaseClient) -> None:
    async def main() -> None:
        async with client.lease("async-ok", ttl=5) as ok:
            assert client.status("async-ok")["held"]
        assert not client.status("async-ok")["held"]
        assert not ok.lost.is_set()
        with pytest.raises(leasehold.Lost):
            async with client.lease("async", ttl=5) as lease:
                waiter = asyncio.ensure_future(lease.lost)
                await asyncio.sleep(0.1)
                assert not waiter.done()
                client.force_release("async")
                # The holder learns it at its next renewal or its deadline (ttl 5 s): within 6 s.
                reason = await asyncio.wait_for(waiter, 6)
                assert reason
            # Leaving the block says the lease was lost before the block ended.

    asyncio.run(main())


def test_a_cancelled_async_wait_leaves_nothing_held(client: leasehold.LeaseClient) -> None:
    holder = client.acquire("cancel", ttl=10)

    async def main() -> None:
        task = asyncio.ensure_future(client.acquire_async("cancel", ttl=10, wait=30))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    holder.release()
    # Nobody else may be left holding or queued for it: a fresh try takes it at once.
    wait_until(lambda: client.status("cancel")["waiting"] == 0, 5, "the cancelled waiter left the queue")
    with client.lease("cancel", ttl=5) as again:
        assert again.fence > holder.fence


def test_semaphore_permits(client: leasehold.LeaseClient) -> None:
    a = client.acquire("pool", ttl=5, permits=2)
    b = client.acquire("pool", ttl=5, permits=2)
    assert a.fence != b.fence
    with pytest.raises(leasehold.Busy):
        client.acquire("pool", ttl=5, permits=2)
    with pytest.raises(leasehold.BadInput) as wrong:
        client.acquire("pool", ttl=5, permits=3)
    assert "permits" in str(wrong.value) or "2" in str(wrong.value)
    assert len(client.status("pool")["holders"]) == 2
    a.release()
    with client.lease("pool", ttl=5, permits=2) as c:
        assert c.fence > max(a.fence, b.fence)
    b.release()


def test_list_and_force_release(client: leasehold.LeaseClient) -> None:
    held = client.acquire("ops-a", ttl=10)
    client.acquire("ops-b", ttl=10).release()
    names = sorted(i["name"] for i in client.list("ops-*"))
    assert names == ["ops-a", "ops-b"]
    forced = client.force_release("ops-a")
    assert forced["evicted"] and forced["fence"] > held.fence
    assert held.lost.wait(12), "the evicted holder is told"
    assert held.lost.reason
    with pytest.raises(leasehold.Lost):
        held.release()
    held.release()  # a second call does nothing


def test_lost_on_a_black_holed_connection(redis_proxy, prefix: str) -> None:
    proxied = leasehold.LeaseClient.connect(f"redis://127.0.0.1:{redis_proxy.port}", key_prefix=prefix)
    direct = leasehold.LeaseClient.connect(REDIS_URL, key_prefix=prefix)
    lease = proxied.acquire("partition", ttl=1.5)
    redis_proxy.black_hole()
    started = time.monotonic()
    # No answer reaches the holder: its deadline (on its own clock) fires the signal, within the TTL.
    assert lease.lost.wait(5), "lost must fire although the store never answers"
    assert time.monotonic() - started <= 2.0
    # And the lease is free in the store after its TTL: another client takes it with a newer fence.
    wait_until(lambda: not direct.status("partition")["held"], 5, "the TTL lapsed in Redis")
    with direct.lease("partition", ttl=5) as successor:
        assert successor.fence > lease.fence


def test_ctrl_c_while_waiting_leaves_the_queue(client: leasehold.LeaseClient, prefix: str) -> None:
    import os
    import signal

    from conftest import python_child

    holder = client.acquire("interrupted", ttl=10)
    child = python_child(
        "import sys, leasehold\n"
        "c = leasehold.LeaseClient.connect(sys.argv[1], key_prefix=sys.argv[2])\n"
        "print('waiting', flush=True)\n"
        "try:\n"
        "    c.acquire('interrupted', ttl=10, wait=60)\n"
        "    print('acquired', flush=True)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
        "import time; time.sleep(1.5)\n",  # still alive: what it left is not cleaned up by its exit
        REDIS_URL,
        prefix,
    )
    assert child.stdout.readline().strip() == "waiting"
    wait_until(lambda: client.status("interrupted")["waiting"] == 1, 10, "the child queued")
    started = time.monotonic()
    os.kill(child.pid, signal.SIGINT)
    assert child.stdout.readline().strip() == "interrupted"
    assert time.monotonic() - started < 2, "Ctrl-C is seen within the 100 ms polling, not after the wait"
    wait_until(lambda: client.status("interrupted")["waiting"] == 0, 5, "the interrupted waiter left the queue")
    holder.release()
    # Not handed to the interrupted waiter: free for the next caller at once.
    assert not client.status("interrupted")["held"]
    child.wait(10)


def test_max_hold_ends_the_lease(client: leasehold.LeaseClient) -> None:
    lease = client.acquire("bounded", ttl=5, max_hold=1.0)
    started = time.monotonic()
    assert lease.lost.wait(4), "the maximum hold ends the lease"
    # At the bound, not at the TTL: generous margins for a loaded machine.
    assert 0.8 <= time.monotonic() - started <= 3.5
    with pytest.raises(leasehold.Lost):
        lease.release()
