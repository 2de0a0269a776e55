"""leasehold for Python: leases with fencing tokens over leasehold's Rust core.

What it promises: the same leases as a Rust program or the ``leasehold`` command (one store
protocol, so a Python holder, a Rust holder and ``leasehold run`` on one name exclude each other,
queue together and see one fence sequence); renewals run in the Rust core's own task with the GIL
released, so a busy or blocked Python thread does not stop them; every wait releases the GIL.

What it does NOT promise: exclusion when a holder is paused (GC, SIGSTOP, a VM pause) past its TTL,
or when the store fails over. The lease is for efficiency; for correctness pass ``lease.fence`` to
the resource: ``SELECT leasehold_fence('resource', %s)`` inside your transaction on PostgreSQL
(``CALL leasehold_fence(...)`` on MariaDB/MySQL), installed by ``leasehold migrate``. A process
killed with SIGKILL releases nothing: its leases stay held until their TTL lapses.

Smallest example::

    import leasehold

    client = leasehold.LeaseClient.connect("redis://127.0.0.1:6379")
    with client.lease("nightly-report", ttl=30, wait=10) as lease:
        do_work(fence=lease.fence)        # renewed in the background until the block ends
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import socket
import threading
import time
import weakref
from typing import Any, AsyncIterator, Dict, Iterator, List, Optional, Sequence, Tuple, Union, cast

from . import _leasehold
from ._leasehold import (
    BadInput,
    Busy,
    Job,
    LeaseholdError,
    Lost,
    Misconfigured,
    ScheduledRun,
    StaleFence,
    Unauthorized,
    Unreachable,
)

__all__ = [
    "LeaseClient",
    "Lease",
    "LostEvent",
    "Election",
    "Leadership",
    "SlotRun",
    "SlotClaim",
    "Observation",
    "Scheduler",
    "Job",
    "ScheduledRun",
    "LeaseholdError",
    "Busy",
    "Lost",
    "Unreachable",
    "Unauthorized",
    "Misconfigured",
    "BadInput",
    "StaleFence",
]

# Every lease this process holds, so that interpreter exit releases them (a lease dropped by the
# garbage collector is released by the core in the background; at exit there may be no background
# left, so it is done here, blocking, before the runtime goes).
_live: "weakref.WeakSet[Any]" = weakref.WeakSet()


@atexit.register
def _release_all_at_exit() -> None:
    for held in list(_live):
        try:
            held._release_quietly()
        except Exception:  # noqa: BLE001 - exit must go on; the TTL frees what this could not
            pass


class LostEvent(threading.Event):
    """Set when the lease is lost: wait on it from a thread (``lost.wait(timeout)``, ``lost.is_set()``)
    or ``await lease.lost`` in asyncio. ``reason`` says why (expired, evicted, renewal refused...).
    Releasing the lease does not set it. It is set by the core at the holder's deadline on its own clock,
    even when the store does not answer; it cannot be set while the process is paused."""

    def __init__(self, native: Union[_leasehold.Lease, _leasehold.Leadership]) -> None:
        super().__init__()
        # Not the native lease itself: the core's task holds this event until the lease is lost,
        # and must not keep the lease alive (a dropped lease is released in the background).
        self._reason: Optional[str] = None
        self._waiters: List[Any] = []
        self._guard = threading.Lock()
        native.on_lost(self._fired)

    @property
    def reason(self) -> Optional[str]:
        return self._reason

    def _fired(self, reason: str) -> None:
        self._reason = reason
        self.set()
        with self._guard:
            waiters, self._waiters = self._waiters, []
        for loop, fut in waiters:
            loop.call_soon_threadsafe(_resolve, fut)

    def __await__(self) -> Any:
        return self._wait_async().__await__()

    async def _wait_async(self) -> Optional[str]:
        if self.is_set():
            return self.reason
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with self._guard:
            if self.is_set():
                return self.reason
            self._waiters.append((loop, fut))
        await fut
        return self.reason


def _resolve(fut: "asyncio.Future[None]") -> None:
    if not fut.done():
        fut.set_result(None)


class Lease:
    """A held lease. ``fence`` is its fencing token (strictly larger than every earlier holder's of
    the name); ``lost`` is a :class:`LostEvent`; ``stop_by`` is the ``time.monotonic()`` instant by
    which the holder must have stopped writing unless a renewal moves it (read it again: renewals
    move it). Leaving the ``with`` / ``async with`` block releases it, whether by return or by
    exception; so does interpreter exit. When the lease was lost before the block ended, leaving the
    block raises :class:`Lost` (the block's work did not run under the lease to its end), unless the
    block is already raising an exception of its own, which is not masked."""

    def __init__(self, native: _leasehold.Lease) -> None:
        self._native = native
        self._lost: Optional[LostEvent] = None
        _live.add(self)

    @property
    def name(self) -> str:
        return self._native.name

    @property
    def fence(self) -> int:
        return self._native.fence

    @property
    def token(self) -> str:
        return self._native.token

    @property
    def lost(self) -> LostEvent:
        if self._lost is None:
            self._lost = LostEvent(self._native)
        return self._lost

    @property
    def remaining(self) -> float:
        """Seconds until the holder's deadline (0 once released or lost)."""
        return self._native.remaining

    @property
    def stop_by(self) -> float:
        """The ``time.monotonic()`` instant by which the work must be gone: the store's earliest
        hand-over by the holder's estimate, less the drift allowance and 100 ms (the Rust core's
        ``Lease::stop_by``). Work that takes ``s`` seconds to stop starts stopping at
        ``stop_by - s``; a renewal moves it on."""
        return time.monotonic() + self._native.stop_in

    def release(self) -> None:
        """Releases the lease (one round trip; a second call does nothing). Raises :class:`Lost`
        when the store no longer held it (expired, force-released), :class:`Unreachable` when the
        store did not answer, in which case the lease stays held until its TTL lapses."""
        _live.discard(self)
        self._native.release()

    async def release_async(self) -> None:
        _live.discard(self)
        await self._native.release_async()

    def _release_quietly(self) -> None:
        try:
            self._native.release()
        except LeaseholdError:
            pass

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        try:
            self.release()
        except LeaseholdError:
            if exc_type is None:
                raise

    async def __aenter__(self) -> "Lease":
        return self

    async def __aexit__(self, exc_type: Any, *_: Any) -> None:
        try:
            await self.release_async()
        except LeaseholdError:
            if exc_type is None:
                raise

    def __repr__(self) -> str:
        return f"<leasehold.Lease {self.name!r} fence={self.fence}>"


class _Acquire:
    """What ``client.lease(...)`` returns: a context manager, sync or async, that acquires on entry
    and releases on exit."""

    def __init__(self, client: "LeaseClient", name: str, kw: Dict[str, Any]) -> None:
        self._client = client
        self._name = name
        self._kw = kw
        self._lease: Optional[Lease] = None

    def __enter__(self) -> Lease:
        self._lease = self._client.acquire(self._name, **self._kw)
        return self._lease

    def __exit__(self, *exc: Any) -> None:
        if self._lease is not None:
            self._lease.__exit__(*exc)

    async def __aenter__(self) -> Lease:
        self._lease = await self._client.acquire_async(self._name, **self._kw)
        return self._lease

    async def __aexit__(self, *exc: Any) -> None:
        if self._lease is not None:
            await self._lease.__aexit__(*exc)


class LeaseClient:
    """A connection to one store. One per process is enough: it carries every lease of the process
    and renews them all in one task (10,000 leases are one batch per renewal period, not 10,000
    threads)."""

    def __init__(self, native: _leasehold.Client) -> None:
        self._native = native

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        key_prefix: Optional[str] = None,
        connect_timeout: Optional[float] = None,
    ) -> "LeaseClient":
        """Connects to the store ``url`` names: every URL ``leasehold --store`` takes (``redis://``,
        ``rediss://``, ``redis-sentinel://``, ``redis-cluster://``, ``postgres://``, ``mysql://``,
        ``mariadb://``, ``etcd://``, ``etcds://``). Raises
        :class:`BadInput` for a malformed URL, :class:`Unreachable`, :class:`Unauthorized`,
        :class:`Misconfigured` (a replica, an evicting Redis)."""
        return cls(_leasehold.Client.connect(url, key_prefix, connect_timeout))

    @property
    def store_kind(self) -> str:
        return self._native.store_kind

    def acquire(
        self,
        name: str,
        *,
        ttl: float = 30.0,
        wait: float = 0.0,
        max_hold: Optional[float] = None,
        permits: int = 1,
    ) -> Lease:
        """Takes ``name`` for ``ttl`` seconds, renewed by the core until released, lost or
        ``max_hold`` seconds have passed. Waits up to ``wait`` seconds in the store's FIFO queue (0:
        try once). ``permits`` > 1 makes it a semaphore: up to that many holders at once, each with
        its own fence; everyone on one name must give the same count. Raises :class:`Busy` when no
        wait is left, :class:`BadInput` for a bad name, TTL or count (nothing sent). Ctrl-C while it
        waits leaves the queue and frees a lease it was handed meanwhile."""
        return Lease(self._native.acquire(name, ttl, wait, max_hold, permits))

    async def acquire_async(
        self,
        name: str,
        *,
        ttl: float = 30.0,
        wait: float = 0.0,
        max_hold: Optional[float] = None,
        permits: int = 1,
    ) -> Lease:
        """As :meth:`acquire`, for asyncio. Cancelling the task while it waits leaves the queue and
        frees a lease it was handed meanwhile."""
        return Lease(await self._native.acquire_async(name, ttl, wait, max_hold, permits))

    def lease(
        self,
        name: str,
        *,
        ttl: float = 30.0,
        wait: float = 0.0,
        max_hold: Optional[float] = None,
        permits: int = 1,
    ) -> _Acquire:
        """``with client.lease(name, ...) as lease`` or ``async with``: :meth:`acquire` on entry,
        release on exit (by return or exception)."""
        kw = dict(ttl=ttl, wait=wait, max_hold=max_hold, permits=permits)
        return _Acquire(self, name, kw)

    def status(self, name: str) -> Dict[str, Any]:
        """The state of ``name`` without touching it (``leasehold status --json``): ``held``,
        ``ttl_ms``, ``fence`` (the last issued), ``permits``, ``holders``, ``waiting``, ``problem``."""
        return cast(Dict[str, Any], json.loads(self._native.status_json(name)))

    def list(self, pattern: str = "*") -> List[Dict[str, Any]]:
        """The names under this client's prefix matching the glob ``pattern``, as :meth:`status`."""
        return cast(List[Dict[str, Any]], json.loads(self._native.list_json(pattern)))

    def force_release(self, name: str) -> Dict[str, Any]:
        """Operator's override, unsafe for the evicted holder by design: frees ``name`` whoever
        holds it and advances the fence, so the evicted holder's fenced writes are refused."""
        evicted, fence = self._native.force_release(name)
        return {"evicted": evicted, "fence": fence}

    def election(self, name: str, *, ttl: float = 10.0, holder: Optional[str] = None) -> "Election":
        """An election on ``name``: one leader at a time, whose term is a fence."""
        return Election(self, name, ttl, holder)

    def once_per(
        self,
        job: str,
        *,
        every: float,
        ttl: float = 60.0,
        max_attempts: int = 3,
        holder: Optional[str] = None,
        offset: float = 0.0,
    ) -> "SlotClaim":
        """Claims the current slot of ``job`` (slots of ``every`` seconds since the epoch, moved by
        ``offset``): one replica runs it, the others see ``busy`` or ``done``. Promise: once per
        slot while the runner finishes within its lease; a run that outlives it, or a store that
        forgets the record, can run it twice (record the slot in the job's own transaction for
        more)."""
        kind, value = self._native.claim_slot(job, every, ttl, max_attempts, holder, offset)
        if kind == "run":
            return SlotClaim(kind, SlotRun(cast(_leasehold.SlotRun, value)), None)
        return SlotClaim(kind, None, json.loads(value) if value else None)

    def scheduler(self, *, holder: Optional[str] = None) -> "Scheduler":
        """The scheduler of ``leasehold cron`` with Python functions as jobs: run one in every
        replica with the same :class:`Job` list, and each slot runs on one replica, reckoned on the
        store's clock, with the same policies and records as ``leasehold cron`` (its records name
        ``holder``, default host:pid:random). It runs nothing until :meth:`Scheduler.set_jobs`."""
        return Scheduler(self._native.scheduler(holder))

    def history(self, job: str, *, limit: int = 20) -> List[Dict[str, Any]]:
        """What ran in each slot of ``job`` (``leasehold history --json``), newest slot first:
        ``slot``, ``outcome`` (running, done, failed, lost, missed, skipped), ``attempts``,
        ``holder``, ``fence``, ``exit_code``, ``duration_ms``, ``reason``. Only what the store still
        keeps (its retention)."""
        return cast(List[Dict[str, Any]], json.loads(self._native.history_json(job, limit)))

    def pause(self, job: str, *, by: Optional[str] = None) -> None:
        """Pauses ``job`` on every replica (kept in the store): its slots are recorded skipped
        until :meth:`resume`. ``by`` says who (default host:pid)."""
        self._native.set_paused(job, True, by or _who())

    def resume(self, job: str, *, by: Optional[str] = None) -> None:
        """Resumes a paused ``job`` on every replica."""
        self._native.set_paused(job, False, by or _who())

    def paused(self, job: str) -> Optional[str]:
        """Who paused ``job``, or ``None`` when it is not paused."""
        return self._native.paused_by(job)


