"""The pause test: a Python holder SIGSTOPped past its TTL wakes up believing it holds the lease.
Its fenced psycopg write (`SELECT leasehold_fence(...)` in its transaction) is refused, naming both
fences; the same write without the fence goes through and overwrites the newer holder's value.
That is what a lease alone cannot prevent and what the fence at the resource does."""

from __future__ import annotations

import json
import os
import signal
import time

import psycopg

import leasehold
from conftest import REDIS_URL, python_child

HOLDER = r"""
import json, sys, time
import psycopg, leasehold
redis_url, prefix, db_url = sys.argv[1:4]
client = leasehold.LeaseClient.connect(redis_url, key_prefix=prefix)
lease = client.acquire("ledger", ttl=1.0)
print(json.dumps({"fence": lease.fence}), flush=True)
sys.stdin.readline()          # the parent pauses us here and says "go" after SIGCONT
result = {"fence": lease.fence, "lost_after_resume": None}
with psycopg.connect(db_url) as conn:
    try:
        with conn.transaction():
            conn.execute("SELECT leasehold_fence(%s, %s)", ("ledger:acct", lease.fence))
            conn.execute("UPDATE ledger SET balance = %s WHERE account = 'acct'", (-1,))
        result["fenced"] = "committed"
    except psycopg.Error as e:
        result["fenced"] = "refused"
        result["sqlstate"] = e.sqlstate
        result["message"] = str(e)
    with conn.transaction():
        conn.execute("UPDATE ledger SET balance = %s WHERE account = 'acct_unfenced'", (-1,))
    result["unfenced"] = "committed"
result["lost_after_resume"] = lease.lost.wait(3)
print(json.dumps(result), flush=True)
"""


def test_a_paused_python_holder_is_refused_by_the_fence(pg_database: str, prefix: str) -> None:
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute("CREATE TABLE ledger (account TEXT PRIMARY KEY, balance BIGINT NOT NULL)")
        conn.execute("INSERT INTO ledger VALUES ('acct', 0), ('acct_unfenced', 0)")
    child = python_child(HOLDER, REDIS_URL, prefix, pg_database)
    try:
        first = json.loads(child.stdout.readline())
        os.kill(child.pid, signal.SIGSTOP)
        # Past its TTL (1 s) while it cannot renew: the lease expires in Redis.
        client = leasehold.LeaseClient.connect(REDIS_URL, key_prefix=prefix)
        with client.lease("ledger", ttl=10, wait=10) as successor:
            assert successor.fence > first["fence"]
            with psycopg.connect(pg_database) as conn:
                with conn.transaction():
                    conn.execute("SELECT leasehold_fence(%s, %s)", ("ledger:acct", successor.fence))
                    conn.execute("UPDATE ledger SET balance = 100 WHERE account = 'acct'")
                with conn.transaction():
                    conn.execute("UPDATE ledger SET balance = 100 WHERE account = 'acct_unfenced'")
            os.kill(child.pid, signal.SIGCONT)
            child.stdin.write("go\n")
            child.stdin.flush()
            out, err = child.communicate(timeout=30)
        result = json.loads(out.strip().splitlines()[-1])
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
            child.wait()
    assert result["fenced"] == "refused", (result, err)
    assert result["sqlstate"] == "LHF01"
    assert f"presented {first['fence']}" in result["message"]
    assert f"accepted {successor.fence}" in result["message"]
    assert result["unfenced"] == "committed"
    assert result["lost_after_resume"], "the woken holder is told it lost the lease"
    with psycopg.connect(pg_database) as conn:
        balances = dict(conn.execute("SELECT account, balance FROM ledger").fetchall())
    assert balances["acct"] == 100, "the fence kept the newer holder's write"
    assert balances["acct_unfenced"] == -1, "without the fence the paused holder overwrote it"
