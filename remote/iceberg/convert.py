"""Records -> Arrow rows of the table. A `Converter` turns a `RecordChunk` into the rows it can convert and the
records it cannot, each with a reason (they go to the DLQ table or are dropped, per
`iceberg.invalid.record.action`). `KeyValueConverter` is key_value mode, where every record converts;
value_json's converter plugs in through the same protocol."""

from __future__ import annotations

from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc

from .records import Header, RecordChunk, TopicRecord
from .schema import HEADERS_TYPE, KEY_VALUE_SCHEMA, TIMESTAMP_TYPE

Rejected = list[tuple[TopicRecord, str]]


class Converter(Protocol):
    """Converts the records of one partition's chunk for one table."""

    @property
    def arrow_schema(self) -> pa.Schema:
        """The columns of the table this converter writes (used to create the table)."""
        ...

    def __call__(self, chunk: RecordChunk) -> tuple[pa.Table, Rejected]:
        """(the rows, in the table's columns; the records that do not convert, with why)."""
        ...


def headers_array(headers: list[list[Header]]) -> pa.Array:
    """list<struct<key, value>> from per-record header lists, built from flat columns and offsets."""
    offsets = [0]
    keys: list[str] = []
    values: list[bytes | None] = []
    for h in headers:
        for k, v in h:
            keys.append(k)
            values.append(v)
        offsets.append(len(keys))
    entries = pa.StructArray.from_arrays(
        [pa.array(keys, pa.string()), pa.array(values, pa.binary())], fields=list(HEADERS_TYPE.value_type)
    )
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), entries, type=HEADERS_TYPE)


def key_value_columns(chunk: RecordChunk) -> dict[str, pa.Array]:
    """The key_value columns of every record of `chunk` (also the `kafka` struct of value_json rows and the DLQ
    table's columns)."""
    n = len(chunk)
    millis = pa.array(chunk.timestamps, pa.int64())
    return {
        "key": pa.array(chunk.keys, pa.binary()),
        "value": pa.array(chunk.values, pa.binary()),
        "topic": pa.array([chunk.topic] * n, pa.string()),
        "partition": pa.array([chunk.partition] * n, pa.int32()),
        "offset": pa.array(chunk.offsets, pa.int64()),
        # ms -> us: the Arrow/Spark timestamp type (microseconds, UTC)
        "timestamp": pc.multiply(millis, 1000).cast(TIMESTAMP_TYPE),
        "timestampType": pa.array(chunk.timestamp_types, pa.int32()),
        "headers": headers_array(chunk.headers),
    }


class KeyValueConverter:
    """key_value mode: the record as Spark's Kafka source shows it; nothing is rejected."""

    @property
    def arrow_schema(self) -> pa.Schema:
        return KEY_VALUE_SCHEMA

    def __call__(self, chunk: RecordChunk) -> tuple[pa.Table, Rejected]:
        return pa.Table.from_pydict(key_value_columns(chunk), schema=KEY_VALUE_SCHEMA), []


__all__ = ["Converter", "KeyValueConverter", "Rejected", "headers_array", "key_value_columns"]
