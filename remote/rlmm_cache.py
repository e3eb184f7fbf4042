"""In-memory remote log metadata per user partition: Kafka's RemoteLogMetadataCache, RemoteLogLeaderEpochState and
RemotePartitionMetadataStore semantics.

Which segments each lookup sees, by state (as Kafka's table):

    method / state                      COPY_STARTED  COPY_FINISHED  DELETE_STARTED  DELETE_FINISHED
    remote_log_segment_metadata(e, o)        no            yes            no              no
    list_remote_log_segments(epoch)          yes           yes            yes             no
    list_remote_log_segments()               yes           yes            yes             no

Per leader epoch, `RemoteLogLeaderEpochState` maps the epoch's start offset inside each COPY_SEGMENT_FINISHED segment
to that segment, and keeps "unreferenced" segments (copy in progress, being deleted, or superseded by a later upload
of the same offsets in the same epoch). A segment that reaches DELETE_SEGMENT_FINISHED disappears.
`highest_offset_for_epoch` is the highest offset of that epoch ever copied (COPY_SEGMENT_FINISHED), as in Kafka it
never goes down when segments are later deleted.

Differences from Kafka, on purpose: an illegal state transition raises `InvalidStateTransitionError` (Kafka logs and
drops it; the RLMM's apply loop catches the error and drops the event the same way); listing all segments is
sorted by start offset (Kafka returns them in hash order); a copied segment replaced in an epoch's offset map by a
later one with the same epoch start offset becomes unreferenced (Kafka's map put drops it from the epoch's listing,
against its own javadoc), so it stays visible to expiration.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

from .metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    is_valid_segment_transition,
)
from .rlmm_types import InvalidStateTransitionError, RemoteStorageNotReadyError
from .rsm import RemoteResourceNotFoundError

S = RemoteLogSegmentState


def is_valid_partition_delete_transition(
    src: RemotePartitionDeleteState | None, dst: RemotePartitionDeleteState
) -> bool:
    """Kafka's RemotePartitionDeleteState.isValidTransition."""
    if src is None:
        return dst == RemotePartitionDeleteState.DELETE_PARTITION_MARKED
    if src == dst:
        return True
    if src == RemotePartitionDeleteState.DELETE_PARTITION_MARKED:
        return dst == RemotePartitionDeleteState.DELETE_PARTITION_STARTED
    if src == RemotePartitionDeleteState.DELETE_PARTITION_STARTED:
        return dst == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
    return False


class RemoteLogLeaderEpochState:
    """Segments of one leader epoch: start offset (of the epoch within the segment) -> copied segment, plus the
    unreferenced segments (kept in insertion order, so listings are deterministic)."""

    __slots__ = ("_offset_to_id", "_offsets", "highest_log_offset", "unreferenced")

    def __init__(self) -> None:
        self._offsets: list[int] = []  # sorted keys of _offset_to_id
        self._offset_to_id: dict[int, RemoteLogSegmentId] = {}
        self.unreferenced: dict[RemoteLogSegmentId, None] = {}
        self.highest_log_offset: int | None = None

    # sorted-map helpers
    def _put(self, offset: int, sid: RemoteLogSegmentId) -> None:
        if offset not in self._offset_to_id:
            bisect.insort(self._offsets, offset)
        self._offset_to_id[offset] = sid

    def _remove(self, offset: int) -> None:
        del self._offset_to_id[offset]
        i = bisect.bisect_left(self._offsets, offset)
        del self._offsets[i]

    def floor_entry(self, offset: int) -> RemoteLogSegmentId | None:
        i = bisect.bisect_right(self._offsets, offset)
        return None if i == 0 else self._offset_to_id[self._offsets[i - 1]]

    def referenced(self) -> list[tuple[int, RemoteLogSegmentId]]:
        return [(o, self._offset_to_id[o]) for o in self._offsets]

    def is_empty(self) -> bool:
        return not self._offsets and not self.unreferenced

    # transitions
    def handle_copy_started(self, sid: RemoteLogSegmentId) -> None:
        self.unreferenced[sid] = None

    def handle_copy_finished(self, start_offset: int, sid: RemoteLogSegmentId, epoch_end_offset: int) -> None:
        # A later upload that covers the tail of this epoch's offsets supersedes the earlier ones: Kafka moves every
        # mapping at or after the new start offset to the unreferenced set, when the new segment reaches at least as
        # far as what was copied before.
        while (
            self._offsets
            and self._offsets[-1] >= start_offset
            and self.highest_log_offset is not None
            and self.highest_log_offset <= epoch_end_offset
        ):
            last = self._offsets[-1]
            self.unreferenced[self._offset_to_id[last]] = None
            self._remove(last)
        replaced = self._offset_to_id.get(start_offset)
        if replaced is not None and replaced != sid:
            # Kafka's put() overwrites it silently and the segment drops out of this epoch's listing, although its
            # javadoc counts such replaced segments as unreferenced: keep it listed so expiration can delete it.
            self.unreferenced[replaced] = None
        self._put(start_offset, sid)
        self.unreferenced.pop(sid, None)
        if self.highest_log_offset is None or epoch_end_offset > self.highest_log_offset:
            self.highest_log_offset = epoch_end_offset

    def handle_delete_started(self, start_offset: int, sid: RemoteLogSegmentId) -> None:
        if self._offset_to_id.get(start_offset) == sid:
            self._remove(start_offset)
        self.unreferenced[sid] = None

    def handle_delete_finished(self, sid: RemoteLogSegmentId) -> None:
        self.unreferenced.pop(sid, None)

    def segment_ids(self) -> list[RemoteLogSegmentId]:
        return [self._offset_to_id[o] for o in self._offsets] + list(self.unreferenced)

    def restore(
        self,
        referenced: Iterable[tuple[int, RemoteLogSegmentId]],
        unreferenced: Iterable[RemoteLogSegmentId],
        highest_log_offset: int | None,
    ) -> None:
        for offset, sid in referenced:
            self._put(offset, sid)
        for sid in unreferenced:
            self.unreferenced[sid] = None
        self.highest_log_offset = highest_log_offset


