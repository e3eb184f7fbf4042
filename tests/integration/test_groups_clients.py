"""Consumer groups with every client: confluent-kafka, kafka-python, aiokafka, kafkajs and kcat (-G).

Each group member is its own OS process (this file run as a script for the Python clients, tests/js/group_member.js
for kafkajs, kcat -G), so "killing a member" is a real SIGKILL with no LeaveGroup. Every member prints one line per
record ("R <partition> <offset> <value>") and commits what it consumed. Per client, on a 6-partition topic:

1. three members join: the broker's DescribeGroups shows a Stable group, 2 partitions each, all 6 covered;
   records produced now are delivered exactly once, each to the member that owns its partition, and the group's
   committed offsets reach the log end offsets (commits honoured);
2. one member is SIGKILLed: within its session timeout (+ one rebalance) the two survivors own 3 partitions each,
   and new records are delivered exactly once, nothing already committed is delivered again;
3. a new member joins: rebalance back to 2/2/2, exactly-once delivery of new records; then the broker restarts under
   the running group: the members rejoin, new records are delivered exactly once, nothing committed comes again;
4. all members close (LeaveGroup): the group is Empty; the broker restarts; the group is still Empty with the same
   committed offsets, and a fresh member consumes exactly the records produced after the restart.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING or __name__ != "__main__":  # a member process (run as a script) needs none of these
    import pytest

    from strata.cli.groups import GroupAdmin
    from tests.support import ck
    from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
JS_DIR = REPO / "tests" / "js"
KCAT = "/usr/bin/kcat"
PARTITIONS = 6
# 10 s, not Kafka's 45 s default (the SIGKILL step waits for it) nor less: on a busy machine a Python client's
# heartbeats can lag several seconds, and a session lost that way is a legitimate rebalance the exactly-once checks
# below would count as a broker fault.
SESSION_MS = 10000
# The broker-restart step: librdkafka backs off reconnecting up to 10 s and kafka-python up to 30 s by default, longer
# than the session, so the restarted broker would expire every member before it reconnects.
RECONNECT_BACKOFF_MAX_MS = 1000
CLIENTS = ["confluent", "kafka-python", "aiokafka", "kafkajs", "kcat"]


# =============================================================================================================
# member processes (this file run as a script)
def _emit(p: int, o: int, v: bytes | None) -> None:
    sys.stdout.write(f"R {p} {o} {(v or b'').decode()}\n")
    sys.stdout.flush()


def _member_confluent(bs: str, topic: str, group: str, client_id: str, stop: threading.Event) -> None:
    from confluent_kafka import Consumer, KafkaException

    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": group,
            "client.id": client_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": 500,
            "reconnect.backoff.max.ms": RECONNECT_BACKOFF_MAX_MS,
            "log_level": 3,
        }
    )
    c.subscribe([topic])
    while not stop.is_set():
        msgs = [m for m in c.consume(500, 0.2) if m.error() is None]
        for m in msgs:
            p, o = m.partition(), m.offset()
            assert p is not None and o is not None  # set on every consumed message
            _emit(p, o, m.value())
        if msgs:
            try:
                c.commit(asynchronous=False)
            except KafkaException:
                pass  # a rebalance started: the records are redelivered to their next owner
    c.close()


def _member_kafka_python(bs: str, topic: str, group: str, client_id: str, stop: threading.Event) -> None:
    from kafka.errors import CommitFailedError, KafkaError

    from tests.support.kafka_python_group import subscribed_consumer

    c = subscribed_consumer(
        topic,
        bootstrap_servers=bs,
        group_id=group,
        client_id=client_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=500,
        request_timeout_ms=30000,
        reconnect_backoff_max_ms=RECONNECT_BACKOFF_MAX_MS,
    )
    while not stop.is_set():
        batches = c.poll(timeout_ms=200)
        for tp, recs in batches.items():
            for r in recs:
                _emit(tp.partition, r.offset, r.value)
        if batches:
            try:
                c.commit()
            except (CommitFailedError, KafkaError):
                pass
    c.close()


def _member_aiokafka(bs: str, topic: str, group: str, client_id: str, stop: threading.Event) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import CommitFailedError, KafkaError

    async def run() -> None:
        c = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bs,
            group_id=group,
            client_id=client_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=500,
        )
        await c.start()
        try:
            while not stop.is_set():
                batches = await c.getmany(timeout_ms=200)
                for tp, recs in batches.items():
                    for r in recs:
                        _emit(tp.partition, r.offset, r.value)
                if batches:
                    try:
                        await c.commit()
                    except (CommitFailedError, KafkaError):
                        pass
        finally:
            await c.stop()

    asyncio.run(run())


def _member_main(argv: list[str]) -> int:
    client, bs, topic, group, client_id = argv
    # the Python clients' warnings (more with STRATA_MEMBER_LOG=DEBUG) go to the member's stderr file, and
    # `kill -USR1` adds every thread's stack there: what a member that stopped heartbeating was doing
    logging.basicConfig(
        level=os.environ.get("STRATA_MEMBER_LOG", "WARNING"),
        stream=sys.stderr,
        format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s",
    )
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    {"confluent": _member_confluent, "kafka-python": _member_kafka_python, "aiokafka": _member_aiokafka}[client](
        bs, topic, group, client_id, stop
    )
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(_member_main(sys.argv[1:]))


# =============================================================================================================
# test side
pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]


class Member:
    """One member process; a reader thread collects its "R p o v" lines."""

    def __init__(self, name: str, client: str, argv: list[str], log_dir: Path, cwd: Path = REPO) -> None:
        self.name = name
        self.client = client
        self.err_path = log_dir / f"{name}.stderr"
        self._err = open(self.err_path, "wb")  # noqa: SIM115 - closed when the process ends
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=self._err, stdin=subprocess.DEVNULL, cwd=str(cwd), env=env
        )
        self._lock = threading.Lock()
        self._records: list[tuple[int, int, str]] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            if line.startswith("R "):
                _, p, o, v = (line.split(" ", 3) + [""])[:4]
                with self._lock:
                    self._records.append((int(p), int(o), v))

    def records(self) -> list[tuple[int, int, str]]:
        with self._lock:
            return list(self._records)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._closed()

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM: the member closes its consumer (LeaveGroup) and exits."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as e:
            self.kill()
            raise AssertionError(f"{self.name} did not exit within {timeout}s of SIGTERM:\n{self.stderr_tail()}") from e
        self._closed()
        return rc

    def _closed(self) -> None:
        self._thread.join(timeout=5)
        self._err.close()

    def stderr_tail(self, n: int = 3000) -> str:
        try:
            return self.err_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""


def member_argv(client: str, bs: str, topic: str, group: str, client_id: str) -> tuple[list[str], Path]:
    if client in ("confluent", "kafka-python", "aiokafka"):
        return [sys.executable, __file__, client, bs, topic, group, client_id], REPO
    if client == "kafkajs":
        assert (JS_DIR / "node_modules" / "kafkajs").is_dir(), "run `make node-deps` (npm install in tests/js)"
        return ["node", str(JS_DIR / "group_member.js"), bs, topic, group, client_id, str(SESSION_MS)], JS_DIR
    if client == "kcat":
        # -E: a long-running kcat -G survives a broker restart (by default it exits once all brokers are down)
        return [
            KCAT,
            "-b",
            bs,
            "-G",
            group,
            topic,
            "-E",
            "-u",
            "-q",
            "-f",
            "R %p %o %s\\n",
            "-X",
            f"client.id={client_id}",
            "-X",
            f"session.timeout.ms={SESSION_MS}",
            "-X",
            "heartbeat.interval.ms=500",
            "-X",
            f"reconnect.backoff.max.ms={RECONNECT_BACKOFF_MAX_MS}",
            "-X",
            "auto.commit.interval.ms=100",
            "-X",
            "auto.offset.reset=earliest",
            "-X",
            "log_level=3",
        ], REPO
    raise ValueError(client)


@pytest.fixture
def spawn(tmp_path):
    started: list[Member] = []

    def _spawn(client: str, bs: str, topic: str, group: str, name: str) -> Member:
        argv, cwd = member_argv(client, bs, topic, group, name)
        m = Member(name, client, argv, tmp_path, cwd)
        started.append(m)
        return m

    yield _spawn
    for m in started:
        if m.alive():
            m.kill()


def produce(bs: str, topic: str, tag: str, n: int) -> dict[tuple[int, int], str]:
    """n records round-robin over the partitions; returns {(partition, offset): value}."""
    p = ck.producer(bs)
    out: dict[tuple[int, int], str] = {}
    errors = []

    def cb(err, msg):
        if err is not None:
            errors.append(err)
        else:
            out[(msg.partition(), msg.offset())] = msg.value().decode()

    for i in range(n):
        p.produce(topic, value=f"{tag}-{i}".encode(), partition=i % PARTITIONS, on_delivery=cb)
    assert p.flush(30) == 0 and not errors, errors
    assert len(out) == n
    return out


def describe(bs: str, group: str):
    with GroupAdmin(bs, timeout=10) as a:
        return a.describe_group(group)


def committed(bs: str, group: str, topic: str) -> dict[int, int]:
    with GroupAdmin(bs, timeout=10) as a:
        offs = a.fetch_offsets(group, {topic: list(range(PARTITIONS))})
    return {p: o for (t, p), o in offs.items()}


def end_offsets(bs: str, topic: str) -> dict[int, int]:
    with GroupAdmin(bs, timeout=10) as a:
        return a.list_offsets(topic, list(range(PARTITIONS)), -1)


def wait_balanced(bs: str, group: str, topic: str, members: list[Member], timeout: float) -> dict[str, set[int]]:
    """Stable, one entry per live member (by client id), every partition owned once, sizes differ by <= 1."""
    names = sorted(m.name for m in members)

    def check():
        d = describe(bs, group)
        if d.state != "Stable" or len(d.members) != len(members):
            return None
        owned = {m.client_id: {p for t, p in m.partitions() if t == topic} for m in d.members}
        if sorted(owned) != names:
            return None
        allp = sorted(p for ps in owned.values() for p in ps)
        if allp != list(range(PARTITIONS)):
            return None
        return owned

    def why() -> str:
        try:
            d = describe(bs, group)
            return f"state={d.state} members={[(m.client_id, m.partitions()) for m in d.members]}"
        except Exception as e:  # noqa: BLE001
            return repr(e)

    owned = wait_until(check, timeout=timeout, interval=0.1, message=why)
    sizes = sorted(len(ps) for ps in owned.values())
    assert sizes[-1] - sizes[0] <= 1, f"unbalanced assignment {owned}"
    return owned


def consumed_since(members: list[Member], marks: dict[str, int]) -> dict[str, list[tuple[int, int, str]]]:
    return {m.name: m.records()[marks.get(m.name, 0) :] for m in members}


def wait_delivered(
    members: list[Member], marks: dict[str, int], expected: dict[tuple[int, int], str], timeout: float = 30.0
) -> dict[str, list[tuple[int, int, str]]]:
    def got() -> set[tuple[int, int]]:
        return {(p, o) for recs in consumed_since(members, marks).values() for p, o, _ in recs}

    wait_until(
        lambda: set(expected) <= got(),
        timeout=timeout,
        message=lambda: (
            f"missing {sorted(set(expected) - got())[:10]} of {len(expected)}; stderr: "
            + " | ".join(m.stderr_tail(500) for m in members)
        ),
    )
    return consumed_since(members, marks)


def current_owners(bs: str, group: str, topic: str) -> dict[str, set[int]]:
    """The assignment of the group's stable generation (DescribeGroups gives assignments only when Stable)."""

    def stable():
        d = describe(bs, group)
        if d.state != "Stable":
            return None
        return {m.client_id: {p for t, p in m.partitions() if t == topic} for m in d.members}

    return wait_until(stable, timeout=SESSION_MS / 1000 + 20, interval=0.1, message="group stable again")


