"""SeaweedFS's Iceberg REST catalog (``weed mini -s3.port.iceberg``, an S3 Tables bucket as the warehouse) through
pyiceberg's RestCatalog with the ``iceberg.catalog.*`` settings the broker and the Spark source take: a value_json
table with a DLQ-worthy record is written, then planned and read file by file by the ``strata-iceberg`` source's
driver and executor code (SigV4 to the catalog, the S3 gateway for the Parquet files)."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator

import pyarrow as pa
import pytest

from strata.pipeline.table_planning import load_catalog, parse_table_options, plan
from strata.pipeline.table_source import FileScanContext, read_file
from strata.remote.iceberg.kv_schema import KEY_VALUE_SCHEMA
from strata.remote.iceberg.snapshot_props import carried_properties
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
    table.append(good, snapshot_properties=carried_properties(None, {0: 6}))

    # a second client (the Spark driver) sees the commit and its offsets; the executors read the files from S3
    p = plan(opts)
    assert p.committed == {0: 6}
    assert p.tasks and all(t.file.file_path.startswith("s3://strata-tables/") for t in p.tasks)
    ctx = FileScanContext(p.metadata_location, p.io_props, p.schema_id, p.row_filter)
    target = pa.schema([pa.field("id", pa.int64()), pa.field("tags", pa.list_(pa.field("element", pa.string())))])
    rows = [r for t in p.tasks for b in read_file(ctx, t, target) for r in b.to_pylist()]
    assert sorted(rows, key=lambda r: r["id"]) == [{"id": i, "tags": ["a"] * i} for i in (0, 1, 2, 4, 5)]
