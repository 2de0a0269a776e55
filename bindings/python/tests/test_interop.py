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


FAIR_ROUNDS = 3
FAIR_HOLD_S = 0.15

FAIR_CHILD = r"""
import sys, time, leasehold
url, prefix, path, rounds, hold = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
c = leasehold.LeaseClient.connect(url, key_prefix=prefix)
for _ in range(rounds):
    queued = time.time_ns()
    with c.lease("fair", ttl=10, wait=60) as lease:
        start = time.time_ns(); time.sleep(hold)
        with open(path, "a") as f:
            f.write(f"{lease.fence} {queued} {start} {time.time_ns()} python-process\n")
"""


def test_python_rust_elect_and_run_queue_together_fairly(
    client: leasehold.LeaseClient, prefix: str, leasehold_bin: str, tmp_path: pathlib.Path
) -> None:
    """Five holders re-queue on one name, each FAIR_ROUNDS times: two Python threads (one client),
    a Python process, `leasehold run` and `leasehold elect` (the Rust library's election, its term
    the fence) in shell loops. The store's FIFO queue means a holder that queued waits for at most
    one section of each other client before its own (the check below; a lock whose releaser could
    barge back in would let the Python threads take turn after turn while the processes wait).
    Exclusion and one fence sequence hold across all five."""
    log = tmp_path / "fair.log"
    log.touch()
    section = (
        'start=$(date +%s%N); sleep {hold}; '
        'echo "{fence} $queued $start $(date +%s%N) {who}" >> {log}'
    )
    store = ["--store", REDIS_URL, "--key-prefix", prefix]
    loops = {
        "leasehold-run": f"{leasehold_bin} run {' '.join(store)} --wait 60s --ttl 10s fair",
        "leasehold-elect": f"{leasehold_bin} elect {' '.join(store)} --ttl 10s --value v fair",
    }
    shells = []
    for who, cli in loops.items():
        fence = "$LEASEHOLD_TERM" if who == "leasehold-elect" else "$LEASEHOLD_FENCE"
        body = section.format(hold=FAIR_HOLD_S, log=log, who=who, fence=fence)
        script = (
            f"for i in $(seq {FAIR_ROUNDS}); do queued=$(date +%s%N); export queued; "
            f"{cli} -- sh -c '{body}' || exit 1; done"
        )
        shells.append(subprocess.Popen(["sh", "-c", script]))
    child = python_child(FAIR_CHILD, REDIS_URL, prefix, str(log), str(FAIR_ROUNDS), str(FAIR_HOLD_S))

    def thread_holder(who: str) -> None:
        for _ in range(FAIR_ROUNDS):
            queued = time.time_ns()
            with client.lease("fair", ttl=10, wait=60) as lease:
                start = time.time_ns()
                time.sleep(FAIR_HOLD_S)
                with open(log, "a") as f:
                    f.write(f"{lease.fence} {queued} {start} {time.time_ns()} {who}\n")

    threads = [threading.Thread(target=thread_holder, args=(f"python-thread-{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert child.wait(120) == 0, child.stderr.read()
    for s in shells:
        assert s.wait(120) == 0

    rows = [line.split() for line in log.read_text().splitlines()]
    sections = sorted((int(start), int(end), int(queued), int(fence), who) for fence, queued, start, end, who in rows)
    holders = {who for *_, who in sections}
    assert len(holders) == 5 and len(sections) == 5 * FAIR_ROUNDS, sections
    for (s1, e1, _, f1, w1), (s2, e2, _, f2, w2) in zip(sections, sections[1:]):
        assert e1 <= s2, f"{w1} (fence {f1}) and {w2} (fence {f2}) overlapped"
        assert f1 < f2, f"the fence went back from {f1} ({w1}) to {f2} ({w2})"
    # Fair, as the store's queue promises it: clients are served in the order they queued, and a
    # client's own waiting tasks take their turns one after another behind one place in that queue
    # (the two Python threads share a client). So while a client with one waiter waits, every other
    # client goes at most once; while one of the two threads waits, at most twice (once for its
    # sibling's turn). The command-line holders get one more: their `queued` is taken before their
    # process starts and joins the queue.
    def client_of(who: str) -> str:
        return "python-threads" if who.startswith("python-thread") else who

    # A section that started within HANDOVER_NS of our `queued` was already handed over when we queued
    # (the release before it had popped its waiter: the two clocks read 0.2 ms apart in one CI run);
    # it is not one that went while we waited. A lock that lets a client barge back in still shows:
    # each of its extra turns is a whole FAIR_HOLD_S section later.
    handover_ns = 20_000_000
    first = sections[0][0]
    timeline = "\n".join(f"{(q - first) / 1e6:9.1f} {(s - first) / 1e6:9.1f} {w}" for s, _, q, _, w in sections)
    for start, _, queued, fence, who in sections:
        me = client_of(who)
        others = [
            client_of(w) for s, _, _, _, w in sections if queued + handover_ns < s < start and client_of(w) != me
        ]
        allowed = (2 if me == "python-threads" else 1) + (1 if me.startswith("leasehold") else 0)
        for other in set(others):
            assert others.count(other) <= allowed, (
                f"{other} went {others.count(other)} times while {who} (fence {fence}) waited; "
                f"queued/started ms:\n{timeline}"
            )
