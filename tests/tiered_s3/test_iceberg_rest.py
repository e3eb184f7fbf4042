"""SeaweedFS's Iceberg REST catalog (``weed mini -s3.port.iceberg``, an S3 Tables bucket as the warehouse) through
pyiceberg's RestCatalog with the ``iceberg.catalog.*`` settings the broker and the Spark source take (OAuth2 client
credential to the catalog, the S3 gateway for the Parquet files): a value_json table written with pyiceberg, and a
topic the broker's translator turns into a table there; both planned and read file by file by the
``strata-iceberg`` source's driver and executor code."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator

import pyarrow as pa
import pytest

from strata.pipeline.table_planning import load_catalog, parse_table_options, plan
from strata.pipeline.table_source import FileScanContext, read_file
from strata.remote.iceberg.offsets import carried_properties
from strata.remote.iceberg.schema import KEY_VALUE_SCHEMA
from strata.remote.iceberg.value_json import ValueJsonConverter, parse_value_schema
from tests.support.s3_servers import SeaweedServer

TOPIC = "orders-rest"  # S3 Tables names: lower-case letters, digits, '_' and '-' only


@pytest.fixture(scope="module")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    with SeaweedServer(tmp_path_factory.mktemp("weed-iceberg"), table_bucket="strata-tables") as s:
        yield s


def test_value_json_table_through_the_rest_catalog(seaweed: SeaweedServer) -> None:
    opts = parse_table_options({"subscribe": TOPIC, **seaweed.iceberg_catalog_config()})
    catalog = load_catalog(opts)
    catalog.create_namespace_if_not_exists("strata")
    schema = {
        "type": "object",
        "required": ["id"],
        "properties": {"id": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
    }
    conv = ValueJsonConverter(parse_value_schema(json.dumps(schema)))
    table = catalog.create_table(opts.identifier, schema=conv.arrow_schema)
    conv.bind(table)
    t0 = datetime.datetime(2026, 5, 1, tzinfo=datetime.UTC)
    kv = pa.Table.from_pylist(
        [
            {
                "key": None,
                "value": json.dumps({"id": i, "tags": ["a"] * i}).encode() if i != 3 else b"[]",
                "topic": TOPIC,
                "partition": 0,
                "offset": i,
                "timestamp": t0,
                "timestampType": 0,
                "headers": None,
            }
            for i in range(6)
        ],
        KEY_VALUE_SCHEMA,
    )
    good, bad = conv(kv)
    assert [row["offset"] for row, _ in bad] == [3]
    table.append(good, snapshot_properties=carried_properties(table, {0: 6}))

    # a second client (the Spark driver) sees the commit and its offsets; the executors read the files from S3
    p = plan(opts)
    assert p.committed == {0: 6}
    assert p.tasks and all(t.file.file_path.startswith("s3://strata-tables/") for t in p.tasks)
    ctx = FileScanContext(p.metadata_location, p.io_props, p.schema_id, p.row_filter)
    target = pa.schema([pa.field("id", pa.int64()), pa.field("tags", pa.list_(pa.field("element", pa.string())))])
    rows = [r for t in p.tasks for b in read_file(ctx, t, target) for r in b.to_pylist()]
    assert sorted(rows, key=lambda r: r["id"]) == [{"id": i, "tags": ["a"] * i} for i in (0, 1, 2, 4, 5)]


def test_broker_translates_a_topic_into_the_rest_catalog(
    seaweed: SeaweedServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A broker with iceberg.catalog.type=rest on SeaweedFS: its translator creates and fills the table there, and
    the strata-iceberg planning finds every record at its offset."""
    from confluent_kafka import Producer

    from tests.support.broker_proc import StrataBroker
    from tests.support.waiting import wait_until

    topic = "events-rest"
    cfg = seaweed.iceberg_catalog_config()
    b = StrataBroker(tmp_path_factory.mktemp("rest-broker"), cfg, name="rest-broker").start()
    try:
        from strata.cli.admin_client import AdminClient

        with AdminClient(b.bootstrap) as a:
            a.create_topic(topic, 2, 1, {"iceberg.enable": "true", "iceberg.target.lag.ms": "300"})
        p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "log_level": 3})
        for i in range(40):
            p.produce(topic, f"v{i}".encode(), key=f"k{i}".encode(), partition=i % 2)
        assert p.flush(30) == 0
        opts = parse_table_options({"subscribe": topic, **cfg})

        def committed() -> dict[int, int] | None:
            try:
                c = plan(opts).committed
            except Exception:  # noqa: BLE001 - no table yet
                return None
            return c if c == {0: 20, 1: 20} else None

        wait_until(committed, timeout=60, message="the table never reached the topic's end")
        p2 = plan(opts)
        ctx = FileScanContext(p2.metadata_location, p2.io_props, p2.schema_id, p2.row_filter)
        target = pa.schema(
            [pa.field("partition", pa.int32()), pa.field("offset", pa.int64()), pa.field("value", pa.binary())]
        )
        rows = sorted(
            (r["partition"], r["offset"], r["value"])
            for t in p2.tasks
            for bt in read_file(ctx, t, target)
            for r in bt.to_pylist()
        )
        assert rows == sorted((i % 2, i // 2, f"v{i}".encode()) for i in range(40))
    finally:
        b.stop()
