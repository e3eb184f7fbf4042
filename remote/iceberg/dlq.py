"""The dead-letter table ``<topic>~dlq`` of ``iceberg.invalid.record.action=dlq_table``: the key_value columns of
each record a converter rejected, plus ``reason``.

Exactly once, like the topic table: each DLQ commit carries the same ``strata.partition.<p>.next-offset``
properties as the topic-table commit it belongs to, and is made first. A translator that dies between the two
converts the same records again after restart; ``append_dlq`` leaves out the rows below the DLQ table's committed
offset of their partition, so they are not written twice."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from .kv_schema import KEY_VALUE_SCHEMA
from .snapshot_props import TOPIC_ID, carried_properties, ensure_commit_properties, next_offsets, summary_properties

DLQ_SUFFIX = "~dlq"
DLQ_SCHEMA = KEY_VALUE_SCHEMA.append(pa.field("reason", pa.string()))


def dlq_table_name(topic: str) -> str:
    return topic + DLQ_SUFFIX


def dlq_rows(bad: Sequence[tuple[Mapping[str, Any], str]]) -> pa.Table:
    """Rejected ``(key_value row, reason)`` pairs as a table in ``DLQ_SCHEMA``."""
    names = KEY_VALUE_SCHEMA.names
    return pa.Table.from_pylist([{**{n: row.get(n) for n in names}, "reason": why} for row, why in bad], DLQ_SCHEMA)


def append_dlq(
    table: Any, bad: Sequence[tuple[Mapping[str, Any], str]], next_offsets_after: Mapping[int, int], topic_id: str
) -> int:
    """Append the rows of ``bad`` the DLQ table does not hold yet, with the commit's next offsets in the snapshot
    summary; returns the number of rows written. A CommitFailedException (a concurrent commit) propagates: the
    caller retries after ``table.refresh()``, as for the topic table."""
    ensure_commit_properties(table)
    parent = table.current_snapshot()
    done = next_offsets(summary_properties(parent))
    fresh = [(row, why) for row, why in bad if int(row["offset"]) >= done.get(int(row["partition"]), 0)]
    updates = {p: off for p, off in next_offsets_after.items() if off > done.get(p, -1)}
    if not fresh and not updates:
        return 0
    props = carried_properties(parent, updates)
    props[TOPIC_ID] = topic_id
    table.append(dlq_rows(fresh), snapshot_properties=props)
    return len(fresh)


__all__ = ["DLQ_SCHEMA", "DLQ_SUFFIX", "append_dlq", "dlq_rows", "dlq_table_name"]
