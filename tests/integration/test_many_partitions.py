"""20,000 partitions on one broker (issue 22): created in three CreateTopics requests, one record produced to each
by aiokafka's producer and read back by confluent-kafka's consumer, the broker's descriptors bounded by the open-file
cache, then `kill -9`: the restart recovers every log (with Kafka's progress line) and serves every partition's
record again.

The partitions' files live on tmpfs when there is room (`/dev/shm`): `kill -9` is a process crash, which the page
cache survives, so what is tested is the same, and the disk's cost (120,000 files made, fsynced, then removed) is
not what this test measures; the disk's durability is tests/integration/test_durability.py's. The broker is
killed at the end too: a clean shutdown of 20,000 logs only adds time, and tests/unit cover it."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker_proc import StrataBroker
from tests.support.kafka_wire import WireClient
from tests.support.many_partitions import create_topics, fetch_all, topics_for

PARTITIONS = 20_000
OPEN_FILES = 2048
TMPFS = Path("/dev/shm")
TMPFS_ROOM = 2 << 30  # the data takes ~250 MiB there; leave plenty for the rest of the machine

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@pytest.fixture
def log_dir(tmp_path: Path) -> Iterator[Path]:
    """A log dir on tmpfs when it has room, removed afterwards; else under tmp_path."""
    try:
        st = os.statvfs(TMPFS)
        roomy = st.f_bavail * st.f_frsize >= TMPFS_ROOM
    except OSError:
        roomy = False
    if not roomy:
        yield tmp_path / "data"
        return
    d = Path(tempfile.mkdtemp(prefix="strata-20k-", dir=TMPFS))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def produce_with_aiokafka(bootstrap: str, topics: list[tuple[str, int]]) -> None:
    """One record to every partition with aiokafka's producer, which (as Kafka's Java producer) puts the batches of
    many partitions in one Produce request; librdkafka sends one request per partition (its issue #1700): 20,000
    requests, twice the CPU on both sides."""
    import asyncio

    from aiokafka import AIOKafkaProducer

    async def produce() -> None:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=100, max_request_size=8 << 20)
        await p.start()
        try:
            sent = [await p.send(t, f"{t}/{i}".encode(), partition=i) for t, n in topics for i in range(n)]
            await asyncio.gather(*sent)  # raises the first failure
        finally:
            await p.stop()

    asyncio.run(produce())


def consume_with_confluent(bootstrap: str, topics: list[tuple[str, int]], deadline_s: float = 180.0) -> set[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "many-partitions",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
            "fetch.max.bytes": 64 << 20,  # every partition's record in the first response
            "receive.message.max.bytes": 80 << 20,
            "log_level": 3,
        }
    )
    try:
        c.assign([TopicPartition(t, i, 0) for t, n in topics for i in range(n)])
        want = sum(n for _, n in topics)
        got: set[bytes] = set()
        deadline = time.monotonic() + deadline_s
        while len(got) < want and time.monotonic() < deadline:
            for m in c.consume(want, timeout=0.5):
                value = m.value()
                if m.error() is None and value is not None:
                    got.add(value)
        return got
    finally:
        c.close()


def test_twenty_thousand_partitions_survive_kill_9(tmp_path: Path, log_dir: Path) -> None:
    topics = topics_for(PARTITIONS)
    overrides = {
        "log.dirs": log_dir,
        "log.open.files.cache.size": OPEN_FILES,
        "num.recovery.threads.per.data.dir": 4,
    }
    b = StrataBroker(tmp_path / "broker", overrides, name="strata-20k")
    b.start()
    phases: dict[str, float] = {}
    try:
        t = time.monotonic()
        create_topics(b.bootstrap, topics)
        phases["create"] = time.monotonic() - t
        t = time.monotonic()
        produce_with_aiokafka(b.bootstrap, topics)
        phases["produce"] = time.monotonic() - t
        t = time.monotonic()
        got = consume_with_confluent(b.bootstrap, topics)
        phases["consume"] = time.monotonic() - t
        assert got == {f"{t}/{i}".encode() for t, n in topics for i in range(n)}, f"consumed {len(got)}"
        assert b.pid is not None
        fds = len(os.listdir(f"/proc/{b.pid}/fd"))
        assert fds < OPEN_FILES + 200, fds  # not three per partition

        b.kill9()
        t = time.monotonic()
        b.start(timeout=300)
        with WireClient.connect(b.bootstrap, timeout=300) as w:
            served = fetch_all(w, topics)
        phases["restart and serve all"] = time.monotonic() - t
        assert served == PARTITIONS
        logs = re.search(r"Recovering (\d+) logs: done in", b.output())  # Kafka's progress line, and its end
        assert logs is not None and int(logs.group(1)) >= PARTITIONS  # (plus the internal topics' partitions)
        print(", ".join(f"{k} {v:.1f} s" for k, v in phases.items()))
    finally:
        b.kill9()  # the data goes with log_dir: a clean shutdown of 20,000 logs would only add time
