"""TopicBasedRemoteLogMetadataManager over an in-memory `__remote_log_metadata` (tests/unit/test_rlmm_fake_io.py):
writes, apply loop, readiness, several brokers, restart from snapshot + tail. No sleeps: every wait is on an event."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from strata.remote.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from strata.remote.rlmm import TopicBasedRemoteLogMetadataManager
from strata.remote.rlmm_partitioner import metadata_partition
from strata.remote.rlmm_serde import deserialize, serialize
from strata.remote.rlmm_snapshot import (
    COMMITTED_OFFSETS_FILE_NAME,
    read_committed_offsets,
    read_snapshot_file,
    snapshot_path,
)
from strata.remote.rlmm_types import (
    InvalidStateTransitionError,
    MetadataTopicIO,
    RemoteStorageNotReadyError,
    RlmmConfig,
)
from strata.remote.rsm import RemoteResourceNotFoundError, RemoteStorageError
from tests.unit.test_rlmm_fake_io import InMemoryMetadataTopicIO

S = RemoteLogSegmentState
P = RemotePartitionDeleteState
NUM_PARTITIONS = 3


def tips_in_same_metadata_partition(n: int, partitions: int = NUM_PARTITIONS) -> list[TopicIdPartition]:
    topic_id = uuid.UUID("9b2f1a4e-0c1d-4e5f-8a9b-0c1d2e3f4a5b")
    by_part: dict[int, list[TopicIdPartition]] = {}
    for p in range(200):
        tip = TopicIdPartition(topic_id, "events", p)
        by_part.setdefault(metadata_partition(tip, partitions), []).append(tip)
        if len(by_part[metadata_partition(tip, partitions)]) == n:
            return by_part[metadata_partition(tip, partitions)]
    raise AssertionError("no such partitions")


U1, U2 = tips_in_same_metadata_partition(2)
MP = metadata_partition(U1, NUM_PARTITIONS)
OTHER = next(
    TopicIdPartition(uuid.UUID(int=i + 1), "other", 0)
    for i in range(100)
    if metadata_partition(TopicIdPartition(uuid.UUID(int=i + 1), "other", 0), NUM_PARTITIONS) != MP
)


def seg(
    tip: TopicIdPartition, start: int, end: int, epochs: dict[int, int], size: int = 100, txn_empty: bool = True
) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, uuid.uuid4()),
        start,
        end,
        end * 10,
        1,
        1000 + start,
        size,
        epochs,
        S.COPY_SEGMENT_STARTED,
        None,
        txn_empty,
    )


def upd(m: RemoteLogSegmentMetadata, state: S, custom: dict | None = None) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(m.remote_log_segment_id, 2000 + m.start_offset, custom, state, 1)


def manager(io: MetadataTopicIO, path: Path, **kw) -> TopicBasedRemoteLogMetadataManager:
    cfg = {
        "remote.log.metadata.topic.num.partitions": str(NUM_PARTITIONS),
        "remote.log.metadata.topic.replication.factor": "1",
    }
    cfg.update(kw.pop("configs", {}))
    kw.setdefault("snapshot_interval_s", 0)
    return TopicBasedRemoteLogMetadataManager(io, path, cfg, broker_id=1, **kw)


def run(coro_fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(coro_fn(), 30))


async def copy(rlmm: TopicBasedRemoteLogMetadataManager, m: RemoteLogSegmentMetadata) -> None:
    await rlmm.add_remote_log_segment_metadata(m)
    await rlmm.update_remote_log_segment_metadata(upd(m, S.COPY_SEGMENT_FINISHED, {"path": m.start_offset}))


async def leading(io: MetadataTopicIO, path: Path, tip: TopicIdPartition = U1) -> TopicBasedRemoteLogMetadataManager:
    """A started manager on a broker that leads `tip`, caught up."""
    m = manager(io, path)
    await m.start()
    m.on_partition_leadership_changes({tip}, set())
    await m.wait_until_ready(tip)
    return m


def sid(m: RemoteLogSegmentMetadata | None):
    return None if m is None else m.remote_log_segment_id


def value(v: bytes | None) -> bytes:
    assert v is not None  # the metadata topic holds no tombstones
    return v


# -- writes and lookups -----------------------------------------------------------------------------------------------


def test_writes_go_to_the_partitioned_topic_and_are_applied_when_the_call_returns(tmp_path: Path) -> None:
    async def main() -> None:
        io = InMemoryMetadataTopicIO()
        rlmm = manager(io, tmp_path, configs={"remote.log.metadata.topic.retention.ms": "604800000"})
        rlmm.on_partition_leadership_changes({U1}, set())  # before start: kept pending, as Kafka
        await rlmm.start()
        assert io.created == [(NUM_PARTITIONS, 1, 604800000)]
        await rlmm.wait_until_ready(U1)
        m = seg(U1, 0, 99, {0: 0})
        await rlmm.add_remote_log_segment_metadata(m)
        assert [x.state for x in rlmm.list_remote_log_segments(U1)] == [S.COPY_SEGMENT_STARTED]  # applied already
        assert rlmm.remote_log_segment_metadata(U1, 0, 10) is None
        await rlmm.update_remote_log_segment_metadata(upd(m, S.COPY_SEGMENT_FINISHED, {"k": "v"}))
        got = rlmm.remote_log_segment_metadata(U1, 0, 10)
        assert got is not None
        assert sid(got) == sid(m) and got.custom_metadata == {"k": "v"}
        assert rlmm.highest_offset_for_epoch(U1, 0) == 99 and rlmm.highest_offset_for_epoch(U1, 1) is None
        # the topic holds exactly Kafka's values, null keys, on the partitioner's partition
        recs = io.records(MP)
        assert [deserialize(value(v)) for _, v in recs] == [m, upd(m, S.COPY_SEGMENT_FINISHED, {"k": "v"})]
        assert all(p == MP for p in io.logs)
        from strata.protocol.records import iter_records

        assert all(r.key is None for b in io.logs[MP] for r in iter_records(b))
        assert rlmm.remote_log_metadata_count(U1) == 1 and rlmm.remote_log_size_bytes(U1) == 100
        assert rlmm.remote_log_size(U1) == 100 and rlmm.remote_log_size(U1, 0) == 100
        await rlmm.close()

    run(main)


def test_invalid_writes_raise_before_anything_is_appended(tmp_path: Path) -> None:
    async def main() -> None:
        io = InMemoryMetadataTopicIO()
        rlmm = manager(io, tmp_path)
        await rlmm.start()
        rlmm.on_partition_leadership_changes({U1}, set())
        await rlmm.wait_until_ready(U1)
        m = seg(U1, 0, 9, {0: 0})
        await copy(rlmm, m)
        appends = io.appends
        with pytest.raises(InvalidStateTransitionError):  # COPY_FINISHED -> DELETE_FINISHED skips a step
            await rlmm.update_remote_log_segment_metadata(upd(m, S.DELETE_SEGMENT_FINISHED))
        with pytest.raises(InvalidStateTransitionError):  # re-adding a finished segment
            await rlmm.add_remote_log_segment_metadata(
                RemoteLogSegmentMetadata(m.remote_log_segment_id, 0, 9, 1, 1, 1, 10, {0: 0})
            )
        with pytest.raises(InvalidStateTransitionError):  # add must be COPY_SEGMENT_STARTED
            await rlmm.add_remote_log_segment_metadata(
                RemoteLogSegmentMetadata(
                    RemoteLogSegmentId(U1, uuid.uuid4()), 0, 9, 1, 1, 1, 10, {0: 0}, S.COPY_SEGMENT_FINISHED
                )
            )
        with pytest.raises(RemoteResourceNotFoundError):  # unknown segment
            await rlmm.update_remote_log_segment_metadata(upd(seg(U1, 0, 9, {0: 0}), S.COPY_SEGMENT_FINISHED))
        with pytest.raises(RemoteResourceNotFoundError):  # partition not followed here
            await rlmm.add_remote_log_segment_metadata(seg(U2, 0, 9, {0: 0}))
        with pytest.raises(InvalidStateTransitionError):  # partition deletion starts with MARKED
            await rlmm.put_remote_partition_delete_metadata(
                RemotePartitionDeleteMetadata(U1, P.DELETE_PARTITION_FINISHED, 1, 1)
            )
        assert io.appends == appends
        with pytest.raises(RemoteResourceNotFoundError):
            rlmm.list_remote_log_segments(U2)
        await rlmm.close()
        with pytest.raises(RemoteStorageError):
            rlmm.list_remote_log_segments(U1)

    run(main)


def test_lookups_by_epoch_and_offset_and_txn_index_through_the_topic(tmp_path: Path) -> None:
    async def main() -> None:
        io = InMemoryMetadataTopicIO()
        rlmm = manager(io, tmp_path)
        await rlmm.start()
        rlmm.on_partition_leadership_changes(set(), {U1})
        await rlmm.wait_until_ready(U1)
        a, b = seg(U1, 0, 99, {0: 0}), seg(U1, 100, 199, {0: 100, 2: 150}, txn_empty=False)
        stale = seg(U1, 150, 249, {1: 150})  # an old leader's upload for epoch 1, off the current lineage
        for m in (a, b, stale):
            await copy(rlmm, m)
        assert sid(rlmm.remote_log_segment_metadata(U1, 0, 120)) == sid(b)
        assert rlmm.remote_log_segment_metadata(U1, 0, 160) is None
        assert sid(rlmm.remote_log_segment_metadata(U1, 2, 160)) == sid(b)
        assert sid(rlmm.remote_log_segment_metadata(U1, 1, 160)) == sid(stale)
        assert [sid(x) for x in rlmm.list_remote_log_segments(U1)] == [sid(a), sid(b), sid(stale)]
        assert [sid(x) for x in rlmm.list_remote_log_segments(U1, 2)] == [sid(b)]
        assert sid(rlmm.next_segment_with_txn_index(U1, 0, 5)) == sid(b)
        await rlmm.close()

    run(main)


def test_a_write_that_loses_a_race_raises_the_apply_error(tmp_path: Path) -> None:
    async def main() -> None:
        io = InMemoryMetadataTopicIO()
        rlmm = manager(io, tmp_path)
        await rlmm.start()
        rlmm.on_partition_leadership_changes({U1}, set())
        await rlmm.wait_until_ready(U1)
        m = seg(U1, 0, 9, {0: 0})
        await rlmm.add_remote_log_segment_metadata(m)
        # both are valid from COPY_SEGMENT_STARTED, so both pass the pre-check; the second to be applied cannot be
        first, second = await asyncio.gather(
            rlmm.update_remote_log_segment_metadata(upd(m, S.DELETE_SEGMENT_STARTED)),
            rlmm.update_remote_log_segment_metadata(upd(m, S.COPY_SEGMENT_FINISHED)),
            return_exceptions=True,
        )
        assert first is None and isinstance(second, InvalidStateTransitionError)
        assert [x.state for x in rlmm.list_remote_log_segments(U1)] == [S.DELETE_SEGMENT_STARTED]
        await rlmm.close()

    run(main)


# -- readiness ---------------------------------------------------------------------------------------------------------


def test_not_ready_until_caught_up_with_the_end_as_of_following(tmp_path: Path) -> None:
    async def main() -> None:
        io = InMemoryMetadataTopicIO()
        writer = await leading(io, tmp_path / "a")
        segs = [seg(U1, i * 10, i * 10 + 9, {0: i * 10}) for i in range(5)]
        for m in segs:
            await copy(writer, m)

        reader = manager(io, tmp_path / "b")
        await reader.start()
        io.block_reads(MP)  # the apply loop sees no data yet
        reader.on_partition_leadership_changes(set(), {U1})
        assert not reader.is_ready(U1)
        with pytest.raises(RemoteStorageNotReadyError):
            reader.remote_log_segment_metadata(U1, 0, 5)
        with pytest.raises(RemoteStorageNotReadyError):
            await reader.add_remote_log_segment_metadata(seg(U1, 50, 59, {0: 50}))
        with pytest.raises(RemoteStorageNotReadyError):
            await reader.wait_until_ready(U1, timeout_s=0.05)
        io.unblock_reads(MP)
        await reader.wait_until_ready(U1)
        assert [sid(x) for x in reader.list_remote_log_segments(U1)] == [sid(m) for m in segs]
        # and a later write by the leader reaches the follower's cache
        extra = seg(U1, 50, 59, {1: 50})
        await copy(writer, extra)
        await reader.wait_for_catch_up(U1)
        assert sid(reader.remote_log_segment_metadata(U1, 1, 55)) == sid(extra)
        assert reader.highest_offset_for_epoch(U1, 1) == 59
        await writer.close()
        await reader.close()

    run(main)


def test_catch_up_waits_for_records_replicated_but_not_yet_below_the_high_watermark(tmp_path: Path) -> None:
    """A new leader's catch-up (before it picks where copying resumes) covers what its replica holds, not only what
    its high watermark shows: after a fail-over the old leader's last COPY_SEGMENT_FINISHED can sit above it."""

    async def main() -> None:
        io = InMemoryMetadataTopicIO()
        old_leader = await leading(io, tmp_path / "a")
        await copy(old_leader, seg(U1, 0, 9, {0: 0}))
        new_leader = manager(io, tmp_path / "b")
        await new_leader.start()
        new_leader.on_partition_leadership_changes(set(), {U1})
        await new_leader.wait_until_ready(U1)

        last = seg(U1, 10, 19, {0: 0})
        await old_leader.add_remote_log_segment_metadata(last)
        io.hold_hw(MP)  # COPY_SEGMENT_FINISHED replicated, high watermark behind it
        pending = asyncio.ensure_future(
            old_leader.update_remote_log_segment_metadata(upd(last, S.COPY_SEGMENT_FINISHED))
        )
        await asyncio.wait_for(_until(lambda: io.leo.get(MP, 0) > io.hw.get(MP, 0)), 5)
        assert new_leader.is_ready(U1) and new_leader.highest_offset_for_epoch(U1, 0) == 9
        with pytest.raises(RemoteStorageNotReadyError):
            await new_leader.wait_for_catch_up(U1, timeout_s=0.2)
        io.release_hw(MP)
        await new_leader.wait_for_catch_up(U1, timeout_s=5)
        assert new_leader.highest_offset_for_epoch(U1, 0) == 19
        await pending
        await old_leader.close()
        await new_leader.close()

    run(main)


