"""Interop on one name: Python holders (threads of this process and another Python process) and
`leasehold run` (the Rust command, over the same library) exclude each other, queue together and
see one fence sequence. Each holder appends `fence start_ns end_ns who` to one file inside its
critical section; the test judges from those timestamps."""

from __future__ import annotations

import pathlib
import subprocess
import threading
import time

import leasehold
from conftest import REDIS_URL, python_child

ROUNDS = 3
HOLD_S = 0.05

CHILD = r"""
import sys, time, leasehold
url, prefix, path, rounds, hold = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
c = leasehold.LeaseClient.connect(url, key_prefix=prefix)
for _ in range(rounds):
    with c.lease("shared", ttl=10, wait=60) as lease:
        start = time.time_ns(); time.sleep(hold)
        with open(path, "a") as f:
            f.write(f"{lease.fence} {start} {time.time_ns()} python-process\n")
"""


def test_python_and_leasehold_run_exclude_each_other_and_share_one_fence_sequence(
    client: leasehold.LeaseClient, prefix: str, leasehold_bin: str, tmp_path: pathlib.Path
) -> None:
    log = tmp_path / "sections.log"
    log.touch()
    script = (
        f"start=$(date +%s%N); sleep {HOLD_S}; "
        f'echo "$LEASEHOLD_FENCE $start $(date +%s%N) leasehold-run" >> {log}'
    )
    runs = [
        subprocess.Popen(
            [leasehold_bin, "run", "--store", REDIS_URL, "--key-prefix", prefix, "--wait", "60s",
             "--ttl", "10s", "shared", "--", "sh", "-c", script]
        )
        for _ in range(2 * ROUNDS)
    ]
    child = python_child(CHILD, REDIS_URL, prefix, str(log), str(ROUNDS), str(HOLD_S))

    def thread_holder(who: str) -> None:
        for _ in range(ROUNDS):
            with client.lease("shared", ttl=10, wait=60) as lease:
                start = time.time_ns()
                time.sleep(HOLD_S)
                with open(log, "a") as f:
                    f.write(f"{lease.fence} {start} {time.time_ns()} {who}\n")

    threads = [threading.Thread(target=thread_holder, args=(f"python-thread-{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert child.wait(120) == 0, child.stderr.read()
    for r in runs:
        assert r.wait(120) == 0

    sections = sorted(
        (int(start), int(end), int(fence), who)
        for fence, start, end, who in (line.split() for line in log.read_text().splitlines())
    )
    kinds = {who.rsplit("-", 1)[0] if who.startswith("python-thread") else who for *_, who in sections}
    assert kinds == {"python-thread", "python-process", "leasehold-run"}, kinds
    assert len(sections) == 2 * ROUNDS + ROUNDS + 2 * ROUNDS
    for (s1, e1, f1, w1), (s2, e2, f2, w2) in zip(sections, sections[1:]):
        assert e1 <= s2, f"{w1} (fence {f1}) and {w2} (fence {f2}) overlapped"
        assert f1 < f2, f"the fence went back from {f1} ({w1}) to {f2} ({w2})"
