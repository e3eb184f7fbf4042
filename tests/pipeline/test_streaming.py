"""Streaming reads: trigger(availableNow=True) twice over a growing topic with one checkpoint delivers every record
exactly once (maxOffsetsPerTrigger honoured, a partition added in between picked up); offsets deleted before the
query read them fail the query, or are skipped with failOnDataLoss=false."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from strata.cli.admin_client import AdminClient
from tests.pipeline.support import consume_all, create_topic, produce


def _run(spark, bs: str, topic: str, out: Path, ck: Path, **opts: str):
    r = (
        spark.readStream.format("strata")
        .option("kafka.bootstrap.servers", bs)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for k, v in opts.items():
        r = r.option(k, v)
    q = (
        r.load()
        .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start()
    )
    t0 = time.monotonic()
    q.awaitTermination()
    print(f"availableNow run on {topic}: {time.monotonic() - t0:.1f}s")
    return [p["numInputRows"] if isinstance(p, dict) else p.numInputRows for p in q.recentProgress]


def _output(spark, out: Path) -> list[tuple]:
    return [(r.partition, r.offset, r.value) for r in spark.read.parquet(str(out)).collect()]


def _expected(bs: str, topic: str) -> list[tuple]:
    return [(p, o, v.decode()) for p, o, _k, v, *_ in consume_all(bs, topic)]


def test_available_now_twice_delivers_each_record_once(spark, tiered, tmp_path):
    bs, topic = tiered.bootstrap, "growing"
    create_topic(bs, topic, 2)
    produce(bs, topic, [{"value": f"a{i}".encode(), "partition": i % 2} for i in range(300)])
    out, ck = tmp_path / "out", tmp_path / "ck"

    rows_per_batch = _run(spark, bs, topic, out, ck, maxOffsetsPerTrigger="200")
    assert sum(rows_per_batch) == 300
    assert [n for n in rows_per_batch if n] == [200, 100]  # maxOffsetsPerTrigger splits the backlog
    first = _output(spark, out)
    assert sorted(first) == _expected(bs, topic)

    # the topic grows, and gains a partition, between the runs
    produce(bs, topic, [{"value": f"b{i}".encode(), "partition": i % 2} for i in range(250)])
    with AdminClient(bs) as a:
        a.create_partitions(topic, 3)
    produce(bs, topic, [{"value": f"c{i}".encode(), "partition": 2} for i in range(30)])

    assert sum(_run(spark, bs, topic, out, ck)) == 280
    rows = _output(spark, out)
    assert len(rows) == len(set(rows)) == 580  # nothing twice
    assert sorted(rows) == _expected(bs, topic)  # nothing missing, partition 2 included
    assert sorted(r for r in rows if r[0] == 2) == [(2, i, f"c{i}") for i in range(30)]

    assert sum(_run(spark, bs, topic, out, ck)) == 0  # a third run finds nothing new
    assert len(_output(spark, out)) == 580


def test_deleted_unread_offsets_fail_the_query_or_are_skipped(spark, tiered, tmp_path):
    bs, topic = tiered.bootstrap, "lossy"
    create_topic(bs, topic, 1)
    produce(bs, topic, [{"value": f"x{i}".encode()} for i in range(100)])
    out, ck = tmp_path / "out", tmp_path / "ck"
    assert sum(_run(spark, bs, topic, out, ck)) == 100

    produce(bs, topic, [{"value": f"y{i}".encode()} for i in range(100)])
    with AdminClient(bs) as a:
        a.delete_records(topic, {0: 150})  # offsets 100..149 go before the query saw them
    with pytest.raises(Exception, match="failOnDataLoss"):
        _run(spark, bs, topic, out, ck)
    assert sum(_run(spark, bs, topic, out, ck, failOnDataLoss="false")) == 50
    offsets = sorted(o for _p, o, _v in _output(spark, out))
    assert offsets == list(range(100)) + list(range(150, 200))
