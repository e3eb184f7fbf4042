"""``format("strata-iceberg")``: a topic's Iceberg table read by Spark (one Spark partition per data file, files
pruned by partition/offset filters), a value_json table's nested columns, and "table + tail": the table up to its
committed offsets plus the topic after them equals a full read of the topic.

The tables are written here with pyiceberg (a SQLite catalog in tmp), with the contract's snapshot summaries, as the
broker's translator writes them."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import datasource as ds

from strata.pipeline.options import OptionError
from strata.pipeline.table_planning import KEY_VALUE_COLUMNS, parse_table_options, plan
from strata.pipeline.table_source import FilePartition, FileScanContext, TableReader, read_file
from strata.remote.iceberg.offsets import TOPIC_ID, carried_properties
from strata.remote.iceberg.schema import KEY_VALUE_SCHEMA
from strata.remote.iceberg.value_json import ValueJsonConverter, parse_value_schema
from tests.pipeline.support import consume_all, create_topic, df_records, produce

T0 = datetime.datetime(2026, 3, 1, 10, 0, tzinfo=datetime.UTC)
TAIL_TOPIC = "ice-tail"


def _kv_rows(topic: str, partition: int, offsets: range, value: Any = None) -> pa.Table:
    rows = [
        {
            "key": None if o % 5 == 0 else f"k{o}".encode(),
            "value": value(o) if value else f"v-{partition}-{o}".encode(),
            "topic": topic,
            "partition": partition,
            "offset": o,
            "timestamp": T0 + datetime.timedelta(minutes=o),
            "timestampType": 0,
            "headers": [{"key": "h", "value": str(o).encode()}] if o % 3 == 0 else None,
        }
        for o in offsets
    ]
    return pa.Table.from_pylist(rows, KEY_VALUE_SCHEMA)


def _commit(table: Any, rows: pa.Table, next_offsets: dict[int, int]) -> None:
    """An append with the contract's summary: every partition's next offset, carried forward."""
    props = carried_properties(table, next_offsets)
    props[TOPIC_ID] = "test-topic-id"
    table.append(rows, snapshot_properties=props)


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.transforms import HourTransform

    d: Path = tmp_path_factory.mktemp("iceberg")
    opts = {"iceberg.catalog.uri": f"sqlite:///{d}/catalog.db", "iceberg.catalog.warehouse": f"file://{d}/wh"}
    c = SqlCatalog("strata", uri=opts["iceberg.catalog.uri"], warehouse=opts["iceberg.catalog.warehouse"])
    c.create_namespace("strata")
    # key_value table "kv": partition 0 offsets 0..59 in three commits, partition 1 offsets 0..29 in one
    kv = c.create_table(("strata", "kv"), schema=KEY_VALUE_SCHEMA)
    with kv.update_spec() as u:
        u.add_field("timestamp", HourTransform(), "timestamp_hour")
    for lo, hi in ((0, 20), (20, 40), (40, 60)):
        _commit(kv, _kv_rows("kv", 0, range(lo, hi)), {0: hi})
    _commit(kv, _kv_rows("kv", 1, range(30)), {1: 30})
    # value_json table "orders"
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "user": {"type": "object", "properties": {"name": {"type": "string"}, "tier": {"type": "integer"}}},
            "lines": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}}}},
        },
    }
    conv = ValueJsonConverter(parse_value_schema(json.dumps(schema)))
    orders = c.create_table(("strata", "orders"), schema=conv.arrow_schema)
    conv.bind(orders)
    doc = {"id": 0, "user": {"name": "u", "tier": 1}, "lines": [{"sku": "a"}, {"sku": "b"}]}
    good, bad = conv(
        _kv_rows("orders", 0, range(10), lambda o: json.dumps({**doc, "id": o}).encode()),
    )
    assert not bad
    _commit(orders, good, {0: 10})
    return opts


def _reader(spark: Any, catalog: dict[str, str], topic: str, **extra: str) -> Any:
    r = spark.read.format("strata-iceberg").option("subscribe", topic)
    for k, v in {**catalog, **extra}.items():
        r = r.option(k, v)
    return r


def test_key_value_table_reads_as_spark_kafka_schema_and_filters_prune_files(
    spark: Any, catalog: dict[str, str]
) -> None:
    df = _reader(spark, catalog, "kv").load()
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    got = df_records(df)
    want = sorted(
        (
            p,
            o,
            None if o % 5 == 0 else f"k{o}".encode(),
            f"v-{p}-{o}".encode(),
            int((T0 + datetime.timedelta(minutes=o)).timestamp() * 1000),
            0,
            [("h", str(o).encode())] if o % 3 == 0 else [],
        )
        for p, n in ((0, 60), (1, 30))
        for o in range(n)
    )
    assert got == want
    # one Spark partition per data file (hour partitions split the commits' files)
    opts = parse_table_options({"subscribe": "kv", **catalog})
    every = plan(opts).tasks
    assert len(_spark_partitions(df, opts)) == len(every) >= 4
    # partition/offset filters prune files by their column statistics
    pruned = plan(opts, [ds.EqualTo(("partition",), 0), ds.GreaterThanOrEqual(("offset",), 45)]).tasks
    assert 0 < len(pruned) < len(every)
    assert len(plan(opts, [ds.In(("partition",), (1,)), ds.LessThan(("offset",), 3)]).tasks) == 1
    # what Spark pushes (pushFilters) decides the reader's files; Spark's own use of it: the table + tail test
    reader = TableReader(opts, df.schema)
    pushed = [ds.EqualTo(("partition",), 0), ds.GreaterThanOrEqual(("offset",), 45)]
    assert list(reader.pushFilters(pushed)) == pushed  # all handed back: Spark evaluates them again
    files = [p.task.file.file_path for p in reader.partitions() if isinstance(p, FilePartition)]
    assert files == [t.file.file_path for t in pruned]


def test_value_json_table_has_nested_columns(spark: Any, catalog: dict[str, str]) -> None:
    df = _reader(spark, catalog, "orders").load()
    assert df.columns == ["id", "user", "lines", "kafka"]
    rows = df.selectExpr("id", "user.name", "lines[1].sku AS sku", "kafka.offset AS o").orderBy("id").collect()
    assert [(r["id"], r["name"], r["sku"], r["o"]) for r in rows] == [(i, "u", "b", i) for i in range(10)]
    opts = parse_table_options({"subscribe": "orders", **catalog})
    # kafka.offset filters are applied in the scan (pyiceberg 0.12 keeps no file statistics for struct fields)
    p = plan(opts, [ds.GreaterThanOrEqual(("kafka", "offset"), 8)])
    ctx = FileScanContext(p.metadata_location, p.io_props, p.schema_id, p.row_filter)
    target = pa.schema([pa.field("id", pa.int64())])
    assert [r["id"] for t in p.tasks for b in read_file(ctx, t, target) for r in b.to_pylist()] == [8, 9]


def test_table_plus_tail_equals_the_topic(spark: Any, catalog: dict[str, str], tiered: Any) -> None:
    """The table holds partition 0 up to offset 70 and partition 1 up to 25 (partition 2 never translated); the
    tail is read from the broker from there: together exactly the topic, no duplicate, no gap."""
    from pyiceberg.catalog.sql import SqlCatalog

    bs = tiered.bootstrap
    create_topic(bs, TAIL_TOPIC, 3)
    produce(
        bs,
        TAIL_TOPIC,
        [{"key": f"k{i}".encode(), "value": f"value-{i}".encode(), "partition": i % 3} for i in range(300)],
    )
    topic = consume_all(bs, TAIL_TOPIC)
    c = SqlCatalog("strata", uri=catalog["iceberg.catalog.uri"], warehouse=catalog["iceberg.catalog.warehouse"])
    table = c.create_table(("strata", TAIL_TOPIC), schema=KEY_VALUE_SCHEMA)
    upto = {0: 70, 1: 25}
    for p, end in upto.items():
        rows = [r for r in topic if r[0] == p and r[1] < end]
        _commit(table, _rows_table(rows), {p: end})

    df = _reader(spark, catalog, TAIL_TOPIC, **{"kafka.bootstrap.servers": bs}).load()
    assert df_records(df) == topic
    files = len(list(table.scan().plan_files()))
    opts = parse_table_options({"subscribe": TAIL_TOPIC, "kafka.bootstrap.servers": bs, **catalog})
    parts = _spark_partitions(df, opts)
    assert len(parts) == files + 3  # the files, then one tail range per partition, from the committed offsets
    assert [(p.range.partition, p.range.start) for p in parts[files:]] == [(0, 70), (1, 25), (2, 0)]
    # filters narrow the tail too
    part = _reader(spark, catalog, TAIL_TOPIC, **{"kafka.bootstrap.servers": bs}).load().where("partition = 1")
    assert [r["offset"] for r in part.orderBy("offset").collect()] == list(range(100))
    # tail=false: the table alone
    alone = plan(
        parse_table_options({"subscribe": TAIL_TOPIC, "kafka.bootstrap.servers": bs, "tail": "false", **catalog})
    )
    assert alone.tail == [] and sum(t.file.record_count for t in alone.tasks) == 95


def _spark_partitions(df: Any, opts: Any) -> list[Any]:
    """The input partitions the reader plans for ``df``'s schema (what Spark gets from it, without a Spark job)."""
    return TableReader(opts, df.schema).partitions()


