"""Bucket manifests (issue 24): formats, versioned writes and their garbage collection, the reader's choice and
validation, the lineage filter, and the leader-epoch fence of the partition manifest writer (a real RLM, RLMM and
LocalTieredStorage)."""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from pathlib import Path

import pytest

from strata.protocol.uuids import parse_kafka_uuid
from strata.remote.bucket_manifest import (
    TOPICS_DIR,
    ClusterManifest,
    ManifestFormatError,
    PartitionManifest,
    SegmentEntry,
    TopicManifest,
    parse_topic_dir,
    partition_manifest_dir,
    topic_dir,
    topic_manifest_dir,
)
from strata.remote.bucket_manifest_reader import BucketManifestReader, PartitionPlan, TopicPlan
from strata.remote.bucket_manifest_writer import ManifestWriter, PartitionManifestWriter, in_lineage
from strata.remote.bucket_store import LocalManifestStore
from strata.remote.local_tiered import LocalTieredStorage
from strata.remote.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from strata.remote.remote_metrics import RemoteMetrics
from strata.remote.rlm import RemoteLogManager, RemoteLogManagerConfig, topic_id_partition
from strata.remote.rsm import partition_dir_name
from strata.remote.topic_recovery_plan import RecoveryWindow, select_partition, select_topic
from tests.support.waiting import wait_until_async
from tests.unit.test_rlm_deposed import open_tiered_log, started_rlmm

TID = uuid.UUID(int=7)
TIP = TopicIdPartition(TID, "orders", 0)


def seg(start: int, end: int, epochs: dict[int, int] | None = None, sid: int = 0) -> SegmentEntry:
    return SegmentEntry(
        segment_id=RemoteLogSegmentId(TIP, uuid.UUID(int=sid or start + 1)).id_str,
        start_offset=start,
        end_offset=end,
        size_bytes=100,
        max_timestamp_ms=1000 + start,
        segment_leader_epochs=epochs or {0: start},
        txn_idx_empty=True,
    )


def pmanifest(
    segments: list[SegmentEntry], *, epoch: int = 0, revision: int = 1, log_start: int = 0
) -> PartitionManifest:
    return PartitionManifest(
        topic_id=TID,
        topic="orders",
        partition=0,
        leader_epoch=epoch,
        revision=revision,
        broker_id=1,
        written_at_ms=1,
        log_start_offset=log_start,
        highest_uploaded_offset=segments[-1].end_offset if segments else -1,
        leader_epochs=[(0, 0)],
        segments=segments,
    )


def test_formats_round_trip_and_reject_garbage() -> None:
    pm = pmanifest([seg(0, 9), seg(10, 19, {0: 10, 2: 15})])
    assert PartitionManifest.from_bytes(pm.to_bytes()) == pm
    tm = TopicManifest(TID, "orders", 3, 2, {"retention.ms": "1000", "remote.storage.enable": "true"}, 4, 5, 1)
    assert TopicManifest.from_bytes(tm.to_bytes()) == tm
    cm = ClusterManifest("c1", 2, 3, topics={"orders": "AAAAAAAAAAAAAAAAAAAABw"}, acls=[{"principal": "User:a"}])
    assert ClusterManifest.from_bytes(cm.to_bytes()) == cm
    for bad in (b"{", b"[]", b'{"kind": "partition", "format": 99}', tm.to_bytes()):
        with pytest.raises(ManifestFormatError):
            PartitionManifest.from_bytes(bad)
    broken = pm.to_bytes().replace(b'"revision": 1', b'"revision": "x"')
    with pytest.raises(ManifestFormatError):
        PartitionManifest.from_bytes(broken)


def _objects(store_root: Path, entries: list[SegmentEntry], skip: dict[int, str] | None = None) -> None:
    pdir = store_root / partition_dir_name(TIP)
    pdir.mkdir(parents=True, exist_ok=True)
    store = LocalManifestStore(store_root, fsync=False)
    for e in entries:
        for suffix in store.segment_suffixes(e.txn_idx_empty):
            if (skip or {}).get(e.start_offset) != suffix:
                (pdir / (e.object_prefix + suffix)).write_bytes(b"x")


def _revision_of(segments: list[SegmentEntry], revision: int) -> PartitionManifest:
    return pmanifest(segments, epoch=3, revision=revision)


