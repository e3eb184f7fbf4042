"""The exactly-once bookkeeping in snapshot summaries (docs/iceberg.md, "Exactly once"): every snapshot of a topic
table (appends, and the replace/overwrite snapshots of maintenance) carries ``strata.partition.<p>.next-offset``
for every Kafka partition the table has received data for, and ``strata.topic-id``. Anything that commits to such a
table builds its summary properties here, from the snapshot it commits on top of."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PREFIX = "strata.partition."
SUFFIX = ".next-offset"
TOPIC_ID = "strata.topic-id"
# pyiceberg (0.12) retries a commit that lost a race by rebuilding the snapshot on the new parent with the SAME
# summary properties, computed from the old parent: a partition another leader advanced meanwhile would get its
# older next-offset back (duplicates after the next leader change). Topic and DLQ tables turn that retry off;
# their writers refresh, rebuild the properties and retry themselves.
COMMIT_PROPERTIES = {"commit.retry.num-retries": "0"}


def next_offset_key(partition: int) -> str:
    return f"{PREFIX}{partition}{SUFFIX}"


def summary_properties(snapshot: Any) -> dict[str, str]:
    """A snapshot's summary as a plain dict (empty for no snapshot)."""
    if snapshot is None or snapshot.summary is None:
        return {}
    return dict(snapshot.summary.additional_properties)


def next_offsets(props: Mapping[str, str]) -> dict[int, int]:
    """``{partition: next offset}`` from summary properties."""
    out: dict[int, int] = {}
    for k, v in props.items():
        if k.startswith(PREFIX) and k.endswith(SUFFIX):
            p = k[len(PREFIX) : -len(SUFFIX)]
            if p.isdigit():
                out[int(p)] = int(v)
    return out


def carried_properties(snapshot: Any, updates: Mapping[int, int] | None = None) -> dict[str, str]:
    """The ``strata.*`` properties of ``snapshot`` (the parent of the commit being built), with ``updates``
    (partition -> next offset) applied: the summary properties of the next commit."""
    props = {k: v for k, v in summary_properties(snapshot).items() if k.startswith("strata.")}
    for p, off in (updates or {}).items():
        props[next_offset_key(p)] = str(off)
    return props


def ensure_commit_properties(table: Any) -> None:
    """Set ``COMMIT_PROPERTIES`` on ``table`` unless it has them."""
    if any(table.properties.get(k) != v for k, v in COMMIT_PROPERTIES.items()):
        with table.transaction() as tx:
            tx.set_properties(COMMIT_PROPERTIES)


__all__ = [
    "COMMIT_PROPERTIES",
    "TOPIC_ID",
    "ensure_commit_properties",
    "carried_properties",
    "next_offset_key",
    "next_offsets",
    "summary_properties",
]