async def _until(cond: Callable[[], bool]) -> None:
    while not cond():
        await asyncio.sleep(0.01)  # polls an in-memory fake: a bounded condition wait (asyncio.wait_for)


def test_empty_metadata_partition_is_ready_at_once(tmp_path: Path) -> None:
    async def main() -> None:
        rlmm = manager(InMemoryMetadataTopicIO(), tmp_path)
        await rlmm.start()
        rlmm.on_partition_leadership_changes({U1}, set())
        assert rlmm.is_ready(U1) and rlmm.list_remote_log_segments(U1) == []
        assert not rlmm.is_ready(U2)
        await rlmm.close()

    run(main)


def test_following_a_second_partition_rewinds_without_reapplying_the_first(tmp_path: Path) -> None:
    async def main() -> None:
        io = InMemoryMetadataTopicIO()
        leader = manager(io, tmp_path / "leader")
        await leader.start()
        leader.on_partition_leadership_changes({U1, U2}, set())
        await leader.wait_until_ready(U1)
        for i in range(4):
            await copy(leader, seg(U1, i * 10, i * 10 + 9, {0: i * 10}))
            await copy(leader, seg(U2, i * 5, i * 5 + 4, {3: i * 5}))
        await leader.update_remote_log_segment_metadata(
            upd(leader.list_remote_log_segments(U2)[0], S.DELETE_SEGMENT_STARTED)
        )

        follower = manager(io, tmp_path / "follower")
        await follower.start()
        follower.on_partition_leadership_changes(set(), {U1})
        await follower.wait_until_ready(U1)
        before = follower.store.caches[U1].state_view()
        reads_from_zero = io.read_offsets.count((MP, 0))
        follower.on_partition_leadership_changes(set(), {U2})
        await follower.wait_until_ready(U2)
        assert io.read_offsets.count((MP, 0)) > reads_from_zero  # re-read the partition for U2
        assert follower.store.caches[U1].state_view() == before
        assert follower.store.caches[U2].state_view() == leader.store.caches[U2].state_view()
        assert follower.store.caches[U1].state_view() == leader.store.caches[U1].state_view()
        await leader.close()
        await follower.close()

    run(main)