def test_versioned_writes_gc_and_highest_epoch_revision_wins(tmp_path: Path) -> None:
    async def run() -> None:
        store = LocalManifestStore(tmp_path, fsync=False)
        metrics = RemoteMetrics()
        writer = ManifestWriter(store, keep=2, metrics=metrics)
        directory = partition_manifest_dir("orders", TID, 0)
        segs = [seg(0, 9), seg(10, 19), seg(20, 29)]
        _objects(tmp_path, segs)
        for n in range(1, 4):
            await writer.put(directory, "partition", functools.partial(_revision_of, segs[:n]))
        names = [k.rsplit("/", 1)[-1] for k in await store.list(directory)]
        assert names == [
            "manifest.0000000003.00000000000000000002.json",
            "manifest.0000000003.00000000000000000003.json",
        ]
        assert metrics.manifest_uploads.labels("partition")._value.get() == 3
        # a deposed leader (epoch 2) writing later, with a higher revision, loses to epoch 3
        late = pmanifest(segs[:1], epoch=2, revision=50)
        await store.put(directory + late.name, late.to_bytes())
        reader = BucketManifestReader(store)
        got = await reader.partition_manifest("orders", TID, 0)
        assert got is not None and (got.leader_epoch, got.revision) == (3, 3) and len(got.segments) == 3
        # a new writer (another broker) continues above every revision present
        assert await ManifestWriter(store).next_revision(directory) == 51
        assert await reader.list_topics() == [("orders", TID)]

    asyncio.run(run())


def test_reader_takes_only_complete_contiguous_segments(tmp_path: Path) -> None:
    async def run() -> None:
        store = LocalManifestStore(tmp_path, fsync=False)
        reader = BucketManifestReader(store)
        segs = [seg(0, 9), seg(10, 19), seg(20, 29), seg(30, 39), seg(40, 49)]
        # 0-9 deleted by retention after the manifest was written; 30-39 lost its .log (a copy never finished)
        _objects(tmp_path, segs[1:], skip={30: ".log"})
        plan = await reader.partition_plan(pmanifest(segs))
        assert [s.start_offset for s in plan.segments] == [10, 20]
        assert (plan.log_start_offset, plan.next_offset) == (10, 30)
        assert [(p.segment.start_offset, p.reason) for p in plan.problems] == [
            (0, "missing objects: .log, .index, .timeindex, .snapshot, .leader_epoch_checkpoint"),
            (30, "missing objects: .log"),
            (40, "after an incomplete segment or gap"),
        ]
        # a gap in offsets ends the plan too; a duplicate copy wholly covered is skipped
        gap = [seg(0, 9), seg(0, 9, sid=99), seg(10, 19), seg(25, 29)]
        _objects(tmp_path, gap)
        plan = await reader.partition_plan(pmanifest(gap))
        assert [s.start_offset for s in plan.segments] == [0, 10]
        assert plan.next_offset == 20
        assert [p.reason for p in plan.problems] == ["offset gap after 19"]

    asyncio.run(run())


def _meta(start: int, end: int, epochs: dict[int, int]) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(TIP, uuid.uuid4()), start, end, 0, 1, 0, 10, epochs)


def test_lineage_filter() -> None:
    chain = [(0, 0), (2, 50), (5, 80)]
    assert in_lineage(chain, 100, _meta(0, 49, {0: 0}))
    assert in_lineage(chain, 100, _meta(40, 59, {0: 40, 2: 50}))
    assert in_lineage(chain, 100, _meta(60, 99, {2: 60, 5: 80}))
    assert not in_lineage(chain, 100, _meta(40, 59, {0: 40}))  # epoch 0 ran past 49 on another lineage
    assert not in_lineage(chain, 100, _meta(50, 59, {3: 50}))  # an epoch this lineage never had
    assert not in_lineage(chain, 100, _meta(40, 59, {0: 40, 2: 55}))  # epoch 2 started elsewhere
    assert not in_lineage(chain, 90, _meta(80, 95, {5: 80}))  # past the log end
    # the chain trimmed at its start (log start advanced): older epochs are taken as they are
    assert in_lineage([(2, 50), (5, 80)], 100, _meta(40, 59, {0: 40, 2: 50}))


