"""RemotePartitionRemover's reading of a led metadata partition: which user partitions still need deleting."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from strata.protocol.records import build_batch
from strata.remote.metadata import RemotePartitionDeleteMetadata, TopicIdPartition
from strata.remote.metadata import RemotePartitionDeleteState as D
from strata.remote.partition_remover import RemotePartitionRemover
from strata.remote.rlmm_serde import serialize
from tests.unit.test_rlmm_fake_io import InMemoryMetadataTopicIO

T1 = TopicIdPartition(uuid.UUID(int=1), "gone", 0)
T2 = TopicIdPartition(uuid.UUID(int=2), "gone-too", 3)


class Deleter:
    """Records the deletions the remover starts (the RLM's delete_partition) and finishes them at once."""

    def __init__(self) -> None:
        self.deleted: list[TopicIdPartition] = []

    async def delete_partition(self, tip: TopicIdPartition) -> int:
        self.deleted.append(tip)
        return 0


class FollowingRLMM:
    def __init__(self) -> None:
        self.followed: set[TopicIdPartition] = set()

    def followed_partitions(self) -> set[TopicIdPartition]:
        return set(self.followed)

    def on_partition_leadership_changes(self, leaders: Any, followers: Any) -> None:
        self.followed |= set(leaders) | set(followers)

    def on_stop_partitions(self, parts: Any) -> None:
        self.followed -= set(parts)

    async def wait_until_ready(self, tip: TopicIdPartition, timeout_s: float) -> None:
        return None


def test_deletions_left_marked_or_started_are_run_and_a_late_mark_after_finished_is_ignored() -> None:
    async def scenario() -> None:
        io = InMemoryMetadataTopicIO(1)
        for tip, state in [
            (T1, D.DELETE_PARTITION_MARKED),
            (T1, D.DELETE_PARTITION_STARTED),
            (T1, D.DELETE_PARTITION_FINISHED),
            (T1, D.DELETE_PARTITION_MARKED),
            (T2, D.DELETE_PARTITION_MARKED),
            (T2, D.DELETE_PARTITION_STARTED),
        ]:
            m = RemotePartitionDeleteMetadata(tip, state, int(time.time() * 1000), 1)
            await io.append(0, build_batch([(None, serialize(m))]))
        rlm, rlmm = Deleter(), FollowingRLMM()
        leads = {0}
        remover = RemotePartitionRemover(
            rlm,
            rlmm,  # type: ignore[arg-type]  # a stand-in with the four methods the remover calls, not the whole ABC
            io,
            num_partitions=1,
            interval_ms=1000,
            is_leader=lambda p: p in leads,
            wait_for_appends=lambda partitions, timeout_s: asyncio.sleep(timeout_s),  # not started: never called
        )
        assert remover.run_once() == [0]
        assert remover.pending() == {T2: D.DELETE_PARTITION_STARTED}
        await asyncio.gather(*remover._removing.values())
        assert rlm.deleted == [T2]
        assert rlmm.followed == set()  # followed for the deletion only
        leads.clear()  # led elsewhere now: its state is dropped here
        assert remover.run_once() == [] and remover.pending() == {}

    asyncio.run(asyncio.wait_for(scenario(), 10))


class FlakyDeleter(Deleter):
    """Fails the first `failures` deletions (remote storage down), then deletes."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.attempts = 0

    async def delete_partition(self, tip: TopicIdPartition) -> int:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise RuntimeError("remote storage unavailable")
        return await super().delete_partition(tip)


def test_a_failed_removal_is_retried_after_a_backoff_not_only_at_the_task_interval() -> None:
    async def no_appends(partitions: list[int], timeout_s: float) -> bool:
        await asyncio.sleep(timeout_s)
        return False

    async def scenario() -> None:
        io = InMemoryMetadataTopicIO(1)
        m = RemotePartitionDeleteMetadata(T1, D.DELETE_PARTITION_MARKED, int(time.time() * 1000), 1)
        await io.append(0, build_batch([(None, serialize(m))]))
        rlm = FlakyDeleter(failures=1)
        remover = RemotePartitionRemover(
            rlm,
            FollowingRLMM(),  # type: ignore[arg-type]  # a stand-in with the four methods the remover calls
            io,
            num_partitions=1,
            interval_ms=600_000,
            is_leader=lambda p: True,
            wait_for_appends=no_appends,
        )
        remover.start()
        try:
            deadline = time.monotonic() + 10  # the interval (10 min) is far off: only the retry can do it
            while rlm.deleted != [T1]:
                assert time.monotonic() < deadline, f"not retried: {rlm.attempts} attempt(s)"
                await asyncio.sleep(0.05)
            assert rlm.attempts == 2
        finally:
            await remover.close()

    asyncio.run(asyncio.wait_for(scenario(), 20))
