"""The type stubs: mypy --strict accepts the package and a program using the documented API, and
refuses a program that misuses it (so the stubs are read, not ignored)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "python" / "leasehold"

GOOD = """
import asyncio
import leasehold

client = leasehold.LeaseClient.connect("redis://127.0.0.1:6379")
with client.lease("job", ttl=5, wait=1) as lease:
    fence: int = lease.fence
    lost: bool = lease.lost.wait(0.1)
    deadline: float = lease.stop_by

async def main() -> None:
    async with client.lease("job", ttl=5) as lease:
        reason = await lease.lost
    async for leader in client.election("svc").observe(timeout=1):
        term: int = leader["term"] if leader else 0

for leader in client.election("svc").observe(every=0.1, timeout=1):
    pass
changed, now = client.election("svc").observe().changed(0.5)

def rollup(run: leasehold.ScheduledRun) -> int:
    f: int = run.fence
    return 0 if run.wait_stop(0.1) else 1

with client.scheduler(holder="web-1") as sched:
    started, stopped = sched.set_jobs([leasehold.Job("rollup", rollup, cron="0 * * * *", zone="UTC")])
    record = sched.trigger("rollup")
history = client.history("rollup", limit=5)
client.pause("rollup"); client.resume("rollup", by="ops"); who = client.paused("rollup")
"""

BAD = """
import leasehold
client = leasehold.LeaseClient.connect("redis://127.0.0.1:6379")
with client.lease("job", ttl="five") as lease:
    name: int = lease.name
leasehold.Job("rollup", lambda run: "done", every="10m")
"""


def mypy(tmp_path: pathlib.Path, program: str) -> subprocess.CompletedProcess:
    pytest.importorskip("mypy")
    path = tmp_path / "program.py"
    path.write_text(program)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(PACKAGE), str(path)],
        capture_output=True, text=True, timeout=300,
    )


def test_mypy_accepts_the_package_and_its_documented_use(tmp_path: pathlib.Path) -> None:
    out = mypy(tmp_path, GOOD)
    assert out.returncode == 0, out.stdout


def test_mypy_refuses_a_misuse(tmp_path: pathlib.Path) -> None:
    out = mypy(tmp_path, BAD)
    assert out.returncode != 0
    assert 'ttl' in out.stdout or '"str"' in out.stdout, out.stdout
    assert "name" in out.stdout or "int" in out.stdout
    assert "every" in out.stdout and "Job" in out.stdout, out.stdout