def test_undecodable_and_foreign_records_are_skipped(tmp_path: Path) -> None:
    async def main() -> None:
        io = InMemoryMetadataTopicIO(NUM_PARTITIONS)
        good = seg(U1, 0, 9, {0: 0})
        io.append_nowait(MP, b"\x07garbage")
        io.append_nowait(MP, None)  # a tombstone (compaction, Kafka 4.3)
        io.append_nowait(MP, serialize(seg(U2, 0, 9, {0: 0})))  # a partition we do not follow
        io.append_nowait(MP, serialize(good))
        io.append_nowait(MP, serialize(upd(good, S.DELETE_SEGMENT_FINISHED)))  # illegal: dropped like Kafka
        rlmm = manager(io, tmp_path)
        await rlmm.start()
        rlmm.on_partition_leadership_changes({U1}, set())
        await rlmm.wait_until_ready(U1)
        assert list(rlmm.list_remote_log_segments(U1)) == [good]
        await rlmm.close()

    run(main)


def test_consume_wait_timeout_gives_a_retriable_error(tmp_path: Path) -> None:
    async def main() -> None:
        io = InMemoryMetadataTopicIO()
        rlmm = manager(io, tmp_path, configs={"remote.log.metadata.consume.wait.ms": "20"})
        await rlmm.start()
        rlmm.on_partition_leadership_changes({U1}, set())
        await rlmm.wait_until_ready(U1)
        io.block_reads(MP)
        with pytest.raises(RemoteStorageError, match="Timed out") as ei:
            await rlmm.add_remote_log_segment_metadata(seg(U1, 0, 9, {0: 0}))
        assert ei.value.retriable
        io.unblock_reads(MP)
        await rlmm.wait_for_catch_up(U1)
        assert len(rlmm.list_remote_log_segments(U1)) == 1  # it was durable; applied later
        await rlmm.close()

    run(main)


