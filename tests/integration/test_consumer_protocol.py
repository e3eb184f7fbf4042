"""KIP-848 consumer groups with real clients: confluent-kafka (librdkafka 2.16) with `group.protocol=consumer`, each
member its own process (tests/support/kip848_member.py), against one broker shared by the module.

* a group of 3 on a 12-partition topic gets 4 partitions each; a 4th member joins and the 3 others keep consuming
  the partitions they retain with no pause (the largest gap in each one's record stream is measured while records
  flow steadily); a member killed with SIGKILL loses its partitions to the others once its session expires; nothing
  is skipped and no record is delivered again after its offset was committed;
* a regex subscription picks up a topic created later, and a partition added to a topic reaches a member;
* a classic group (kafka-python) becomes a consumer group when it is empty and a consumer-protocol member joins, and
  a classic group again (aiokafka) after that one leaves, each continuing from the committed offsets;
* the coordinator restarts (kill -9 of the broker) under a running group: the members carry on at their epochs.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests.support import ck
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]
SESSION_MS = 6000
MODULE_BROKER_OVERRIDES = {
    "group.consumer.min.session.timeout.ms": 1000,
    "group.consumer.session.timeout.ms": SESSION_MS,
    "group.consumer.min.heartbeat.interval.ms": 100,
    "group.consumer.heartbeat.interval.ms": 500,
    "offsets.topic.num.partitions": 3,
}


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


@pytest.fixture
def members(tmp_path):
    started: list[Member] = []

    def spawn(client: str, bs: str, topic: str, group: str) -> Member:
        m = Member(client, bs, topic, group, f"{group}-{len(started)}", tmp_path)
        started.append(m)
        return m

    yield spawn
    for m in started:
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


def _balanced(ms: list[Member], partitions: int) -> bool:
    got = [m.assignment() for m in ms]
    union: set[int] = set().union(*got)
    sizes = sorted(len(a) for a in got)
    return len(union) == partitions and sum(sizes) == partitions and sizes[-1] - sizes[0] <= 1


def _max_gap(records: list[tuple[int, int, int]], partitions: set[int], start: int, end: int) -> int:
    """The longest time without a record of `partitions` in [start, end] (ms)."""
    times = sorted(t for p, _, t in records if p in partitions and start <= t <= end)
    edges = [start, *times, end]
    return max(b - a for a, b in itertools.pairwise(edges))


def test_group_balances_grows_without_pause_and_survives_kill9(module_broker, members):
    bs = module_broker.bootstrap
    topic, group, n = "kip848-main", "kip848-main", 12
    ck.create_topic(bs, topic, n)
    producer = SteadyProducer(bs, topic, n)
    try:
        ms = [members("consumer", bs, topic, group) for _ in range(3)]
        wait_until(lambda: _balanced(ms, n), 30, message=lambda: str([m.assignment() for m in ms]))
        assert sorted(len(m.assignment()) for m in ms) == [4, 4, 4]

        # a 4th member: the others give up one partition each and never stop on the ones they keep
        before = [m.assignment() for m in ms]
        joined = int(time.time() * 1000)
        ms.append(members("consumer", bs, topic, group))
        wait_until(lambda: _balanced(ms, n), 30, message=lambda: str([m.assignment() for m in ms]))
        time.sleep(1.0)  # a second of steady consumption after the rebalance, inside the measured window
        settled = int(time.time() * 1000)
        for m, had in zip(ms[:3], before):
            kept = had & m.assignment()
            assert len(kept) == 3, (m.name, had, m.assignment())
            gap = _max_gap(m.snapshot()[0], kept, joined, settled)
            assert gap < SESSION_MS / 3, f"{m.name} paused {gap} ms on the partitions it kept"

        # SIGKILL: no leave; the partitions move once the broker expires the session
        victim = ms.pop(0)
        lost = victim.assignment()
        killed = time.monotonic()
        victim.kill()
        wait_until(lambda: _balanced(ms, n), SESSION_MS / 1000 + 20, message=lambda: str([m.assignment() for m in ms]))
        assert time.monotonic() - killed >= SESSION_MS / 1000 * 0.8  # not before the session expired
        assert lost <= set().union(*(m.assignment() for m in ms))
    finally:
        producer.stop()
    ends = {p: ck.watermarks(bs, topic, p)[1] for p in range(n)}

    def missing() -> list[tuple[int, int]]:
        got = {(p, o) for m in [victim, *ms] for p, o, _ in m.snapshot()[0]}
        return [(p, o) for p in range(n) for o in range(ends[p]) if (p, o) not in got]

    wait_until(lambda: not missing(), 30, message=lambda: f"not consumed: {missing()[:20]} of {ends}")  # none skipped
    # nothing committed comes again: a record delivered again after some member committed past it
    everyone = [victim, *ms]
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
    assert not late, f"redelivered after their commit: {late[:5]}"


def test_regex_subscription_new_topic_and_added_partition(module_broker):
    """librdkafka sends a `^`-prefixed subscription as SubscribedTopicRegex; the broker resolves it against the
    topics and bumps the group epoch when a matching topic appears or grows."""
    from confluent_kafka.admin import NewPartitions

    bs = module_broker.bootstrap
    ck.create_topic(bs, "kip848rx-a", 1)
    c = ck.consumer(bs, **{"group.id": "kip848-rx", "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["^kip848rx-.*"])
        seen: set[tuple[str, int, bytes]] = set()

        def got(*wanted: tuple[str, int, bytes]) -> bool:
            for m in c.consume(100, 0.2):
                if m.error() is None:
                    seen.add((m.topic(), m.partition(), m.value()))
            return set(wanted) <= seen

        p = ck.producer(bs)
        p.produce("kip848rx-a", b"a0", partition=0)
        p.flush(10)
        wait_until(lambda: got(("kip848rx-a", 0, b"a0")), 30, message=lambda: str(seen))
        ck.create_topic(bs, "kip848rx-b", 2)
        p.produce("kip848rx-b", b"b1", partition=1)
        p.flush(10)
        wait_until(lambda: got(("kip848rx-b", 1, b"b1")), 30, message=lambda: str(seen))
        a = ck.admin(bs)  # (the handle must outlive its future)
        a.create_partitions([NewPartitions("kip848rx-a", 2)])["kip848rx-a"].result(30)
        wait_until(lambda: ck.topic_partitions(bs, "kip848rx-a") == 2, 10)
        p = ck.producer(bs)  # (one that knows the new partition)
        p.produce("kip848rx-a", b"a1", partition=1)
        p.flush(10)
        wait_until(lambda: got(("kip848rx-a", 1, b"a1")), 30, message=lambda: str(seen))
        assert {(tp.topic, tp.partition) for tp in c.assignment()} == {
            ("kip848rx-a", 0),
            ("kip848rx-a", 1),
            ("kip848rx-b", 0),
            ("kip848rx-b", 1),
        }
    finally:
        c.close()
