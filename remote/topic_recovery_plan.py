"""Topic recovery planning (issue 24): which of a topic's segments in the bucket to recover.

Recovery takes either everything the bucket holds for the topic or a retention window: the newest segments of each
partition within `retention_bytes` (per partition, as Kafka's `retention.bytes`) and whose newest record is not older
than `retention_ms`. The log of a recovered partition starts at the first segment taken and ends where the bucket's
data ends, so producers continue after the last recovered offset whatever the window; a window that takes nothing
leaves an empty log starting there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from .bucket_manifest_reader import PartitionPlan, TopicPlan


@dataclass(frozen=True)
class RecoveryWindow:
    """-1 for no bound (Kafka's convention for retention.bytes / retention.ms)."""

    retention_bytes: int = -1
    retention_ms: int = -1

    @classmethod
    def everything(cls) -> RecoveryWindow:
        return cls()

    @classmethod
    def from_topic_configs(cls, configs: Mapping[str, str]) -> RecoveryWindow:
        """The topic's own retention.bytes / retention.ms (absent: unbounded, as Kafka's defaults of -1 and 7 days
        are not applied to data a user asked to recover)."""
        return cls(int(configs.get("retention.bytes", -1)), int(configs.get("retention.ms", -1)))


def select_partition(plan: PartitionPlan, window: RecoveryWindow, now_ms: int) -> PartitionPlan:
    """`plan` with only the newest segments within `window`; log start = the first one taken."""
    taken = []
    size = 0
    for seg in reversed(plan.segments):
        if window.retention_ms >= 0 and now_ms - seg.max_timestamp_ms > window.retention_ms:
            break
        if window.retention_bytes >= 0 and size + seg.size_bytes > window.retention_bytes:
            break
        taken.append(seg)
        size += seg.size_bytes
    taken.reverse()
    start = max(plan.log_start_offset, taken[0].start_offset) if taken else plan.next_offset
    return dataclasses.replace(plan, segments=taken, log_start_offset=start)


def select_topic(plan: TopicPlan, window: RecoveryWindow, now_ms: int) -> TopicPlan:
    """Every partition of `plan` cut to `window`."""
    parts = {p: select_partition(pp, window, now_ms) for p, pp in plan.partitions.items()}
    return dataclasses.replace(plan, partitions=parts)


__all__ = ["RecoveryWindow", "select_partition", "select_topic"]
