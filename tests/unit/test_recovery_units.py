"""Topic recovery's planning and error paths (issue 24): the request-only configs, the recovery record of a bucket
whose partition held two lineages (only the surviving one is recovered), the RLMM registration of the recovered
segments (idempotent), and a replica's log started past the last recovered offset."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from strata.broker.recovered_log import recovered_start, start_recovered_log
from strata.broker.topic_recovery import (
    RETENTION_BYTES_KEY,
    RETENTION_MS_KEY,
    first_epoch_after,
    recovery_record,
    take_recovery_request,
)
from strata.config import default_log_config
from strata.protocol.errors import ErrorCode, KafkaApiError
from strata.protocol.records import build_batch
from strata.remote.bucket_manifest import (
    PartitionManifest,
    SegmentEntry,
    TopicManifest,
    partition_manifest_dir,
    topic_manifest_dir,
)
from strata.remote.bucket_manifest_reader import BucketManifestReader
from strata.remote.bucket_manifest_writer import ManifestWriter, lineage_segments, segment_entry
from strata.remote.bucket_store import LocalManifestStore
from strata.remote.metadata import RemoteLogSegmentState
from strata.remote.remote_segment_registration import register_partition_segments, register_segments
from strata.remote.topic_recovery_plan import RecoveryWindow, select_topic
from strata.storage.epoch_cache import EpochEntry
from strata.storage.log import UnifiedLog
from tests.unit.test_bucket_manifest_formats import TIP, _objects, seg
from tests.unit.test_rlm_deposed import started_rlmm


def test_recovery_request_keys_are_taken_out_and_checked() -> None:
    configs = {"remote.recovery": "TRUE", RETENTION_BYTES_KEY: "1000", "retention.ms": "5"}
    req = take_recovery_request(configs)
    assert req is not None and req.window == RecoveryWindow(1000, -1)
    assert configs == {"retention.ms": "5"}  # never stored
    assert take_recovery_request({"retention.ms": "5"}) is None
    assert take_recovery_request({"remote.recovery": "false"}) is None
    for bad, text in (
        ({"remote.recovery": "yes"}, "Expected value to be either true or false"),
        ({RETENTION_MS_KEY: "10"}, "can only be set with remote.recovery=true"),
        ({"remote.recovery": "true", RETENTION_MS_KEY: "ten"}, "Not a number"),
        ({"remote.recovery": "true", RETENTION_BYTES_KEY: "-2"}, "at least -1"),
    ):
        with pytest.raises(KafkaApiError) as e:
            take_recovery_request(dict(bad))
        assert e.value.error_code == ErrorCode.INVALID_CONFIG and text in str(e.value.message)


CHAIN = [(0, 0), (2, 20)]  # the surviving lineage: epoch 0 from 0, epoch 2 from 20 (epoch 1 lost its election)


def divergent_segments() -> tuple[list[SegmentEntry], SegmentEntry]:
    survivors = [seg(0, 9), seg(10, 19), seg(20, 29, {2: 20})]
    divergent = seg(10, 24, {0: 10, 1: 15}, sid=99)  # written by the epoch-1 leader before it was deposed
    return survivors, divergent


def test_divergent_lineages_only_the_surviving_one_is_recovered(tmp_path: Path) -> None:
    survivors, divergent = divergent_segments()

    async def run() -> None:
        # the old cluster's RLMM held both lineages' segments; its leader wrote the manifest from them
        old = await started_rlmm(tmp_path / "old-rlmm", TIP)
        try:
            assert await register_partition_segments(old, TIP, [*survivors, divergent], 1) == 8
            listed = lineage_segments(old.list_remote_log_segments(TIP), CHAIN, 0, 30)
        finally:
            await old.close()
        assert [s.start_offset for s in listed] == [0, 10, 20]
        store = LocalManifestStore(tmp_path / "bucket", fsync=False)
        _objects(store.root, [*survivors, divergent])  # every object is in the bucket, the divergent one too
        writer = ManifestWriter(store)
        pm = PartitionManifest(TIP.topic_id, TIP.topic, 0, 2, 1, 1, 1, 0, 29, CHAIN, [segment_entry(s) for s in listed])
        await writer.put(partition_manifest_dir(TIP.topic, TIP.topic_id, 0), "partition", lambda r: pm)
        tm = TopicManifest(TIP.topic_id, TIP.topic, 1, 3, {"remote.storage.enable": "true"}, 1, 1)
        await writer.put(topic_manifest_dir(TIP.topic, TIP.topic_id), "topic", lambda r: tm)

        plan = (await BucketManifestReader(store).restore_plan({TIP.topic})).topics[TIP.topic]
        record = recovery_record(select_topic(plan, RecoveryWindow.everything(), 0), RecoveryWindow.everything())
        p0 = record["partitions"]["0"]
        assert (p0["log_start_offset"], p0["next_offset"], p0["segments"]) == (0, 30, 3)
        assert p0["leader_epochs"] == [[0, 0], [2, 20]] and p0["leader_epoch"] == 3  # above the deposed epoch 1 too
        assert first_epoch_after(plan.partitions[0]) == 3

        # the new cluster's RLMM gets the survivors, pointing at their objects, and nothing twice on a retry
        new = await started_rlmm(tmp_path / "new-rlmm", TIP)
        try:
            segments = {TIP: plan.partitions[0].segments}
            assert await register_segments(new, segments, 2) == 6
            assert await register_segments(new, segments, 2) == 0
            got = new.list_remote_log_segments(TIP)
            assert {s.remote_log_segment_id.id_str for s in got} == {s.segment_id for s in survivors}
            assert all(s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED for s in got)
            found = new.remote_log_segment_metadata(TIP, 2, 25)
            assert found is not None and found.start_offset == 20
            assert new.remote_log_segment_metadata(TIP, 1, 16) is None  # the lost lineage is not there
        finally:
            await new.close()

    asyncio.run(run())


def test_windowed_record_starts_the_log_at_the_first_segment_taken() -> None:
    survivors, _ = divergent_segments()
    from strata.remote.bucket_manifest_reader import PartitionPlan, TopicPlan

    pp = PartitionPlan(0, None, survivors, 0, 30)
    plan = TopicPlan(TIP.topic, TIP.topic_id, 1, 1, {}, None, {0: pp})
    window = RecoveryWindow(retention_bytes=150)  # 100-byte segments: only the newest fits
    p0 = recovery_record(select_topic(plan, window, 0), window)["partitions"]["0"]
    assert (p0["log_start_offset"], p0["next_offset"], p0["segments"], p0["bytes"]) == (20, 30, 1, 100)
    assert p0["leader_epoch"] == 3  # the segment's epochs count even without a manifest chain


def test_recovered_replica_log_starts_past_the_last_recovered_offset(tmp_path: Path) -> None:
    cfg = default_log_config(segment_bytes=1024, remote_storage_enable=True)
    entry = {"log_start_offset": 5, "next_offset": 30, "leader_epochs": [[0, 0], [2, 20], [4, 31]], "segments": 3}
    assert recovered_start({"partitions": {"0": entry}}, 0) == entry
    assert recovered_start({"partitions": {"0": {**entry, "next_offset": 0}}}, 0) is None  # nothing to start past
    assert recovered_start(None, 0) is None
    log = UnifiedLog.open(tmp_path / "t-0", uuid.UUID(int=3), cfg, needs_recovery=False)
    assert start_recovered_log(log, entry)
    assert (log.log_start_offset, log.local_log_start_offset, log.log_end_offset) == (5, 30, 30)
    assert log.highest_offset_in_remote_storage == 29
    assert log.leader_epoch_cache.entries == [EpochEntry(0, 0), EpochEntry(2, 20)]  # none at or past the LEO
    log.append_as_leader(build_batch([b"next"]), leader_epoch=3)
    assert log.log_end_offset == 31 and log.leader_epoch_cache.entries[-1] == EpochEntry(3, 30)
    assert not start_recovered_log(log, entry)  # a log with data of its own is left alone
    log.close()
    reopened = UnifiedLog.open(tmp_path / "t-0", uuid.UUID(int=3), cfg, needs_recovery=False)
    assert reopened.log_end_offset == 31 and reopened.leader_epoch_cache.entries[0] == EpochEntry(0, 0)
    reopened.close()
