"""confluent-kafka (librdkafka) helpers shared by several test modules.

Group-less reads use ``Consumer.assign`` with explicit offsets. librdkafka refuses to build a consumer without
``group.id``, so one is set, but nothing subscribes or commits (no JoinGroup/OffsetCommit is needed).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .records import Rec, norm_headers

QUIET = {"log_level": 3}  # errors only; librdkafka logs go to stderr of the test process


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **QUIET})


def create_topic(
    bootstrap: str, topic: str, partitions: int, config: dict[str, str] | None = None, timeout: float = 30.0
) -> None:
    a = admin(bootstrap)  # must outlive the future: destroying the handle fails it with _DESTROY
    fs = a.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    fs[topic].result(timeout=timeout)
    del a


def topic_partitions(bootstrap: str, topic: str, timeout: float = 10.0) -> int:
    md = admin(bootstrap).list_topics(topic, timeout=timeout)
    t = md.topics[topic]
    if t.error is not None:
        raise KafkaException(t.error)
    return len(t.partitions)


def producer(bootstrap: str, **conf: Any) -> Producer:
    base = {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", **QUIET}
    base.update(conf)
    return Producer(base)


def produce_all(
    bootstrap: str, topic: str, records: Sequence[Rec], compression: str = "none", timeout: float = 60.0, **conf: Any
) -> list[tuple[int, int]]:
    """Produce every record to its partition; return the delivered (partition, offset) of each, in input order.

    Fails on any delivery error.
    """
    p = producer(bootstrap, **{"compression.type": compression, **conf})
    results: list[Any] = [None] * len(records)

    def cb(idx: int):
        def _cb(err: KafkaError | None, msg: Any) -> None:
            results[idx] = err if err is not None else (msg.partition(), msg.offset())

        return _cb

    for i, r in enumerate(records):
        kw: dict[str, Any] = {
            "topic": topic,
            "key": r.key,
            "value": r.value,
            "partition": r.partition,
            "headers": list(r.headers),
            "on_delivery": cb(i),
        }
        if r.timestamp is not None:
            kw["timestamp"] = r.timestamp
        while True:
            try:
                p.produce(**kw)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    remaining = p.flush(timeout)
    assert remaining == 0, f"{remaining} records not delivered within {timeout}s"
    errors = [(i, e) for i, e in enumerate(results) if not isinstance(e, tuple)]
    assert not errors, f"{len(errors)} delivery errors, first: {errors[:3]}"
    return results


def consumer(bootstrap: str, **conf: Any) -> Consumer:
    base = {
        "bootstrap.servers": bootstrap,
        "group.id": "strata-it-assign-only",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        **QUIET,
    }
    base.update(conf)
    return Consumer(base)


def msg_to_rec(m: Any) -> Rec:
    return Rec(
        partition=m.partition(),
        key=m.key(),
        value=m.value(),
        headers=norm_headers(m.headers()),
        timestamp=m.timestamp()[1],
        offset=m.offset(),
    )


def read_partition(
    bootstrap: str, topic: str, partition: int, start: int, count: int, timeout: float = 60.0, **conf: Any
) -> list[Rec]:
    """Read exactly ``count`` records of one partition from offset ``start`` (assign, no group)."""
    c = consumer(bootstrap, **conf)
    try:
        c.assign([TopicPartition(topic, partition, start)])
        out: list[Rec] = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            assert time.monotonic() < deadline, (
                f"{topic}[{partition}]: read {len(out)}/{count} records from {start} within {timeout}s"
            )
            for m in c.consume(num_messages=1000, timeout=0.5):
                if m.error() is not None:
                    raise KafkaException(m.error())
                out.append(msg_to_rec(m))
        return out
    finally:
        c.close()


def read_range(
    bootstrap: str, topic: str, partition: int, start: int, end: int, timeout: float = 45.0, **conf: Any
) -> list[Rec]:
    """The records of one partition at offsets [start, end) as a consumer sees them from ``start`` (assign, no
    group): it reads until it has passed ``end - 1``, so a start below the log start offset works with
    ``auto.offset.reset=earliest`` in ``conf``."""
    c = consumer(bootstrap, **conf)
    out: list[Rec] = []
    try:
        c.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + timeout
        while not out or out[-1].offset < end - 1:
            assert time.monotonic() < deadline, f"{topic}[{partition}]: no offset {end - 1} in {timeout}s: {out[-1:]}"
            for m in c.consume(num_messages=1000, timeout=0.5):
                if m.error() is not None:
                    raise KafkaException(m.error())
                out.append(msg_to_rec(m))
    finally:
        c.close()
    return [r for r in out if r.offset < end]


def read_partitions(
    bootstrap: str, topic: str, starts: dict[int, int], counts: dict[int, int], timeout: float = 60.0
) -> dict[int, list[Rec]]:
    return {p: read_partition(bootstrap, topic, p, starts[p], counts[p], timeout) for p in starts}


def watermarks(bootstrap: str, topic: str, partition: int, timeout: float = 10.0) -> tuple[int, int]:
    c = consumer(bootstrap)
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
    finally:
        c.close()


def offsets_for_times(bootstrap: str, topic: str, targets: dict[int, int], timeout: float = 10.0) -> dict[int, int]:
    c = consumer(bootstrap)
    try:
        res = c.offsets_for_times([TopicPartition(topic, p, ts) for p, ts in targets.items()], timeout=timeout)
        out = {}
        for tp in res:
            if tp.error is not None:
                raise KafkaException(tp.error)
            out[tp.partition] = tp.offset
        return out
    finally:
        c.close()
