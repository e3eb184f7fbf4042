"""Table layout: the key_value columns (Spark's Kafka source schema, as pipeline/'s `strata` source reads it) and
the Iceberg schema and partition spec made from an Arrow schema and `iceberg.partition.spec`."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.transforms import BucketTransform, DayTransform, HourTransform, IdentityTransform, Transform

from strata.config.iceberg import PartitionField as SpecTerm

HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

# key_value mode: the columns of Spark's Kafka source (key, value, topic, partition, offset, timestamp,
# timestampType, headers) with the Arrow types the `strata` Spark source produces for them.
KEY_VALUE_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", TIMESTAMP_TYPE),
        pa.field("timestampType", pa.int32()),
        pa.field("headers", HEADERS_TYPE),
    ]
)


def iceberg_schema(schema: pa.Schema) -> Schema:
    """The Iceberg schema of an Arrow schema, with field ids assigned as a new table would assign them."""
    from pyiceberg.io.pyarrow import _ConvertToIcebergWithoutIDs, visit_pyarrow

    converted = visit_pyarrow(schema, _ConvertToIcebergWithoutIDs())
    assert isinstance(converted, Schema)
    return assign_fresh_schema_ids(converted)


def _transform(term: SpecTerm) -> Transform[Any, Any]:
    if term.transform == "hour":
        return HourTransform()
    if term.transform == "day":
        return DayTransform()
    if term.transform == "bucket":
        return BucketTransform(term.buckets)
    return IdentityTransform()


def partition_spec(schema: Schema, terms: list[SpecTerm]) -> PartitionSpec:
    """`iceberg.partition.spec` (parsed) over `schema`; a column the schema lacks raises ValueError."""
    fields = []
    for i, term in enumerate(terms):
        try:
            source = schema.find_field(term.column)
        except ValueError:
            raise ValueError(f"iceberg.partition.spec names {term.column!r}, which the table does not have") from None
        suffix = term.transform if term.transform != "bucket" else f"bucket_{term.buckets}"
        name = f"{term.column.replace('.', '_')}_{suffix}"
        fields.append(
            PartitionField(source_id=source.field_id, field_id=1000 + i, transform=_transform(term), name=name)
        )
    return PartitionSpec(*fields)


__all__ = ["HEADERS_TYPE", "KEY_VALUE_SCHEMA", "TIMESTAMP_TYPE", "iceberg_schema", "partition_spec"]
