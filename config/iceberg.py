"""Iceberg topics: the topic configs (`iceberg.*`, Strata's own names; docs/iceberg.md lists Redpanda's equivalents)
and the broker configs of the catalog and the translator.

A topic with `iceberg.enable=true` is also an Iceberg table: its partition leaders translate committed records into
Parquet files and commit them to the catalog (remote/iceberg/, broker/iceberg.py). Values are checked here, once,
so CreateTopics and AlterConfigs answer INVALID_CONFIG with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .defs import ConfigDef, ConfigError, at_least
from .defs import ConfigType as T
from .value_schema import check_value_schema

KEY_VALUE = "key_value"
VALUE_JSON = "value_json"
MODES = (KEY_VALUE, VALUE_JSON)
DROP = "drop"
DLQ_TABLE = "dlq_table"
INVALID_RECORD_ACTIONS = (DROP, DLQ_TABLE)
DEFAULT_PARTITION_SPEC = "hour(timestamp)"

# The key_value table's columns (Spark's Kafka source schema) and which of them are timestamps.
KEY_VALUE_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")
TIMESTAMP_COLUMNS = ("timestamp",)


@dataclass(frozen=True)
class PartitionField:
    """One term of `iceberg.partition.spec`: transform (hour, day, identity, bucket), its source column and, for
    bucket, the bucket count."""

    transform: str
    column: str
    buckets: int = 0


_TERM = re.compile(
    r"^\s*(?:(?P<fn>hour|day|identity)\(\s*(?P<col>[A-Za-z_][\w.]*)\s*\)"
    r"|bucket\(\s*(?P<n>\d+)\s*,\s*(?P<bcol>[A-Za-z_][\w.]*)\s*\))\s*$"
)


def _split_terms(spec: str) -> list[str]:
    """Split on the commas between terms, not the one inside bucket(N, col)."""
    terms, depth, cur = [], 0, ""
    for ch in spec:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    terms.append(cur)
    return terms


def parse_partition_spec(spec: str) -> list[PartitionField]:
    """`hour(col)`, `day(col)`, `identity(col)`, `bucket(N, col)`, comma-separated; "" is unpartitioned. Raises
    ConfigError naming the term that does not parse."""
    if not spec.strip():
        return []
    out: list[PartitionField] = []
    for term in _split_terms(spec):
        m = _TERM.match(term)
        if m is None:
            raise ConfigError(
                f"partition spec term {term.strip()!r} is not hour(col), day(col), identity(col) or bucket(N, col)"
            )
        if m["fn"]:
            out.append(PartitionField(m["fn"], m["col"]))
        else:
            n = int(m["n"])
            if n < 1:
                raise ConfigError(f"partition spec term {term.strip()!r}: the bucket count must be at least 1")
            out.append(PartitionField("bucket", m["bcol"], n))
    cols = [(f.transform, f.column) for f in out]
    if len(set(cols)) != len(cols):
        raise ConfigError(f"partition spec {spec!r} repeats a term")
    return out


def _check_spec(value: Any) -> None:
    parse_partition_spec(str(value))


def check_iceberg_overrides(values: Mapping[str, Any]) -> None:
    """Checks across keys: in key_value mode the partition spec may only name the table's columns, and hour/day
    only its timestamp. (value_json columns come from the value schema: checked when the table is made.)"""
    mode = values.get("iceberg.mode", KEY_VALUE)
    spec = values.get("iceberg.partition.spec")
    if mode != KEY_VALUE or spec is None:
        return
    for f in parse_partition_spec(str(spec)):
        if f.column not in KEY_VALUE_COLUMNS:
            raise ConfigError(
                f"Invalid value {spec!r} for configuration iceberg.partition.spec: column {f.column!r} is not a "
                f"column of the key_value table ({', '.join(KEY_VALUE_COLUMNS)})"
            )
        if f.transform in ("hour", "day") and f.column not in TIMESTAMP_COLUMNS:
            raise ConfigError(
                f"Invalid value {spec!r} for configuration iceberg.partition.spec: {f.transform}() needs a timestamp "
                f"column, {f.column!r} is not one"
            )


# (topic key, broker synonym, definition): appended to the topic config table (config/topic_config.py)
ICEBERG_TOPIC_DEFS: list[tuple[str, str | None, ConfigDef]] = [
    ("iceberg.enable", None, ConfigDef("iceberg.enable", T.BOOLEAN, False, "the topic is also an Iceberg table")),
    (
        "iceberg.mode",
        None,
        ConfigDef("iceberg.mode", T.STRING, KEY_VALUE, "key_value or value_json columns", choices=MODES),
    ),
    (
        "iceberg.target.lag.ms",
        None,
        ConfigDef("iceberg.target.lag.ms", T.LONG, 60000, "how stale the table may get behind the LSO", at_least(1)),
    ),
    (
        "iceberg.partition.spec",
        None,
        ConfigDef(
            "iceberg.partition.spec",
            T.STRING,
            DEFAULT_PARTITION_SPEC,
            "hour(col), day(col), identity(col), bucket(N, col), comma-separated; empty: unpartitioned",
            _check_spec,
        ),
    ),
    (
        "iceberg.invalid.record.action",
        None,
        ConfigDef(
            "iceberg.invalid.record.action",
            T.STRING,
            DROP,
            "records that do not convert: drop (counted) or dlq_table (<topic>~dlq)",
            choices=INVALID_RECORD_ACTIONS,
        ),
    ),
    (
        "iceberg.value.schema",
        None,
        ConfigDef("iceberg.value.schema", T.STRING, "", "value_json: JSON Schema of the value", check_value_schema),
    ),
    (
        "iceberg.value.schema.file",
        None,
        ConfigDef("iceberg.value.schema.file", T.STRING, "", "value_json: path of the value's JSON Schema file"),
    ),
]

SQL, REST = "sql", "rest"

ICEBERG_BROKER_DEFS: list[ConfigDef] = [
    ConfigDef("iceberg.catalog.type", T.STRING, SQL, "sql (embedded SQLite by default) or rest", choices=(SQL, REST)),
    ConfigDef(
        "iceberg.catalog.uri",
        T.STRING,
        "",
        "sql: SQLAlchemy URI (default sqlite:///<log.dirs[0]>/iceberg/catalog.db); rest: the catalog's URL",
    ),
    ConfigDef("iceberg.catalog.namespace", T.STRING, "strata", "namespace of the topics' tables"),
    ConfigDef(
        "iceberg.catalog.warehouse",
        T.STRING,
        "",
        "warehouse location; default: the remote storage (s3://<bucket>/<key.prefix>iceberg/ or <rsm dir>/iceberg)",
    ),
    ConfigDef("iceberg.catalog.credential", T.PASSWORD, "", "rest: OAuth2 client credential (client_id:secret)"),
    ConfigDef("iceberg.catalog.token", T.PASSWORD, "", "rest: bearer token"),
    ConfigDef("iceberg.translator.threads", T.INT, 2, "threads converting, writing and committing", at_least(1)),
    ConfigDef(
        "iceberg.translator.memory.bytes",
        T.LONG,
        64 * 1024 * 1024,
        "record bytes all translators may hold at once",
        at_least(1024),
    ),
    ConfigDef(
        "iceberg.translator.max.file.bytes",
        T.LONG,
        128 * 1024 * 1024,
        "record bytes read per commit (and Parquet target file size)",
        at_least(1024),
    ),
    ConfigDef(
        "iceberg.translator.backoff.ms", T.LONG, 500, "first pause after a catalog or storage failure", at_least(1)
    ),
    ConfigDef("iceberg.translator.backoff.max.ms", T.LONG, 30000, "longest pause after repeated failures", at_least(1)),
    ConfigDef(
        "iceberg.max.local.retention.hold.bytes",
        T.LONG,
        1024**3,
        "per partition: untranslated bytes local retention keeps past its limits (-1: no cap)",
        at_least(-1),
    ),
    ConfigDef(
        "iceberg.maintenance.interval.ms",
        T.LONG,
        3600000,
        "merge small files and expire snapshots of the tables of topics whose partition 0 is led here (0: never)",
        at_least(0),
    ),
]

# pass-through catalog properties (pyiceberg's names): iceberg.catalog.prop.<name>=value
CATALOG_PROP_PREFIX = "iceberg.catalog.prop."


__all__ = [
    "CATALOG_PROP_PREFIX",
    "DEFAULT_PARTITION_SPEC",
    "DLQ_TABLE",
    "DROP",
    "ICEBERG_BROKER_DEFS",
    "ICEBERG_TOPIC_DEFS",
    "KEY_VALUE",
    "KEY_VALUE_COLUMNS",
    "MODES",
    "PartitionField",
    "REST",
    "SQL",
    "VALUE_JSON",
    "check_iceberg_overrides",
    "parse_partition_spec",
]
