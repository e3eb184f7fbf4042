"""Bucket manifests (issue 24): the partition's leader writes a manifest listing exactly its COPY_SEGMENT_FINISHED,
not deleted segments; remote deletions drop them from it; the reader validates them against the objects present.

Topics: 5 records of 100 bytes per batch, 2 batches per segment (segment j = offsets [10j, 10j + 9]),
`local.retention.bytes=1`. Runs on LocalTieredStorage and on S3 (moto).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from strata.protocol.uuids import kafka_uuid_str, parse_kafka_uuid
from strata.remote.bucket_manifest_reader import BucketManifestReader, PartitionPlan
from strata.remote.bucket_store import LocalManifestStore, ManifestStore, S3ManifestStore
from strata.remote.s3 import S3RemoteStorageManager
from tests.tiered.harness import Harness, LocalBackend, S3Backend, Scenario

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

T = TypeVar("T")
LOCAL_TAIL = {"local.retention.bytes": "1"}
FAST_MANIFESTS = {"remote.manifest.upload.interval.ms": 200}


def read_bucket(h: Harness, fn: Callable[[BucketManifestReader], Awaitable[T]]) -> T:
    """Run `fn` with a reader over the harness's bucket, from this (test) process."""

    async def run() -> T:
        store: ManifestStore
        rsm = None
        if isinstance(h.backend, LocalBackend):
            assert h.backend.root is not None
            store = LocalManifestStore(h.backend.root, fsync=False)
        else:
            assert isinstance(h.backend, S3Backend)
            cfg = h.backend.server.rsm_config(**{"key.prefix": h.backend.prefix})
            rsm = S3RemoteStorageManager.from_config(cfg)
            store = S3ManifestStore(rsm)
        try:
            return await fn(BucketManifestReader(store))
        finally:
            if rsm is not None:
                await rsm.close()

    return asyncio.run(run())


def partition_plan(h: Harness, topic: str, partition: int) -> PartitionPlan | None:
    tid = parse_kafka_uuid(h.topic(topic).topic_id or "")

    async def plan(r: BucketManifestReader) -> PartitionPlan | None:
        pm = await r.partition_manifest(topic, tid, partition)
        return None if pm is None else await r.partition_plan(pm)

    return read_bucket(h, plan)


def expect_manifest(topic: str, partition: int, starts: list[int], log_start: int) -> Callable[[Harness], None]:
    """The newest manifest lists exactly the RLMM's finished segments (base offsets `starts`), all complete."""

    def check(h: Harness) -> None:
        def ok(plan: PartitionPlan | None) -> bool:
            return (
                plan is not None
                and plan.manifest is not None
                and [s.start_offset for s in plan.manifest.segments] == starts
                and plan.log_start_offset == log_start
            )

        plan = h.wait(
            f"manifest of {topic}-{partition} listing {starts}", lambda: partition_plan(h, topic, partition), ok
        )
        assert plan is not None and plan.manifest is not None
        assert not plan.problems, plan.problems
        assert [s.start_offset for s in plan.segments] == starts
        assert plan.next_offset == (starts[-1] + 10 if starts else log_start)
        segments = h.rlmm_segments(topic, partition)
        finished = {kafka_uuid_str(s.segment_id) for s in segments if s.state == "COPY_SEGMENT_FINISHED"}
        assert {s.segment_id for s in plan.manifest.segments} == finished
        assert plan.manifest.highest_uploaded_offset == (starts[-1] + 9 if starts else -1)

    return check


def test_partition_manifest_follows_copies_and_deletions(make_harness: Callable[..., Harness]) -> None:
    h = make_harness(**FAST_MANIFESTS)
    (
        Scenario("partition manifests")
        .create_topic("t", partitions=1, configs=LOCAL_TAIL)
        .produce("t", 0, 50)
        .wait_for_offload("t", 0, up_to_offset=39)
        .expect_remote_segments("t", 0, [0, 10, 20, 30])
        .step("manifest lists the four copied segments", expect_manifest("t", 0, [0, 10, 20, 30], 0))
        .delete_records("t", 0, before_offset=23)
        .expect_remote_segments("t", 0, [20, 30])
        .step("manifest drops the deleted segments", expect_manifest("t", 0, [20, 30], 23))
        .run(h)
    )
    assert h.metric("strata_remote_manifest_uploads_total", kind="partition") >= 2
