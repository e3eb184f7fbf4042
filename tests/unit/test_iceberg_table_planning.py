"""strata-iceberg planning without Spark: Spark's pushed filters -> the Iceberg row filter and the tail's bounds,
offset ranges clipped to them (pieces included), and the tail's source options."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import datasource as ds

from strata.pipeline.options import OptionError
from strata.pipeline.planning import OffsetRange, Piece
from strata.pipeline.table_planning import parse_table_options, pruning, tail_source_options

OPTS = {"subscribe": "t", "iceberg.catalog.uri": "sqlite:///x.db", "kafka.bootstrap.servers": "h:1"}


def test_filters_become_bounds_and_an_iceberg_row_filter() -> None:
    row_filter, b = pruning(
        [
            ds.EqualTo(("partition",), 1),
            ds.GreaterThan(("offset",), 9),
            ds.LessThanOrEqual(("offset",), 20),
            ds.EqualTo(("key",), b"k"),  # not ours: left to Spark
        ],
        key_value=True,
    )
    assert (b.p_lo, b.p_hi, b.lo, b.hi) == (1, 2, 10, 21)
    assert "partition" in str(row_filter) and "offset" in str(row_filter) and "key" not in str(row_filter)
    r = OffsetRange("t", 1, 0, 100, (Piece(0, 15, "seg"), Piece(15, 100)))
    c = b.clip(r)
    assert c is not None and (c.start, c.end) == (10, 21)
    assert [(p.start, p.end, p.segment) for p in c.pieces] == [(10, 15, "seg"), (15, 21, None)]
    assert b.clip(OffsetRange("t", 0, 0, 100)) is None
    assert b.clip(OffsetRange("t", 1, 30, 40)) is None


def test_in_filters_and_value_json_columns() -> None:
    _, b = pruning([ds.In(("kafka", "partition"), (0, 2)), ds.In(("kafka", "offset"), (5, 7))], key_value=False)
    assert b.partitions == {0, 2} and (b.lo, b.hi) == (5, 8)
    assert b.allows(2) and not b.allows(1)
    # top-level partition/offset of a value_json table are the user's columns, not Kafka's
    row_filter, b = pruning([ds.EqualTo(("partition",), 3)], key_value=False)
    assert b.partitions is None and b.allows(7) and str(row_filter) == "AlwaysTrue()"


def test_tail_starts_at_the_committed_offsets_read_committed() -> None:
    o = tail_source_options(parse_table_options(OPTS), {0: 70, 2: 5})
    assert o.starting.kind == "offsets" and o.starting.per_partition == {("t", 0): 70, ("t", 2): 5}
    assert o.isolation_level == "read_committed"
    assert tail_source_options(parse_table_options(OPTS), {}).starting.kind == "earliest"
    with pytest.raises(OptionError, match="startingoffsets does not apply"):
        tail_source_options(parse_table_options({**OPTS, "startingOffsets": json.dumps({"t": {"0": 1}})}), {})
    ru = {**OPTS, "kafka.isolation.level": "read_uncommitted"}
    assert tail_source_options(parse_table_options(ru), {}).isolation_level == "read_uncommitted"


def test_catalog_options_keep_secrets_out_of_repr() -> None:
    o = parse_table_options(
        {
            **OPTS,
            "iceberg.catalog.type": "rest",
            "iceberg.catalog.credential": "id:SECRET",
            "iceberg.catalog.prop.s3.secret-access-key": "KEY",
        }
    )
    assert o.catalog_props["credential"] == "id:SECRET" and o.catalog_props["s3.secret-access-key"] == "KEY"
    assert "SECRET" not in repr(o) and "KEY" not in repr(o)
    with pytest.raises(OptionError, match="must be sql or rest"):
        parse_table_options({**OPTS, "iceberg.catalog.type": "hive"})
