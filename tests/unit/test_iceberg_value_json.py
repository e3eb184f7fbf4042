"""value_json conversion, the DLQ table and schema evolution, against real pyiceberg tables (SQLite catalog, local
warehouse in tmp) and real Parquet files."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from strata.remote.iceberg.dlq import DLQ_SCHEMA, append_dlq, dlq_sink, dlq_table_name
from strata.remote.iceberg.offsets import committed_next_offsets
from strata.remote.iceberg.schema import KEY_VALUE_SCHEMA
from strata.remote.iceberg.value_json import (
    ValueJsonConverter,
    ValueSchemaError,
    converter,
    load_value_schema,
    parse_value_schema,
)

T0 = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)

SCHEMA = {
    "type": "object",
    "required": ["id", "user"],
    "properties": {
        "id": {"type": "integer"},
        "amount": {"type": ["number", "null"]},
        "at": {"type": "string", "format": "date-time"},
        "user": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string"},
                "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}}},
            },
        },
        "tags": {"type": "array", "items": {"type": "string"}},
        "items": {
            "type": "array",
            "items": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}},
        },
    },
}


def _kv(values: list[Any], partition: int = 0, start: int = 0) -> pa.Table:
    rows = []
    for i, v in enumerate(values):
        raw = v if isinstance(v, bytes) or v is None else json.dumps(v).encode()
        rows.append(
            {
                "key": f"k{i}".encode(),
                "value": raw,
                "topic": "orders",
                "partition": partition,
                "offset": start + i,
                "timestamp": T0 + datetime.timedelta(seconds=i),
                "timestampType": 0,
                "headers": [{"key": "h", "value": b"1"}] if i % 2 else None,
            }
        )
    return pa.Table.from_pylist(rows, KEY_VALUE_SCHEMA)


@pytest.fixture
def catalog(tmp_path: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    c = SqlCatalog("test", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse")
    c.create_namespace("strata")
    return c


GOOD = {
    "id": 1,
    "amount": 9.5,
    "at": "2026-01-02T03:04:05+01:00",
    "user": {"name": "ann", "address": {"city": "Oslo", "zip": "0150"}},
    "tags": ["a", "b"],
    "items": [{"sku": "x", "qty": 2}, {"sku": "y", "qty": 1}],
    "ignored": True,
}


def test_nested_fields_round_trip_through_a_real_table(catalog: Any) -> None:
    conv = ValueJsonConverter(parse_value_schema(json.dumps(SCHEMA)))
    table = catalog.create_table(("strata", "orders"), schema=conv.arrow_schema)
    conv.bind(table)
    good, bad = conv(_kv([GOOD, {"id": 2, "user": {"name": "bob"}}]))
    assert bad == []
    table.append(good)
    rows = table.scan().to_arrow().sort_by("id").to_pylist()
    assert [r["id"] for r in rows] == [1, 2]
    first = rows[0]
    assert first["user"] == {"name": "ann", "address": {"city": "Oslo", "zip": "0150"}}
    assert first["items"] == [{"sku": "x", "qty": 2}, {"sku": "y", "qty": 1}]
    assert first["tags"] == ["a", "b"]
    assert first["at"] == datetime.datetime(2026, 1, 2, 2, 4, 5, tzinfo=datetime.UTC)
    assert "ignored" not in first and "value" not in first["kafka"]
    assert first["kafka"]["offset"] == 0 and first["kafka"]["key"] == b"k0" and first["kafka"]["topic"] == "orders"
    assert rows[1]["kafka"]["headers"] == [{"key": "h", "value": b"1"}]
    assert rows[1]["amount"] is None and rows[1]["user"]["address"] is None
    # the table's columns: the schema's, then the kafka struct
    assert table.schema().column_names[-1] == "kafka"
    assert table.schema().find_field("user.address.city") is not None


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"{not json", "not JSON"),
        (None, "null"),
        ([1, 2], "JSON array, not an object"),
        ({"user": {"name": "x"}}, "$.id: required property is missing"),
        ({"id": "7", "user": {"name": "x"}}, "$.id: expected long, got string"),
        ({"id": 1, "user": {"name": None}}, "$.user.name: null is not allowed"),
        ({"id": 1, "user": {"name": "x"}, "items": [{"sku": 5}]}, "$.items[0].sku: expected string, got integer"),
        ({"id": 1, "user": {"name": "x"}, "at": "yesterday"}, "$.at: 'yesterday' is not an RFC 3339 date-time"),
        ({"id": 1 << 64, "user": {"name": "x"}}, "out of range for long"),
        ({"id": True, "user": {"name": "x"}}, "expected long, got boolean"),
    ],
)
def test_records_that_do_not_match_are_rejected_with_a_reason(value: Any, reason: str) -> None:
    conv = ValueJsonConverter(parse_value_schema(json.dumps(SCHEMA)))
    good, bad = conv(_kv([GOOD, value, GOOD]))
    assert good.num_rows == 2
    assert [row["offset"] for row, _ in bad] == [1]
    assert reason in bad[0][1]
    assert bad[0][0]["value"] == (value if isinstance(value, bytes) or value is None else json.dumps(value).encode())


def test_dlq_table_holds_rejected_records_with_offsets_exactly_once(catalog: Any) -> None:
    conv = ValueJsonConverter(parse_value_schema(json.dumps(SCHEMA)))
    _good, bad = conv(_kv([GOOD, b"\xff", {"id": "x", "user": {"name": "a"}}, GOOD], partition=3, start=40))
    dlq = catalog.create_table(("strata", dlq_table_name("orders")), schema=DLQ_SCHEMA)
    assert append_dlq(dlq, bad, "topic-uuid") == 2
    # the translator died before its topic-table commit: the same records are converted and offered again
    assert append_dlq(dlq, bad, "topic-uuid") == 0
    rows = dlq.scan().to_arrow().to_pylist()
    assert [(r["partition"], r["offset"], r["value"]) for r in rows] == [
        (3, 41, b"\xff"),
        (3, 42, b'{"id": "x", "user": {"name": "a"}}'),
    ]
    assert "not JSON" in rows[0]["reason"] and "$.id: expected long" in rows[1]["reason"]
    assert committed_next_offsets(dlq) == {3: 43}
    assert dlq.current_snapshot().summary["strata.topic-id"] == "topic-uuid"


class _Chunk:
    """A translator chunk's shape (remote.iceberg.records.RecordChunk): columns as lists, record(i)."""

    def __init__(self, values: list[Any], partition: int = 0, start: int = 0) -> None:
        self.topic, self.partition = "orders", partition
        self.values = [v if isinstance(v, bytes) or v is None else json.dumps(v).encode() for v in values]
        self.offsets = [start + i for i in range(len(values))]
        self.timestamps = [1_700_000_000_000 + i for i in range(len(values))]
        self.timestamp_types = [0] * len(values)
        self.keys = [b"k"] * len(values)
        self.headers = [[("h", b"v")] if i % 2 else [] for i in range(len(values))]

    def record(self, i: int) -> Any:
        from types import SimpleNamespace

        return SimpleNamespace(
            topic=self.topic,
            partition=self.partition,
            offset=self.offsets[i],
            timestamp=self.timestamps[i],
            timestamp_type=self.timestamp_types[i],
            key=self.keys[i],
            value=self.values[i],
            headers=self.headers[i],
        )


