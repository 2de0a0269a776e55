"""Leases kept in PostgreSQL and MariaDB (after `leasehold migrate`) from Python: the same API as on
Redis, with the store's own fences."""

from __future__ import annotations

import pytest

import leasehold
from conftest import MYSQL_URL, pg_dsn


def exercise(url: str, prefix: str) -> None:
    client = leasehold.LeaseClient.connect(url, key_prefix=prefix)
    with client.lease("job", ttl=5) as first:
        with pytest.raises(leasehold.Busy):
            client.acquire("job", ttl=5)
        assert client.status("job")["held"]
    with client.lease("job", ttl=5, wait=2) as second:
        assert second.fence > first.fence
    assert not client.status("job")["held"]
    with pytest.raises(leasehold.BadInput):
        client.acquire("bad\nname", ttl=5)


def test_a_lease_on_postgresql(pg_database: str, prefix: str) -> None:
    exercise(pg_database, prefix)
    assert leasehold.LeaseClient.connect(pg_database).store_kind == "postgres"


def test_a_lease_on_mariadb(mysql_database: str, prefix: str) -> None:
    exercise(pg_dsn(MYSQL_URL, mysql_database), prefix)
