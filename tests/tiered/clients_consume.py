"""Read a topic from offset 0 to given end offsets with one client library and print per-partition digests.

usage: python -m tests.tiered.clients_consume <confluent|kafka-python|aiokafka> <bootstrap> <topic> <ends-json>

`ends-json` is {"<partition>": <end offset>}. Every partition is read with `assign` from offset 0 (no group) until
its end offset; records must arrive in offset order with no gap. Output (stdout, one JSON line):
{"<partition>": [record count, bytes, hex digest]} where the digest is `partition_digest` below -- the producer side
computes the same from its delivery reports, so equal digests mean every key and value came back byte for byte.
Memory stays small: one running hash per partition.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import struct
import sys
import time

TIMEOUT_S = 150.0


def record_digest(key: bytes | None, value: bytes | None) -> bytes:
    h = hashlib.sha256()
    for part in (key, value):
        if part is None:
            h.update(b"\xff\xff\xff\xff")
        else:
            h.update(struct.pack(">i", len(part)))
            h.update(part)
    return h.digest()


class PartitionDigest:
    """sha256 over (offset: int64, record_digest) of every record, in offset order."""

    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.next_offset = 0
        self.count = 0
        self.bytes = 0

    def add(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        if offset != self.next_offset:
            raise SystemExit(f"offset {offset} where {self.next_offset} was expected (gap or duplicate)")
        self.h.update(struct.pack(">q", offset) + record_digest(key, value))
        self.next_offset = offset + 1
        self.count += 1
        self.bytes += len(key or b"") + len(value or b"")

    def result(self) -> list[int | str]:
        return [self.count, self.bytes, self.h.hexdigest()]


def _done(d: dict[int, PartitionDigest], ends: dict[int, int]) -> bool:
    return all(d[p].next_offset >= e for p, e in ends.items())


def _check_time(start: float, d: dict[int, PartitionDigest], ends: dict[int, int]) -> None:
    if time.monotonic() - start > TIMEOUT_S:
        raise SystemExit(f"timed out after {TIMEOUT_S}s at {[d[p].next_offset for p in sorted(d)]} of {ends}")


def confluent(bootstrap: str, topic: str, ends: dict[int, int]) -> dict[int, PartitionDigest]:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tiered-200mb-confluent",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            "log_level": 3,
            "fetch.max.bytes": 8 << 20,
            "max.partition.fetch.bytes": 1 << 20,
        }
    )
    d = {p: PartitionDigest() for p in ends}
    c.assign([TopicPartition(topic, p, 0) for p in ends])
    start = time.monotonic()
    try:
        while not _done(d, ends):
            _check_time(start, d, ends)
            for m in c.consume(num_messages=10000, timeout=0.5):
                if m.error() is not None:
                    raise KafkaException(m.error())
                part, offset = m.partition(), m.offset()
                assert part is not None and offset is not None  # set on every consumed message
                d[part].add(offset, m.key(), m.value())
    finally:
        c.close()
    return d


def kafka_python(bootstrap: str, topic: str, ends: dict[int, int]) -> dict[int, PartitionDigest]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
        fetch_max_bytes=8 << 20,
        max_partition_fetch_bytes=1 << 20,
        client_id="tiered-200mb-kafka-python",
    )
    d = {p: PartitionDigest() for p in ends}
    tps = [TopicPartition(topic, p) for p in ends]
    c.assign(tps)
    for tp in tps:
        c.seek(tp, 0)
    start = time.monotonic()
    try:
        while not _done(d, ends):
            _check_time(start, d, ends)
            for tp, msgs in c.poll(timeout_ms=500, max_records=10000).items():
                for m in msgs:
                    d[tp.partition].add(m.offset, m.key, m.value)
    finally:
        c.close()
    return d


def aiokafka_(bootstrap: str, topic: str, ends: dict[int, int]) -> dict[int, PartitionDigest]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> dict[int, PartitionDigest]:
        c = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="none",
            fetch_max_bytes=8 << 20,
            max_partition_fetch_bytes=1 << 20,
            client_id="tiered-200mb-aiokafka",
        )
        await c.start()
        d = {p: PartitionDigest() for p in ends}
        try:
            tps = [TopicPartition(topic, p) for p in ends]
            c.assign(tps)
            for tp in tps:
                c.seek(tp, 0)
            start = time.monotonic()
            while not _done(d, ends):
                _check_time(start, d, ends)
                batch = await c.getmany(timeout_ms=500, max_records=10000)
                for tp, msgs in batch.items():
                    for m in msgs:
                        d[tp.partition].add(m.offset, m.key, m.value)
        finally:
            await c.stop()
        return d

    return asyncio.run(run())


CLIENTS = {"confluent": confluent, "kafka-python": kafka_python, "aiokafka": aiokafka_}


def main() -> None:
    client, bootstrap, topic, ends_json = sys.argv[1:5]
    ends = {int(p): int(e) for p, e in json.loads(ends_json).items()}
    started = time.monotonic()
    d = CLIENTS[client](bootstrap, topic, ends)
    out: dict[str, list[int | str] | float] = {str(p): d[p].result() for p in sorted(d)}
    out["seconds"] = round(time.monotonic() - started, 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