def _who() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Leadership:
    """A won election. ``term`` is a fence (pass it to the resource like a lease's); ``lost`` is a
    :class:`LostEvent`. Leaving the ``with`` block resigns."""

    def __init__(self, native: _leasehold.Leadership) -> None:
        self._native = native
        self._lost: Optional[LostEvent] = None
        _live.add(self)

    @property
    def term(self) -> int:
        return self._native.term

    @property
    def holder(self) -> str:
        return self._native.holder

    @property
    def lost(self) -> LostEvent:
        if self._lost is None:
            self._lost = LostEvent(self._native)
        return self._lost

    def proclaim(self, value: str) -> None:
        """Publishes a new value under the same term (refused once the leadership is lost)."""
        self._native.proclaim(value)

    def resign(self) -> None:
        """Steps down: the next candidate in the queue takes over with a higher term."""
        _live.discard(self)
        self._native.resign()

    def _release_quietly(self) -> None:
        try:
            self._native.resign()
        except LeaseholdError:
            pass

    def __enter__(self) -> "Leadership":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.resign()


class Election:
    """An election over a lease: ``campaign`` waits to lead, ``leader`` reads who leads,
    ``observe`` follows changes. It does NOT promise one leader under process pauses or failover:
    the term, checked at the resource, is what holds."""

    def __init__(self, client: LeaseClient, name: str, ttl: float, holder: Optional[str]) -> None:
        self._client = client
        self.name = name
        self._ttl = ttl
        self._holder = holder

    def campaign(self, value: str, *, wait: float = 0.0) -> Leadership:
        """Becomes the leader with ``value`` (waiting up to ``wait`` seconds in the queue), or
        raises :class:`Busy`."""
        native = self._client._native.campaign(self.name, value, self._ttl, wait, self._holder)
        return Leadership(native)

    def leader(self) -> Optional[Dict[str, Any]]:
        """The current leader's record (``term``, ``value``, ``holder``, ...) or ``None``."""
        return cast(Optional[Dict[str, Any]], json.loads(self._client._native.leader_json(self.name)))

    def observe(self, *, every: float = 0.25, timeout: Optional[float] = None) -> "Observation":
        """Follows the leader: an iterator (``for leader in ...``) and an async iterator (``async
        for``) yielding the leader's record (or ``None``: nobody leads) first as it is, then at each
        change of term or value. The Rust core's observer does the asking, every ``every``
        seconds, with the GIL released; a change shorter than ``every`` may be missed. Ends after
        ``timeout`` seconds if given; a store error is raised (the observation can be iterated
        again)."""
        return Observation(self._client._native.observe(self.name, every), timeout)


