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
"""

BAD = """
import leasehold
client = leasehold.LeaseClient.connect("redis://127.0.0.1:6379")
with client.lease("job", ttl="five") as lease:
    name: int = lease.name
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
