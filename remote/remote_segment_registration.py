"""Register segments that already sit in the bucket in the RLMM, for a topic that does not have them (issue 24).

Topic recovery and whole-cluster restore rebuild a partition's remote log from its bucket manifest: each listed
segment gets a new COPY_SEGMENT_STARTED and COPY_SEGMENT_FINISHED record pointing at the objects that are there
(same segment id, offsets, epochs and KIP-917 custom metadata), so nothing is copied. The records are built as read
replicas build theirs (remote/manifest_segment_metadata.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

from .bucket_manifest import SegmentEntry
from .manifest_segment_metadata import segment_metadata
from .metadata import RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState, TopicIdPartition
from .rlmm_api import RemoteLogMetadataManager

# partitions registered at once: each record is an acks=-1 write to a metadata partition's leader
PARALLEL_PARTITIONS = 16
READY_TIMEOUT_S = 30.0


async def register_partition_segments(
    rlmm: RemoteLogMetadataManager, tip: TopicIdPartition, entries: Iterable[SegmentEntry], broker_id: int
) -> int:
    """Record each segment as copied (started, then finished), in offset order, skipping what the RLMM already has
    (a retried recovery); the number of records written. The RLMM must follow `tip` (it checks transitions)."""
    known = {s.remote_log_segment_id.id: s.state for s in rlmm.list_remote_log_segments(tip)}
    n = 0
    for entry in entries:
        now = int(time.time() * 1000)
        meta = segment_metadata(tip, entry, RemoteLogSegmentState.COPY_SEGMENT_STARTED)
        state = known.get(meta.remote_log_segment_id.id)
        if state is None:
            await rlmm.add_remote_log_segment_metadata(meta)
            n += 1
        if state in (None, RemoteLogSegmentState.COPY_SEGMENT_STARTED):
            await rlmm.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(
                    meta.remote_log_segment_id,
                    now,
                    entry.custom_metadata,
                    RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                    broker_id,
                )
            )
            n += 1
    return n


async def register_segments(
    rlmm: RemoteLogMetadataManager,
    segments: dict[TopicIdPartition, list[SegmentEntry]],
    broker_id: int,
    timeout_s: float = READY_TIMEOUT_S,
) -> int:
    """`register_partition_segments` for several partitions, a few at once; the number of records written. The
    partitions this broker's RLMM does not follow are followed for the time of the call."""
    tips = [tip for tip, e in segments.items() if e]
    borrowed = [tip for tip in tips if tip not in rlmm.followed_partitions()]
    rlmm.on_partition_leadership_changes([], borrowed)
    gate = asyncio.Semaphore(PARALLEL_PARTITIONS)

    async def one(tip: TopicIdPartition) -> int:
        async with gate:
            await rlmm.wait_until_ready(tip, timeout_s)
            return await register_partition_segments(rlmm, tip, segments[tip], broker_id)

    try:
        return sum(await asyncio.gather(*(one(tip) for tip in tips)))
    finally:
        rlmm.on_stop_partitions(borrowed)


__all__ = ["register_partition_segments", "register_segments"]
