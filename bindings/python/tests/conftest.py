"""Real servers for the Python tests: the Redis, PostgreSQL and MariaDB that `./dev setup` starts
(URLs from LEASEHOLD_TEST_REDIS_URL, LEASEHOLD_TEST_DATABASE_URL, LEASEHOLD_TEST_MYSQL_URL), each
test under a key prefix or database of its own; the `leasehold` command from LEASEHOLD_BIN or the
workspace's debug build; and a TCP proxy that can black-hole a connection."""

from __future__ import annotations

import os
import pathlib
import select
import socket
import subprocess
import sys
import threading
import time
import uuid
from typing import Iterator, List

import pytest

import leasehold

REDIS_URL = os.environ.get("LEASEHOLD_TEST_REDIS_URL", "redis://127.0.0.1:6379")
PG_URL = os.environ.get(
    "LEASEHOLD_TEST_DATABASE_URL", "postgres://postgres:postgres@127.0.0.1:5432/test"
)
MYSQL_URL = os.environ.get(
    "LEASEHOLD_TEST_MYSQL_URL", "mysql://leasehold:leasehold@127.0.0.1:3306/test"
)
REPO = pathlib.Path(__file__).resolve().parents[3]
LEASEHOLD_BIN = os.environ.get("LEASEHOLD_BIN", str(REPO / "target" / "debug" / "leasehold"))


@pytest.fixture
def prefix() -> str:
    """A key prefix of this test's own, so tests never see each other's names."""
    return f"pytest-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def client(prefix: str) -> leasehold.LeaseClient:
    return leasehold.LeaseClient.connect(REDIS_URL, key_prefix=prefix)


@pytest.fixture
def leasehold_bin() -> str:
    if not os.access(LEASEHOLD_BIN, os.X_OK):
        pytest.fail(f"the leasehold command is not built at {LEASEHOLD_BIN}; run cargo build -p leasehold-cli or set LEASEHOLD_BIN")
    return LEASEHOLD_BIN


def pg_dsn(url: str, database: str) -> str:
    head, _, _ = url.rpartition("/")
    return f"{head}/{database}"


@pytest.fixture
def pg_database(leasehold_bin: str) -> Iterator[str]:
    """A PostgreSQL database of this test's own, migrated by `leasehold migrate` (so it has the
    leasehold_fence function); its URL. Dropped at the end."""
    import psycopg

    name = f"lh_py_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    url = pg_dsn(PG_URL, name)
    try:
        out = subprocess.run(
            [leasehold_bin, "migrate", "--store", url], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        yield url
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def mysql_database(leasehold_bin: str) -> Iterator[str]:
    name = f"lh_py_{uuid.uuid4().hex[:12]}"
    creds = ["-h", "127.0.0.1", "-P", "3306", "-uleasehold", "-pleasehold"]
    subprocess.run(["mariadb", *creds, "-e", f"CREATE DATABASE {name}"], check=True)
    url = pg_dsn(MYSQL_URL, name)
    try:
        out = subprocess.run([leasehold_bin, "migrate", "--store", url], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        yield name
    finally:
        subprocess.run(["mariadb", *creds, "-e", f"DROP DATABASE IF EXISTS {name}"], check=True)



class BlackHoleProxy:
    """A TCP proxy on 127.0.0.1 in front of `target`; `black_hole()` keeps every connection open
    but stops passing bytes either way (a network partition as a client sees one)."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.holed = threading.Event()
        self.closing = threading.Event()
        self.sockets: List[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closing.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.sockets += [conn, upstream]
            threading.Thread(target=self._pump, args=(conn, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        while not self.closing.is_set():
            try:
                ready, _, _ = select.select([a, b], [], [], 0.1)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    if not self.holed.is_set():
                        peers[s].sendall(data)
            except OSError:
                return

    def black_hole(self) -> None:
        self.holed.set()

    def close(self) -> None:
        self.closing.set()
        for s in self.sockets:
            try:
                s.close()
            except OSError:
                pass


@pytest.fixture
def redis_proxy() -> Iterator[BlackHoleProxy]:
    host, _, port = REDIS_URL.removeprefix("redis://").partition(":")
    proxy = BlackHoleProxy(host, int(port or 6379))
    yield proxy
    proxy.close()


def python_child(code: str, *args: str) -> "subprocess.Popen[str]":
    """A Python process running `code` with this interpreter (the one leasehold is installed in)."""
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_until(predicate, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {what}")
