"""``iceberg.mode=value_json``: each record's value, parsed as JSON, becomes the columns of a schema the topic
configures, and the record's Kafka metadata is kept in a ``kafka`` struct column (the key_value columns minus
``value``).

The schema is a JSON Schema subset (``strata.config.value_schema``). Every column is optional in the table (so that
adding a property is a compatible schema change); ``required`` and nullability are checked per record. Properties the
schema does not name are ignored (JSON Schema's default ``additionalProperties``).

Records that do not parse or do not match come back as ``(row, reason)`` pairs for the DLQ table (or the drop
counter); nothing raises on bad data. Schema evolution (``bind``): properties the table lacks become columns
(pyiceberg ``update_schema``); a property whose type the table cannot take (anything but Iceberg's int -> long and
float -> double promotions) keeps the table's column, and records with a value there go to the DLQ, the reason naming
both types.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from strata.config.value_schema import (
    KAFKA_COLUMN,
    FieldSpec,
    ValueSchemaError,
    load_value_schema,
    parse_value_schema,
)

from .schema import KEY_VALUE_SCHEMA

# the key_value columns the kafka struct keeps (all but value)
KAFKA_STRUCT_COLUMNS = ("key", "topic", "partition", "offset", "timestamp", "timestampType", "headers")

_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
# Iceberg's legal type promotions (old table type -> configured type)
_PROMOTIONS = {("int", "long"), ("float", "double")}


# -- Arrow types ----------------------------------------------------------------------------------------------------
_ARROW_PRIMITIVES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "long": pa.int64(),
    "int": pa.int32(),
    "double": pa.float64(),
    "float": pa.float32(),
    "boolean": pa.bool_(),
    "timestamptz": pa.timestamp("us", tz="UTC"),
    "date": pa.date32(),
}


def arrow_type(f: FieldSpec) -> pa.DataType:
    if f.kind == "struct":
        return pa.struct([pa.field(c.name, arrow_type(c)) for c in f.fields])
    if f.kind == "list":
        assert f.item is not None
        return pa.list_(pa.field("element", arrow_type(f.item)))
    return _ARROW_PRIMITIVES[f.kind]


def kafka_struct_type() -> pa.DataType:
    return pa.struct([KEY_VALUE_SCHEMA.field(n) for n in KAFKA_STRUCT_COLUMNS])


def value_json_arrow_schema(fields: Sequence[FieldSpec]) -> pa.Schema:
    """The configured columns, then the ``kafka`` struct (contract: value_json mode)."""
    return pa.schema([pa.field(f.name, arrow_type(f)) for f in fields] + [pa.field(KAFKA_COLUMN, kafka_struct_type())])


# -- schema evolution -----------------------------------------------------------------------------------------------
def _iceberg_kind(t: Any) -> str:
    from pyiceberg import types as it

    simple: dict[type, str] = {
        it.StringType: "string",
        it.LongType: "long",
        it.IntegerType: "int",
        it.DoubleType: "double",
        it.FloatType: "float",
        it.BooleanType: "boolean",
        it.TimestamptzType: "timestamptz",
        it.DateType: "date",
        it.StructType: "struct",
        it.ListType: "list",
    }
    return simple.get(type(t), str(t))


@dataclass
class Binding:
    """What ``bind`` found: properties whose configured type the table cannot take (path -> reason)."""

    conflicts: dict[tuple[str, ...], str] = field(default_factory=dict)


def _compare(spec: FieldSpec, t: Any, path: tuple[str, ...], out: Binding, table: str) -> FieldSpec | None:
    """The part of ``spec`` the table can take and must add or widen (None: nothing), recording conflicts."""
    have = _iceberg_kind(t)
    if spec.kind == "struct" and have == "struct":
        kept = []
        for c in spec.fields:
            sub = t.fields if hasattr(t, "fields") else ()
            match = next((x for x in sub if x.name == c.name), None)
            if match is None:
                kept.append(c)
                continue
            k = _compare(c, match.field_type, (*path, c.name), out, table)
            if k is not None:
                kept.append(k)
        return FieldSpec(spec.name, "struct", spec.nullable, spec.required, tuple(kept)) if kept else None
    if spec.kind == "list" and have == "list":
        assert spec.item is not None
        item = _compare(spec.item, t.element_type, (*path, "element"), out, table)
        if item is None:
            return None
        return FieldSpec(spec.name, "list", spec.nullable, spec.required, item=item)
    if spec.kind == have or (have, spec.kind) in _PROMOTIONS:
        return spec
    if (spec.kind, have) in _PROMOTIONS:  # configured narrower than the table: its wider column takes the values
        return None
    out.conflicts[path] = (
        f"incompatible schema change: {'.'.join(path)} is {spec.type_name()} in the value schema but "
        f"{t} in table {table}"
    )
    return None


def bind_table(fields: Sequence[FieldSpec], table: Any) -> Binding:
    """Evolve ``table``'s schema to the configured one where Iceberg allows it (new optional columns, int -> long,
    float -> double) in one schema update, and report what it cannot take."""
    out = Binding()
    name = ".".join(table.name()) if hasattr(table, "name") else str(table)
    current = table.schema()
    compatible = []
    for f in fields:
        try:
            existing = current.find_field(f.name)
        except ValueError:
            compatible.append(f)
            continue
        k = _compare(f, existing.field_type, (f.name,), out, name)
        if k is not None:
            compatible.append(k)
    if not compatible:
        return out
    wanted = pa.schema([pa.field(f.name, arrow_type(f)) for f in compatible])
    with table.update_schema() as update:
        update.union_by_name(wanted)
    return out


# -- record conversion ----------------------------------------------------------------------------------------------
class _Invalid(ValueError):
    pass


def _coerce(f: FieldSpec, v: Any, path: str) -> Any:
    if v is None:
        if not f.nullable:
            raise _Invalid(f"{path}: null is not allowed")
        return None
    k = f.kind
    if k == "string":
        if isinstance(v, str):
            return v
    elif k in ("long", "int"):
        if isinstance(v, float) and v.is_integer() and math.isfinite(v):  # 3.0 is an integer in JSON Schema
            v = int(v)
        if isinstance(v, int) and not isinstance(v, bool):
            lo, hi = (_LONG_MIN, _LONG_MAX) if k == "long" else (_INT_MIN, _INT_MAX)
            if not lo <= v <= hi:
                raise _Invalid(f"{path}: {v} is out of range for {k}")
            return v
    elif k in ("double", "float"):
        if isinstance(v, int | float) and not isinstance(v, bool):
            return float(v)
    elif k == "boolean":
        if isinstance(v, bool):
            return v
    elif k == "timestamptz":
        if isinstance(v, str):
            try:
                ts = datetime.datetime.fromisoformat(v)
            except ValueError:
                raise _Invalid(f"{path}: {v!r} is not an RFC 3339 date-time") from None
            if ts.tzinfo is None:
                raise _Invalid(f"{path}: {v!r} has no time zone offset (RFC 3339 date-time)")
            return ts.astimezone(datetime.UTC)
    elif k == "date":
        if isinstance(v, str):
            try:
                return datetime.date.fromisoformat(v)
            except ValueError:
                raise _Invalid(f"{path}: {v!r} is not a full-date (YYYY-MM-DD)") from None
    elif k == "struct":
        if isinstance(v, dict):
            return _coerce_object(f.fields, v, path)
    elif k == "list" and isinstance(v, list):
        assert f.item is not None
        return [_coerce(f.item, x, f"{path}[{i}]") for i, x in enumerate(v)]
    raise _Invalid(f"{path}: expected {f.type_name()}, got {_json_type(v)}")


def _coerce_object(fields: Sequence[FieldSpec], obj: Mapping[str, Any], path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields:
        if f.name not in obj:
            if f.required:
                raise _Invalid(f"{path}.{f.name}: required property is missing")
            out[f.name] = None
            continue
        out[f.name] = _coerce(f, obj[f.name], f"{path}.{f.name}")
    return out


# JSON type names of what json.loads returns (bool before int: True is an int in Python)
_JSON_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
)


def _json_type(v: Any) -> str:
    return next((name for t, name in _JSON_TYPES if isinstance(v, t)), type(v).__name__)


def _conflict_hit(obj: Any, path: tuple[str, ...]) -> bool:
    """Whether the parsed value holds a non-null value at ``path`` (``element`` steps into every list item)."""
    if obj is None:
        return False
    if not path:
        return True
    head, rest = path[0], path[1:]
    if head == "element" and isinstance(obj, list):
        return any(_conflict_hit(x, rest) for x in obj)
    if isinstance(obj, dict):
        return _conflict_hit(obj.get(head), rest)
    return False


def _drop_path(obj: Any, path: tuple[str, ...]) -> None:
    if obj is None or not path:
        return
    head, rest = path[0], path[1:]
    if head == "element" and isinstance(obj, list):
        for x in obj:
            _drop_path(x, rest)
    elif isinstance(obj, dict) and head in obj:
        if rest:
            _drop_path(obj[head], rest)
        else:
            obj[head] = None


class ValueJsonConverter:
    """The Converter of ``iceberg.mode=value_json``: ``(records) -> (rows in the table's schema, [(record, why)])``.

    ``records``: a translator's chunk of one partition (columns ``offsets``, ``timestamps`` in ms,
    ``timestamp_types``, ``keys``, ``values``, ``headers`` as lists, ``topic``, ``partition``, and ``record(i)``
    for a rejected record), or a pyarrow Table/RecordBatch of the key_value columns (whose rejected rows come back as
    dicts). ``arrow_schema`` creates the table; ``bind(table)`` must follow (at start and after the topic's schema
    config changed) so that rows are written in the table's current schema."""

    def __init__(self, fields: Sequence[FieldSpec]) -> None:
        self.fields = tuple(fields)
        self.arrow_schema = value_json_arrow_schema(self.fields)  # the configured schema: creates the table
        self.output_schema = self.arrow_schema
        self.binding = Binding()

    def bind(self, table: Any) -> Binding:
        """Evolve ``table`` to the configured schema where allowed and write rows in its (new) schema."""
        from pyiceberg.io.pyarrow import schema_to_pyarrow

        self.binding = bind_table(self.fields, table)
        table.refresh()
        self.output_schema = schema_to_pyarrow(table.schema(), include_field_ids=False)
        return self.binding

    def column(self, name: str) -> str:
        """The table column ``iceberg.partition.spec`` means by ``name``: a value column, else the ``kafka``
        struct's (``hour(timestamp)`` partitions by the record timestamp, ``kafka.timestamp``)."""
        if any(f.name == name for f in self.fields) or name.startswith(f"{KAFKA_COLUMN}."):
            return name
        return f"{KAFKA_COLUMN}.{name}" if name in KAFKA_STRUCT_COLUMNS else name

    def _value_columns(self, raw: bytes | None) -> tuple[dict[str, Any] | None, str]:
        """The value's columns, or None and the reason it cannot become a row."""
        if raw is None:
            return None, "the value is null (a tombstone): no JSON to convert"
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            return None, f"the value is not JSON: {e}"
        if not isinstance(doc, dict):
            return None, f"the value is a JSON {_json_type(doc)}, not an object"
        conflicts = self.binding.conflicts
        hit = next((why for p, why in conflicts.items() if _conflict_hit(doc, p)), None)
        if hit is not None:
            return None, hit
        try:
            out = _coerce_object(self.fields, doc, "$")
        except _Invalid as e:
            return None, f"the value does not match the schema: {e}"
        for p in conflicts:  # an optional conflicting property that is absent or null: null in the table's column
            _drop_path(out, p)
        return out, ""

    def __call__(self, records: Any) -> tuple[pa.Table, list[tuple[Any, str]]]:
        if isinstance(records, pa.Table | pa.RecordBatch):
            rows = records.to_pylist()
            values = [r.get("value") for r in rows]
            kafka = [{n: r.get(n) for n in KAFKA_STRUCT_COLUMNS} for r in rows]
            rejected = rows.__getitem__
        else:
            values = records.values
            kafka = _chunk_kafka_rows(records)
            rejected = records.record
        good: list[dict[str, Any]] = []
        bad: list[tuple[Any, str]] = []
        value_names = [f.name for f in self.output_schema if f.name != KAFKA_COLUMN]
        for i, raw in enumerate(values):
            out, reason = self._value_columns(raw)
            if out is None:
                bad.append((rejected(i), reason))
                continue
            row = {n: out.get(n) for n in value_names}
            row[KAFKA_COLUMN] = kafka[i]
            good.append(row)
        return pa.Table.from_pylist(good, schema=self.output_schema), bad


