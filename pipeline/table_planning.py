"""Driver-side planning of ``format("strata-iceberg")``: a topic's Iceberg table (one Spark partition per data
file, planned with pyiceberg) and, for "table + tail", the topic's records after the table's committed offsets
(offset ranges of the ``strata`` source).

No gap, no overlap: the table's current snapshot is read once; its summary gives each Kafka partition's next offset
to translate (``strata.partition.<p>.next-offset``, written atomically with the data files), the data files of that
same snapshot are scanned, and the tail starts exactly there. A partition the table has never received starts at the
topic's earliest offset.

Options (names as the broker's configs, docs/spark.md "Iceberg topics"): ``subscribe`` (one topic: the table name),
``iceberg.catalog.type`` / ``.uri`` / ``.warehouse`` / ``.credential`` / ``.token`` / ``.namespace`` (default
``strata``) and ``iceberg.catalog.prop.<pyiceberg property>``; with ``kafka.bootstrap.servers`` the tail is read too
(``tail=false`` turns it off), with the ``strata`` source's options (``read.mode``, ``kafka.*``, ...).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .options import OptionError, SourceOptions, bool_option, parse_source_options
from .planning import OffsetRange, Piece, plan_batch

CATALOG_PREFIX = "iceberg.catalog."
CATALOG_KEYS = ("type", "uri", "warehouse", "credential", "token")
PROP_PREFIX = "iceberg.catalog.prop."
DEFAULT_NAMESPACE = "strata"
KEY_VALUE_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")


@dataclass(frozen=True)
class TableOptions:
    topic: str
    namespace: str
    catalog_props: dict[str, str] = field(repr=False)  # may hold credentials
    tail: bool
    raw: dict[str, str] = field(repr=False)  # the options as given (lower-cased keys), for the tail's source

    @property
    def identifier(self) -> tuple[str, str]:
        return (self.namespace, self.topic)


def parse_table_options(options: Mapping[str, Any]) -> TableOptions:
    raw = {str(k).lower(): str(v) for k, v in options.items()}
    topics = [t.strip() for t in raw.get("subscribe", "").split(",") if t.strip()]
    if len(topics) != 1:
        raise OptionError("format strata-iceberg reads one topic's table: set the option subscribe to one topic")
    props: dict[str, str] = {}
    for k, v in raw.items():
        if k.startswith(PROP_PREFIX):
            props[k[len(PROP_PREFIX) :]] = v
        elif k.startswith(CATALOG_PREFIX) and k[len(CATALOG_PREFIX) :] in CATALOG_KEYS and v:
            props[k[len(CATALOG_PREFIX) :]] = v
    props.setdefault("type", "sql")
    if props["type"] not in ("sql", "rest") and "py-catalog-impl" not in props:
        raise OptionError(f"option iceberg.catalog.type must be sql or rest, not {props['type']!r}")
    if "uri" not in props:
        raise OptionError("option iceberg.catalog.uri is required (the broker's iceberg.catalog.uri)")
    has_kafka = bool(raw.get("kafka.bootstrap.servers", "").strip())
    tail = bool_option("tail", raw.get("tail"), has_kafka)
    if tail and not has_kafka:
        raise OptionError("tail=true needs kafka.bootstrap.servers (the tail is read from the topic)")
    ns = raw.get("iceberg.catalog.namespace", "").strip() or DEFAULT_NAMESPACE
    return TableOptions(topics[0], ns, props, tail, raw)


def load_catalog(opts: TableOptions) -> Any:
    """The pyiceberg catalog the options describe (``sql`` or ``rest``)."""
    from pyiceberg.catalog import load_catalog as _load

    return _load("strata", **opts.catalog_props)


def load_table(opts: TableOptions) -> Any:
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return load_catalog(opts).load_table(opts.identifier)
    except NoSuchTableError:
        raise OptionError(
            f"no Iceberg table {'.'.join(opts.identifier)} in the catalog: is iceberg.enable=true set on topic "
            f"{opts.topic!r}, and has its first commit been made?"
        ) from None


# -- filters on partition and offset -------------------------------------------------------------------------------
@dataclass
class Bounds:
    """What the pushed filters say about Kafka partitions and offsets (offsets [lo, hi))."""

    partitions: set[int] | None = None
    p_lo: int = 0
    p_hi: int | None = None
    lo: int = 0
    hi: int | None = None

    def allows(self, partition: int) -> bool:
        in_set = self.partitions is None or partition in self.partitions
        return in_set and self.p_lo <= partition and (self.p_hi is None or partition < self.p_hi)

    def clip(self, r: OffsetRange) -> OffsetRange | None:
        if not self.allows(r.partition):
            return None
        start, end = max(r.start, self.lo), r.end if self.hi is None else min(r.end, self.hi)
        if start >= end:
            return None
        pieces = tuple(
            Piece(max(p.start, start), min(p.end, end), p.segment, p.following, p.local_aborted)
            for p in r.pieces
            if p.end > start and p.start < end
        )
        return OffsetRange(r.topic, r.partition, start, end, pieces)


def _column(attr: Sequence[str], key_value: bool) -> str | None:
    """'partition'/'offset' for the filter's column, or None (not one we prune by)."""
    path = tuple(attr)
    if key_value and len(path) == 1 and path[0] in ("partition", "offset"):
        return path[0]
    if not key_value and len(path) == 2 and path[0] == "kafka" and path[1] in ("partition", "offset"):
        return path[1]
    return None


def _as_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _min_end(a: int | None, b: int | None) -> int | None:
    """The smaller of two exclusive ends (None: unbounded)."""
    return b if a is None else a if b is None else min(a, b)


