"""Exactly-once bookkeeping: the next offset to translate of every Kafka partition, in the snapshot summary.

Every append snapshot the translator commits carries `strata.partition.<p>.next-offset` for every partition the table
has ever received data for (carried forward from the parent snapshot, updated for the partitions of that commit)
and `strata.topic-id`. The current snapshot alone therefore tells where each partition resumes, in the same atomic
commit as the data files, and expiring old snapshots never loses it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

PREFIX = "strata.partition."
SUFFIX = ".next-offset"
TOPIC_ID = "strata.topic-id"
_KEY = re.compile(r"^strata\.partition\.(\d+)\.next-offset$")


def next_offset_key(partition: int) -> str:
    return f"{PREFIX}{partition}{SUFFIX}"


def _summary(table: Any) -> Mapping[str, Any]:
    snap = table.current_snapshot()
    if snap is None or snap.summary is None:
        return {}
    return snap.summary.additional_properties


def committed_next_offsets(table: Any) -> dict[int, int]:
    """Kafka partition -> next offset to translate, from the table's current snapshot ({} for a new table)."""
    out: dict[int, int] = {}
    for k, v in _summary(table).items():
        m = _KEY.match(k)
        if m is not None:
            out[int(m.group(1))] = int(v)
    return out


def committed_topic_id(table: Any) -> str | None:
    """The topic id the table's offsets belong to (None before the first commit)."""
    v = _summary(table).get(TOPIC_ID)
    return None if v is None else str(v)


def summary_properties(table: Any, updates: Mapping[int, int], topic_id: str) -> dict[str, str]:
    """The offsets for the next snapshot: the current snapshot's, carried forward, with `updates` applied. Offsets
    of another topic id (the topic was deleted and made again under its name) are not carried."""
    carried = committed_next_offsets(table) if committed_topic_id(table) in (None, topic_id) else {}
    carried.update(updates)
    props = {next_offset_key(p): str(o) for p, o in sorted(carried.items())}
    props[TOPIC_ID] = topic_id
    return props


def carried_properties(table: Any, updates: Mapping[int, int] | None = None) -> dict[str, str]:
    """The ``strata.*`` summary properties of ``table``'s current snapshot (offsets and topic id, whatever the topic
    id), with ``updates`` applied: for commits that are not a translator's (DLQ appends, maintenance rewrites)."""
    props = {k: str(v) for k, v in _summary(table).items() if k.startswith("strata.")}
    props.update({next_offset_key(p): str(o) for p, o in (updates or {}).items()})
    return props


__all__ = [
    "TOPIC_ID",
    "carried_properties",
    "committed_next_offsets",
    "committed_topic_id",
    "next_offset_key",
    "summary_properties",
]
