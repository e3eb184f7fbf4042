"""Helpers of the KIP-848 tests (tests/integration/test_consumer_protocol.py, tests/cluster/
test_consumer_group_failover.py): member processes (tests/support/kip848_member.py) and what they saw, a steady
producer, and the checks on a group's deliveries."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

from tests.support import ck
from tests.support.kafka_wire import WireClient
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
DESCRIBE_CG = 69
FIND_COORDINATOR = 10


class Member:
    """A member process; a reader thread keeps its R (record), C (commit) and A (assignment) lines."""

    def __init__(self, client: str, bs: str, topic: str, group: str, name: str, log_dir: Path) -> None:
        self.name = name
        self.err_path = log_dir / f"{name}.stderr"
        self._err = open(self.err_path, "wb")  # noqa: SIM115 - closed when the process ends
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.kip848_member", client, bs, topic, group, name],
            stdout=subprocess.PIPE,
            stderr=self._err,
            stdin=subprocess.DEVNULL,
            cwd=str(REPO),
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        self._lock = threading.Lock()
        self.records: list[tuple[int, int, int]] = []  # (partition, offset, ms)
        self.commits: list[tuple[int, int, int]] = []  # (partition, next offset, ms)
        self.assignments: list[tuple[int, frozenset[int]]] = []  # (ms, partitions)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            kind, *rest = raw.decode(errors="replace").split()
            with self._lock:
                if kind == "R":
                    self.records.append((int(rest[0]), int(rest[1]), int(rest[2])))
                elif kind == "C":
                    self.commits.append((int(rest[0]), int(rest[1]), int(rest[2])))
                elif kind == "A":
                    parts = frozenset(int(p) for p in rest[1].split(",")) if len(rest) > 1 else frozenset()
                    self.assignments.append((int(rest[0]), parts))

    def assignment(self) -> frozenset[int]:
        with self._lock:
            return self.assignments[-1][1] if self.assignments else frozenset()

    def snapshot(self) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
        with self._lock:
            return list(self.records), list(self.commits)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        self._thread.join(timeout=5)
        self._err.close()

    def stderr_tail(self) -> str:
        return self.err_path.read_text(errors="replace")[-2000:]


class MemberPool:
    """The member processes a test started; `close` kills what is left."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[Member] = []

    def spawn(self, client: str, bs: str, topic: str, group: str) -> Member:
        m = Member(client, bs, topic, group, f"{group}-{len(self.started)}", self.log_dir)
        self.started.append(m)
        return m

    def close(self) -> None:
        for m in self.started:
            m.kill()
            m.stop()


class SteadyProducer:
    """One record per partition every `interval` seconds until stopped: a gap in a member's stream is then the
    member's, not the producer's."""

    def __init__(self, bs: str, topic: str, partitions: int, interval: float = 0.05) -> None:
        self.p = ck.producer(bs, **{"linger.ms": 0})
        self.topic = topic
        self.partitions = partitions
        self.interval = interval
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        n = 0
        while not self.stopped.is_set():
            for p in range(self.partitions):
                self.p.produce(self.topic, str(n).encode(), partition=p)
            self.p.poll(0)
            n += 1
            self.stopped.wait(self.interval)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=10)
        assert self.p.flush(30) == 0


def balanced(ms: list[Member], partitions: int) -> bool:
    got = [m.assignment() for m in ms]
    union: set[int] = set().union(*got)
    sizes = sorted(len(a) for a in got)
    return len(union) == partitions and sum(sizes) == partitions and sizes[-1] - sizes[0] <= 1


def max_gap(records: list[tuple[int, int, int]], partitions: set[int], start: int, end: int) -> int:
    """The longest time without a record of `partitions` in [start, end] (ms)."""
    times = sorted(t for p, _, t in records if p in partitions and start <= t <= end)
    edges = [start, *times, end]
    return max(b - a for a, b in itertools.pairwise(edges))


def redelivered_after_commit(everyone: list[Member]) -> list[tuple[tuple[int, int], list[int], int]]:
    """Records delivered again after some member had committed past them: ((partition, offset), delivery times,
    commit time)."""
    commits = [c for m in everyone for c in m.snapshot()[1]]
    deliveries: dict[tuple[int, int], list[int]] = defaultdict(list)
    for m in everyone:
        for p, o, t in m.snapshot()[0]:
            deliveries[(p, o)].append(t)
    late = []
    for (p, o), ts in deliveries.items():
        if len(ts) > 1:
            committed = min((t for cp, nxt, t in commits if cp == p and nxt > o), default=None)
            if committed is not None and max(ts) > committed:
                late.append(((p, o), ts, committed))
    return late


def describe(bs: str, group: str) -> Any:
    """ConsumerGroupDescribe of `group` from its coordinator (found through the first broker of `bs` that answers)."""
    for address in bs.split(","):
        try:
            with WireClient.connect(address, timeout=5) as w:
                found = w.call(FIND_COORDINATOR, 0, key=group)
        except OSError:
            continue
        if found.error_code == 0:
            with WireClient.connect(f"{found.host}:{found.port}", timeout=5) as w:
                return w.call(DESCRIBE_CG, 0, group_ids=[group], include_authorized_operations=False).groups[0]
    raise AssertionError(f"no coordinator found for {group} through {bs}")


def check_deliveries(everyone: list[Member], bs: str, topic: str, n: int) -> None:
    """Every record produced is consumed, and none again after a commit past it."""
    wait_until(
        lambda: not undelivered(everyone, bs, topic, n),
        30,
        message=lambda: str(undelivered(everyone, bs, topic, n)[:9]),
    )
    assert not redelivered_after_commit(everyone)


def undelivered(ms: list[Member], bs: str, topic: str, n: int) -> list[tuple[int, int]]:
    got = {(p, o) for m in ms for p, o, _ in m.snapshot()[0]}
    ends = {p: ck.watermarks(bs, topic, p)[1] for p in range(n)}
    return [(p, o) for p in range(n) for o in range(ends[p]) if (p, o) not in got]