def _epoch_end_offset(epoch: int, m: RemoteLogSegmentMetadata) -> int:
    """Last offset of `epoch` within the segment: the next epoch's start - 1, or the segment's end offset."""
    nxt = None
    for e, start in m.segment_leader_epochs.items():  # sorted by epoch
        if e > epoch:
            nxt = start
            break
    return nxt - 1 if nxt is not None else m.end_offset


class RemoteLogMetadataCache:
    """Kafka's RemoteLogMetadataCache for one user partition."""

    def __init__(self) -> None:
        self.id_to_segment: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata] = {}
        self.epoch_entries: dict[int, RemoteLogLeaderEpochState] = {}
        self.initialized = False

    def mark_initialized(self) -> None:
        self.initialized = True

    # -- lookups --------------------------------------------------------------------------------------------------
    def remote_log_segment_metadata(self, leader_epoch: int, offset: int) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding `offset` written in `leader_epoch`, or None."""
        state = self.epoch_entries.get(leader_epoch)
        if state is None:
            return None
        sid = state.floor_entry(offset)
        m = None if sid is None else self.id_to_segment.get(sid)
        if m is not None and offset <= _epoch_end_offset(leader_epoch, m):
            return m
        # Not where Kafka looks: a segment of the same epoch start uploaded by another lineage (after an unclean
        # election both sides hold the epoch's first records) replaced this one in the epoch's map. An epoch has one
        # leader, so any copied segment holding `offset` within `leader_epoch` holds the right records.
        for u in state.unreferenced:
            m = self.id_to_segment.get(u)
            if m is None or m.state != S.COPY_SEGMENT_FINISHED:
                continue
            start = m.segment_leader_epochs.get(leader_epoch)
            if start is not None and start <= offset <= _epoch_end_offset(leader_epoch, m):
                return m
        return None

    def next_segment_with_txn_index(self, leader_epoch: int, offset: int) -> RemoteLogSegmentMetadata | None:
        """The first copied segment of `leader_epoch` at or after `offset` whose transaction index is not empty
        (KIP-1058), walking segment by segment from the one holding `offset`."""
        m = self.remote_log_segment_metadata(leader_epoch, offset)
        while m is not None and m.txn_idx_empty:
            m = self.remote_log_segment_metadata(leader_epoch, m.end_offset + 1)
        return m

    def highest_offset_for_epoch(self, leader_epoch: int) -> int | None:
        state = self.epoch_entries.get(leader_epoch)
        return None if state is None else state.highest_log_offset

    def list_all_remote_log_segments(self) -> list[RemoteLogSegmentMetadata]:
        """Every segment not DELETE_SEGMENT_FINISHED, sorted by start offset (ties in insertion order)."""
        return sorted(self.id_to_segment.values(), key=lambda m: m.start_offset)

    def list_remote_log_segments(self, leader_epoch: int) -> list[RemoteLogSegmentMetadata]:
        """Segments with records of `leader_epoch` (any state but DELETE_SEGMENT_FINISHED), sorted by start offset."""
        state = self.epoch_entries.get(leader_epoch)
        if state is None:
            return []
        out = []
        for sid in state.segment_ids():
            m = self.id_to_segment.get(sid)
            if m is None:
                raise RemoteResourceNotFoundError(f"No remote log segment metadata found for :{sid}")
            out.append(m)
        if state.unreferenced:
            out.sort(key=lambda m: m.start_offset)
        return out

    def remote_log_size(self, leader_epoch: int | None = None) -> int:
        """Kafka's remoteLogSize: the bytes of the listed segments (all states but DELETE_SEGMENT_FINISHED)."""
        segs = (
            self.list_all_remote_log_segments() if leader_epoch is None else self.list_remote_log_segments(leader_epoch)
        )
        return sum(m.segment_size_in_bytes for m in segs)

    def segment_count(self) -> int:
        return len(self.id_to_segment)

    def copied_size_bytes(self) -> int:
        """Bytes of the COPY_SEGMENT_FINISHED segments (the readable remote log)."""
        return sum(m.segment_size_in_bytes for m in self.id_to_segment.values() if m.state == S.COPY_SEGMENT_FINISHED)

    # -- mutations --------------------------------------------------------------------------------------------------
    def check_transition(self, sid: RemoteLogSegmentId, target: RemoteLogSegmentState) -> None:
        """Raise InvalidStateTransitionError if `target` is not a valid next state of the segment's metadata."""
        existing = self.id_to_segment.get(sid)
        if target == S.COPY_SEGMENT_STARTED and existing is None:
            return
        if existing is None:
            raise RemoteResourceNotFoundError(f"No remote log segment metadata found for :{sid}")
        src = existing.state
        if not is_valid_segment_transition(src, target):
            raise InvalidStateTransitionError(
                f"Current state: {src.name} can not be transitioned to target state: {target.name}, segmentId: {sid}"
            )

    def add_copy_in_progress_segment(self, m: RemoteLogSegmentMetadata) -> None:
        if m.state != S.COPY_SEGMENT_STARTED:
            raise InvalidStateTransitionError(
                f"Given remoteLogSegmentMetadata should have state as {S.COPY_SEGMENT_STARTED.name} but it contains "
                f"state as: {m.state.name}"
            )
        sid = m.remote_log_segment_id
        existing = self.id_to_segment.get(sid)
        if existing is not None and not is_valid_segment_transition(existing.state, m.state):
            # (no metadata yet: m's COPY_SEGMENT_STARTED is the one valid first state)
            raise InvalidStateTransitionError(
                f"Current state: {existing.state.name} can not be transitioned to target state: "
                f"{m.state.name}, segmentId: {sid}"
            )
        for epoch in m.segment_leader_epochs:
            self.epoch_entries.setdefault(epoch, RemoteLogLeaderEpochState()).handle_copy_started(sid)
        self.id_to_segment[sid] = m

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        sid = update.remote_log_segment_id
        existing = self.id_to_segment.get(sid)
        if existing is None:
            if not self.initialized:
                # Catching up from the topic: the base metadata may be gone with retention (Kafka drops the event).
                return
            raise RemoteResourceNotFoundError(f"No remote log segment metadata found for :{sid}")
        target = update.state
        if target == S.COPY_SEGMENT_STARTED:
            raise InvalidStateTransitionError(
                f"metadataUpdate: {update} with state {S.COPY_SEGMENT_STARTED.name} can not be updated"
            )
        if not is_valid_segment_transition(existing.state, target):
            raise InvalidStateTransitionError(
                f"Current state: {existing.state.name} can not be transitioned to target state: {target.name}, "
                f"segmentId: {sid}"
            )
        updated = existing.create_with_update(update)
        if target == S.COPY_SEGMENT_FINISHED:
            self._handle_copy_finished(updated)
        elif target == S.DELETE_SEGMENT_STARTED:
            self._handle_delete_started(updated)
        else:
            self._handle_delete_finished(updated)

    def _handle_copy_finished(self, m: RemoteLogSegmentMetadata) -> None:
        sid = m.remote_log_segment_id
        for epoch, start in m.segment_leader_epochs.items():
            state = self.epoch_entries.setdefault(epoch, RemoteLogLeaderEpochState())
            state.handle_copy_finished(start, sid, _epoch_end_offset(epoch, m))
        self.id_to_segment[sid] = m

    def _handle_delete_started(self, m: RemoteLogSegmentMetadata) -> None:
        sid = m.remote_log_segment_id
        for epoch, start in m.segment_leader_epochs.items():
            self.epoch_entries.setdefault(epoch, RemoteLogLeaderEpochState()).handle_delete_started(start, sid)
        self.id_to_segment[sid] = m

    def _handle_delete_finished(self, m: RemoteLogSegmentMetadata) -> None:
        sid = m.remote_log_segment_id
        for epoch in m.segment_leader_epochs:
            self.epoch_entries.setdefault(epoch, RemoteLogLeaderEpochState()).handle_delete_finished(sid)
        self.id_to_segment.pop(sid, None)

    # -- comparison (tests, restart checks) ---------------------------------------------------------------------------
    def state_view(self) -> tuple:
        """Everything that determines lookup results, as plain comparable values."""
        epochs = {
            e: (tuple(s.referenced()), tuple(s.unreferenced), s.highest_log_offset)
            for e, s in sorted(self.epoch_entries.items())
        }
        return dict(self.id_to_segment), epochs


