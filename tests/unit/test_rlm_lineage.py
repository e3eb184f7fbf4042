"""Where a replica's tiered data ends, by its own leader-epoch lineage (RemoteLogManager.find_highest_remote_offset).

After both replicas lose an unflushed tail, or an unclean election, remote storage can hold a segment of epoch E that
runs past where E ends in the surviving log. The RLMM's highest offset for E then overstates what this log has in
remote storage: copying must resume at the epoch's end here, and local retention must not delete past it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

from strata.config import default_log_config
from strata.protocol.records import build_batch
from strata.remote.local_tiered import LocalTieredStorage
from strata.remote.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from strata.remote.metadata import RemoteLogSegmentState as S
from strata.remote.rlm import RemoteLogManager, RemoteLogManagerConfig, lineage_end_in_segment, topic_id_partition
from strata.remote.rlmm_api import RemoteLogMetadataManager
from strata.remote.rlmm_cache import RemoteLogMetadataCache
from strata.storage.log import UnifiedLog

NOW = int(time.time() * 1000)


class CacheRLMM(RemoteLogMetadataManager):
    """An RLMM over one partition's real RemoteLogMetadataCache (no topic, no consumer): writes apply at once."""

    def __init__(self) -> None:
        self.cache = RemoteLogMetadataCache()
        self.cache.mark_initialized()
        self.followed: set[TopicIdPartition] = set()
        self.delete_state: RemotePartitionDeleteMetadata | None = None

    async def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        self.cache.add_copy_in_progress_segment(metadata)

    async def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        self.cache.update_remote_log_segment_metadata(update)

    async def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None:
        self.delete_state = metadata

    def remote_log_segment_metadata(
        self, tip: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        return self.cache.remote_log_segment_metadata(leader_epoch, offset)

    def highest_offset_for_epoch(self, tip: TopicIdPartition, epoch: int) -> int | None:
        return self.cache.highest_offset_for_epoch(epoch)

    def list_remote_log_segments(
        self, tip: TopicIdPartition, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        if leader_epoch is None:
            return self.cache.list_all_remote_log_segments()
        return self.cache.list_remote_log_segments(leader_epoch)

    def partition_delete_metadata(self, tip: TopicIdPartition) -> RemotePartitionDeleteMetadata | None:
        return self.delete_state

    def on_partition_leadership_changes(
        self, leader_partitions: Iterable[TopicIdPartition], follower_partitions: Iterable[TopicIdPartition]
    ) -> None:
        self.followed |= set(leader_partitions) | set(follower_partitions)

    def on_stop_partitions(self, partitions: Iterable[TopicIdPartition]) -> None:
        self.followed -= set(partitions)

    def followed_partitions(self) -> set[TopicIdPartition]:
        return set(self.followed)

    def is_ready(self, tip: TopicIdPartition) -> bool:
        return True

    async def wait_until_ready(self, tip: TopicIdPartition, timeout_s: float | None = None) -> None:
        return None

    async def wait_for_catch_up(self, tip: TopicIdPartition, timeout_s: float | None = None) -> None:
        return None

    def copied(self, tip: TopicIdPartition, start: int, end: int, epochs: dict[int, int]) -> None:
        m = RemoteLogSegmentMetadata(
            RemoteLogSegmentId(tip, uuid.uuid4()), start, end, NOW, 1, NOW, 100, epochs, S.COPY_SEGMENT_STARTED
        )
        self.cache.add_copy_in_progress_segment(m)
        self.cache.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(m.remote_log_segment_id, NOW, None, S.COPY_SEGMENT_FINISHED, 1)
        )


def _log(tmp_path: Path, epochs: list[tuple[int, int]]) -> UnifiedLog:
    """A log of 10-record batches: (epoch, number of batches) in order."""
    log = UnifiedLog.open(
        tmp_path / "t-0", uuid.UUID(int=7), default_log_config(segment_bytes=1 << 20), needs_recovery=False
    )
    for epoch, n in epochs:
        for _ in range(n):
            log.append_as_leader(build_batch([b"v"] * 10, timestamp=NOW), leader_epoch=epoch, now_ms=NOW)
    return log


def _rlm(tmp_path: Path, rlmm: CacheRLMM) -> RemoteLogManager:
    return RemoteLogManager(
        RemoteLogManagerConfig(),
        LocalTieredStorage(tmp_path / "rsm"),
        rlmm,
        broker_id=1,
        index_cache_dir=tmp_path / "idx",
    )


def test_a_divergent_segment_of_an_epoch_counts_only_up_to_where_the_epoch_ends_here(tmp_path: Path) -> None:
    log = _log(tmp_path, [(0, 4), (2, 3)])  # epoch 0: 0..39, epoch 2: 40..69
    tip = topic_id_partition(log)
    rlmm = CacheRLMM()
    rlmm.copied(tip, 0, 59, {0: 0})  # the old leader's epoch-0 data ran to 59 before it was lost
    rlm = _rlm(tmp_path, rlmm)
    assert asyncio.run(rlm.find_highest_remote_offset(log)) == 39
    assert asyncio.run(rlm.sync_highest_copied_offset(log)) == 39
    assert log.highest_offset_in_remote_storage == 39
    # Once the surviving lineage's epoch 2 is copied, that is where the tiered data ends.
    rlmm.copied(tip, 30, 59, {0: 30, 2: 40})
    assert asyncio.run(rlm.sync_highest_copied_offset(log)) == 59


def test_a_lower_recomputation_replaces_a_stale_highest_offset(tmp_path: Path) -> None:
    log = _log(tmp_path, [(0, 2), (3, 2)])  # epoch 0: 0..19, epoch 3: 20..39
    tip = topic_id_partition(log)
    rlmm = CacheRLMM()
    rlmm.copied(tip, 0, 9, {0: 0})
    log.highest_offset_in_remote_storage = 35  # learnt while this replica followed another lineage
    assert asyncio.run(_rlm(tmp_path, rlmm).sync_highest_copied_offset(log)) == 9


def test_nothing_of_the_lineage_copied_is_minus_one_and_an_empty_lineage_is_unknown(tmp_path: Path) -> None:
    log = _log(tmp_path, [(1, 2)])
    rlmm = CacheRLMM()
    rlmm.copied(topic_id_partition(log), 0, 9, {0: 0})  # another lineage's epoch only
    rlm = _rlm(tmp_path, rlmm)
    assert asyncio.run(rlm.find_highest_remote_offset(log)) == -1
    empty = UnifiedLog.open(tmp_path / "e-0", uuid.UUID(int=8), default_log_config(), needs_recovery=False)
    empty.highest_offset_in_remote_storage = 5
    assert asyncio.run(rlm.find_highest_remote_offset(empty)) is None
    assert asyncio.run(rlm.sync_highest_copied_offset(empty)) == 5


def test_truncation_below_the_highest_remote_offset_lowers_it(tmp_path: Path) -> None:
    log = _log(tmp_path, [(0, 6)])
    log.highest_offset_in_remote_storage = 49
    assert log.truncate_to(30)
    assert log.highest_offset_in_remote_storage == 29
    log.truncate_to(100)  # past the LEO: nothing changes
    assert log.highest_offset_in_remote_storage == 29


def _meta(tip: TopicIdPartition, start: int, end: int, epochs: dict[int, int]) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, uuid.uuid4()), start, end, NOW, 1, NOW, 100, epochs, S.COPY_SEGMENT_FINISHED
    )


def test_a_remote_read_stops_where_the_segment_leaves_this_lineage(tmp_path: Path) -> None:
    log = _log(tmp_path, [(0, 3), (2, 3)])  # epoch 0: 0..29, epoch 2: 30..59
    tip = topic_id_partition(log)
    # the old leader's segment: epoch 0 ran on to 49 there
    assert lineage_end_in_segment(log, _meta(tip, 20, 49, {0: 20}), 0) == 29
    # a segment of this lineage crossing from epoch 0 into epoch 2
    assert lineage_end_in_segment(log, _meta(tip, 20, 49, {0: 20, 2: 30}), 0) == 49
    assert lineage_end_in_segment(log, _meta(tip, 20, 49, {0: 20, 2: 30}), 2) == 49
    # a segment of another lineage: epoch 1 started at 25 there, which this log never had
    assert lineage_end_in_segment(log, _meta(tip, 20, 49, {0: 20, 1: 25}), 0) == 24
    # epoch 2 started at 35 there, at 30 here
    assert lineage_end_in_segment(log, _meta(tip, 20, 49, {0: 20, 2: 35}), 0) == 29