def _rows_table(rows: list[tuple]) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "key": key,
                "value": value,
                "topic": TAIL_TOPIC,
                "partition": p,
                "offset": o,
                "timestamp": datetime.datetime.fromtimestamp(ts / 1000, datetime.UTC),
                "timestampType": tt,
                "headers": [{"key": k, "value": v} for k, v in hdrs] or None,
            }
            for p, o, key, value, ts, tt, hdrs in rows
        ],
        KEY_VALUE_SCHEMA,
    )


def test_missing_table_and_bad_options_fail_on_the_driver(spark: Any, catalog: dict[str, str]) -> None:
    with pytest.raises(Exception, match=r"no Iceberg table strata\.nope"):
        _reader(spark, catalog, "nope").load()
    with pytest.raises(OptionError, match="value_json table"):
        plan(parse_table_options({"subscribe": "orders", "kafka.bootstrap.servers": "127.0.0.1:1", **catalog}))
    with pytest.raises(OptionError, match="one topic"):
        parse_table_options({"subscribe": "a,b", **catalog})
    with pytest.raises(OptionError, match=r"iceberg\.catalog\.uri is required"):
        parse_table_options({"subscribe": "a"})
    with pytest.raises(OptionError, match=r"tail=true needs kafka\.bootstrap\.servers"):
        parse_table_options({"subscribe": "a", "tail": "true", **catalog})


