"""A bucket manifest's segment entry as the RLMM's segment metadata (issue 24).

Read replicas serve a manifest's segments through the RemoteLogManager's read path, which takes
`RemoteLogSegmentMetadata`; topic recovery writes the same records into a cluster's RLMM. Both start here: the
entry's fields map one to one (the segment id is Kafka's base64url text in the manifest, a uuid here).
"""

from __future__ import annotations

from strata.protocol.uuids import parse_kafka_uuid

from .bucket_manifest import SegmentEntry
from .metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from .rlmm_cache import RemoteLogMetadataCache


def segment_metadata(
    tip: TopicIdPartition,
    entry: SegmentEntry,
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
) -> RemoteLogSegmentMetadata:
    """The metadata of a listed (COPY_SEGMENT_FINISHED) segment; `state` for a writer that records it in steps."""
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(tip, parse_kafka_uuid(entry.segment_id)),
        start_offset=entry.start_offset,
        end_offset=entry.end_offset,
        max_timestamp_ms=entry.max_timestamp_ms,
        broker_id=entry.broker_id,
        event_timestamp_ms=entry.event_timestamp_ms,
        segment_size_in_bytes=entry.size_bytes,
        segment_leader_epochs=dict(entry.segment_leader_epochs),
        state=state,
        custom_metadata=entry.custom_metadata,
        txn_idx_empty=entry.txn_idx_empty,
    )


def metadata_cache(tip: TopicIdPartition, entries: list[SegmentEntry]) -> RemoteLogMetadataCache:
    """A partition's RemoteLogMetadataCache holding exactly `entries`, finished (the lookups of the topic-based
    RLMM, with its lineage rules, over a manifest's segments)."""
    cache = RemoteLogMetadataCache()
    cache.mark_initialized()
    for entry in entries:
        started = segment_metadata(tip, entry, RemoteLogSegmentState.COPY_SEGMENT_STARTED)
        cache.add_copy_in_progress_segment(started)
        cache.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                started.remote_log_segment_id,
                entry.event_timestamp_ms,
                entry.custom_metadata,
                RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                entry.broker_id,
            )
        )
    return cache


__all__ = ["metadata_cache", "segment_metadata"]
