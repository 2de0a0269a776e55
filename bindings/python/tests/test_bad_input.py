"""Bad input from Python: a clear exception naming what was wrong, nothing sent, nothing held."""

from __future__ import annotations

import pytest

import leasehold


@pytest.mark.parametrize(
    "url, says",
    [
        ("bogus://127.0.0.1", "scheme"),
        ("redis://127.0.0.1:notaport", "url"),
        ("", "url"),
    ],
)
def test_a_bad_url_names_the_url(url: str, says: str) -> None:
    with pytest.raises(leasehold.BadInput) as e:
        leasehold.LeaseClient.connect(url)
    assert says in str(e.value).lower()


def test_an_unreachable_store_is_unreachable() -> None:
    with pytest.raises(leasehold.Unreachable) as e:
        leasehold.LeaseClient.connect("redis://127.0.0.1:1", connect_timeout=2)
    assert "reach" in str(e.value)


@pytest.mark.parametrize(
    "name, kw, says",
    [
        ("job", dict(ttl=0), "ttl"),
        ("job", dict(ttl=-1), "ttl"),
        ("job", dict(ttl=float("nan")), "ttl"),
        ("a\nb", dict(ttl=5), "name"),
        ("", dict(ttl=5), "name"),
        ("job", dict(ttl=5, wait=-1), "wait"),
        ("job", dict(ttl=5, permits=0), "permits"),
        ("job", dict(ttl=5, max_hold=-3), "max_hold"),
    ],
)
def test_bad_lease_arguments_name_what_was_wrong(client: leasehold.LeaseClient, name: str, kw: dict, says: str) -> None:
    with pytest.raises(leasehold.BadInput) as e:
        with client.lease(name, **kw):
            pytest.fail("a lease with bad arguments was granted")
    assert says in str(e.value).lower(), str(e.value)
    assert client.list("*") == [], "nothing was written"


def test_the_exception_classes_share_one_base() -> None:
    for cls in (leasehold.Busy, leasehold.Lost, leasehold.Unreachable, leasehold.Unauthorized,
                leasehold.Misconfigured, leasehold.BadInput, leasehold.StaleFence):
        assert issubclass(cls, leasehold.LeaseholdError)
        assert issubclass(cls, Exception)


def test_a_bad_election_value_and_slot_period(client: leasehold.LeaseClient) -> None:
    with pytest.raises(leasehold.BadInput):
        client.election("e", ttl=5).campaign("x" * 10_000)
    with pytest.raises(leasehold.BadInput):
        client.once_per("job", every=0)
    assert client.list("*") == []
