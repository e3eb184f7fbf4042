"""Start a replica's log of a recovered topic where the bucket's data ends (issue 24, broker/topic_recovery.py).

A recovered partition has no local data: its log is empty at one past the last recovered offset, its log start is
the first recovered segment's base (everything between lives in remote storage), its leader-epoch cache holds the
old lineage's chain below that offset, and the highest offset in remote storage is the last recovered one. Applied to
a replica whose log is still empty at offset 0 (made just now, or a crash before it was started); any other log has
data of its own and is left as it is.
"""

from __future__ import annotations

from typing import Any

from strata.storage.epoch_cache import EpochEntry
from strata.storage.log import UnifiedLog


def recovered_start(recovery: dict[str, Any] | None, partition: int) -> dict[str, Any] | None:
    """The partition's entry of a topic's recovery record, None when it has none or nothing to start past."""
    entry = (recovery or {}).get("partitions", {}).get(str(partition))
    return entry if entry is not None and int(entry.get("next_offset", 0)) > 0 else None


def start_recovered_log(ulog: UnifiedLog, entry: dict[str, Any]) -> bool:
    """Start an empty `ulog` as `entry` says; False (nothing done) when the log is not empty at offset 0."""
    if ulog.log_end_offset != 0 or ulog.log_start_offset != 0 or ulog.size_in_bytes != 0:
        return False
    next_offset = int(entry["next_offset"])
    log_start = min(int(entry["log_start_offset"]), next_offset)
    ulog.truncate_fully_and_start_at(next_offset, log_start)
    ulog.leader_epoch_cache.assign_entries(
        EpochEntry(int(e), int(o)) for e, o in entry.get("leader_epochs", []) if int(o) < next_offset
    )
    if int(entry.get("segments", 0)) > 0:
        ulog.update_highest_offset_in_remote_storage(next_offset - 1)
    return True


__all__ = ["recovered_start", "start_recovered_log"]