class Observation:
    """The changes of an election's leader, from :meth:`Election.observe`: iterate it, or ``async
    for`` over it, or call :meth:`changed`."""

    def __init__(self, native: _leasehold.Observer, timeout: Optional[float]) -> None:
        self._native = native
        self._end = None if timeout is None else time.monotonic() + timeout

    def _left(self) -> Optional[float]:
        return None if self._end is None else max(0.0, self._end - time.monotonic())

    def changed(self, timeout: Optional[float] = None) -> Tuple[bool, Optional[Dict[str, Any]]]:
        """Waits up to ``timeout`` seconds (``None``: as long as it takes) for the next change:
        ``(True, leader)``, or ``(False, None)`` when the time passed first."""
        text = self._native.changed_json(timeout)
        if text is None:
            return False, None
        return True, cast(Optional[Dict[str, Any]], json.loads(text))

    def __iter__(self) -> Iterator[Optional[Dict[str, Any]]]:
        return self

    def __next__(self) -> Optional[Dict[str, Any]]:
        left = self._left()
        if left == 0.0:
            raise StopIteration
        changed, leader = self.changed(left)
        if not changed:
            raise StopIteration
        return leader

    def __aiter__(self) -> AsyncIterator[Optional[Dict[str, Any]]]:
        return self

    async def __anext__(self) -> Optional[Dict[str, Any]]:
        left = self._left()
        if left == 0.0:
            raise StopAsyncIteration
        text = await self._native.changed_json_async(left)
        if text is None:
            raise StopAsyncIteration
        return cast(Optional[Dict[str, Any]], json.loads(text))


