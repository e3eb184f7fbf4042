"""The dead-letter table ``<topic>~dlq`` of ``iceberg.invalid.record.action=dlq_table``: the key_value columns of
each record a converter rejected, plus ``reason``.

Exactly once, like the topic table: each DLQ commit carries ``strata.partition.<p>.next-offset`` = one past the last
rejected record of each partition it holds, and is made before the topic-table commit that moves the translator past
those records. A translator that dies between the two converts the same records again after restart; ``append_dlq``
leaves out the records below the DLQ table's committed offset of their partition, so none is written twice."""

from __future__ import annotations

import datetime
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from .catalog import NO_COMMIT_RETRIES, without_commit_retries
from .offsets import TOPIC_ID, carried_properties, committed_next_offsets
from .schema import KEY_VALUE_SCHEMA

DLQ_SUFFIX = "~dlq"
DLQ_SCHEMA = KEY_VALUE_SCHEMA.append(pa.field("reason", pa.string()))
MAX_ATTEMPTS = 20


def dlq_table_name(topic: str) -> str:
    return topic + DLQ_SUFFIX


def _row(record: Any) -> dict[str, Any]:
    """A key_value row of a rejected record: a mapping of the key_value columns, or a translator record (attributes
    topic, partition, offset, timestamp in ms, timestamp_type, key, value, headers as (key, value) pairs)."""
    if isinstance(record, Mapping):
        return {n: record.get(n) for n in KEY_VALUE_SCHEMA.names}
    headers = record.headers
    return {
        "key": record.key,
        "value": record.value,
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": datetime.datetime.fromtimestamp(record.timestamp / 1000, datetime.UTC),
        "timestampType": record.timestamp_type,
        "headers": [{"key": k, "value": v} for k, v in headers] if headers else None,
    }


def dlq_rows(bad: Sequence[tuple[Any, str]]) -> pa.Table:
    """Rejected ``(record, reason)`` pairs as a table in ``DLQ_SCHEMA``."""
    return pa.Table.from_pylist([{**_row(rec), "reason": why} for rec, why in bad], DLQ_SCHEMA)


def append_dlq(table: Any, bad: Sequence[tuple[Any, str]], topic_id: str) -> int:
    """Append the rejected records the DLQ table does not hold yet; returns how many were written. A
    CommitFailedException (a concurrent commit: another partition's leader) propagates; ``DlqSink`` retries."""
    without_commit_retries(table)
    done = committed_next_offsets(table)
    rows = dlq_rows(bad).to_pylist()
    fresh = [r for r in rows if r["offset"] >= done.get(r["partition"], 0)]
    if not fresh:
        return 0
    updates: dict[int, int] = {}
    for r in fresh:
        updates[r["partition"]] = max(updates.get(r["partition"], 0), r["offset"] + 1)
    props = carried_properties(table, updates)
    props[TOPIC_ID] = topic_id
    table.append(pa.Table.from_pylist(fresh, DLQ_SCHEMA), snapshot_properties=props)
    return len(fresh)


class DlqSink:
    """``iceberg.invalid.record.action=dlq_table``: called (blocking, on the translator's executor) with a round's
    rejected records before its topic-table commit. ``open_table`` loads or creates ``<topic>~dlq`` with
    ``DLQ_SCHEMA``; a commit that loses the race to another partition's leader is redone on the new snapshot."""

    def __init__(self, open_table: Callable[[], Any], topic_id: str) -> None:
        self.open_table = open_table
        self.topic_id = topic_id
        self.written = 0

    def __call__(self, rejected: Sequence[tuple[Any, str]]) -> None:
        from pyiceberg.exceptions import CommitFailedException

        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                self.written += append_dlq(self.open_table(), rejected, self.topic_id)
                return
            except CommitFailedException:
                if attempt == MAX_ATTEMPTS:
                    raise
                time.sleep(random.uniform(0.005, 0.05) * min(attempt, 10))  # spread competing committers apart


def dlq_sink(catalog: Any, identifier: tuple[str, str]) -> DlqSink:
    """The broker's hook: the DLQ sink of the topic table ``identifier``. The DLQ table ``<topic>~dlq`` (same
    namespace, unpartitioned) is made at its first write; its commits carry the topic table's ``strata.topic-id``
    (a table property the translator sets)."""
    from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError

    ns, topic = identifier
    dlq_id = (ns, dlq_table_name(topic))
    topic_id = str(catalog.load_table(identifier).properties.get(TOPIC_ID, ""))

    def open_table() -> Any:
        try:
            return catalog.load_table(dlq_id)
        except NoSuchTableError:
            pass
        try:
            return catalog.create_table(dlq_id, schema=DLQ_SCHEMA, properties={**NO_COMMIT_RETRIES, TOPIC_ID: topic_id})
        except TableAlreadyExistsError:  # another partition's leader made it first
            return catalog.load_table(dlq_id)

    return DlqSink(open_table, topic_id)


__all__ = ["DLQ_SCHEMA", "DLQ_SUFFIX", "DlqSink", "append_dlq", "dlq_rows", "dlq_sink", "dlq_table_name"]
