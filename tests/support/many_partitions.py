"""Raw-wire helpers for thousands of partitions (tests/integration/test_many_partitions.py, bench/scale_bench.py):
topics of 1,000 partitions made in as few CreateTopics requests as Kafka allows, one record produced to each
partition, and one Fetch that reads every partition's first record."""

from __future__ import annotations

from typing import Any

TOPIC_PARTITIONS = 1000


def _wire(bootstrap: str, timeout: float = 120.0) -> Any:
    from .kafka_wire import WireClient

    return WireClient.connect(bootstrap, timeout=timeout)


def topics_for(size: int) -> list[tuple[str, int]]:
    n = max(1, size // TOPIC_PARTITIONS)
    per = min(size, TOPIC_PARTITIONS)
    return [(f"scale-{i:03d}", per) for i in range(n)]


MAX_RECORDS_PER_CREATE = 10_000  # Kafka's controller refuses more metadata records in one operation


def create_chunks(topics: list[tuple[str, int]]) -> list[list[tuple[str, int]]]:
    """Topics grouped into as few CreateTopics requests as the 10,000-record bound allows (a topic is one record
    plus one per partition): 20 topics of 1,000 partitions in three requests."""
    chunks: list[list[tuple[str, int]]] = [[]]
    records = 0
    for t, n in topics:
        if chunks[-1] and records + n + 1 > MAX_RECORDS_PER_CREATE:
            chunks.append([])
            records = 0
        chunks[-1].append((t, n))
        records += n + 1
    return chunks


def create_topics(bootstrap: str, topics: list[tuple[str, int]], timeout_s: float = 300.0) -> None:
    """All topics in as few CreateTopics requests as Kafka's controller accepts (`create_chunks`)."""
    with _wire(bootstrap, timeout_s) as c:
        for chunk in create_chunks(topics):
            resp = c.call(
                19,
                4,
                topics=[
                    {"name": t, "num_partitions": n, "replication_factor": 1, "assignments": [], "configs": []}
                    for t, n in chunk
                ],
                timeout_ms=int(timeout_s * 1000),
                validate_only=False,
            )
            bad = [(t.name, t.error_code) for t in resp.topics if t.error_code not in (0, 36)]
            if bad:
                raise RuntimeError(f"CreateTopics failed: {bad[:5]}")


def produce_one_each(bootstrap: str, topics: list[tuple[str, int]], timeout_s: float = 120.0) -> None:
    """One record to every partition: one acks=1 Produce request per topic, one batch per partition."""
    from .kafka_wire import build_batch

    batch = build_batch([(b"k", b"v" * 16, [])])
    with _wire(bootstrap, timeout_s) as c:
        for t, n in topics:
            resp = c.call(
                0,
                7,
                transactional_id=None,
                acks=1,
                timeout_ms=int(timeout_s * 1000),
                topic_data=[{"name": t, "partition_data": [{"index": p, "records": batch} for p in range(n)]}],
            )
            errs = [p.error_code for r in resp.responses for p in r.partition_responses if p.error_code]
            if errs:
                raise RuntimeError(f"Produce to {t}: {len(errs)} partitions failed (first error {errs[0]})")


def fetch_all(c: Any, topics: list[tuple[str, int]]) -> int:
    """Partitions whose record at offset 0 one Fetch (v11) for every partition returns."""
    resp = c.call(
        1,
        11,
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=256 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            {
                "topic": t,
                "partitions": [
                    {
                        "partition": p,
                        "current_leader_epoch": -1,
                        "fetch_offset": 0,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 4096,
                    }
                    for p in range(n)
                ],
            }
            for t, n in topics
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    return sum(1 for r in resp.responses for p in r.partitions if p.error_code == 0 and p.records)


__all__ = ["TOPIC_PARTITIONS", "create_chunks", "create_topics", "fetch_all", "produce_one_each", "topics_for"]
