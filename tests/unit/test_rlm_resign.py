"""Leadership moving away while a segment is being copied (KIP-405): the old leader finishes that copy -- the new
leader may copy the same offsets again, and expiration removes the duplicate -- and starts no other."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from strata.remote.local_tiered import LocalTieredStorage
from strata.remote.metadata import RemoteLogSegmentState as S
from strata.remote.rlm import RemoteLogManager, RemoteLogManagerConfig, topic_id_partition
from tests.support.waiting import wait_until_async
from tests.unit.test_rlm_deposed import open_tiered_log, started_rlmm

NOW = int(time.time() * 1000)


class GatedStorage(LocalTieredStorage):
    """LocalTieredStorage whose copies wait for `gate` once `started` is set."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.started = asyncio.Event()
        self.gate = asyncio.Event()
        self.copies = 0

    async def copy_log_segment_data(self, metadata: Any, segment_data: Any) -> Any:
        self.copies += 1
        self.started.set()
        await self.gate.wait()
        return await super().copy_log_segment_data(metadata, segment_data)


def test_a_copy_in_flight_when_leadership_moves_away_finishes_and_no_other_starts(tmp_path: Path) -> None:
    async def scenario() -> None:
        log = open_tiered_log(tmp_path / "t-0", NOW)
        tip = topic_id_partition(log)
        rlmm = await started_rlmm(tmp_path / "rlmm", tip)
        rsm = GatedStorage(tmp_path / "rsm")
        rlm = RemoteLogManager(
            RemoteLogManagerConfig(task_interval_ms=20), rsm, rlmm, broker_id=1, index_cache_dir=tmp_path / "idx"
        )
        try:
            rlm.on_leadership_change([(log, 0)], [])
            await asyncio.wait_for(rsm.started.wait(), 10)
            rlm.on_leadership_change([], [log])  # a follower now, the first copy still running
            rsm.gate.set()
            await wait_until_async(
                lambda: [s.state for s in rlmm.list_remote_log_segments(tip)] == [S.COPY_SEGMENT_FINISHED], timeout=10
            )
            # the former leadership's copy task ends after that copy: nothing else was or will be copied
            await wait_until_async(lambda: not rlm._resigning, timeout=10)
            assert rsm.copies == 1
            assert [s.state for s in rlmm.list_remote_log_segments(tip)] == [S.COPY_SEGMENT_FINISHED]
        finally:
            await rlm.close()
            await rlmm.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))