# -- stop, delete, restart ---------------------------------------------------------------------------------------------


def test_stop_partitions_drops_the_cache_and_refollowing_restores_it(tmp_path: Path) -> None:
    async def main() -> None:
        io = InMemoryMetadataTopicIO()
        rlmm = manager(io, tmp_path)
        await rlmm.start()
        rlmm.on_partition_leadership_changes({U1, OTHER}, set())
        await rlmm.wait_until_ready(U1)
        await rlmm.wait_until_ready(OTHER)
        await copy(rlmm, seg(U1, 0, 9, {0: 0}))
        await copy(rlmm, seg(OTHER, 0, 9, {0: 0}))
        view = rlmm.store.caches[U1].state_view()
        rlmm.on_stop_partitions({U1, OTHER})
        assert rlmm.followed_partitions() == set()
        with pytest.raises(RemoteResourceNotFoundError):
            rlmm.list_remote_log_segments(U1)
        rlmm.on_partition_leadership_changes({U1}, set())  # comes back from its snapshot
        await rlmm.wait_until_ready(U1)
        assert rlmm.store.caches[U1].state_view() == view
        await rlmm.close()
        assert read_snapshot_file(tmp_path, OTHER) is not None

    run(main)


def test_partition_deletion_flow(tmp_path: Path) -> None:
    async def main() -> None:
        io = InMemoryMetadataTopicIO()
        rlmm = manager(io, tmp_path)
        await rlmm.start()
        rlmm.on_partition_leadership_changes({U1}, set())
        await rlmm.wait_until_ready(U1)
        m = seg(U1, 0, 9, {0: 0})
        await copy(rlmm, m)
        await rlmm.snapshot_now()
        assert snapshot_path(tmp_path, U1).exists()
        for st in (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED):
            await rlmm.put_remote_partition_delete_metadata(RemotePartitionDeleteMetadata(U1, st, 5, 1))
            pd = rlmm.partition_delete_metadata(U1)
            assert pd is not None and pd.state == st
        await rlmm.update_remote_log_segment_metadata(upd(m, S.DELETE_SEGMENT_STARTED))
        await rlmm.update_remote_log_segment_metadata(upd(m, S.DELETE_SEGMENT_FINISHED))
        await rlmm.put_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(U1, P.DELETE_PARTITION_FINISHED, 6, 1)
        )
        assert rlmm.partition_delete_metadata(U1) is None
        with pytest.raises(RemoteResourceNotFoundError):
            rlmm.list_remote_log_segments(U1)
        # a delete event for a partition this broker does not follow is just written
        await rlmm.put_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(OTHER, P.DELETE_PARTITION_STARTED, 7, 1)
        )
        last = deserialize(value(io.records(metadata_partition(OTHER, NUM_PARTITIONS))[-1][1]))
        assert isinstance(last, RemotePartitionDeleteMetadata) and last.topic_id_partition == OTHER
        await rlmm.snapshot_now()
        assert not snapshot_path(tmp_path, U1).exists()
        await rlmm.close()

    run(main)


