"""Table maintenance on real pyiceberg tables (SQLite catalog, local warehouse): small files merged by one overwrite
snapshot that keeps every partition's committed offset, a merge that loses the race to a translator's commit
changes nothing, snapshot expiry keeps the offsets and deletes only unreferenced files, and the scheduler runs."""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.transforms import HourTransform

from strata.remote.iceberg.catalog import without_commit_retries
from strata.remote.iceberg.maintenance import (
    MaintenanceScheduler,
    expire_snapshots,
    merge_small_files,
    run_maintenance,
)
from strata.remote.iceberg.offsets import TOPIC_ID, carried_properties, committed_next_offsets
from strata.remote.iceberg.schema import KEY_VALUE_SCHEMA
from tests.support.waiting import wait_until

T0 = datetime.datetime(2026, 4, 1, 8, 0, tzinfo=datetime.UTC)


def _rows(partition: int, lo: int, hi: int) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "key": None,
                "value": f"{partition}-{o}".encode(),
                "topic": "t",
                "partition": partition,
                "offset": o,
                "timestamp": T0 + datetime.timedelta(seconds=o),
                "timestampType": 0,
                "headers": None,
            }
            for o in range(lo, hi)
        ],
        KEY_VALUE_SCHEMA,
    )


def _commit(table: Any, partition: int, lo: int, hi: int) -> None:
    props = carried_properties(table, {partition: hi})
    props[TOPIC_ID] = "tid"
    table.append(_rows(partition, lo, hi), snapshot_properties=props)


def _content(table: Any) -> list[tuple[int, int, bytes]]:
    rows = table.scan().to_arrow().to_pylist()
    return sorted((r["partition"], r["offset"], r["value"]) for r in rows)


@pytest.fixture
def catalog(tmp_path: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    c = SqlCatalog("m", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    c.create_namespace("strata")
    return c


@pytest.fixture
def table(catalog: Any) -> Any:
    t = catalog.create_table(("strata", "t"), schema=KEY_VALUE_SCHEMA)
    with t.update_spec() as u:
        u.add_field("timestamp", HourTransform(), "timestamp_hour")
    without_commit_retries(t)
    for i in range(6):  # six small commits alternating between two Kafka partitions, one hour
        _commit(t, i % 2, (i // 2) * 10, (i // 2) * 10 + 10)
    return t


def test_small_files_merge_into_one_and_offsets_are_carried(table: Any) -> None:
    before = _content(table)
    assert committed_next_offsets(table) == {0: 30, 1: 30}
    assert len(list(table.scan().plan_files())) == 6
    merged, written = merge_small_files(table)
    assert (merged, written) == (6, 1)
    table.refresh()
    files = list(table.scan().plan_files())
    assert len(files) == 1
    assert _content(table) == before
    snap = table.current_snapshot()
    assert snap.summary.operation.value == "overwrite"
    assert committed_next_offsets(table) == {0: 30, 1: 30}
    assert snap.summary["strata.topic-id"] == "tid"
    # the merged file is in Kafka order: partition, then offset
    rows = table.scan().to_arrow()
    assert list(zip(rows["partition"].to_pylist(), rows["offset"].to_pylist(), strict=True)) == sorted(
        (p, o) for p, o, _ in before
    )
    # nothing left to merge
    assert merge_small_files(table) == (0, 0)


def test_merge_that_loses_the_race_to_a_translator_commit_changes_nothing(catalog: Any, table: Any) -> None:
    stale = catalog.load_table(("strata", "t"))  # the maintenance task read the table ...
    _commit(table, 1, 30, 40)  # ... then partition 1's leader committed
    with pytest.raises(CommitFailedException):
        merge_small_files(stale)
    table.refresh()
    assert committed_next_offsets(table) == {0: 30, 1: 40}
    assert len(list(table.scan().plan_files())) == 7
    # run_maintenance swallows the lost race and merges at its next run
    assert run_maintenance(stale).files_merged == 0
    assert run_maintenance(stale).files_merged == 7
    table.refresh()
    assert committed_next_offsets(table) == {0: 30, 1: 40}


def test_expiry_keeps_offsets_and_deletes_only_unreferenced_files(table: Any, tmp_path: Path) -> None:
    before = _content(table)
    old_files = {t.file.file_path for t in table.scan().plan_files()}
    merge_small_files(table)
    table.refresh()
    now = table.current_snapshot().timestamp_ms + 6 * 24 * 3600 * 1000  # past the 5-day default
    expired, deleted = expire_snapshots(table, now)
    table.refresh()
    assert expired == 6 and deleted == 6
    assert len(table.snapshots()) == 1
    assert committed_next_offsets(table) == {0: 30, 1: 30}
    assert _content(table) == before
    assert not any(Path(p.removeprefix("file://")).exists() for p in old_files)
    # young snapshots are kept
    _commit(table, 0, 30, 31)
    assert expire_snapshots(table, table.current_snapshot().timestamp_ms + 1000) == (0, 0)


def test_scheduler_runs_on_its_interval_and_stops(table: Any) -> None:
    async def main() -> int:
        async def tables() -> list[Any]:
            return [table]

        s = MaintenanceScheduler(50, tables)
        s.start()
        await asyncio.to_thread(wait_until, lambda: s.runs >= 1, timeout=30, message="no maintenance run")
        await s.stop()
        return s.runs

    assert asyncio.run(main()) >= 1
    table.refresh()
    assert len(list(table.scan().plan_files())) == 1


@pytest.mark.parametrize("retry_off", [False, True])
def test_pyiceberg_commit_retry_would_rewind_offsets(catalog: Any, retry_off: bool) -> None:
    """Why topic tables set commit.retry.num-retries=0: pyiceberg's own retry rebuilds a lost commit on the new
    parent with the summary properties computed for the old one."""
    t = catalog.create_table(("strata", f"r{int(retry_off)}"), schema=KEY_VALUE_SCHEMA)
    if retry_off:
        without_commit_retries(t)
    _commit(t, 0, 0, 10)
    leader1 = catalog.load_table(t.name())
    props = carried_properties(leader1, {1: 5})  # partition 1's leader builds its commit ...
    _commit(t, 0, 10, 20)  # ... partition 0's leader commits first
    if retry_off:
        with pytest.raises(CommitFailedException):
            leader1.append(_rows(1, 0, 5), snapshot_properties=props)
        assert committed_next_offsets(catalog.load_table(t.name())) == {0: 20}
    else:
        leader1.append(_rows(1, 0, 5), snapshot_properties=props)
        assert committed_next_offsets(catalog.load_table(t.name())) == {0: 10, 1: 5}  # partition 0 went back