class RemotePartitionMetadataStore:
    """Caches and partition-delete states of the user partitions this broker follows (Kafka's
    RemotePartitionMetadataStore). Lookups raise RemoteResourceNotFoundError for a partition that is not loaded
    and RemoteStorageNotReadyError while its cache is catching up."""

    def __init__(self) -> None:
        self.caches: dict[TopicIdPartition, RemoteLogMetadataCache] = {}
        self.delete_metadata: dict[TopicIdPartition, RemotePartitionDeleteMetadata] = {}

    def maybe_load_partition(self, tip: TopicIdPartition) -> RemoteLogMetadataCache:
        cache = self.caches.get(tip)
        if cache is None:
            cache = self.caches[tip] = RemoteLogMetadataCache()
        return cache

    def clear_partition(self, tip: TopicIdPartition) -> None:
        self.caches.pop(tip, None)
        self.delete_metadata.pop(tip, None)

    def is_initialized(self, tip: TopicIdPartition) -> bool:
        cache = self.caches.get(tip)
        return cache is not None and cache.initialized

    def handle_segment_metadata(self, m: RemoteLogSegmentMetadata) -> None:
        tip = m.remote_log_segment_id.topic_id_partition
        cache = self.caches.get(tip)
        if cache is None:
            raise RemoteResourceNotFoundError(f"No partition metadata found for : {tip}")
        cache.add_copy_in_progress_segment(m)

    def handle_segment_update(self, u: RemoteLogSegmentMetadataUpdate) -> None:
        tip = u.remote_log_segment_id.topic_id_partition
        cache = self.caches.get(tip)
        if cache is None:
            raise RemoteResourceNotFoundError(f"No partition metadata found for : {tip}")
        cache.update_remote_log_segment_metadata(u)

    def handle_partition_delete(self, d: RemotePartitionDeleteMetadata) -> None:
        tip = d.topic_id_partition
        self.delete_metadata[tip] = d
        if d.state == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
            # Kafka drops every trace of the partition once its remote data is gone.
            self.caches.pop(tip, None)
            self.delete_metadata.pop(tip, None)

    def partition_delete_state(self, tip: TopicIdPartition) -> RemotePartitionDeleteMetadata | None:
        return self.delete_metadata.get(tip)

    def cache_for(self, tip: TopicIdPartition) -> RemoteLogMetadataCache:
        cache = self.caches.get(tip)
        if cache is None:
            raise RemoteResourceNotFoundError(f"No resource found for partition: {tip}")
        if not cache.initialized:
            raise RemoteStorageNotReadyError(f"Remote log metadata cache is not initialized for partition: {tip}")
        return cache

    def __iter__(self) -> Iterator[TopicIdPartition]:
        return iter(self.caches)


__all__ = [
    "RemoteLogLeaderEpochState",
    "RemoteLogMetadataCache",
    "RemotePartitionMetadataStore",
    "is_valid_partition_delete_transition",
]
