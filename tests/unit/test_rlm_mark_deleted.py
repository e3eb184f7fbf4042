"""Topic deletion's DELETE_PARTITION_MARKED is written until it is recorded: when every replica of the topic is down,
nobody else would mark it, and the remote data would stay in the bucket for good."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from strata.remote.local_tiered import LocalTieredStorage
from strata.remote.metadata import RemotePartitionDeleteState as D
from strata.remote.metadata import TopicIdPartition
from strata.remote.rlm import RemoteLogManager, RemoteLogManagerConfig
from strata.remote.rlmm import TopicBasedRemoteLogMetadataManager
from tests.support.waiting import wait_until_async
from tests.unit.test_rlmm_fake_io import InMemoryMetadataTopicIO

TIPS = [TopicIdPartition(uuid.UUID(int=7), "deleted", i) for i in range(3)]


class FlakyIO(InMemoryMetadataTopicIO):
    """The metadata topic's first appends fail, as they do while its partition has no leader."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.appends = 0

    async def append(self, partition: int, records: bytes) -> int:
        self.appends += 1
        if self.appends <= self.failures:
            raise RuntimeError("append to __remote_log_metadata failed: REQUEST_TIMED_OUT")
        return await super().append(partition, records)


async def _managers(tmp_path: Path, failures: int) -> tuple[RemoteLogManager, TopicBasedRemoteLogMetadataManager]:
    rlmm = TopicBasedRemoteLogMetadataManager(
        FlakyIO(failures),
        tmp_path / "rlmm",
        {"remote.log.metadata.topic.num.partitions": "1", "remote.log.metadata.topic.replication.factor": "1"},
        broker_id=1,
        snapshot_interval_s=0,
    )
    await rlmm.start()
    rlmm.on_partition_leadership_changes([], TIPS)  # followed, to read the marks back
    rlm = RemoteLogManager(
        RemoteLogManagerConfig(retry_backoff_ms=20, retry_backoff_max_ms=50),
        LocalTieredStorage(tmp_path / "rsm"),
        rlmm,
        broker_id=1,
        index_cache_dir=tmp_path / "idx",
    )
    return rlm, rlmm


def _states(rlmm: TopicBasedRemoteLogMetadataManager) -> list[D | None]:
    return [m.state if (m := rlmm.partition_delete_metadata(t)) else None for t in TIPS]


def test_marks_that_fail_are_retried_until_recorded(tmp_path: Path) -> None:
    async def scenario() -> None:
        rlm, rlmm = await _managers(tmp_path, failures=4)
        try:
            await wait_until_async(lambda: all(rlmm.is_ready(t) for t in TIPS), timeout=10)
            assert await rlm.mark_partitions_deleted(TIPS, wait_s=10) == 0
            assert _states(rlmm) == [D.DELETE_PARTITION_MARKED] * 3
            assert isinstance(rlmm.io, FlakyIO) and rlmm.io.appends >= 4 + 3  # every failed append was tried again
        finally:
            await rlm.close()
            await rlmm.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_marks_not_recorded_within_the_wait_go_on_in_the_background(tmp_path: Path) -> None:
    async def scenario() -> None:
        rlm, rlmm = await _managers(tmp_path, failures=2)
        try:
            await wait_until_async(lambda: all(rlmm.is_ready(t) for t in TIPS), timeout=10)
            assert await rlm.mark_partitions_deleted(TIPS, wait_s=0) == 3  # the caller does not wait
            await wait_until_async(lambda: _states(rlmm) == [D.DELETE_PARTITION_MARKED] * 3, timeout=10)
        finally:
            await rlm.close()
            await rlmm.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))
