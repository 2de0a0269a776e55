"""The SQL fence function from outside Rust: `psql` and the `mariadb` client in a shell job run by
`leasehold run` (the fence in LEASEHOLD_FENCE), and SQLAlchemy. A superseded writer is refused with
SQLSTATE LHF01 naming both fences, and nothing of its transaction is left; the same job without the
call overwrites the newer value (the unsafe variant)."""

from __future__ import annotations

import os
import subprocess

import psycopg
import pytest

from conftest import MYSQL_URL, REDIS_URL, pg_dsn


def run_job(leasehold_bin: str, prefix: str, script: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [leasehold_bin, "run", "--store", REDIS_URL, "--key-prefix", prefix, "--ttl", "10s",
         "--wait", "10s", "ledger-job", "--", "sh", "-c", script],
        capture_output=True, text=True, timeout=60, env={**os.environ, **env},
    )


PSQL_JOB = """psql "$DB" -v ON_ERROR_STOP=1 -q <<SQL
BEGIN;
SELECT leasehold_fence('ledger:acct', ${FENCE:-$LEASEHOLD_FENCE});
UPDATE ledger SET balance = $VALUE WHERE account = 'acct';
COMMIT;
SQL
"""


def test_psql_under_leasehold_run(pg_database: str, leasehold_bin: str, prefix: str) -> None:
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute("CREATE TABLE ledger (account TEXT PRIMARY KEY, balance BIGINT NOT NULL)")
        conn.execute("INSERT INTO ledger VALUES ('acct', 0)")
    first = run_job(leasehold_bin, prefix, 'echo "$LEASEHOLD_FENCE" >&2; ' + PSQL_JOB,
                    {"DB": pg_database, "VALUE": "10"})
    assert first.returncode == 0, first.stderr
    old_fence = int(first.stderr.split()[0])
    second = run_job(leasehold_bin, prefix, PSQL_JOB, {"DB": pg_database, "VALUE": "20"})
    assert second.returncode == 0, second.stderr
    # A writer still holding the first job's fence (paused, or a retry of it) is refused.
    stale = run_job(leasehold_bin, prefix, PSQL_JOB,
                    {"DB": pg_database, "VALUE": "666", "FENCE": str(old_fence)})
    assert stale.returncode != 0
    assert "stale fence" in stale.stderr and f"presented {old_fence}" in stale.stderr, stale.stderr
    with psycopg.connect(pg_database) as conn:
        assert conn.execute("SELECT balance FROM ledger").fetchone()[0] == 20
    # Unsafe variant: the same stale job without the call lands its write.
    unfenced = PSQL_JOB.replace("SELECT leasehold_fence('ledger:acct', ${FENCE:-$LEASEHOLD_FENCE});\n", "")
    late = run_job(leasehold_bin, prefix, unfenced, {"DB": pg_database, "VALUE": "666"})
    assert late.returncode == 0, late.stderr
    with psycopg.connect(pg_database) as conn:
        assert conn.execute("SELECT balance FROM ledger").fetchone()[0] == 666


def test_sqlalchemy(pg_database: str) -> None:
    sqlalchemy = pytest.importorskip("sqlalchemy")
    from sqlalchemy import text

    engine = sqlalchemy.create_engine(pg_database.replace("postgres://", "postgresql+psycopg://", 1))
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE ledger (account TEXT PRIMARY KEY, balance BIGINT NOT NULL)"))
        conn.execute(text("INSERT INTO ledger VALUES ('acct', 0)"))
    fence_call = text("SELECT leasehold_fence(:resource, :fence)")
    with engine.begin() as conn:
        assert conn.execute(fence_call, {"resource": "ledger:acct", "fence": 9}).scalar() == 9
        conn.execute(text("UPDATE ledger SET balance = 9"))
    with pytest.raises(sqlalchemy.exc.DBAPIError) as refused:
        with engine.begin() as conn:
            conn.execute(text("UPDATE ledger SET balance = 3"))
            conn.execute(fence_call, {"resource": "ledger:acct", "fence": 3})
    assert refused.value.orig.sqlstate == "LHF01"
    assert "presented 3" in str(refused.value.orig) and "accepted 9" in str(refused.value.orig)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT balance FROM ledger")).scalar() == 9
    engine.dispose()


MARIADB_JOB = """mariadb -h 127.0.0.1 -P 3306 -uleasehold -pleasehold "$DB" -e "
BEGIN;
CALL leasehold_fence('ledger:acct', ${FENCE:-$LEASEHOLD_FENCE});
UPDATE ledger SET balance = $VALUE WHERE account = 'acct';
COMMIT;"
"""


def test_the_mariadb_client_under_leasehold_run(mysql_database: str, leasehold_bin: str, prefix: str) -> None:
    creds = ["-h", "127.0.0.1", "-P", "3306", "-uleasehold", "-pleasehold", mysql_database]
    subprocess.run(["mariadb", *creds, "-e",
                    "CREATE TABLE ledger (account VARCHAR(64) PRIMARY KEY, balance BIGINT NOT NULL);"
                    "INSERT INTO ledger VALUES ('acct', 0)"], check=True)
    first = run_job(leasehold_bin, prefix, 'echo "$LEASEHOLD_FENCE" >&2; ' + MARIADB_JOB,
                    {"DB": mysql_database, "VALUE": "10"})
    assert first.returncode == 0, first.stderr
    old_fence = int(first.stderr.split()[0])
    assert run_job(leasehold_bin, prefix, MARIADB_JOB, {"DB": mysql_database, "VALUE": "20"}).returncode == 0
    stale = run_job(leasehold_bin, prefix, MARIADB_JOB,
                    {"DB": mysql_database, "VALUE": "666", "FENCE": str(old_fence)})
    assert stale.returncode != 0
    assert "(LHF01)" in stale.stderr and f"presented {old_fence}" in stale.stderr, stale.stderr
    balance = subprocess.run(["mariadb", *creds, "-N", "-e", "SELECT balance FROM ledger"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert balance == "20"
