"""Size- and time-based retention with small segments: whole closed segments go, the log start offset follows.

Brokers run with ``log.segment.bytes=16384``, ``log.retention.check.interval.ms=200`` and
``log.segment.delete.delay.ms=0``. The partition directory is ``<log.dirs>/<topic>-<partition>/`` with Kafka's
``<20-digit base offset>.log`` segment files.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kafka.errors import OffsetOutOfRangeError

from tests.support import ck
from tests.support.kafka_wire import OFFSET_OUT_OF_RANGE, WireClient
from tests.support.records import Rec
from tests.support.waiting import wait_until

SEGMENT = 16 * 1024
COMMON = {"log.segment.bytes": SEGMENT, "log.retention.check.interval.ms": 200, "log.segment.delete.delay.ms": 0}

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

_SEGMENT_FILE = re.compile(r"^(\d{20})\.log$")


def segments(part_dir: Path) -> dict[int, int]:
    """base offset -> size of the live segment files (``.log``; ``.deleted``/``.cleaned`` excluded)."""
    out = {}
    for f in part_dir.iterdir():
        m = _SEGMENT_FILE.match(f.name)
        if m:
            out[int(m.group(1))] = f.stat().st_size
    return out


def list_offset(bs: str, topic: str, ts: int) -> int:
    with WireClient.connect(bs) as c:
        resp = c.list_offsets(topic, 0, ts, version=c.pick_version(2, 5))
        part = resp.topics[0].partitions[0]
        assert part.error_code == 0, f"ListOffsets({ts}) error {part.error_code}"
        return part.offset


def produce_small_batches(bs: str, topic: str, n: int, value_size: int, ts_base: int | None = None) -> list[Rec]:
    records = [
        Rec(
            partition=0,
            key=b"k%06d" % i,
            value=(b"%06d" % i) * (value_size // 6),
            timestamp=None if ts_base is None else ts_base + i,
        )
        for i in range(n)
    ]
    # small batches so segments roll at a fine granularity
    small: dict[str, Any] = {"batch.num.messages": 10, "linger.ms": 0}
    ck.produce_all(bs, topic, records, **small)
    return records


def check_reads_from_zero(bs: str, topic: str, start: int, leo: int) -> None:
    """Fetch at 0 -> OFFSET_OUT_OF_RANGE (raw), and each client's auto.offset.reset behaviour."""
    with WireClient.connect(bs) as w:
        part = w.fetch(topic, 0, 0, version=w.pick_version(1, 11)).responses[0].partitions[0]
        assert part.error_code == OFFSET_OUT_OF_RANGE
        assert part.log_start_offset in (-1, start)  # Fetch v5+ reports the log start offset

    # librdkafka, auto.offset.reset=earliest: silently restarts at the log start offset
    earliest: dict[str, Any] = {"auto.offset.reset": "earliest"}
    got = ck.read_partition(bs, topic, 0, 0, 5, **earliest)
    assert got[0].offset == start

    # librdkafka, auto.offset.reset=error: the consumer reports the out-of-range condition
    c = ck.consumer(bs, **{"auto.offset.reset": "error"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])

        def reports_error():
            for m in c.consume(num_messages=10, timeout=0.5):
                if m.error() is not None:
                    return m.error()
                raise AssertionError(f"read offset {m.offset()} below the log start offset {start}")
            return None

        err = wait_until(reports_error, timeout=20, message="no out-of-range error from librdkafka")
        assert err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE), err
    finally:
        c.close()

    # kafka-python: earliest resets to the log start, none raises OffsetOutOfRangeError
    kc = KafkaConsumer(bootstrap_servers=bs, group_id=None, enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        tp = KpTopicPartition(topic, 0)
        kc.assign([tp])
        kc.seek(tp, 0)
        first = wait_until(lambda: kc.poll(timeout_ms=500, max_records=1).get(tp), timeout=20)
        assert first[0].offset == start
    finally:
        kc.close()
    kc = KafkaConsumer(bootstrap_servers=bs, group_id=None, enable_auto_commit=False, auto_offset_reset="none")
    try:
        tp = KpTopicPartition(topic, 0)
        kc.assign([tp])
        kc.seek(tp, 0)
        deadline = time.monotonic() + 20
        with pytest.raises(OffsetOutOfRangeError):
            while time.monotonic() < deadline:
                recs = kc.poll(timeout_ms=500, max_records=1).get(tp)
                assert not recs, f"read offset {recs[0].offset} below the log start offset {start}"
    finally:
        kc.close()
    assert leo == list_offset(bs, topic, -1)


def test_size_retention_deletes_oldest_closed_segments(broker_factory):
    retention = 4 * SEGMENT
    broker = broker_factory(**COMMON, **{"log.retention.bytes": retention})
    bs, topic = broker.bootstrap, "by-size"
    ck.create_topic(bs, topic, 1)
    records = produce_small_batches(bs, topic, 3000, 120)  # ~400 KB: ~25 segments
    leo = len(records)
    assert list_offset(bs, topic, -1) == leo
    part_dir = broker.partition_dir(topic, 0)
    assert part_dir.is_dir(), f"no partition directory {part_dir}"

    wait_until(
        lambda: list_offset(bs, topic, -2) > 0, timeout=30, message="log start offset (ListOffsets -2) never moved"
    )

    # Kafka's rule (UnifiedLog.deleteRetentionSizeBreachedSegments): with diff = size - retention.bytes, delete
    # the oldest segments while diff - segment.size >= 0. So once it settles, the remaining size R satisfies
    # R >= retention.bytes and R - size(oldest remaining) < retention.bytes.
    def settled():
        segs = segments(part_dir)
        total = sum(segs.values())
        if total - segs[min(segs)] < retention and min(segs) == list_offset(bs, topic, -2):
            return segs
        return None

    segs = wait_until(
        settled,
        timeout=30,
        message=lambda: (
            f"segments on disk {sorted(segments(part_dir).items())}, log start {list_offset(bs, topic, -2)}"
        ),
    )
    start = list_offset(bs, topic, -2)
    assert start > 0 and start == min(segs), "log start offset must be the base offset of the oldest segment"
    assert sum(segs.values()) >= retention, f"deleted more than retention.bytes requires: {sorted(segs.items())}"
    assert len(segs) >= 2 and max(segs) < leo
    got = ck.read_partition(bs, topic, 0, start, leo - start)
    assert [r.offset for r in got] == list(range(start, leo))
    assert [r.value for r in got] == [r.value for r in records[start:]]
    check_reads_from_zero(bs, topic, start, leo)

    # the new log start offset survives a restart
    broker.restart()
    assert list_offset(broker.bootstrap, topic, -2) == start
    assert list_offset(broker.bootstrap, topic, -1) == leo


def test_time_retention_deletes_expired_segments(broker_factory):
    broker = broker_factory(**COMMON, **{"log.retention.ms": 60_000})
    bs, topic = broker.bootstrap, "by-time"
    ck.create_topic(bs, topic, 1)
    old = int(time.time() * 1000) - 3_600_000  # an hour ago: every record is past retention.ms on arrival
    records = produce_small_batches(bs, topic, 1500, 120, ts_base=old)
    leo = len(records)
    part_dir = broker.partition_dir(topic, 0)

    # every segment is expired; Kafka also deletes the expired active segment (after rolling a new, empty one),
    # so the end state is one empty segment at the LEO and the log start offset there
    wait_until(
        lambda: segments(part_dir) == {leo: 0},
        timeout=30,
        message=lambda: f"segments on disk: {sorted(segments(part_dir).items())}",
    )
    start = wait_until(lambda: list_offset(bs, topic, -2) or None, timeout=30)
    assert start == leo, f"log start {start}, segments {segments(part_dir)}"
    assert list_offset(bs, topic, -1) == leo

    # fresh records (current timestamps) are kept and readable from the log start offset
    ck.produce_all(bs, topic, [Rec(partition=0, key=b"new", value=b"v%d" % i) for i in range(20)])
    got = ck.read_partition(bs, topic, 0, start, leo + 20 - start)
    assert [r.offset for r in got] == list(range(start, leo + 20))
    assert [r.key for r in got[-20:]] == [b"new"] * 20
    check_reads_from_zero(bs, topic, start, leo + 20)


def test_time_retention_rolls_and_deletes_an_expired_active_segment(broker_factory):
    """Kafka's rule, stricter than "closed segments go": when every record of the partition is past
    retention.ms (and below the high watermark), the active segment is deleted too -- Kafka rolls a new empty
    segment first (UnifiedLog.deleteSegments: "we must always have at least one segment, so if we are going to
    delete all the segments, create a new one first") -- so the log start offset reaches the log end offset."""
    broker = broker_factory(**COMMON, **{"log.retention.ms": 60_000})
    bs, topic = broker.bootstrap, "by-time-all"
    ck.create_topic(bs, topic, 1)
    records = produce_small_batches(bs, topic, 300, 120, ts_base=int(time.time() * 1000) - 3_600_000)
    leo = len(records)
    part_dir = broker.partition_dir(topic, 0)
    wait_until(
        lambda: list_offset(bs, topic, -2) == leo,
        timeout=15,
        message=lambda: (
            f"log start {list_offset(bs, topic, -2)} (LEO {leo}), segments on disk {sorted(segments(part_dir).items())}"
        ),
    )
    wait_until(
        lambda: segments(part_dir) == {leo: 0},
        timeout=30,
        message=lambda: f"segments on disk {sorted(segments(part_dir).items())}, expected one empty at {leo}",
    )
    assert list_offset(bs, topic, -1) == leo
    # the next record lands at the old log end offset
    [(p, off)] = ck.produce_all(bs, topic, [Rec(partition=0, key=b"k", value=b"after")])
    assert (p, off) == (0, leo)