def test_restart_from_snapshot_plus_tail_rebuilds_an_identical_cache(tmp_path: Path) -> None:
    async def main() -> None:
        io = InMemoryMetadataTopicIO()
        first = manager(io, tmp_path / "broker")
        await first.start()
        first.on_partition_leadership_changes({U1, U2}, set())
        await first.wait_until_ready(U1)
        await first.wait_until_ready(U2)
        # history before the snapshot: epochs, a re-upload, a divergent lineage, a delete in progress
        a = seg(U1, 0, 99, {0: 0})
        b = seg(U1, 100, 199, {0: 100, 1: 150})
        b2 = seg(U1, 100, 199, {0: 100, 2: 120})
        c = seg(U1, 200, 299, {2: 200}, txn_empty=False)
        for m in (a, b, b2, c):
            await copy(first, m)
        await first.update_remote_log_segment_metadata(upd(a, S.DELETE_SEGMENT_STARTED))
        await copy(first, seg(U2, 0, 49, {5: 0}))
        await first.put_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(U2, P.DELETE_PARTITION_MARKED, 1, 1)
        )
        await first.snapshot_now()
        snap = read_snapshot_file(tmp_path / "broker", U1)
        assert snap is not None
        snap_offset = snap.metadata_partition_offset
        assert snap_offset == io.end_offset(MP)
        assert read_committed_offsets(tmp_path / "broker") == {MP: snap_offset}
        assert (tmp_path / "broker" / COMMITTED_OFFSETS_FILE_NAME).read_text() == f"0\n{MP} {snap_offset}\n"
        # the tail, after the snapshot
        await first.update_remote_log_segment_metadata(upd(a, S.DELETE_SEGMENT_FINISHED))
        d = seg(U1, 300, 399, {2: 300, 3: 350})
        await copy(first, d)
        await first.add_remote_log_segment_metadata(seg(U1, 400, 499, {3: 400}))
        await first.update_remote_log_segment_metadata(upd(b, S.DELETE_SEGMENT_STARTED))
        await copy(first, seg(U2, 50, 99, {5: 50}))
        views = {t: first.store.caches[t].state_view() for t in (U1, U2)}
        deletes = {t: first.partition_delete_metadata(t) for t in (U1, U2)}
        await first.close(write_snapshots=False)  # crash: the snapshot stays behind

        restarted = manager(io, tmp_path / "broker")
        await restarted.start()
        io.read_offsets.clear()
        restarted.on_partition_leadership_changes({U1}, {U2})
        await restarted.wait_until_ready(U1)
        await restarted.wait_until_ready(U2)
        assert min(off for p, off in io.read_offsets if p == MP) == snap_offset  # only the tail was read
        for t in (U1, U2):
            assert restarted.store.caches[t].state_view() == views[t]
            assert restarted.partition_delete_metadata(t) == deletes[t]
        assert sid(restarted.remote_log_segment_metadata(U1, 3, 360)) == sid(d)
        assert sid(restarted.next_segment_with_txn_index(U1, 2, 200)) == sid(c)

        fresh = manager(io, tmp_path / "fresh")  # and the same as a rebuild from offset 0
        await fresh.start()
        fresh.on_partition_leadership_changes({U1, U2}, set())
        await fresh.wait_until_ready(U1)
        await fresh.wait_until_ready(U2)
        for t in (U1, U2):
            assert fresh.store.caches[t].state_view() == views[t]
        await restarted.close()
        await fresh.close()

    run(main)


