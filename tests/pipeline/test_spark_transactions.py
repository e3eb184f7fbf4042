"""Transactions and Spark (issue 19): READ_COMMITTED reads of tiered transactional data in broker and direct mode
(aborted records never appear, including an aborted transaction whose data is only in remote storage and whose abort
marker is in the leader's local log), and the sink's exactlyOnce mode: a task that fails mid-write is retried
without duplicates, and a micro-batch replayed after a "driver crash" (its commit-log entry removed) is not written
twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from strata.pipeline.jobs.transform import transform
from strata.pipeline.options import parse_source_options
from strata.pipeline.planning import plan_batch
from tests.pipeline.support import (
    consume_all,
    create_topic,
    local_log_start,
    produce,
    produce_transactions,
    wait_offloaded,
)

TOPIC = "txn-history"
# (records of A, records of B, A commits?): B ends the other way; the last round is a long aborted transaction of A
# whose abort marker stays in the active segment while its records are tiered and deleted locally
ROUNDS = [(5 + i % 3, 4 if i % 4 else 0, i % 2 == 0) for i in range(8)] + [(80, 0, False)]


@pytest.fixture(scope="module")
def txn_history(tiered) -> tuple[list[bytes], list[bytes], int]:
    """(committed values in offset order, aborted values, the high watermark) of TOPIC, tiered."""
    bs = tiered.bootstrap
    create_topic(
        bs, TOPIC, 1, remote_storage_enable="true", segment_bytes=4096, local_retention_bytes=1, retention_ms=-1
    )
    committed, aborted = produce_transactions(bs, TOPIC, ROUNDS)
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "group.id": "hw", "log_level": 3})
    try:
        _low, hw = c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10, cached=False)
    finally:
        c.close()
    wait_offloaded(bs, TOPIC, 0, at_least=hw - 30)  # most of the last (aborted) transaction only in remote storage
    return committed, aborted, hw


def _read(spark: Any, bs: str, isolation: str, **opts: str) -> list[bytes]:
    r = (
        spark.read.format("strata")
        .option("kafka.bootstrap.servers", bs)
        .option("subscribe", TOPIC)
        .option("kafka.isolation.level", isolation)
    )
    for k, v in opts.items():
        r = r.option(k, v)
    rows = r.load().select("offset", "value").collect()
    return [bytes(row.value) for row in sorted(rows, key=lambda row: row.offset)]


def test_read_committed_broker_and_direct_mode(spark, tiered, txn_history):
    committed, aborted, hw = txn_history
    bs = tiered.bootstrap
    assert len(committed) > 30 and len(aborted) > 100
    assert _values(bs, TOPIC) == committed  # the reference: a stock consumer

    # direct mode really reads remote segments, and the last abort's marker is known only from the local log
    direct = tiered.direct_options()
    opts = parse_source_options(
        {"kafka.bootstrap.servers": bs, "subscribe": TOPIC, "kafka.isolation.level": "read_committed", **direct},
        streaming=False,
    )
    (rng,) = plan_batch(opts)
    remote = [p for p in rng.pieces if p.segment is not None]
    assert rng.end == hw and sum(p.end - p.start for p in remote) >= hw - 30 - 1, rng.pieces
    assert any(p.local_aborted for p in remote), "the last aborted transaction ends in the local log"
    assert local_log_start(bs, TOPIC, 0) > remote[-1].start

    assert _read(spark, bs, "read_committed") == committed
    assert _read(spark, bs, "read_committed", **direct) == committed
    assert _read(spark, bs, "read_committed", **direct, maxRecordsPerPartition="17") == committed  # ranges cut inside
    # the aborted records are in those segments: READ_UNCOMMITTED returns them
    everything = _read(spark, bs, "read_uncommitted", **direct)
    assert sorted(everything) == sorted(committed + aborted)


# -- the sink's exactlyOnce mode ---------------------------------------------------------------------------------
def _values(bs: str, topic: str, isolation: str = "read_committed") -> list[bytes]:
    return [r[3] for r in consume_all(bs, topic, [0], isolation=isolation)]


def test_exactly_once_sink_fences_a_zombie_attempt_and_survives_a_task_retry(spark, tiered):
    from confluent_kafka import KafkaException, Producer

    bs, out = tiered.bootstrap, "eos-out"
    create_topic(bs, out, 1)
    # an earlier attempt of partition 0's task that died mid-write: its transaction is open (the LSO waits on it)
    zombie = Producer({"bootstrap.servers": bs, "transactional.id": "eos-job-0", "log_level": 3})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(out, b"zombie", partition=0)
    assert zombie.flush(30) == 0

    def values(index: int, ids: Any) -> Any:
        """id -> ("v<id>",); the first attempt of partition 1 fails (Spark retries it)"""
        from pyspark import TaskContext

        ctx = TaskContext.get()
        for i in ids:
            if index == 1 and ctx is not None and ctx.attemptNumber() == 0 and i == 350:
                raise RuntimeError("injected failure of the first attempt")
            yield (f"v{i}",)

    rows = spark.sparkContext.parallelize(range(400), 2).mapPartitionsWithIndex(values)
    spark.createDataFrame(rows, "value string").write.format("strata").option("kafka.bootstrap.servers", bs).option(
        "topic", out
    ).option("exactlyOnce", "true").option("transactional.id.prefix", "eos-job").mode("append").save()

    assert sorted(_values(bs, out)) == sorted(f"v{i}".encode() for i in range(400))  # each once, no zombie
    assert b"zombie" in _values(bs, out, "read_uncommitted")  # it was written, then aborted by the fencing
    with pytest.raises(KafkaException, match=r"(?i)fenced"):
        zombie.commit_transaction(30)


def _stream(spark: Any, bs: str, src: str, out: str, ck: Path) -> None:
    transform(spark, bs, src, out, str(ck), once=True, exactly_once=True)  # strata pipeline transform --exactly-once


def test_exactly_once_stream_replayed_batch_is_not_written_twice(spark, tiered, tmp_path):
    bs, src, out = tiered.bootstrap, "eos-stream-in", "eos-stream-out"
    create_topic(bs, src, 2)
    create_topic(bs, out, 1)
    produce(bs, src, [{"value": f"s{i}".encode(), "partition": i % 2} for i in range(200)])
    ck = tmp_path / "ck"
    _stream(spark, bs, src, out, ck)
    expected = sorted(f"s{i}".encode() for i in range(200))
    assert sorted(_values(bs, out)) == expected

    # the driver "crashed" after the sink committed the batch but before Spark recorded it: the restarted query
    # runs the batch again (same id, same offsets); the tasks find their markers and write nothing
    commits = sorted((ck / "commits").iterdir(), key=lambda p: p.name)
    last = [p for p in commits if p.name.isdigit()][-1]
    last.unlink()
    (ck / "commits" / f".{last.name}.crc").unlink(missing_ok=True)
    _stream(spark, bs, src, out, ck)
    assert sorted(_values(bs, out)) == expected