def converter(configs: Mapping[str, Any]) -> ValueJsonConverter:
    """The broker's hook (``strata.remote.iceberg.<mode>.converter(topic configs)``): the converter of a topic's
    ``iceberg.value.schema`` / ``iceberg.value.schema.file``. Raises ValueSchemaError naming what is wrong."""
    return ValueJsonConverter(
        load_value_schema(configs.get("iceberg.value.schema"), configs.get("iceberg.value.schema.file"))
    )


def _chunk_kafka_rows(chunk: Any) -> list[dict[str, Any]]:
    """The ``kafka`` struct of each record of a translator chunk (timestamps: ms -> us)."""
    return [
        {
            "key": key,
            "topic": chunk.topic,
            "partition": chunk.partition,
            "offset": off,
            "timestamp": ts * 1000,
            "timestampType": tt,
            "headers": [{"key": k, "value": v} for k, v in hdrs] if hdrs else None,
        }
        for key, off, ts, tt, hdrs in zip(
            chunk.keys, chunk.offsets, chunk.timestamps, chunk.timestamp_types, chunk.headers, strict=True
        )
    ]


__all__ = [
    "KAFKA_COLUMN",
    "Binding",
    "FieldSpec",
    "ValueJsonConverter",
    "ValueSchemaError",
    "arrow_type",
    "bind_table",
    "converter",
    "load_value_schema",
    "parse_value_schema",
    "value_json_arrow_schema",
]
