"""RemoteLogMetadataManager: the KIP-405 plugin interface (Kafka's `RemoteLogMetadataManager`, asyncio
flavour).

The RemoteLogManager, the ReplicaManager and the follower's tier state machine depend on this interface, not
on the topic-based implementation (`rlmm.py`), as they depend on `rsm.RemoteStorageManager` and not on S3 or
LocalTieredStorage. Lookups answer from memory and are plain methods; writes go through the metadata topic and
are coroutines that return once the event is applied (or durable, for partitions this broker does not follow).
Semantics follow Kafka's javadoc; the readiness waits are Strata's (Kafka's RLMM blocks inside its lookups).
"""

from __future__ import annotations

import abc
from collections.abc import Iterable

from .metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)


class RemoteLogMetadataManager(abc.ABC):
    """Where the remote segments of the user partitions are recorded, and their states."""

    # ---- writes ------------------------------------------------------------------------------------------
    @abc.abstractmethod
    async def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Record a segment copy starting (state COPY_SEGMENT_STARTED)."""

    @abc.abstractmethod
    async def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """Move a recorded segment to its next state (copy finished, delete started/finished)."""

    @abc.abstractmethod
    async def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None:
        """Record a step of a user partition's deletion (marked, started, finished)."""

    # ---- lookups -----------------------------------------------------------------------------------------
    @abc.abstractmethod
    def remote_log_segment_metadata(
        self, tip: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """The copied segment of `leader_epoch` holding `offset`, if any."""

    @abc.abstractmethod
    def highest_offset_for_epoch(self, tip: TopicIdPartition, leader_epoch: int) -> int | None:
        """The highest offset of `leader_epoch` copied to remote storage (None: nothing of that epoch)."""

    @abc.abstractmethod
    def list_remote_log_segments(
        self, tip: TopicIdPartition, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        """Every segment recorded for the partition (or for one leader epoch), in any state."""

    @abc.abstractmethod
    def partition_delete_metadata(self, tip: TopicIdPartition) -> RemotePartitionDeleteMetadata | None:
        """The last recorded deletion step of the partition, if any."""

    # ---- which partitions are followed -------------------------------------------------------------------
    @abc.abstractmethod
    def on_partition_leadership_changes(
        self, leader_partitions: Iterable[TopicIdPartition], follower_partitions: Iterable[TopicIdPartition]
    ) -> None:
        """Follow the metadata of these user partitions (this broker leads or follows them)."""

    @abc.abstractmethod
    def on_stop_partitions(self, partitions: Iterable[TopicIdPartition]) -> None:
        """Stop following these user partitions."""

    @abc.abstractmethod
    def followed_partitions(self) -> set[TopicIdPartition]:
        """The user partitions whose metadata is followed here."""

    @abc.abstractmethod
    def is_ready(self, tip: TopicIdPartition) -> bool:
        """True once the partition's metadata has caught up, so that lookups answer for all of it."""

    @abc.abstractmethod
    async def wait_until_ready(self, tip: TopicIdPartition, timeout_s: float | None = None) -> None:
        """Wait until `is_ready(tip)`; raise (RemoteStorageNotReadyError) on timeout."""

    @abc.abstractmethod
    async def wait_for_catch_up(self, tip: TopicIdPartition, timeout_s: float | None = None) -> None:
        """Wait until everything recorded for the partition *now* is applied (a new leader about to choose
        where copying resumes); raise on timeout."""


__all__ = ["RemoteLogMetadataManager"]