class Scheduler:
    """A running scheduler (:meth:`LeaseClient.scheduler`). Each :class:`Job`'s function is
    called with a :class:`ScheduledRun` in a thread of its own, once per slot across every
    replica; it returns ``None`` or ``0`` (done), another int (failed: retried up to
    ``max_attempts``), or raises (failed, its traceback printed). It should return soon after
    ``run.stopping`` turns true (``run.wait_stop(s)`` sleeps until then).

    Promise: each slot runs on one replica at a time while runs finish within their lease (renewed
    by the core); a failed or lost run is retried by whichever replica claims next. Does NOT
    promise: once per slot when a run outlives its lease (pass ``run.fence`` to the resource) or
    when the store forgets its records. Leaving the ``with`` block, or interpreter exit, drains it:
    no new slot is taken and the runs going on get their grace."""

    def __init__(self, native: _leasehold.Scheduler) -> None:
        self._native = native
        _live.add(self)

    def set_jobs(self, jobs: Sequence[Job]) -> Tuple[List[str], List[str]]:
        """Runs exactly ``jobs`` from now: a new or changed job starts, a missing one stops taking
        slots (its run going on is left to end), an unchanged one goes on. Returns the names
        started and stopped. Raises :class:`BadInput` for two jobs of one name."""
        return self._native.set_jobs(list(jobs))

    def trigger(self, name: str) -> Optional[Dict[str, Any]]:
        """Runs job ``name`` once now, outside its schedule (recorded with reason ``trigger``),
        and returns its record once it ended."""
        return cast(Optional[Dict[str, Any]], json.loads(self._native.trigger_json(name)))

    @property
    def running(self) -> int:
        """Runs going on in this process now."""
        return self._native.running

    @property
    def clock_ms(self) -> int:
        """The store's clock as this scheduler reckons it, in ms since the Unix epoch."""
        return self._native.clock_ms

    def drain(self) -> None:
        """Stops taking slots, lets the runs going on end within their job's grace, then tells them
        to stop (``run.stopping``) and waits a little more."""
        _live.discard(self)
        self._native.drain()

    def _release_quietly(self) -> None:
        self._native.drain()

    def __enter__(self) -> "Scheduler":
        return self

    def __exit__(self, *_: Any) -> None:
        self.drain()


