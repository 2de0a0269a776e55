"""No Python call leaves a lease held when the interpreter exits, whether the program returns, raises
out of a `with` block, drops a lease on the floor or never releases what it acquired."""

from __future__ import annotations

import pytest

import leasehold
from conftest import REDIS_URL, python_child, wait_until

PROGRAMS = {
    "never released": """
c = leasehold.LeaseClient.connect(url, key_prefix=prefix)
kept = [c.acquire("held", ttl=60), c.acquire("pool", ttl=60, permits=3)]
leader = c.election("boss", ttl=60).campaign("me")
""",
    "an exception out of the block": """
c = leasehold.LeaseClient.connect(url, key_prefix=prefix)
with c.lease("held", ttl=60), c.lease("pool", ttl=60, permits=3), c.election("boss", ttl=60).campaign("me"):
    raise SystemExit(3)
""",
    "sys.exit while holding": """
import sys
c = leasehold.LeaseClient.connect(url, key_prefix=prefix)
l1 = c.acquire("held", ttl=60); l2 = c.acquire("pool", ttl=60, permits=3)
leader = c.election("boss", ttl=60).campaign("me")
sys.exit(4)
""",
    # The case only the exit handler covers: a daemon thread's locals are never finalized, so the
    # core would never see these leases dropped (without the handler they stay held for 60 s).
    "held by a daemon thread": """
import threading, time
c = leasehold.LeaseClient.connect(url, key_prefix=prefix)
ready = threading.Event()
def work():
    l1 = c.acquire("held", ttl=60); l2 = c.acquire("pool", ttl=60, permits=3)
    leader = c.election("boss", ttl=60).campaign("me")
    ready.set()
    time.sleep(120)
threading.Thread(target=work, daemon=True).start()
ready.wait()
""",
    "an uncaught exception": """
c = leasehold.LeaseClient.connect(url, key_prefix=prefix)
l1 = c.acquire("held", ttl=60); l2 = c.acquire("pool", ttl=60, permits=3)
leader = c.election("boss", ttl=60).campaign("me")
raise RuntimeError("crash")
""",
}


@pytest.mark.parametrize("how", sorted(PROGRAMS))
def test_interpreter_exit_leaves_nothing_held(how: str, client: leasehold.LeaseClient, prefix: str) -> None:
    code = "import sys, leasehold\nurl, prefix = sys.argv[1:3]\n" + PROGRAMS[how]
    child = python_child(code, REDIS_URL, prefix)
    out, err = child.communicate(timeout=60)
    # The program got its leases (it did not fail before them) ...
    assert "Busy" not in err and "BadInput" not in err, err
    names = sorted(i["name"] for i in client.list("*"))
    assert names == ["boss", "held", "pool"], (names, err)
    # ... and none is held now, long before their 60 s TTLs.
    for name in names:
        assert not client.status(name)["held"], (how, name, err)


def test_a_dropped_lease_is_released_in_the_background(client: leasehold.LeaseClient) -> None:
    lease = client.acquire("dropped", ttl=60)
    assert client.status("dropped")["held"]
    del lease
    wait_until(lambda: not client.status("dropped")["held"], 5, "the dropped lease was released")


def test_sigkill_is_the_limit(client: leasehold.LeaseClient, prefix: str) -> None:
    """What exit handling cannot do: a SIGKILLed holder releases nothing; its TTL frees the name."""
    child = python_child(
        "import sys, time, leasehold\n"
        "c = leasehold.LeaseClient.connect(sys.argv[1], key_prefix=sys.argv[2])\n"
        "l = c.acquire('killed', ttl=2)\nprint('held', flush=True)\ntime.sleep(60)\n",
        REDIS_URL,
        prefix,
    )
    assert child.stdout.readline().strip() == "held"
    child.kill()
    child.wait()
    assert client.status("killed")["held"], "a SIGKILLed holder cannot release"
    wait_until(lambda: not client.status("killed")["held"], 6, "the TTL freed it")


def test_an_exception_or_a_cancellation_out_of_any_context_releases_what_it_held(
    client: leasehold.LeaseClient,
) -> None:
    """Every context manager the package has, left by an exception (sync and async) or by a
    cancelled asyncio task: nothing stays held, long before the 30 s TTLs."""
    import asyncio

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with client.lease("sync", ttl=30), client.lease("pool", ttl=30, permits=2), client.election(
            "boss", ttl=30
        ).campaign("me"), client.scheduler() as sched:
            sched.set_jobs([leasehold.Job("never", lambda run: 0, cron="0 0 1 1 *")])
            raise Boom

    async def raising() -> None:
        async with client.lease("async", ttl=30):
            raise Boom

    with pytest.raises(Boom):
        asyncio.run(raising())

    async def cancelled() -> None:
        entered = asyncio.Event()

        async def hold() -> None:
            async with client.lease("cancelled", ttl=30):
                entered.set()
                await asyncio.sleep(60)

        task = asyncio.ensure_future(hold())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())
    for name in ("sync", "pool", "boss", "async", "cancelled"):
        assert not client.status(name)["held"], name