def check_exactly_once(
    new: dict[str, list[tuple[int, int, str]]],
    expected: dict[tuple[int, int], str],
    owned: dict[str, set[int]],
    after: dict[str, set[int]] | None = None,
) -> None:
    """Every record delivered once, to its partition's owner. `after` is the assignment once the records arrived:
    if a member lost its session meanwhile (a Python client's heartbeat starved on a loaded machine: CI saw
    kafka-python's leader stop heartbeating right after the sync) its partitions legitimately moved, and a moved
    partition's records may come from either owner, and twice across the handover (Kafka's at-least-once)."""
    after = owned if after is None else after
    moved = {p for name, ps in owned.items() for p in ps if p not in after.get(name, set())}
    seen: dict[tuple[int, int], str] = {}
    for name, recs in new.items():
        allowed = owned.get(name, set()) | after.get(name, set())
        for p, o, _v in recs:
            assert (p, o) not in seen or p in moved, f"({p}, {o}) delivered twice ({seen[(p, o)]} and {name})"
            seen[(p, o)] = name
            assert p in allowed, f"{name} consumed partition {p} it does not own ({sorted(allowed)})"
    assert {k: expected.get(k) for k in seen} == {k: expected[k] for k in seen}
    assert set(seen) == set(expected), f"unexpected records {sorted(set(seen) - set(expected))[:10]}"