class SlotRun:
    """A claimed slot: run the job, then :meth:`finish` (done for exit code 0, failed otherwise)."""

    def __init__(self, native: _leasehold.SlotRun) -> None:
        self._native = native
        _live.add(self)

    @property
    def fence(self) -> int:
        return self._native.fence

    @property
    def slot(self) -> int:
        return self._native.slot

    @property
    def record(self) -> Dict[str, Any]:
        return cast(Dict[str, Any], json.loads(self._native.record_json))

    def finish(self, exit_code: Optional[int] = 0, *, lost: bool = False) -> Dict[str, Any]:
        """Records the outcome and releases the slot's lease; returns the final record."""
        _live.discard(self)
        return cast(Dict[str, Any], json.loads(self._native.finish_json(exit_code, lost)))

    def _release_quietly(self) -> None:
        try:
            self._native.finish_json(None, True)
        except LeaseholdError:
            pass


class SlotClaim:
    """What :meth:`LeaseClient.once_per` found: ``kind`` is ``"run"`` (``run`` is yours),
    ``"busy"`` (another replica runs it), ``"done"`` or ``"exhausted"`` (``record`` says how)."""

    def __init__(self, kind: str, run: Optional[SlotRun], record: Optional[Dict[str, Any]]) -> None:
        self.kind = kind
        self.run = run
        self.record = record

    def __repr__(self) -> str:
        return f"<leasehold.SlotClaim {self.kind}>"