def test_deposed_leader_writes_no_partition_manifest(tmp_path: Path) -> None:
    leading = True

    async def probe(tip: TopicIdPartition, epoch: int) -> bool:
        return leading

    async def scenario() -> None:
        nonlocal leading
        log = open_tiered_log(tmp_path / "t-0", int(time.time() * 1000))  # within retention: nothing expires
        tip = topic_id_partition(log)
        rlmm = await started_rlmm(tmp_path / "rlmm", tip)
        rsm = LocalTieredStorage(tmp_path / "rsm", fsync=False)
        metrics = RemoteMetrics()
        rlm = RemoteLogManager(
            RemoteLogManagerConfig(task_interval_ms=20),
            rsm,
            rlmm,
            broker_id=1,
            index_cache_dir=tmp_path / "idx",
            leadership_probe=probe,
            metrics=metrics,
        )
        store = LocalManifestStore(rsm.root, fsync=False)
        rlm.manifests = PartitionManifestWriter(
            ManifestWriter(store, metrics=metrics), rlmm, broker_id=1, interval_ms=0, metrics=metrics
        )
        reader = BucketManifestReader(store)
        closed = len(log.segments) - 1
        try:
            rlm.on_leadership_change([(log, 0)], [])

            async def listed() -> int:
                pm = await reader.partition_manifest(tip.topic, tip.topic_id, tip.partition)
                return len(pm.segments) if pm is not None else 0

            deadline = asyncio.get_running_loop().time() + 20
            while await listed() != closed:
                assert asyncio.get_running_loop().time() < deadline, "the leader's manifest never listed every copy"
                await asyncio.sleep(0.02)
            directory = partition_manifest_dir(tip.topic, tip.topic_id, tip.partition)
            leading = False  # another broker leads now; this one has not heard of it
            st = rlm._leaders[tip]
            rlm.manifests.request(log, tip, 0, lambda: rlm.still_leader(st, 0))
            await wait_until_async(lambda: metrics.manifest_writes_fenced._value.get() >= 1, timeout=10)
            # a write that passed its fence check before the flip has finished by now (one writer per partition)
            before = await store.list(directory)
            rlm.manifests.request(log, tip, 0, lambda: rlm.still_leader(st, 0))
            await wait_until_async(lambda: metrics.manifest_writes_fenced._value.get() >= 2, timeout=10)
            assert await store.list(directory) == before
        finally:
            await rlm.close()
            await rlmm.close()

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_topic_recovery_window_takes_the_newest_segments() -> None:
    segs = [seg(0, 9), seg(10, 19), seg(20, 29), seg(30, 39)]  # 100 bytes each, newest record at 1000 + start
    plan = PartitionPlan(0, None, segs, log_start_offset=5, next_offset=40)
    assert select_partition(plan, RecoveryWindow.everything(), 0) == plan
    by_bytes = select_partition(plan, RecoveryWindow(retention_bytes=250), 0)
    assert [s.start_offset for s in by_bytes.segments] == [20, 30]
    assert (by_bytes.log_start_offset, by_bytes.next_offset) == (20, 40)
    by_time = select_partition(plan, RecoveryWindow(retention_ms=30), now_ms=1040)  # newest at 1010 is 30 ms old
    assert [s.start_offset for s in by_time.segments] == [10, 20, 30]
    none = select_partition(plan, RecoveryWindow(retention_bytes=50), 0)
    assert (none.segments, none.log_start_offset, none.next_offset) == ([], 40, 40)  # producers continue at 40
    window = RecoveryWindow.from_topic_configs({"retention.bytes": "100", "cleanup.policy": "delete"})
    topic = TopicPlan("orders", TID, 1, 1, {}, None, {0: plan})
    assert [s.start_offset for s in select_topic(topic, window, 0).partitions[0].segments] == [30]


def test_topic_directories_parse_with_dashes_in_name_and_id(tmp_path: Path) -> None:
    tid = parse_kafka_uuid("V8H6Ki71Q1-XQEMQOK-h3Q")  # base64url ids may hold "-"
    assert parse_topic_dir(topic_dir("my-topic", tid).removeprefix(TOPICS_DIR)) == ("my-topic", tid)
    assert parse_topic_dir("orders") is None

    async def run() -> None:
        store = LocalManifestStore(tmp_path, fsync=False)
        tm = TopicManifest(tid, "my-topic", 1, 1, {}, 1, 1)
        await store.put(topic_manifest_dir("my-topic", tid) + tm.name, tm.to_bytes())
        reader = BucketManifestReader(store)
        assert await reader.list_topics() == [("my-topic", tid)]
        assert list((await reader.restore_plan()).topics) == ["my-topic"]

    asyncio.run(run())
