"""The sink (df.write / writeStream format "strata") and the example jobs: a written DataFrame reads back unchanged
through a stock consumer, broker rejections fail the Spark job, and export / transform / aggregate produce what the
topic holds."""

from __future__ import annotations

import pytest

from strata.cli.main import main as strata_main
from strata.pipeline.jobs.aggregate import aggregate
from strata.pipeline.jobs.transform import transform
from tests.pipeline.support import consume_all, create_topic, df_records, produce, wait_offloaded


def test_write_round_trip_through_a_stock_consumer(spark, tiered):
    bs = tiered.bootstrap
    create_topic(bs, "sunk", 3)
    rows = [
        (f"k{i % 5}" if i % 4 else None, f"value {i}".encode(), [("n", str(i).encode())] if i % 2 else None, i % 3)
        for i in range(300)
    ]
    df = spark.createDataFrame(
        rows, "key string, value binary, headers array<struct<key:string,value:binary>>, partition int"
    )
    df.repartition(4).write.format("strata").option("kafka.bootstrap.servers", bs).option("topic", "sunk").mode(
        "append"
    ).save()
    got = consume_all(bs, "sunk")
    assert len(got) == 300
    as_rows = sorted(
        ((k.decode() if k is not None else None, v, h or None, p) for p, _o, k, v, _t, _tt, h in got), key=repr
    )
    assert as_rows == sorted(rows_as_sent(rows), key=repr)
    # per partition, offsets are dense: no gaps from retried or lost sends
    for p in range(3):
        assert [o for pp, o, *_ in got if pp == p] == list(range(100))


def rows_as_sent(rows: list[tuple]) -> list[tuple]:
    return [(k, v, h, p) for k, v, h, p in rows]


def test_topic_column_routes_rows_and_keys_pick_partitions(spark, tiered):
    bs = tiered.bootstrap
    create_topic(bs, "route-a", 4)
    create_topic(bs, "route-b", 1)
    rows = [("route-a" if i % 2 else "route-b", f"key-{i % 10}", f"v{i}") for i in range(100)]
    spark.createDataFrame(rows, "topic string, key string, value string").write.format("strata").option(
        "kafka.bootstrap.servers", bs
    ).mode("append").save()
    a, b = consume_all(bs, "route-a"), consume_all(bs, "route-b")
    assert sorted(r[3] for r in a) == sorted(f"v{i}".encode() for i in range(1, 100, 2))
    assert sorted(r[3] for r in b) == sorted(f"v{i}".encode() for i in range(0, 100, 2))
    by_key: dict[bytes, set[int]] = {}
    for p, _o, k, *_ in a:
        by_key.setdefault(k, set()).add(p)
    assert all(len(ps) == 1 for ps in by_key.values())  # one key, one partition (murmur2, as Java)


def test_rejected_records_fail_the_job(spark, tiered):
    bs = tiered.bootstrap
    create_topic(bs, "one-part", 1)
    df = spark.createDataFrame([("ok", 0), ("no such partition", 5)], "value string, partition int")
    with pytest.raises(Exception, match=r"(?i)unknown partition|broker rejected"):
        df.write.format("strata").option("kafka.bootstrap.servers", bs).option("topic", "one-part").mode(
            "append"
        ).save()
    with pytest.raises(Exception, match="acks=all"):
        df.write.format("strata").option("kafka.bootstrap.servers", bs).option("topic", "one-part").option(
            "kafka.acks", "1"
        ).mode("append").save()


def test_export_cli_writes_the_full_history_to_parquet(spark, tiered, tmp_path, capsys):
    bs = tiered.bootstrap
    create_topic(
        bs, "exported", 1, remote_storage_enable="true", segment_bytes=4096, local_retention_bytes=1, retention_ms=-1
    )
    produce(
        bs,
        "exported",
        [{"key": b"k%d" % (i % 3), "value": b"e" * 50 + b"%d" % i, "headers": [("i", b"%d" % i)]} for i in range(400)],
        batch_size=1024,
    )
    wait_offloaded(bs, "exported", 0, at_least=200)
    out = tmp_path / "exported.parquet"
    rsm = [f"--rsm-config={k}={v}" for k, v in tiered.moto.rsm_config(**{"key.prefix": tiered.prefix}).items()]
    rc = strata_main(
        [
            "pipeline",
            "export",
            "--bootstrap-server",
            bs,
            "--topic",
            "exported",
            "--to",
            str(out),
            "--from",
            "earliest",
            "--read-mode",
            "direct",
            *rsm,
        ]
    )
    assert rc == 0
    assert "exported 400 records" in capsys.readouterr().out
    assert df_records(spark.read.parquet(str(out))) == consume_all(bs, "exported")
    # --mode append reports what this run added, not the dataset's size
    rc = strata_main(
        [
            "pipeline",
            "export",
            "--bootstrap-server",
            bs,
            "--topic",
            "exported",
            "--to",
            str(out),
            "--from",
            "earliest",
            "--mode",
            "append",
        ]
    )
    assert rc == 0
    assert "exported 400 records" in capsys.readouterr().out
    assert spark.read.parquet(str(out)).count() == 800


def test_transform_job_streams_topic_to_topic(spark, tiered, tmp_path):
    bs = tiered.bootstrap
    create_topic(bs, "raw", 2)
    create_topic(bs, "clean", 2)
    produce(
        bs,
        "raw",
        [
            {
                "key": b"k%d" % i,
                "value": b"hello %d" % i if i % 10 else None,
                "headers": [("trace", b"%d" % i)],
                "partition": i % 2,
            }
            for i in range(200)
        ],
    )
    transform(
        spark,
        bs,
        "raw",
        "clean",
        str(tmp_path / "ck"),
        value_expr="upper(CAST(value AS STRING))",
        where="value IS NOT NULL",
        keep_partition=True,
    )
    got = consume_all(bs, "clean")
    want = sorted((i % 2, b"k%d" % i, b"HELLO %d" % i, [("trace", b"%d" % i)]) for i in range(200) if i % 10)
    assert sorted((p, k, v, h) for p, _o, k, v, _t, _tt, h in got) == want


def test_aggregate_job_keeps_per_key_totals(spark, tiered, tmp_path):
    bs = tiered.bootstrap
    create_topic(bs, "clicks", 2)
    produce(bs, "clicks", [{"key": b"user-%d" % (i % 7), "value": b"x" * (i % 5 + 1)} for i in range(140)])
    out, ck = str(tmp_path / "per_key.parquet"), str(tmp_path / "ck")
    produce(bs, "clicks", [{"key": b"user-0", "value": b"yy"} for _ in range(10)])
    aggregate(spark, bs, "clicks", out, ck, max_offsets_per_trigger=100)  # 150 records: two micro-batches
    table = {r.key: (r.records, r.value_bytes) for r in spark.read.parquet(out).collect()}
    expected: dict[bytes, list[int]] = {}
    for _p, _o, k, v, *_ in consume_all(bs, "clicks"):
        e = expected.setdefault(k, [0, 0])
        e[0] += 1
        e[1] += len(v)
    assert table == {k: tuple(v) for k, v in expected.items()}
    assert table[b"user-0"][0] == 20 + 10
