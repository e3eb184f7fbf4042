"""Read replicas (issue 24), the remote side: where an origin is (`remote.readreplica` parsing, refusing the broker's
own root) and the in-memory RLMM over a manifest's segments (lookups by epoch and offset, read-only, not ready
before its first manifest)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from strata.protocol.uuids import kafka_uuid_str
from strata.remote.bucket_manifest import SegmentEntry
from strata.remote.metadata import RemoteLogSegmentState, TopicIdPartition
from strata.remote.read_replica import ManifestRLMM, ReadReplicaError, origin_location
from strata.remote.rlmm_types import RemoteStorageNotReadyError

OWN_S3 = {
    "rsm.config.s3.bucket.name": "own",
    "rsm.config.key.prefix": "replica/",
    "rsm.config.s3.endpoint.url": "http://127.0.0.1:9000",
    "rsm.config.fetch.chunk.cache.path": "/var/cache/own",
}
TIP = TopicIdPartition(uuid.UUID(int=5), "events", 0)


def entry(start: int, end: int, epochs: dict[int, int]) -> SegmentEntry:
    return SegmentEntry(kafka_uuid_str(uuid.UUID(int=start + 1)), start, end, 1000, 10 * start, epochs)


def test_s3_origin_is_the_brokers_settings_with_the_origins_bucket_and_prefix(tmp_path) -> None:
    loc = origin_location("origin-bucket/some/prefix/", "s3", OWN_S3, tmp_path)
    assert loc.class_name == "s3"
    assert loc.configs["s3.bucket.name"] == "origin-bucket"
    assert loc.configs["key.prefix"] == "some/prefix/"  # verbatim: the origin's rsm.config.key.prefix
    assert loc.configs["s3.endpoint.url"] == "http://127.0.0.1:9000"
    assert "fetch.chunk.cache.path" not in loc.configs  # the disk cache is the broker's own RSM's
    assert origin_location("bare", "s3", OWN_S3, tmp_path).configs["key.prefix"] == ""
    assert not loc.same_as("s3", OWN_S3)
    assert origin_location("own/replica/", "s3", OWN_S3, tmp_path).same_as("s3", OWN_S3)


def test_local_origin_is_a_directory_and_other_rsms_are_refused(tmp_path) -> None:
    loc = origin_location(str(tmp_path / "origin"), "local", {}, tmp_path)
    assert (loc.class_name, loc.configs["dir"]) == ("local", str(tmp_path / "origin"))
    assert loc.same_as("local", {"dir": str(tmp_path / "origin")})
    with pytest.raises(ReadReplicaError):
        origin_location("", "s3", OWN_S3, tmp_path)
    with pytest.raises(ReadReplicaError):
        origin_location("/x", "strata.remote.rsm:RemoteStorageManager", {}, tmp_path)
    with pytest.raises(ReadReplicaError):
        origin_location("/bucket", "s3", OWN_S3, tmp_path)  # no bucket name


def test_manifest_rlmm_answers_from_the_manifest_segments_only() -> None:
    rlmm = ManifestRLMM()
    with pytest.raises(RemoteStorageNotReadyError):  # not "no segment": that would reset a consumer's offset
        rlmm.remote_log_segment_metadata(TIP, 0, 0)
    assert not rlmm.is_ready(TIP)
    rlmm.replace(TIP, [entry(0, 9, {0: 0}), entry(10, 19, {0: 10, 1: 15})])
    assert rlmm.is_ready(TIP)
    m = rlmm.remote_log_segment_metadata(TIP, 1, 17)
    assert m is not None and (m.start_offset, m.end_offset) == (10, 19)
    assert m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    assert m.segment_id == uuid.UUID(int=11)
    assert rlmm.remote_log_segment_metadata(TIP, 0, 12) is not None
    assert rlmm.remote_log_segment_metadata(TIP, 1, 5) is None  # epoch 1 starts at 15
    assert rlmm.highest_offset_for_epoch(TIP, 1) == 19
    assert [s.start_offset for s in sorted(rlmm.list_remote_log_segments(TIP), key=lambda s: s.start_offset)] == [
        0,
        10,
    ]
    rlmm.replace(TIP, [entry(10, 19, {0: 10, 1: 15})])  # the origin's retention removed the first segment
    assert rlmm.remote_log_segment_metadata(TIP, 0, 5) is None
    with pytest.raises(PermissionError):
        asyncio.run(rlmm.add_remote_log_segment_metadata(m))
    rlmm.on_stop_partitions([TIP])
    assert not rlmm.is_ready(TIP)
