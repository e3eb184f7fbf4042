"""Committed offsets of a topic table (contract: the current snapshot's summary holds every partition's next
offset to translate)."""

from __future__ import annotations

from typing import Any

from .snapshot_props import next_offsets, summary_properties


def committed_next_offsets(table: Any) -> dict[int, int]:
    """``{partition: next offset to translate}`` from ``table``'s current snapshot ({} for an empty table)."""
    return next_offsets(summary_properties(table.current_snapshot()))


__all__ = ["committed_next_offsets"]
