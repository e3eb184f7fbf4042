"""Reading a broker's Iceberg tables with pyiceberg (tests of Iceberg topics): the catalog, the committed offsets,
the rows as `Rec`s, and a bounded wait until the table has caught up with the topic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from strata.remote.iceberg.offsets import committed_next_offsets

from .records import Rec
from .waiting import wait_until

NAMESPACE = "strata"


def sql_catalog(uri: str) -> SqlCatalog:
    """The catalog as the broker opens it: pyiceberg's SQL catalog named "strata" (rows are per catalog name)."""
    return SqlCatalog("strata", uri=uri)


def broker_catalog(log_dir: Path) -> SqlCatalog:
    """A broker's default embedded catalog: <log.dirs[0]>/iceberg/catalog.db (made here if the broker has not yet)."""
    (log_dir / "iceberg").mkdir(parents=True, exist_ok=True)
    return sql_catalog(f"sqlite:///{log_dir}/iceberg/catalog.db")


def load(catalog: SqlCatalog, topic: str) -> Table:
    return catalog.load_table((NAMESPACE, topic))


def table_offsets(catalog: SqlCatalog, topic: str) -> dict[int, int]:
    """The next offset per partition of the table's current snapshot ({} before the table exists)."""
    try:
        return committed_next_offsets(load(catalog, topic))
    except Exception:  # noqa: BLE001 - no table yet
        return {}


def wait_translated(catalog: SqlCatalog, topic: str, ends: dict[int, int], timeout: float = 60.0) -> dict[int, int]:
    """Wait until the table's next offsets reach `ends` (the partitions' LSOs)."""

    def done() -> dict[int, int] | None:
        o = table_offsets(catalog, topic)
        return o if o and all(o.get(p, 0) >= e for p, e in ends.items()) else None

    got = wait_until(
        done,
        timeout=timeout,
        interval=0.2,
        message=lambda: f"table {topic} at {table_offsets(catalog, topic)}, expected {ends}",
    )
    assert got is not None
    return got


def rows(catalog: SqlCatalog, topic: str) -> list[Rec]:
    """Every row of the table as a Rec, sorted by (partition, offset)."""
    t = load(catalog, topic).scan().to_arrow()
    out = []
    for r in t.to_pylist():
        out.append(_rec(r))
    out.sort(key=lambda r: (r.partition, r.offset))
    return out


def _rec(r: dict[str, Any]) -> Rec:
    ts = r["timestamp"]
    return Rec(
        partition=r["partition"],
        key=r["key"],
        value=r["value"],
        headers=tuple((h["key"], h["value"]) for h in (r["headers"] or [])),
        timestamp=round(ts.timestamp() * 1000) if ts is not None else None,
        offset=r["offset"],
    )


__all__ = ["NAMESPACE", "broker_catalog", "load", "rows", "sql_catalog", "table_offsets", "wait_translated"]
