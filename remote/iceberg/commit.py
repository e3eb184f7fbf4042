"""Parquet data files and the append commit that makes them rows, with the partitions' next offsets in the same
snapshot (offsets.py). Blocking: runs on the translator's executor.

Several partition leaders (on different brokers) commit to one table, so a commit reads the current snapshot,
checks that it still holds what this translator expects for its partition, merges the offsets and commits; a
concurrent commit makes the catalog refuse it (Iceberg's optimistic concurrency, CommitFailedException) and it is
redone on the new snapshot with the same data files. If the table's offset for the partition is no longer the one
this translator started from (a new leader translated the range), the commit is refused for good: the files become
orphans, never rows.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from .offsets import committed_next_offsets, committed_topic_id, summary_properties

MAX_ATTEMPTS = 20
COMMIT_ID = "strata.commit-id"  # one per commit_files call: tells whether an attempt whose answer was lost landed


class OffsetConflictError(Exception):
    """The table's next offset for the partition is not the one this translator started from: another leader
    committed this range. `actual` is the table's."""

    def __init__(self, partition: int, expected: int | None, actual: int | None) -> None:
        super().__init__(
            f"partition {partition}: the table's next offset is {actual}, not {expected}: another leader translated it"
        )
        self.actual = actual


@dataclass(frozen=True)
class CommitResult:
    table: Table
    attempts: int


def table_next_offset(table: Table, partition: int, topic_id: str) -> int | None:
    """The table's next offset for `partition` of the topic with `topic_id` (None: nothing committed yet)."""
    if committed_topic_id(table) not in (None, topic_id):
        return None
    return committed_next_offsets(table).get(partition)


def _landed(table: Table, commit_id: str) -> bool:
    """Whether a recent snapshot is this commit's (the catalog may have applied an attempt it answered badly)."""
    for snap in table.snapshots()[-MAX_ATTEMPTS:]:
        if snap.summary is not None and snap.summary.additional_properties.get(COMMIT_ID) == commit_id:
            return True
    return False


def write_data_files(table: Table, rows: pa.Table) -> list[DataFile]:
    """Write `rows` as Parquet files of the table's target size, split by its partition spec (not committed)."""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    if rows.num_rows == 0:
        return []
    return list(_dataframe_to_data_files(table.metadata, rows, table.io, write_uuid=uuid.uuid4()))


def commit_files(
    catalog: Catalog,
    identifier: tuple[str, str],
    files: list[DataFile],
    partition: int,
    expected: int | None,
    next_offset: int,
    topic_id: str,
    table: Table | None = None,
) -> CommitResult:
    """Append `files` and set the partition's next offset to `next_offset`, if the table's is still `expected`.
    Raises OffsetConflictError when it is not; CommitFailedException after MAX_ATTEMPTS concurrent commits.
    `table`: the table as just loaded (the first attempt uses it; a refused one loads the table again)."""
    commit_id = uuid.uuid4().hex
    for attempt in range(1, MAX_ATTEMPTS + 1):
        if table is None or attempt > 1:
            table = catalog.load_table(identifier)
        if attempt > 1 and _landed(table, commit_id):
            return CommitResult(table, attempt)  # an earlier attempt landed after all (its answer was lost)
        actual = table_next_offset(table, partition, topic_id)
        if actual != expected:
            raise OffsetConflictError(partition, expected, actual)
        props = summary_properties(table, {partition: next_offset}, topic_id)
        props[COMMIT_ID] = commit_id
        tx = table.transaction()
        with tx.update_snapshot(snapshot_properties=props).fast_append() as append:
            for f in files:
                append.append_data_file(f)
        try:
            return CommitResult(tx.commit_transaction(), attempt)
        except (CommitFailedException, CommitStateUnknownException):
            if attempt == MAX_ATTEMPTS:
                raise
            time.sleep(random.uniform(0.005, 0.05) * min(attempt, 10))  # spread competing committers apart
    raise AssertionError("unreachable")


__all__ = ["CommitResult", "OffsetConflictError", "commit_files", "table_next_offset", "write_data_files"]
