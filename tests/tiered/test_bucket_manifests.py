"""Bucket manifests (issue 24): the partition's leader writes a manifest listing exactly its COPY_SEGMENT_FINISHED,
not deleted segments; remote deletions drop them from it; the reader validates them against the objects present.

Topics: 5 records of 100 bytes per batch, 2 batches per segment (segment j = offsets [10j, 10j + 9]),
`local.retention.bytes=1`. On S3 (moto) and on LocalTieredStorage (the kill -9 test).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest
from confluent_kafka import Consumer, TopicPartition

from strata.protocol.uuids import kafka_uuid_str, parse_kafka_uuid
from strata.remote.bucket_manifest import topic_dir
from strata.remote.bucket_manifest_reader import BucketManifestReader, PartitionPlan, RestorePlan
from strata.remote.bucket_store import LocalManifestStore, ManifestStore, S3ManifestStore
from strata.remote.s3 import S3RemoteStorageManager
from tests.support.ck import QUIET
from tests.tiered.harness import Harness, LocalBackend, S3Backend, Scenario

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

T = TypeVar("T")
LOCAL_TAIL = {"local.retention.bytes": "1"}
FAST_MANIFESTS = {"remote.manifest.upload.interval.ms": 200, "remote.cluster.manifest.interval.ms": 300}


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


def commit_offset(h: Harness, group: str, topic: str, partition: int, offset: int) -> None:
    """A standalone commit (no group membership), as `kafka-consumer-groups --reset-offsets` makes."""
    c = Consumer({"bootstrap.servers": h.broker.bootstrap, "group.id": group, **QUIET})
    try:
        c.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)
    finally:
        c.close()


def restore_plan(h: Harness) -> RestorePlan:
    return read_bucket(h, lambda r: r.restore_plan())


def expect_topic_in_plan(configs: dict[str, str], group_offset: int) -> Callable[[Harness], None]:
    def check(h: Harness) -> None:
        def ok(plan: RestorePlan) -> bool:
            t = plan.topics.get("t")
            return (
                t is not None
                and all(t.configs.get(k) == v for k, v in configs.items())
                and plan.cluster is not None
                and "t" in plan.cluster.topics
                and plan.group_offsets.get("g", {}).get("t", {}).get(0, {}).get("offset") == group_offset
            )

        plan = h.wait("topic, cluster and group offsets manifests", lambda: restore_plan(h), ok)
        t = plan.topics["t"]
        assert (t.partition_count, t.replication_factor) == (1, 1)
        assert kafka_uuid_str(t.topic_id) == h.topic("t").topic_id
        assert plan.cluster is not None and plan.cluster.cluster_id
        assert plan.cluster.topics["t"] == h.topic("t").topic_id
        p0 = t.partitions[0]
        assert [s.start_offset for s in p0.segments] == [20, 30]
        assert (p0.log_start_offset, p0.next_offset) == (23, 40)

    return check


def expect_no_manifests_of_deleted(topic: str) -> Callable[[Harness], None]:
    def check(h: Harness) -> None:
        gone = next(t for t in reversed(h.deleted) if t.name == topic)
        directory = topic_dir(topic, parse_kafka_uuid(gone.topic_id or ""))
        h.wait(
            f"no object under {directory}", lambda: read_bucket(h, lambda r: r.store.list(directory)), lambda k: not k
        )

    return check


@pytest.mark.parametrize("backend_name", ["s3"])  # LocalTieredStorage: the kill -9 test below and the unit tests
def test_manifests_follow_copies_deletions_configs_and_offsets(make_harness: Callable[..., Harness]) -> None:
    h = make_harness(**FAST_MANIFESTS)
    (
        Scenario("bucket manifests")
        .create_topic("t", partitions=1, configs=LOCAL_TAIL)
        .produce("t", 0, 50)
        .wait_for_offload("t", 0, up_to_offset=39)
        .expect_remote_segments("t", 0, [0, 10, 20, 30])
        .step("manifest lists the four copied segments", expect_manifest("t", 0, [0, 10, 20, 30], 0))
        .delete_records("t", 0, before_offset=23)
        .expect_remote_segments("t", 0, [20, 30])
        .step("manifest drops the deleted segments", expect_manifest("t", 0, [20, 30], 23))
        .update_topic_config("t", set={"retention.ms": "86400000"})
        .step("a group commits", lambda h: commit_offset(h, "g", "t", 0, 25))
        .step(
            "the plan has the topic's configs, the cluster's topics and the group's offsets",
            expect_topic_in_plan({"local.retention.bytes": "1", "retention.ms": "86400000"}, 25),
        )
        .delete_topic("t")
        .step(
            "a deleted topic leaves the bucket's picture",
            lambda h: h.wait("topic gone from the plan", lambda: restore_plan(h), lambda p: "t" not in p.topics),
        )
        .expect_empty_remote_storage("t")
        .step("and its partition manifests go with its data", expect_no_manifests_of_deleted("t"))
        .run(h)
    )
    assert h.metric("strata_remote_manifest_uploads_total", kind="partition") >= 2
    assert h.metric("strata_remote_manifest_uploads_total", kind="topic") >= 2
    assert h.metric("strata_remote_manifest_uploads_total", kind="cluster") >= 1
    assert h.metric("strata_remote_manifest_uploads_total", kind="groups") >= 1


KILL_ROUNDS = 2
SEGMENTS_PER_ROUND = 12


@pytest.mark.parametrize("backend_name", ["local"])
def test_kill9_during_uploads_never_leaves_a_manifest_listing_an_incomplete_segment(
    make_harness: Callable[..., Harness],
) -> None:
    """kill -9 at a seeded moment while segments are being copied (a manifest write after every copy): the newest
    manifest on disk lists only complete segments, and after the restart manifests continue above it."""
    rng = random.Random(2405)
    h = make_harness(**{**FAST_MANIFESTS, "remote.manifest.upload.interval.ms": 0})
    Scenario("create").create_topic("t", partitions=1, configs=LOCAL_TAIL).run(h)
    listed = 0
    for _ in range(KILL_ROUNDS):
        Scenario("produce").produce("t", 0, SEGMENTS_PER_ROUND * 10).run(h)
        target = listed + rng.randint(1, SEGMENTS_PER_ROUND - 2)  # copies of later segments are under way then

        def reached(plan: PartitionPlan | None, target: int = target) -> bool:
            return plan is not None and plan.manifest is not None and len(plan.manifest.segments) >= target

        h.wait(f"a manifest listing {target} segments", lambda: partition_plan(h, "t", 0), reached)
        h.broker.kill9()
        plan = partition_plan(h, "t", 0)
        assert plan is not None and plan.manifest is not None
        assert not plan.problems, plan.problems  # every listed segment has all its objects
        assert [s.start_offset for s in plan.segments] == [10 * i for i in range(len(plan.segments))]
        listed = len(plan.segments)
        h.broker.start()
    end = KILL_ROUNDS * SEGMENTS_PER_ROUND * 10 - 10  # the last segment stays active, never copied
    after = h.wait(
        "the manifest after the restarts lists every closed segment",
        lambda: partition_plan(h, "t", 0),
        lambda p: p is not None and p.next_offset == end,
    )
    assert not after.problems