def wait_committed(bs: str, group: str, topic: str, timeout: float = 20.0) -> None:
    ends = end_offsets(bs, topic)
    wait_until(
        lambda: committed(bs, group, topic) == ends,
        timeout=timeout,
        message=lambda: f"committed {committed(bs, group, topic)} != log end {ends}",
    )


@pytest.mark.parametrize("client", CLIENTS)
def test_group_of_three(module_broker, spawn, client):
    bs = module_broker.bootstrap
    topic, group = f"grp-{client}", f"group-{client}"
    ck.create_topic(bs, topic, PARTITIONS)
    members = [spawn(client, bs, topic, group, f"{client}-m{i}") for i in range(3)]

    # 1. three members, balanced; exactly-once delivery to the owners; commits reach the log end
    owned = wait_balanced(bs, group, topic, members, timeout=40)
    marks = {m.name: len(m.records()) for m in members}
    batch = produce(bs, topic, "b1", 120)
    check_exactly_once(wait_delivered(members, marks, batch), batch, owned, current_owners(bs, group, topic))
    wait_committed(bs, group, topic)

    # 2. SIGKILL one member (no LeaveGroup): its partitions move to the survivors within the session timeout
    victim, survivors = members[2], members[:2]
    victim.kill()
    t0 = time.monotonic()
    owned = wait_balanced(bs, group, topic, survivors, timeout=SESSION_MS / 1000 + 15)
    moved_after = time.monotonic() - t0
    assert sorted(len(v) for v in owned.values()) == [3, 3]
    assert moved_after < SESSION_MS / 1000 + 10, f"partitions moved only after {moved_after:.1f}s"
    marks = {m.name: len(m.records()) for m in survivors}
    batch = produce(bs, topic, "b2", 60)
    check_exactly_once(wait_delivered(survivors, marks, batch), batch, owned, current_owners(bs, group, topic))
    wait_committed(bs, group, topic)

    # 3. a new member joins: rebalance back to 2/2/2
    newcomer = spawn(client, bs, topic, group, f"{client}-m3")
    members = survivors + [newcomer]
    owned = wait_balanced(bs, group, topic, members, timeout=40)
    assert sorted(len(v) for v in owned.values()) == [2, 2, 2]
    marks = {m.name: len(m.records()) for m in members}
    batch = produce(bs, topic, "b3", 60)
    check_exactly_once(wait_delivered(members, marks, batch), batch, owned, current_owners(bs, group, topic))
    wait_committed(bs, group, topic)

    # 3b. the broker restarts (SIGTERM) under the running group: the members reconnect and rejoin; records produced
    # after it are delivered exactly once, and nothing committed before it is delivered again
    marks = {m.name: len(m.records()) for m in members}
    module_broker.restart()
    owned = wait_balanced(bs, group, topic, members, timeout=60)
    batch = produce(bs, topic, "b3r", 60)
    got = wait_delivered(members, marks, batch, timeout=60)
    check_exactly_once(got, batch, owned, current_owners(bs, group, topic))
    wait_committed(bs, group, topic)

    # 4. everyone leaves; broker restart; offsets and group survive; a new member resumes after the commits
    for m in members:
        assert m.stop() == 0, m.stderr_tail()
    wait_until(lambda: describe(bs, group).state == "Empty", timeout=SESSION_MS / 1000 + 10)
    before = committed(bs, group, topic)
    assert before == end_offsets(bs, topic)
    module_broker.restart()
    wait_until(lambda: describe(bs, group).state == "Empty", timeout=15)
    assert committed(bs, group, topic) == before
    batch = produce(bs, topic, "b4", 60)
    fresh = spawn(client, bs, topic, group, f"{client}-m4")
    owned = wait_balanced(bs, group, topic, [fresh], timeout=40)
    got = wait_delivered([fresh], {}, batch)
    # Partitions are read in offset order, so anything before the committed offsets would have come first.
    check_exactly_once(got, batch, owned, current_owners(bs, group, topic))
    wait_committed(bs, group, topic)
    assert fresh.stop() == 0, fresh.stderr_tail()
