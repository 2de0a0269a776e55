"""Elections and once-per-slot claims from Python on a real Redis."""

from __future__ import annotations

import threading
import time

import pytest

import leasehold

# Slots a week long: the tests never straddle a slot boundary in practice.
WEEK = 7 * 24 * 3600.0


def test_campaign_leader_proclaim_resign_and_a_higher_term(client: leasehold.LeaseClient) -> None:
    election = client.election("primary", ttl=5, holder="node-a")
    assert election.leader() is None
    rival = client.election("primary", ttl=5, holder="node-b")
    with election.campaign("10.0.0.1:5432") as leadership:
        leader = election.leader()
        assert leader["value"] == "10.0.0.1:5432" and leader["term"] == leadership.term
        assert leader["holder"] == "node-a"
        with pytest.raises(leasehold.Busy):
            rival.campaign("10.0.0.2:5432")
        leadership.proclaim("10.0.0.9:5432")
        assert election.leader()["value"] == "10.0.0.9:5432"
        assert election.leader()["term"] == leadership.term, "proclaim keeps the term"
        first_term = leadership.term
    assert election.leader() is None, "resigned on leaving the block"
    with rival.campaign("10.0.0.2:5432") as second:
        assert second.term > first_term


def test_a_standby_takes_over_on_resign_and_observe_sees_it(client: leasehold.LeaseClient) -> None:
    election = client.election("svc", ttl=5)
    first = election.campaign("one")
    seen = []

    def watch() -> None:
        for leader in election.observe(every=0.05, timeout=5):
            seen.append(None if leader is None else leader["value"])
            if seen[-1] == "two":
                return

    watcher = threading.Thread(target=watch)
    watcher.start()
    standby = {}

    def campaign() -> None:
        standby["l"] = election.campaign("two", wait=10)

    t = threading.Thread(target=campaign)
    t.start()
    time.sleep(0.3)
    first.resign()
    t.join(10)
    watcher.join(10)
    assert standby["l"].term > first.term
    assert seen[0] == "one" and seen[-1] == "two", seen
    standby["l"].resign()


def test_a_slot_runs_once_and_records_its_outcome(client: leasehold.LeaseClient) -> None:
    claim = client.once_per("report", every=WEEK, ttl=10)
    assert claim.kind == "run" and claim.run is not None
    assert claim.run.record["outcome"] == "running"
    # Another replica in the same slot while it runs: busy.
    assert client.once_per("report", every=WEEK, ttl=10).kind == "busy"
    final = claim.run.finish(0)
    assert final["outcome"] == "done" and final["exit_code"] == 0
    again = client.once_per("report", every=WEEK, ttl=10)
    assert again.kind == "done" and again.record["fence"] == claim.run.fence
    with pytest.raises(leasehold.BadInput):
        claim.run.finish(0)


def test_failed_slots_are_retried_up_to_max_attempts(client: leasehold.LeaseClient) -> None:
    for attempt in (1, 2):
        claim = client.once_per("flaky", every=WEEK, ttl=10, max_attempts=2)
        assert claim.kind == "run" and claim.run.record["attempts"] == attempt
        assert claim.run.finish(1)["outcome"] == "failed"
    last = client.once_per("flaky", every=WEEK, ttl=10, max_attempts=2)
    assert last.kind == "exhausted" and last.record["attempts"] == 2


def test_a_deposed_leader_is_told(client: leasehold.LeaseClient) -> None:
    leadership = client.election("deposed", ttl=5).campaign("me")
    client.force_release("deposed")
    assert leadership.lost.wait(7), "the leader learns it at its next renewal"
    with pytest.raises(leasehold.LeaseholdError):
        leadership.proclaim("still me")


def test_observe_reports_nobody_a_leader_and_a_new_term_and_times_out(client: leasehold.LeaseClient) -> None:
    """The core's observer: the first change is the current state (nobody), then each term; a quiet
    election ends the iteration at its timeout, and `changed` says it timed out."""
    election = client.election("watched", ttl=5)
    observation = election.observe(every=0.05)
    assert observation.changed(1) == (True, None), "first: the current state, nobody"
    assert observation.changed(0.3) == (False, None), "nothing changed"
    first = election.campaign("one")
    changed, leader = observation.changed(2)
    assert changed and leader is not None and leader["term"] == first.term and leader["value"] == "one"
    first.proclaim("uno")
    assert observation.changed(2)[1]["value"] == "uno", "a new value is a change"
    first.resign()
    second = election.campaign("two")
    # Nobody may be seen in between (the observer asks every 50 ms); the new term is seen.
    terms = []
    for leader in observation:
        terms.append(None if leader is None else leader["term"])
        if terms[-1] == second.term:
            break
    assert terms[-1] == second.term > first.term
    second.resign()
    began = time.monotonic()
    assert [None if l is None else l["term"] for l in election.observe(every=0.05, timeout=0.5)] == [None]
    assert 0.4 < time.monotonic() - began < 3


def test_observe_async_for(client: leasehold.LeaseClient) -> None:
    import asyncio

    election = client.election("watched-async", ttl=5)

    async def main() -> list:
        seen = []

        async def follow() -> None:
            async for leader in election.observe(every=0.05, timeout=5):
                seen.append(None if leader is None else leader["value"])
                if seen[-1] == "async-leader":
                    return

        task = asyncio.create_task(follow())
        await asyncio.sleep(0.2)
        leadership = await asyncio.to_thread(election.campaign, "async-leader")
        await asyncio.wait_for(task, 5)
        leadership.resign()
        return seen

    seen = asyncio.run(main())
    assert seen[0] is None and seen[-1] == "async-leader", seen
