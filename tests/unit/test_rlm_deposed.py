"""A deposed leader's remote expiration pass deletes nothing more (issue 21): every deletion first checks that this
broker still leads the partition at the leader epoch the pass started with, in its own view and in the cluster's
(the leadership probe), so neither a cancellation that a library swallowed nor a stale view of a resumed broker lets
the pass run on."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata.config import default_log_config
from strata.protocol.records import build_batch
from strata.remote.local_tiered import LocalTieredStorage
from strata.remote.metadata import RemoteLogSegmentState as S
from strata.remote.metadata import TopicIdPartition
from strata.remote.rlm import RemoteLogManager, RemoteLogManagerConfig, topic_id_partition
from strata.remote.rlmm import TopicBasedRemoteLogMetadataManager
from strata.storage.log import UnifiedLog
from tests.support.waiting import wait_until_async
from tests.unit.test_rlmm_fake_io import InMemoryMetadataTopicIO

OLD = int(time.time() * 1000) - 8 * 24 * 3600 * 1000  # past the default retention.ms (7 days): every segment expires


class GatedDeletes(LocalTieredStorage):
    """Deletions wait for `gate`. A cancellation that reaches one is swallowed, as an HTTP client does that turns it
    into its own timeout error when every timer fires at once (a frozen process resumed) and retries."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.delete_started = asyncio.Event()
        self.gate = asyncio.Event()
        self.deletes = 0

    async def delete_log_segment_data(self, metadata: Any) -> None:
        self.deletes += 1
        self.delete_started.set()
        while not self.gate.is_set():
            try:
                await self.gate.wait()
            except asyncio.CancelledError:
                continue  # lost, as in the fault runs
        await super().delete_log_segment_data(metadata)


@dataclass
class Setup:
    log: UnifiedLog
    tip: TopicIdPartition
    rlm: RemoteLogManager
    rlmm: TopicBasedRemoteLogMetadataManager
    rsm: GatedDeletes
    segments: int

    def states(self) -> list[S]:
        return [s.state for s in self.rlmm.list_remote_log_segments(self.tip)]


def open_tiered_log(path: Path, timestamp: int) -> UnifiedLog:
    """A tiered log of small segments, all below the HW."""
    log = UnifiedLog.open(
        path, uuid.UUID(int=9), default_log_config(segment_bytes=1024, remote_storage_enable=True), needs_recovery=False
    )
    for _ in range(40):
        log.append_as_leader(build_batch([b"x" * 100], timestamp=timestamp), leader_epoch=0, now_ms=timestamp)
    log.update_high_watermark(log.log_end_offset)
    assert len(log.segments) > 3
    return log


async def started_rlmm(path: Path, tip: TopicIdPartition) -> TopicBasedRemoteLogMetadataManager:
    """An RLMM over an in-memory metadata topic, following `tip` as its leader."""
    rlmm = TopicBasedRemoteLogMetadataManager(
        InMemoryMetadataTopicIO(),
        path,
        {"remote.log.metadata.topic.num.partitions": "3", "remote.log.metadata.topic.replication.factor": "1"},
        broker_id=1,
        snapshot_interval_s=0,
    )
    await rlmm.start()
    rlmm.on_partition_leadership_changes([tip], [])
    return rlmm


@asynccontextmanager
async def tiered_leader(tmp_path: Path, probe: Any = None) -> AsyncIterator[Setup]:
    log = open_tiered_log(tmp_path / "t-0", OLD)
    closed = len(log.segments) - 1
    tip = topic_id_partition(log)
    rlmm = await started_rlmm(tmp_path / "rlmm", tip)
    rsm = GatedDeletes(tmp_path / "rsm")
    rlm = RemoteLogManager(
        RemoteLogManagerConfig(task_interval_ms=20),
        rsm,
        rlmm,
        broker_id=1,
        index_cache_dir=tmp_path / "idx",
        leadership_probe=probe,
    )
    try:
        rlm.on_leadership_change([(log, 0)], [])
        # every closed segment copied while the first deletion of the expiration pass waits at the gate
        await asyncio.wait_for(rsm.delete_started.wait(), 10)
        await wait_until_async(lambda: sum(1 for s in rlmm.list_remote_log_segments(tip)) == closed, timeout=10)
        await wait_until_async(lambda: log.highest_offset_in_remote_storage == log.segments[-1].base_offset - 1)
        yield Setup(log, tip, rlm, rlmm, rsm, closed)
    finally:
        rsm.gate.set()
        await rlm.close()
        await rlmm.close()


def test_resigned_leader_with_a_lost_cancellation_starts_no_new_deletion(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with tiered_leader(tmp_path) as t:
            st = t.rlm._leaders[t.tip]
            t.rlm.on_leadership_change([], [t.log])  # became follower: the expiration task is cancelled
            t.rsm.gate.set()  # ... but the deletion in flight swallowed that cancellation
            assert st.expire_task is not None
            await asyncio.wait_for(asyncio.shield(st.expire_task), 10)  # the pass and the loop end anyway
            assert t.rsm.deletes == 1
            # the deletion in flight completed its transitions (a DELETE_SEGMENT_FINISHED segment is no longer
            # listed); every other segment is untouched
            assert t.states() == [S.COPY_SEGMENT_FINISHED] * (t.segments - 1)
            assert t.log.log_start_offset == 0  # a deposed leader does not move the log start either

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_leader_whose_view_is_stale_deletes_nothing_once_the_cluster_says_otherwise(tmp_path: Path) -> None:
    leading = True
    asked_after_loss = 0

    async def probe(tip: TopicIdPartition, epoch: int) -> bool:
        nonlocal asked_after_loss
        assert epoch == 0
        if not leading:
            asked_after_loss += 1
        return leading

    async def scenario() -> None:
        nonlocal leading
        async with tiered_leader(tmp_path, probe) as t:
            leading = False  # another broker leads now; this one has not heard of it yet
            t.rsm.gate.set()
            # two more expiration passes ask and stop before deleting
            await wait_until_async(lambda: asked_after_loss >= 2, timeout=10)
            assert t.rsm.deletes == 1
            assert t.states() == [S.COPY_SEGMENT_FINISHED] * (t.segments - 1)
            assert t.rlm._leaders.get(t.tip) is not None  # still a leader in its own view

    asyncio.run(asyncio.wait_for(scenario(), 60))