def test_translator_chunks_convert_and_their_rejects_reach_the_dlq(catalog: Any) -> None:
    conv = ValueJsonConverter(parse_value_schema(json.dumps(SCHEMA)))
    good, bad = conv(_Chunk([GOOD, "nope", GOOD], partition=2, start=7))
    assert good.num_rows == 2 and [r.offset for r, _ in bad] == [8]
    kafka = good.column("kafka").to_pylist()
    assert [k["offset"] for k in kafka] == [7, 9]
    assert kafka[0]["timestamp"] == datetime.datetime.fromtimestamp(1_700_000_000, datetime.UTC)
    assert kafka[1]["headers"] is None and kafka[0]["partition"] == 2
    catalog.create_table(("strata", "orders"), schema=conv.arrow_schema, properties={"strata.topic-id": "tid"})
    sink = dlq_sink(catalog, ("strata", "orders"))  # the broker's hook: makes orders~dlq at its first write
    sink(bad)
    sink(bad)
    dlq = catalog.load_table(("strata", "orders~dlq"))
    assert dlq.properties["commit.retry.num-retries"] == "0"
    assert dlq.current_snapshot().summary["strata.topic-id"] == "tid"
    rows = dlq.scan().to_arrow().to_pylist()
    assert [(r["partition"], r["offset"], r["value"], r["headers"]) for r in rows] == [
        (2, 8, b'"nope"', [{"key": "h", "value": b"v"}])
    ]
    assert sink.written == 1
    assert "JSON string, not an object" in rows[0]["reason"]
    assert conv.column("timestamp") == "kafka.timestamp" and conv.column("id") == "id"