def test_snapshot_beyond_the_topic_end_is_discarded(tmp_path: Path) -> None:
    async def main() -> None:
        io = InMemoryMetadataTopicIO()
        rlmm = manager(io, tmp_path)
        await rlmm.start()
        rlmm.on_partition_leadership_changes({U1}, set())
        await rlmm.wait_until_ready(U1)
        await copy(rlmm, seg(U1, 0, 9, {0: 0}))
        await rlmm.close()
        snap = read_snapshot_file(tmp_path, U1)
        assert snap is not None and snap.metadata_partition_offset == 2
        recreated = InMemoryMetadataTopicIO()  # the metadata topic was deleted/recreated
        again = manager(recreated, tmp_path)
        await again.start()
        again.on_partition_leadership_changes({U1}, set())
        await again.wait_until_ready(U1)
        assert again.list_remote_log_segments(U1) == []
        await again.close()

    run(main)


def test_corrupt_snapshot_falls_back_to_the_topic(tmp_path: Path) -> None:
    async def main() -> None:
        io = InMemoryMetadataTopicIO()
        rlmm = manager(io, tmp_path)
        await rlmm.start()
        rlmm.on_partition_leadership_changes({U1}, set())
        await rlmm.wait_until_ready(U1)
        m = seg(U1, 0, 9, {0: 0})
        await copy(rlmm, m)
        await rlmm.close()
        path = snapshot_path(tmp_path, U1)
        data = bytearray(path.read_bytes())
        data[20] ^= 0xFF
        path.write_bytes(bytes(data))
        again = manager(io, tmp_path)
        await again.start()
        again.on_partition_leadership_changes({U1}, set())
        await again.wait_until_ready(U1)
        assert [sid(x) for x in again.list_remote_log_segments(U1)] == [sid(m)]
        await again.close()

    run(main)