def _expr(ex: Any, name: str, column: str, value: Any) -> Any:
    """``pyiceberg.expressions.<name>(column, value)`` (its pydantic signatures do not type-check positionally)."""
    return getattr(ex, name)(column, value)


def pruning(filters: Sequence[Any], key_value: bool) -> tuple[Any, Bounds]:
    """An Iceberg row filter (for file pruning by column statistics, and row filtering) and the tail's bounds,
    from Spark's pushed filters on partition and offset (``kafka.partition``/``kafka.offset`` in value_json
    tables). Other filters are left to Spark; Spark evaluates all of them again after the scan."""
    from pyiceberg import expressions as ex
    from pyspark.sql import datasource as ds

    # Spark filter -> (pyiceberg expression, the offsets [lo, hi) it keeps given its value v)
    ops: dict[type, tuple[str, Any]] = {
        ds.EqualTo: ("EqualTo", lambda v: (v, v + 1)),
        ds.GreaterThan: ("GreaterThan", lambda v: (v + 1, None)),
        ds.GreaterThanOrEqual: ("GreaterThanOrEqual", lambda v: (v, None)),
        ds.LessThan: ("LessThan", lambda v: (0, v)),
        ds.LessThanOrEqual: ("LessThanOrEqual", lambda v: (0, v + 1)),
    }
    exprs: list[Any] = []
    b = Bounds()
    for f in filters:
        col = _column(getattr(f, "attribute", ()), key_value)
        if col is None:
            continue
        name = col if key_value else f"kafka.{col}"
        if isinstance(f, ds.In):
            vals = [x for x in (_as_int(v) for v in f.value) if x is not None]
            if not vals or len(vals) != len(f.value):
                continue
            exprs.append(_expr(ex, "In", name, set(vals)))
            if col == "partition":
                b.partitions = set(vals) if b.partitions is None else b.partitions & set(vals)
            else:
                b.lo, b.hi = max(b.lo, min(vals)), _min_end(b.hi, max(vals) + 1)
            continue
        v = _as_int(getattr(f, "value", None))
        op = ops.get(type(f))
        if v is None or op is None:
            continue
        exprs.append(_expr(ex, op[0], name, v))
        lo, hi = op[1](v)
        if col == "partition":
            b.p_lo, b.p_hi = max(b.p_lo, lo), _min_end(b.p_hi, hi)
        else:
            b.lo, b.hi = max(b.lo, lo), _min_end(b.hi, hi)
    row_filter = ex.AlwaysTrue() if not exprs else ex.And(*exprs) if len(exprs) > 1 else exprs[0]
    return row_filter, b


# -- the plan ------------------------------------------------------------------------------------------------------
@dataclass
class TablePlan:
    """One snapshot's files (pyiceberg FileScanTasks) and what an executor needs to read them (the metadata file that
    snapshot is in, FileIO properties, its schema, the row filter); the tail's ranges and options."""

    metadata_location: str
    io_props: dict[str, str] = field(repr=False)
    schema_id: int = 0
    row_filter: Any = None
    tasks: list[Any] = field(default_factory=list)
    committed: dict[int, int] = field(default_factory=dict)
    tail: list[OffsetRange] = field(default_factory=list)
    tail_options: SourceOptions | None = field(default=None, repr=False)


def tail_source_options(opts: TableOptions, committed: Mapping[int, int]) -> SourceOptions:
    """The ``strata`` source's options for the tail: the topic from the committed offsets (partitions the table has
    never received: earliest), READ_COMMITTED unless ``kafka.isolation.level`` says otherwise (the translator
    writes what a READ_COMMITTED consumer reads)."""
    raw = {k: v for k, v in opts.raw.items() if k not in ("subscribepattern", "assign", "tail")}
    raw["subscribe"] = opts.topic
    starting = {opts.topic: {str(p): off for p, off in sorted(committed.items())}}
    for k in ("startingoffsets", "startingtimestamp", "startingoffsetsbytimestamp"):
        if k in raw:
            raise OptionError(f"option {k} does not apply to strata-iceberg: the tail starts where the table ends")
    raw["startingoffsets"] = json.dumps(starting) if committed else "earliest"
    raw.setdefault("kafka.isolation.level", "read_committed")
    return parse_source_options(raw, streaming=False)


def plan(opts: TableOptions, filters: Sequence[Any] = (), table: Any = None) -> TablePlan:
    """``table``: the table as the caller just loaded it (else loaded here); its current snapshot is planned."""
    from strata.remote.iceberg.offsets import committed_next_offsets

    table = load_table(opts) if table is None else table
    snap = table.current_snapshot()
    key_value = all(c in table.schema().column_names for c in ("partition", "offset"))
    row_filter, bounds = pruning(filters, key_value)
    committed = committed_next_offsets(table)  # the summary of snap, the snapshot planned below
    out = TablePlan(table.metadata_location, dict(table.io.properties), committed=committed)
    if snap is not None:
        scan = table.scan(row_filter=row_filter, snapshot_id=snap.snapshot_id)
        out.schema_id = scan.projection().schema_id
        out.row_filter = row_filter
        out.tasks = list(scan.plan_files())
    if opts.tail:
        if not key_value:
            raise OptionError(
                f"table {'.'.join(opts.identifier)} is a value_json table: table + tail reads key_value tables only "
                "(set tail=false to read the table alone)"
            )
        out.tail_options = tail_source_options(opts, committed)
        ranges = plan_batch(out.tail_options)
        out.tail = [c for r in ranges if (c := bounds.clip(r)) is not None]
    return out


__all__ = [
    "Bounds",
    "TableOptions",
    "TablePlan",
    "load_catalog",
    "load_table",
    "parse_table_options",
    "plan",
    "pruning",
    "tail_source_options",
]
