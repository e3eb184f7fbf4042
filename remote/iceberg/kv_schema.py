"""The key_value columns (Spark's Kafka source schema, the Arrow types of ``strata.pipeline``'s ``strata`` source):
the table of ``iceberg.mode=key_value``, the ``kafka`` struct of ``value_json`` (without ``value``) and the DLQ
table (plus ``reason``)."""

from __future__ import annotations

import pyarrow as pa

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])

KEY_VALUE_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
        pa.field("headers", pa.list_(pa.field("element", HEADER_TYPE))),
    ]
)

KAFKA_STRUCT_COLUMNS = ("key", "topic", "partition", "offset", "timestamp", "timestampType", "headers")

__all__ = ["HEADER_TYPE", "KAFKA_STRUCT_COLUMNS", "KEY_VALUE_SCHEMA"]