def test_periodic_snapshots(tmp_path: Path) -> None:
    async def main() -> None:
        ticks: asyncio.Queue[None] = asyncio.Queue()
        sleeping = asyncio.Event()
        intervals: list[float] = []

        async def timer(seconds: float) -> None:  # the snapshot timer, driven by the test
            intervals.append(seconds)
            sleeping.set()
            await ticks.get()

        io = InMemoryMetadataTopicIO()
        rlmm = manager(io, tmp_path, snapshot_interval_s=12.5, sleep=timer)
        await rlmm.start()
        rlmm.on_partition_leadership_changes({U1}, set())
        await rlmm.wait_until_ready(U1)
        await copy(rlmm, seg(U1, 0, 9, {0: 0}))
        await sleeping.wait()
        assert not snapshot_path(tmp_path, U1).exists()
        sleeping.clear()
        ticks.put_nowait(None)  # the interval elapses: one round of snapshots
        await sleeping.wait()  # ... done, and the writer sleeps again
        snap = read_snapshot_file(tmp_path, U1)
        assert snap is not None
        assert snap.metadata_partition_offset == 2 and intervals == [12.5, 12.5]
        assert snap.cache.state_view() == rlmm.store.caches[U1].state_view()
        assert read_committed_offsets(tmp_path) == {MP: 2}
        await rlmm.close()

    run(main)


def test_config_from_kafka_names() -> None:
    assert RlmmConfig.from_configs({}) == RlmmConfig(50, 3, -1, 120_000)
    c = RlmmConfig.from_configs(
        {
            "remote.log.metadata.topic.num.partitions": "7",
            "remote.log.metadata.topic.replication.factor": 1,
            "remote.log.metadata.topic.retention.ms": "86400000",
            "remote.log.metadata.consume.wait.ms": "500",
            "unrelated": "x",
        }
    )
    assert c == RlmmConfig(7, 1, 86_400_000, 500)
    for bad in (
        {"remote.log.metadata.topic.num.partitions": "0"},
        {"remote.log.metadata.topic.num.partitions": "many"},
        {"remote.log.metadata.topic.retention.ms": "0"},
    ):
        with pytest.raises(ValueError):
            RlmmConfig.from_configs(bad)


