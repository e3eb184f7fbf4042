"""Transactional data for the READ_COMMITTED tests, written with storage calls into a stopped broker's partition
directory (exact layouts, without a coordinator), and readers that stop at the readable end."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

from kafka import KafkaConsumer, TopicPartition

from strata.config import default_log_config
from strata.protocol.records import build_batch
from strata.protocol.txn_markers import build_end_txn_marker
from strata.storage.log import UnifiedLog
from strata.storage.log_manager import read_partition_metadata
from tests.support.waiting import wait_until


class TxnWriter:
    """Appends to a partition's log as a leader would: plain batches, transactional batches of producers the
    (future) coordinator verified, and the coordinator's commit/abort markers."""

    def __init__(self, partition_dir: Path) -> None:
        self.topic_id = read_partition_metadata(partition_dir) or uuid.UUID(int=0)
        self.log = UnifiedLog.open(partition_dir, self.topic_id, default_log_config(), needs_recovery=False)

    def plain(self, *values: bytes, timestamp: int | None = None) -> None:
        self.log.append_as_leader(build_batch(list(values), timestamp=timestamp), 0)

    def txn(self, pid: int, *values: bytes) -> None:
        batch = build_batch(list(values), producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True)
        self.log.append_as_leader(batch, 0, verified_producers={pid})

    def end(self, pid: int, commit: bool) -> None:
        marker = build_end_txn_marker(pid, 0, commit=commit, coordinator_epoch=0)
        self.log.append_as_leader(marker, 0, from_client=False)

    def close(self) -> None:
        self.log.close()


def write_partition(partition_dir: Path, build: Callable[[TxnWriter], None]) -> uuid.UUID:
    """Run `build` on the partition's log and close it cleanly (snapshot at the LEO); returns the topic id."""
    w = TxnWriter(partition_dir)
    try:
        build(w)
    finally:
        w.close()
    return w.topic_id


def read_kafka_python(bootstrap: str, topic: str, isolation: str, timeout: float = 30) -> tuple[list[bytes], int, int]:
    """(values read until the position reaches the end ListOffsets answers for `isolation`, that end, position)."""
    tp = TopicPartition(topic, 0)
    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
    )
    try:
        c.assign([tp])
        end = c.end_offsets([tp])[tp]
        values: list[bytes] = []

        def caught_up() -> bool:
            for recs in c.poll(timeout_ms=100).values():
                values.extend(r.value for r in recs)
            return c.position(tp) >= end

        wait_until(caught_up, timeout=timeout, message=lambda: f"{isolation}: {values}, position {c.position(tp)}")
        return values, end, c.position(tp)
    finally:
        c.close()


def read_confluent(
    bootstrap: str, topic: str, isolation: str, stop: int, timeout: float = 30, partition: int = 0
) -> list[bytes]:
    """Values a confluent-kafka consumer reads from offset 0 of `partition` until its position reaches `stop`."""
    import time

    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CkTp

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"txn-{isolation}-{time.monotonic_ns()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    try:
        c.assign([CkTp(topic, partition, 0)])
        values: list[bytes] = []

        def caught_up() -> bool:
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                values.append(m.value() or b"")
            return c.position([CkTp(topic, partition)])[0].offset >= stop

        wait_until(caught_up, timeout=timeout, message=lambda: f"{isolation}: {values}")
        return values
    finally:
        c.close()