def test_new_optional_field_becomes_a_column(catalog: Any) -> None:
    v1 = ValueJsonConverter(parse_value_schema(json.dumps(SCHEMA)))
    table = catalog.create_table(("strata", "orders"), schema=v1.arrow_schema)
    v1.bind(table)
    table.append(v1(_kv([GOOD]))[0])

    evolved = json.loads(json.dumps(SCHEMA))
    evolved["properties"]["channel"] = {"type": "string"}
    evolved["properties"]["user"]["properties"]["vip"] = {"type": "boolean"}
    v2 = ValueJsonConverter(parse_value_schema(json.dumps(evolved)))
    assert v2.bind(table).conflicts == {}
    good, bad = v2(_kv([{**GOOD, "channel": "web", "user": {"name": "c", "vip": True}}], start=1))
    assert bad == []
    table.append(good)
    names = table.schema().column_names
    assert "channel" in names and "user.vip" in names
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["kafka"]["offset"])
    assert [r["channel"] for r in rows] == [None, "web"]
    assert [r["user"]["vip"] for r in rows] == [None, True]


def test_incompatible_type_change_sends_records_to_the_dlq(catalog: Any) -> None:
    v1 = ValueJsonConverter(parse_value_schema(json.dumps(SCHEMA)))
    table = catalog.create_table(("strata", "orders"), schema=v1.arrow_schema)
    v1.bind(table)
    changed = json.loads(json.dumps(SCHEMA))
    changed["properties"]["amount"] = {"type": ["string", "null"]}  # double -> string: Iceberg cannot
    changed["properties"]["id"] = {"type": "integer", "format": "int32"}  # narrower: the long column takes it
    v2 = ValueJsonConverter(parse_value_schema(json.dumps(changed)))
    binding = v2.bind(table)
    assert list(binding.conflicts) == [("amount",)]
    good, bad = v2(_kv([{**GOOD, "amount": "12.50"}, {**GOOD, "amount": None}, {k: GOOD[k] for k in ("id", "user")}]))
    assert [row["offset"] for row, _ in bad] == [0]
    assert "incompatible schema change: amount is string in the value schema but double in table" in bad[0][1]
    assert good.num_rows == 2
    table.append(good)
    assert str(table.schema().find_field("amount").field_type) == "double"
    assert str(table.schema().find_field("id").field_type) == "long"


def test_int_to_long_promotion_widens_the_column(catalog: Any) -> None:
    narrow = {"type": "object", "properties": {"n": {"type": "integer", "format": "int32"}}}
    v1 = ValueJsonConverter(parse_value_schema(json.dumps(narrow)))
    table = catalog.create_table(("strata", "nums"), schema=v1.arrow_schema)
    v1.bind(table)
    table.append(v1(_kv([{"n": 5}]))[0])
    wide = {"type": "object", "properties": {"n": {"type": "integer"}}}
    v2 = ValueJsonConverter(parse_value_schema(json.dumps(wide)))
    assert v2.bind(table).conflicts == {}
    good, bad = v2(_kv([{"n": 1 << 40}], start=1))
    assert bad == []
    table.append(good)
    assert str(table.schema().find_field("n").field_type) == "long"
    assert sorted(r["n"] for r in table.scan().to_arrow().to_pylist()) == [5, 1 << 40]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("[", "not JSON"),
        ('{"type": "array", "items": {"type": "string"}}', "must be a JSON Schema object"),
        ('{"type": "object", "properties": {"a": {"type": "tuple"}}}', "type 'tuple' is not supported"),
        ('{"type": "object", "properties": {"a": {"type": "array"}}}', "needs 'items'"),
        ('{"type": "object", "properties": {"a": {"type": ["string", "integer"]}}}', "exactly one non-null type"),
        ('{"type": "object", "required": ["b"], "properties": {"a": {"type": "string"}}}', "not defined: ['b']"),
        ('{"type": "object", "properties": {"kafka": {"type": "string"}}}', "may not define 'kafka'"),
    ],
)
def test_bad_schemas_are_refused_with_the_reason(doc: str, message: str) -> None:
    with pytest.raises(ValueSchemaError) as e:
        parse_value_schema(doc)
    assert message in str(e.value)


def test_schema_file_and_missing_schema(tmp_path: Path) -> None:
    f = tmp_path / "orders.schema.json"
    f.write_text(json.dumps(SCHEMA))
    assert [x.name for x in load_value_schema(None, str(f))][:2] == ["id", "amount"]
    # the broker's hook builds the converter from the topic's configs; the inline schema wins over the file
    conv = converter(
        {
            "iceberg.value.schema": json.dumps({"type": "object", "properties": {"z": {"type": "string"}}}),
            "iceberg.value.schema.file": str(f),
        }
    )
    assert conv.arrow_schema.names == ["z", "kafka"]
    with pytest.raises(ValueSchemaError, match=r"needs iceberg\.value\.schema"):
        load_value_schema("", "")
    with pytest.raises(ValueSchemaError, match="No such file"):
        load_value_schema(None, str(tmp_path / "missing.json"))