def test_start_fails_when_the_topic_has_another_partition_count(tmp_path: Path) -> None:
    async def main() -> None:
        rlmm = manager(InMemoryMetadataTopicIO(NUM_PARTITIONS + 1), tmp_path)
        with pytest.raises(RuntimeError):
            await rlmm.start()
        with pytest.raises(RemoteStorageNotReadyError):
            rlmm.list_remote_log_segments(U1)

    run(main)


def test_random_histories_with_crashes_rebuild_the_same_cache(tmp_path: Path) -> None:
    """Seeded random lifecycles over three user partitions (two share a metadata partition), with snapshots and
    crashes at random points: after each restart, and at the end, the cache equals a rebuild from offset 0."""
    import random

    async def main() -> None:
        rng = random.Random(405)
        io = InMemoryMetadataTopicIO()
        tips = [U1, U2, OTHER]
        live: dict[TopicIdPartition, list[RemoteLogSegmentMetadata]] = {t: [] for t in tips}
        next_offset = dict.fromkeys(tips, 0)
        epoch = dict.fromkeys(tips, 0)

        async def boot() -> TopicBasedRemoteLogMetadataManager:
            r = manager(io, tmp_path / "broker")
            await r.start()
            r.on_partition_leadership_changes(set(tips), set())
            for t in tips:
                await r.wait_until_ready(t)
            return r

        async def rebuilt_views() -> dict:
            fresh = manager(io, tmp_path / f"fresh-{rng.random()}")
            await fresh.start()
            fresh.on_partition_leadership_changes(set(tips), set())
            for t in tips:
                await fresh.wait_until_ready(t)
            views = {t: fresh.store.caches[t].state_view() for t in tips}
            await fresh.close()
            return views

        rlmm = await boot()
        for step in range(200):
            t = rng.choice(tips)
            roll = rng.random()
            if roll < 0.35:
                if rng.random() < 0.2:
                    epoch[t] += 1
                start = next_offset[t] - rng.choice([0, 0, 0, 5])  # sometimes a re-upload of a tail
                start = max(start, 0)
                end = start + rng.randint(0, 30)
                epochs = {epoch[t]: start}
                if rng.random() < 0.3 and end > start:
                    epoch[t] += 1
                    epochs[epoch[t]] = rng.randint(start + 1, end)
                m = seg(t, start, end, epochs, size=rng.randint(1, 1000), txn_empty=rng.random() < 0.7)
                await rlmm.add_remote_log_segment_metadata(m)
                if rng.random() < 0.9:
                    await rlmm.update_remote_log_segment_metadata(upd(m, S.COPY_SEGMENT_FINISHED))
                next_offset[t] = max(next_offset[t], end + 1)
                live[t].append(m)
            elif roll < 0.6 and live[t]:
                m = rng.choice(live[t])
                cur = next(x for x in rlmm.list_remote_log_segments(t) if sid(x) == sid(m))
                nxt = {
                    S.COPY_SEGMENT_STARTED: S.DELETE_SEGMENT_STARTED,
                    S.COPY_SEGMENT_FINISHED: S.DELETE_SEGMENT_STARTED,
                    S.DELETE_SEGMENT_STARTED: S.DELETE_SEGMENT_FINISHED,
                }[cur.state]
                await rlmm.update_remote_log_segment_metadata(upd(m, nxt))
                if nxt == S.DELETE_SEGMENT_FINISHED:
                    live[t].remove(m)
            elif roll < 0.7:
                await rlmm.snapshot_now()
            elif roll < 0.75:
                views = {x: rlmm.store.caches[x].state_view() for x in tips}
                await rlmm.close(write_snapshots=rng.random() < 0.5)
                rlmm = await boot()
                assert {x: rlmm.store.caches[x].state_view() for x in tips} == views, f"restart at step {step}"
        final = {x: rlmm.store.caches[x].state_view() for x in tips}
        assert final == await rebuilt_views()
        assert sum(len(v[0]) for v in final.values()) == sum(len(v) for v in live.values())
        await rlmm.close()

    run(main)
