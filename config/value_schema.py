"""``iceberg.value.schema`` / ``iceberg.value.schema.file``: the JSON Schema subset of ``iceberg.mode=value_json``
tables, parsed into field specs (pure Python: CreateTopics/AlterConfigs check it, the converter in
``strata.remote.iceberg.value_json`` turns it into Arrow/Iceberg types).

The subset is what Kafka users write for Schema Registry's JSON format and Kafka Connect: an ``object`` with
``properties``; each property is ``string`` (``format``: ``date-time`` -> timestamptz, ``date`` -> date),
``integer`` (long; ``format: int32`` -> int), ``number`` (double; ``format: float`` -> float), ``boolean``,
``object`` (a struct: nested ``properties``) or ``array`` (a list of its ``items``). ``"type": ["string", "null"]``
allows null; ``required`` lists the properties a record must have. Other keywords are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .defs import ConfigError

KAFKA_COLUMN = "kafka"  # the value_json table's metadata struct: no property may take its name


class ValueSchemaError(ConfigError):
    """``iceberg.value.schema`` (or its file) is not a JSON Schema this converter understands."""


@dataclass(frozen=True)
class FieldSpec:
    """One property of the value schema: its Iceberg kind, whether null is allowed, and nested fields/items."""

    name: str
    kind: str  # string, long, int, double, float, boolean, timestamptz, date, struct or list
    nullable: bool = True
    required: bool = False
    fields: tuple[FieldSpec, ...] = ()  # struct
    item: FieldSpec | None = None  # list

    def type_name(self) -> str:
        if self.kind == "struct":
            return "struct<" + ", ".join(f"{f.name}: {f.type_name()}" for f in self.fields) + ">"
        if self.kind == "list":
            assert self.item is not None
            return f"list<{self.item.type_name()}>"
        return self.kind


def _types_of(doc: Mapping[str, Any], where: str) -> tuple[str, bool]:
    t = doc.get("type")
    names = [t] if isinstance(t, str) else list(t) if isinstance(t, list) else None
    if not names or not all(isinstance(n, str) for n in names):
        raise ValueSchemaError(f"{where}: 'type' must be a JSON Schema type name or a list of them")
    nullable = "null" in names
    rest = [n for n in names if n != "null"]
    if len(rest) != 1:
        raise ValueSchemaError(f"{where}: exactly one non-null type is supported, got {names}")
    return rest[0], nullable


def _parse_field(name: str, doc: Any, where: str, required: bool) -> FieldSpec:
    if not isinstance(doc, Mapping):
        raise ValueSchemaError(f"{where}: a property's schema must be an object")
    t, nullable = _types_of(doc, where)
    fmt = doc.get("format")
    if t == "string":
        kind = {"date-time": "timestamptz", "date": "date"}.get(fmt or "", "string")
    elif t == "integer":
        kind = "int" if fmt == "int32" else "long"
    elif t == "number":
        kind = "float" if fmt == "float" else "double"
    elif t == "boolean":
        kind = "boolean"
    elif t == "object":
        return FieldSpec(name, "struct", nullable, required, _parse_properties(doc, where))
    elif t == "array":
        items = doc.get("items")
        if items is None:
            raise ValueSchemaError(f"{where}: an array needs 'items'")
        return FieldSpec(name, "list", nullable, required, item=_parse_field("element", items, f"{where}[]", False))
    else:
        raise ValueSchemaError(f"{where}: type {t!r} is not supported")
    return FieldSpec(name, kind, nullable, required)


def _parse_properties(doc: Mapping[str, Any], where: str) -> tuple[FieldSpec, ...]:
    props = doc.get("properties")
    if not isinstance(props, Mapping) or not props:
        raise ValueSchemaError(f"{where}: an object needs a non-empty 'properties' map")
    req = doc.get("required", [])
    if not isinstance(req, list) or not all(isinstance(r, str) for r in req):
        raise ValueSchemaError(f"{where}: 'required' must be a list of property names")
    unknown = sorted(set(req) - set(props))
    if unknown:
        raise ValueSchemaError(f"{where}: 'required' names properties that are not defined: {unknown}")
    return tuple(_parse_field(str(n), d, f"{where}.{n}", n in req) for n, d in props.items())


def parse_value_schema(text: str) -> tuple[FieldSpec, ...]:
    """The top-level properties of a JSON Schema document (an ``object``)."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ValueSchemaError(f"the value schema is not JSON: {e}") from None
    if not isinstance(doc, Mapping) or doc.get("type") != "object":
        raise ValueSchemaError('the value schema must be a JSON Schema object: {"type": "object", "properties": ...}')
    fields = _parse_properties(doc, "$")
    if any(f.name == KAFKA_COLUMN for f in fields):
        raise ValueSchemaError(f"the value schema may not define {KAFKA_COLUMN!r}: that column holds the metadata")
    return fields


def load_value_schema(schema: str | None, schema_file: str | None) -> tuple[FieldSpec, ...]:
    """``iceberg.value.schema`` (inline JSON) wins over ``iceberg.value.schema.file`` (a path on the broker)."""
    if schema and schema.strip():
        return parse_value_schema(schema)
    if schema_file and schema_file.strip():
        try:
            text = Path(schema_file).read_text(encoding="utf-8")
        except OSError as e:
            raise ValueSchemaError(f"iceberg.value.schema.file {schema_file!r}: {e.strerror}") from None
        return parse_value_schema(text)
    raise ValueSchemaError("iceberg.mode=value_json needs iceberg.value.schema or iceberg.value.schema.file")


def check_value_schema(value: Any) -> None:
    """Topic config validator of ``iceberg.value.schema`` (empty: not set)."""
    if value is not None and str(value).strip():
        parse_value_schema(str(value))


__all__ = [
    "KAFKA_COLUMN",
    "FieldSpec",
    "ValueSchemaError",
    "check_value_schema",
    "load_value_schema",
    "parse_value_schema",
]
