"""Reading a broker's Iceberg tables with pyiceberg (tests of Iceberg topics): the catalog, the committed offsets,
the rows as `Rec`s, and a bounded wait until the table has caught up with the topic."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
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
    """Every row of the table as a Rec, sorted by (partition, offset). Read column by column (a row-wise
    to_pylist of 100,000 rows with timestamps and header structs takes seconds)."""
    t = load(catalog, topic).scan().to_arrow()
    col = t.column
    ts = [None if v is None else v // 1000 for v in col("timestamp").cast(pa.int64()).to_pylist()]
    hdrs = col("headers").combine_chunks()
    bounds = hdrs.offsets.to_pylist()
    flat = hdrs.flatten()
    hkeys, hvalues = flat.field("key").to_pylist(), flat.field("value").to_pylist()
    headers = [
        tuple(zip(hkeys[bounds[i] : bounds[i + 1]], hvalues[bounds[i] : bounds[i + 1]])) for i in range(t.num_rows)
    ]
    out = [
        Rec(partition=p, key=k, value=v, headers=h, timestamp=s, offset=o)
        for p, k, v, h, s, o in zip(
            col("partition").to_pylist(),
            col("key").to_pylist(),
            col("value").to_pylist(),
            headers,
            ts,
            col("offset").to_pylist(),
        )
    ]
    out.sort(key=lambda r: (r.partition, r.offset))
    return out


__all__ = ["NAMESPACE", "broker_catalog", "load", "rows", "sql_catalog", "table_offsets", "wait_translated"]
