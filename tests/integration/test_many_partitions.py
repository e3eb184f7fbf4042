"""20,000 partitions on one broker (issue 22): created in four CreateTopics requests, one record produced to each
and read back by confluent-kafka, the broker's descriptors bounded by the open-file cache, then `kill -9`: the
restart recovers every log (with Kafka's progress line) and serves every partition's record again."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from tests.support.broker_proc import StrataBroker
from tests.support.kafka_wire import WireClient
from tests.support.many_partitions import create_topics, fetch_all, topics_for

PARTITIONS = 20_000
OPEN_FILES = 2048

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def produce_with_confluent(bootstrap: str, topics: list[tuple[str, int]]) -> None:
    from confluent_kafka import KafkaException, Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 100, "acks": 1, "log_level": 3})
    failed: list[object] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    for t, n in topics:
        for i in range(n):
            p.produce(t, f"{t}/{i}".encode(), partition=i, on_delivery=delivered)
        p.poll(0)
    if p.flush(120) or failed:
        raise KafkaException(f"undelivered: {failed[:3]}")


def consume_with_confluent(bootstrap: str, topics: list[tuple[str, int]], deadline_s: float = 180.0) -> set[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "many-partitions",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "log_level": 3,
        }
    )
    try:
        c.assign([TopicPartition(t, i, 0) for t, n in topics for i in range(n)])
        want = sum(n for _, n in topics)
        got: set[bytes] = set()
        deadline = time.monotonic() + deadline_s
        while len(got) < want and time.monotonic() < deadline:
            for m in c.consume(10_000, timeout=0.5):
                value = m.value()
                if m.error() is None and value is not None:
                    got.add(value)
        return got
    finally:
        c.close()


def test_twenty_thousand_partitions_survive_kill_9(tmp_path: Path) -> None:
    topics = topics_for(PARTITIONS)
    overrides = {"log.open.files.cache.size": OPEN_FILES, "num.recovery.threads.per.data.dir": 4}
    b = StrataBroker(tmp_path / "broker", overrides, name="strata-20k")
    b.start()
    try:
        create_topics(b.bootstrap, topics)
        produce_with_confluent(b.bootstrap, topics)
        got = consume_with_confluent(b.bootstrap, topics)
        assert len(got) == PARTITIONS, f"consumed {len(got)} of {PARTITIONS}"
        assert got == {f"{t}/{i}".encode() for t, n in topics for i in range(n)}
        assert b.pid is not None
        fds = len(os.listdir(f"/proc/{b.pid}/fd"))
        assert fds < OPEN_FILES + 200, fds  # not three per partition

        b.kill9()
        t0 = time.monotonic()
        b.start(timeout=300)
        with WireClient.connect(b.bootstrap, timeout=300) as w:
            served = fetch_all(w, topics)
        recovered_s = time.monotonic() - t0
        assert served == PARTITIONS
        logs = re.search(r"Recovering (\d+) logs: done in", b.output())  # Kafka's progress line, and its end
        assert logs is not None and int(logs.group(1)) >= PARTITIONS  # (plus the internal topics' partitions)
        print(f"every partition served {recovered_s:.1f} s after kill -9")
    finally:
        b.stop()