def test_files_are_read_with_pyarrow_and_old_schema_files_through_arrow_scan(catalog: dict[str, str]) -> None:
    """A file with the snapshot's schema is read straight with pyarrow.parquet; one written before a column was added
    falls back to pyiceberg's ArrowScan, which fills the new column with nulls. Both give the same rows."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.types import StringType

    from strata.pipeline.table_source import _file_io, _metadata, read_file_direct

    c = SqlCatalog("strata", uri=catalog["iceberg.catalog.uri"], warehouse=catalog["iceberg.catalog.warehouse"])
    t = c.create_table(("strata", "evolved"), schema=pa.schema([pa.field("id", pa.int64())]))
    t.append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    with t.update_schema() as u:
        u.add_column("note", StringType())
    t = c.load_table(("strata", "evolved"))
    t.append(pa.table({"id": pa.array([3], pa.int64()), "note": pa.array(["new"], pa.large_string())}))
    p = plan(parse_table_options({"subscribe": "evolved", **catalog}))
    ctx = FileScanContext(p.metadata_location, p.io_props, p.schema_id, p.row_filter)
    target = pa.schema([pa.field("id", pa.int64()), pa.field("note", pa.string())])
    io = _file_io(ctx)
    schema = next(s for s in _metadata(ctx, io).schemas if s.schema_id == ctx.schema_id)
    direct = {t.file.record_count: read_file_direct(ctx, t, target, io, schema) is not None for t in p.tasks}
    assert direct == {2: False, 1: True}  # the old file (2 rows) lacks "note": ArrowScan projects it
    rows = sorted((r["id"], r["note"]) for task in p.tasks for b in read_file(ctx, task, target) for r in b.to_pylist())
    assert rows == [(1, None), (2, None), (3, "new")]


def _rows(df: Any) -> list[Any]:
    return sorted((tuple(r) for r in df.collect()), key=repr)


def test_read_table_with_spark_parquet_equals_the_data_source(spark: Any, catalog: dict[str, str]) -> None:
    """``read_table`` hands the snapshot's files to Spark's Parquet reader: the same schema (timestamps in UTC
    included) and rows as ``format("strata-iceberg")``, the same partition/offset bounds, and a column added after
    some files were written reads as null from them."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.types import StringType

    from strata.pipeline import read_table

    native = read_table(spark, "kv", catalog)
    source = _reader(spark, catalog, "kv").load()
    assert "FileScan parquet" in native._jdf.queryExecution().executedPlan().toString()
    assert native.schema == source.schema
    rows = _rows(native)
    assert rows == _rows(source) and len(rows) == 90
    bounded = read_table(spark, "kv", catalog, partitions=[0], offsets=(45, 50))
    assert [(r["partition"], r["offset"]) for r in bounded.orderBy("offset").collect()] == [
        (0, o) for o in range(45, 50)
    ]
    orders = read_table(spark, "orders", catalog, offsets=(8, None))  # value_json: bounds on kafka.offset
    assert orders.columns == ["id", "user", "lines", "kafka"]
    assert sorted((r["id"], r["kafka"]["offset"]) for r in orders.collect()) == [(8, 8), (9, 9)]

    c = SqlCatalog("strata", uri=catalog["iceberg.catalog.uri"], warehouse=catalog["iceberg.catalog.warehouse"])
    t = c.create_table(("strata", "kv-added"), schema=KEY_VALUE_SCHEMA)
    _commit(t, _kv_rows("kv-added", 0, range(5)), {0: 5})
    with t.update_schema() as u:
        u.add_column("note", StringType())
    t = c.load_table(("strata", "kv-added"))
    later = _kv_rows("kv-added", 0, range(5, 8)).append_column("note", pa.array(["n5", "n6", "n7"], pa.large_string()))
    _commit(t, later, {0: 8})
    native = read_table(spark, "kv-added", catalog)
    source = _reader(spark, catalog, "kv-added").load()
    assert native.columns == [*KEY_VALUE_COLUMNS, "note"] and native.schema == source.schema
    rows = _rows(native)
    assert rows == _rows(source)
    at, note = native.columns.index("offset"), native.columns.index("note")
    assert sorted((r[at], r[note]) for r in rows) == [(o, None) for o in range(5)] + [
        (5, "n5"),
        (6, "n6"),
        (7, "n7"),
    ]


