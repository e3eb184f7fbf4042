"""Table maintenance of topic tables, every ``iceberg.maintenance.interval.ms``: merge small data files and expire
old snapshots, with Iceberg's own table properties for the thresholds.

* **Small files.** A translator commits on its target lag, so a quiet topic makes one small file per commit. Files
  of one Iceberg partition smaller than ``min-file-size`` (75% of ``write.target-file-size-bytes``, Iceberg's
  RewriteDataFiles default) are merged once there are ``min-input-files`` (5) of them: read with pyarrow, sorted by
  Kafka partition and offset, written as new files and swapped in by one overwrite snapshot (pyiceberg 0.12 has no
  rewrite action). That snapshot carries every ``strata.partition.<p>.next-offset`` of its parent, so the
  committed offsets never go back. It commits only on top of the snapshot it read (Iceberg's optimistic
  concurrency): if a translator committed meanwhile, the merge is dropped and tried at the next run. Files with
  delete files attached are left alone.
* **Snapshots.** Snapshots older than ``history.expire.max-snapshot-age-ms`` (5 days) are expired, keeping the
  newest ``history.expire.min-snapshots-to-keep`` (1) and every branch or tag head; the data files only they
  referenced are deleted. The offsets live in every snapshot's summary, so expiry cannot lose them.

Commits are made with pyiceberg's automatic commit retry off (``catalog.without_commit_retries``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .catalog import without_commit_retries
from .offsets import carried_properties

log = logging.getLogger(__name__)

TARGET_FILE_SIZE = "write.target-file-size-bytes"
TARGET_FILE_SIZE_DEFAULT = 512 << 20  # Iceberg's default
MAX_SNAPSHOT_AGE = "history.expire.max-snapshot-age-ms"
MAX_SNAPSHOT_AGE_DEFAULT = 5 * 24 * 3600 * 1000
MIN_SNAPSHOTS = "history.expire.min-snapshots-to-keep"
MIN_SNAPSHOTS_DEFAULT = 1
MIN_INPUT_FILES = 5  # Iceberg RewriteDataFiles' min-input-files


@dataclass
class MaintenanceResult:
    files_merged: int = 0  # small files replaced
    files_written: int = 0
    snapshots_expired: int = 0
    files_deleted: int = 0  # data files only expired snapshots referenced


def _int_prop(table: Any, key: str, default: int) -> int:
    try:
        return int(table.properties.get(key, default))
    except ValueError:
        return default


# -- small files ----------------------------------------------------------------------------------------------------
def _kafka_order(rows: pa.Table) -> pa.Table:
    """Rows sorted by Kafka partition and offset (top-level columns, or the ``kafka`` struct's)."""
    if "partition" in rows.column_names and "offset" in rows.column_names:
        parts, offs = rows["partition"], rows["offset"]
    elif "kafka" in rows.column_names:
        parts, offs = pc.struct_field(rows["kafka"], "partition"), pc.struct_field(rows["kafka"], "offset")
    else:
        return rows
    keys = pa.table({"p": parts, "o": offs})
    return rows.take(pc.sort_indices(keys, sort_keys=[("p", "ascending"), ("o", "ascending")]))


def small_file_groups(table: Any, min_input_files: int = MIN_INPUT_FILES) -> list[list[Any]]:
    """FileScanTasks of the current snapshot to merge: per Iceberg partition of the current spec, the files below
    the minimum size, when there are at least ``min_input_files`` of them."""
    target = _int_prop(table, TARGET_FILE_SIZE, TARGET_FILE_SIZE_DEFAULT)
    min_size = target * 3 // 4
    spec_id = table.spec().spec_id
    groups: dict[Any, list[Any]] = {}
    for task in table.scan(snapshot_id=table.current_snapshot().snapshot_id).plan_files():
        f = task.file
        if task.delete_files or f.spec_id != spec_id or f.file_size_in_bytes >= min_size:
            continue
        groups.setdefault(repr(f.partition), []).append(task)
    return [g for g in groups.values() if len(g) >= min_input_files]


def merge_small_files(table: Any, min_input_files: int = MIN_INPUT_FILES) -> tuple[int, int]:
    """One overwrite snapshot replacing the small files of every eligible partition; returns (files replaced,
    files written). Raises CommitFailedException when another commit came first (nothing changes then)."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files

    if table.current_snapshot() is None:
        return 0, 0
    groups = small_file_groups(table, min_input_files)
    if not groups:
        return 0, 0
    old: list[Any] = []
    new: list[Any] = []
    for tasks in groups:
        rows = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(tasks)
        expected = sum(t.file.record_count for t in tasks)
        if rows.num_rows != expected:  # never replace files by fewer (or more) rows than they hold
            raise RuntimeError(f"merge read {rows.num_rows} rows from files holding {expected}")
        old += [t.file for t in tasks]
        new += list(_dataframe_to_data_files(table.metadata, _kafka_order(rows), table.io))
    tx = table.transaction()
    with tx.update_snapshot(snapshot_properties=carried_properties(table)).overwrite() as ow:
        for f in old:
            ow.delete_data_file(f)
        for f in new:
            ow.append_data_file(f)
    tx.commit_transaction()
    return len(old), len(new)


# -- snapshots ------------------------------------------------------------------------------------------------------
def _data_files(table: Any, snapshots: Iterable[Any]) -> set[str]:
    out: set[str] = set()
    for s in snapshots:
        for m in s.manifests(table.io):
            out.update(e.data_file.file_path for e in m.fetch_manifest_entry(table.io, discard_deleted=True))
    return out


def expire_snapshots(table: Any, now_ms: int) -> tuple[int, int]:
    """Expire the snapshots past the age limit (keeping the newest ``min-snapshots-to-keep`` and branch/tag heads)
    and delete the data files only they referenced; returns (snapshots expired, files deleted)."""
    max_age = _int_prop(table, MAX_SNAPSHOT_AGE, MAX_SNAPSHOT_AGE_DEFAULT)
    keep = max(1, _int_prop(table, MIN_SNAPSHOTS, MIN_SNAPSHOTS_DEFAULT))
    snaps = sorted(table.snapshots(), key=lambda s: s.timestamp_ms)
    protected = {r.snapshot_id for r in table.metadata.refs.values()} | {s.snapshot_id for s in snaps[-keep:]}
    doomed = [s for s in snaps if s.timestamp_ms < now_ms - max_age and s.snapshot_id not in protected]
    if not doomed:
        return 0, 0
    ids = {s.snapshot_id for s in doomed}
    kept = [s for s in snaps if s.snapshot_id not in ids]
    orphans = _data_files(table, doomed) - _data_files(table, kept)
    table.maintenance.expire_snapshots().by_ids(sorted(ids)).commit()
    for path in sorted(orphans):
        with contextlib.suppress(FileNotFoundError):
            table.io.delete(path)
    return len(ids), len(orphans)


def run_maintenance(table: Any, now_ms: int | None = None, min_input_files: int = MIN_INPUT_FILES) -> MaintenanceResult:
    """Merge small files, then expire snapshots (blocking: run it in a worker thread). A merge that loses the race
    to a translator's commit is skipped until the next run."""
    from pyiceberg.exceptions import CommitFailedException

    without_commit_retries(table)
    out = MaintenanceResult()
    try:
        out.files_merged, out.files_written = merge_small_files(table, min_input_files)
    except CommitFailedException as e:
        log.info("iceberg maintenance of %s: merge skipped, a concurrent commit came first (%s)", table.name(), e)
        table.refresh()
    out.snapshots_expired, out.files_deleted = expire_snapshots(
        table, int(time.time() * 1000) if now_ms is None else now_ms
    )
    return out


class MaintenanceScheduler:
    """Runs ``run_maintenance`` every ``interval_ms`` on the tables ``tables()`` returns (those this broker maintains:
    the broker wiring passes the tables of topics whose partition 0 it leads), one at a time in a worker thread. A
    failure is logged and the table is tried again at the next run. ``interval_ms`` <= 0: never."""

    def __init__(self, interval_ms: int, tables: Callable[[], Awaitable[list[Any]]]) -> None:
        self.interval_ms = interval_ms
        self.tables = tables
        self.runs = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.interval_ms > 0 and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="iceberg-maintenance")

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
            self._task = None

    async def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval_ms / 1000)
            if self._stop.is_set():
                return
            await self.run_once()

    async def run_once(self) -> list[MaintenanceResult]:
        out = []
        for table in await self.tables():
            try:
                out.append(await asyncio.to_thread(run_maintenance, table))
            except Exception:
                log.exception("iceberg maintenance of %s failed; retried next interval", table.name())
        self.runs += 1
        return out


__all__ = [
    "MaintenanceResult",
    "MaintenanceScheduler",
    "expire_snapshots",
    "merge_small_files",
    "run_maintenance",
    "small_file_groups",
]
