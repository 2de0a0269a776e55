"""Leases kept in PostgreSQL and MariaDB (after `leasehold migrate`) and in etcd (a private
single-member etcd started for the test) from Python: the same API as on Redis, with the store's own
fences."""

from __future__ import annotations

import os
import pathlib
import shutil
import socket
import subprocess
import time
from typing import Iterator

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def etcd_url(tmp_path: pathlib.Path) -> Iterator[str]:
    """A private etcd (`etcd` from etcd-server, or ETCD_BIN), killed at the end; its etcd:// URL."""
    binary = os.environ.get("ETCD_BIN") or shutil.which("etcd")
    if binary is None:
        pytest.fail("etcd is not installed: apt-get install -y etcd-server (./dev setup does) or set ETCD_BIN")
    client, peer = free_port(), free_port()
    log = open(tmp_path / "etcd.log", "w")
    proc = subprocess.Popen(
        [binary, "--name", "m0", "--data-dir", str(tmp_path / "data"),
         "--listen-client-urls", f"http://127.0.0.1:{client}", "--advertise-client-urls", f"http://127.0.0.1:{client}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"m0=http://127.0.0.1:{peer}"],
        stdout=subprocess.DEVNULL, stderr=log,
    )
    try:
        url = f"etcd://127.0.0.1:{client}"
        end = time.monotonic() + 20
        while True:
            try:
                leasehold.LeaseClient.connect(url, connect_timeout=1).status("probe")
                break
            except leasehold.LeaseholdError:
                if time.monotonic() > end or proc.poll() is not None:
                    raise
                time.sleep(0.2)
        yield url
    finally:
        proc.kill()
        proc.wait()
        log.close()


def test_a_lease_on_etcd(etcd_url: str, prefix: str) -> None:
    exercise(etcd_url, prefix)
    assert leasehold.LeaseClient.connect(etcd_url).store_kind == "etcd"