def test_read_table_falls_back_to_the_data_source_for_s3_without_s3a(
    spark: Any, pipeline_moto: Any, tmp_path: Path
) -> None:
    """A table in S3 while the session's JVM has no S3A file system (no hadoop-aws): the data source reads it."""
    from pyiceberg.catalog.sql import SqlCatalog

    from strata.pipeline import read_table
    from strata.pipeline.table_native import jvm_path, s3a_available

    s3 = pipeline_moto.rsm_config()
    props = {
        "s3.endpoint": pipeline_moto.endpoint,
        "s3.region": s3["s3.region"],
        "s3.access-key-id": s3["aws.access.key.id"],
        "s3.secret-access-key": s3["aws.secret.access.key"],
    }
    opts = {
        "iceberg.catalog.uri": f"sqlite:///{tmp_path}/catalog.db",
        "iceberg.catalog.warehouse": f"s3://{pipeline_moto.bucket}/native-fallback/",
        **{f"iceberg.catalog.prop.{k}": str(v) for k, v in props.items()},
    }
    c = SqlCatalog("strata", uri=opts["iceberg.catalog.uri"], warehouse=opts["iceberg.catalog.warehouse"], **props)
    c.create_namespace("strata")
    t = c.create_table(("strata", "kv-s3"), schema=KEY_VALUE_SCHEMA)
    _commit(t, _kv_rows("kv-s3", 0, range(7)), {0: 7})
    assert not s3a_available(spark)
    assert jvm_path("s3://b/k.parquet", False) is None and jvm_path("s3://b/k.parquet", True) == "s3a://b/k.parquet"
    df = read_table(spark, "kv-s3", opts)
    assert "FileScan parquet" not in df._jdf.queryExecution().executedPlan().toString()
    assert [r["offset"] for r in df.orderBy("offset").collect()] == list(range(7))
