"""KIP-405 across a leader failover under load: three brokers tier one partition (S3 on a moto server,
`__remote_log_metadata` with a replica on every broker) while an idempotent producer writes
continuously; the leader is killed with kill -9 in the middle and comes back as a follower.

The new leader resumes copying where the remote log ends for its lineage (never re-copying, never skipping), so the
COPY_SEGMENT_FINISHED segments listed by the RLMM form one chain from offset 0 to the latest tiered offset with no gap
and no overlap, and every acknowledged record reads back from offset 0 through the remote segments. Followers delete
their local copies of what was tiered as the leader does.
"""

from __future__ import annotations

from collections.abc import Callable

from strata.cli.admin_client import AdminClient
from strata.cli.remote_log_metadata import RemoteSegment, remote_log_state
from tests.cluster.checker import check
from tests.cluster.tiered_support import s3_overrides
from tests.cluster.workload import ContinuousProducer, read_all
from tests.support.cluster_proc import StrataCluster
from tests.support.s3_servers import MotoServer
from tests.support.waiting import wait_until
from tests.tiered.harness import ScenarioError, check_remote_chain

TOPIC = "tiered-failover"
LATEST_TIERED = -5
EARLIEST_LOCAL = -4

TIERED = {
    "remote.log.storage.system.enable": True,
    "remote.log.manager.task.interval.ms": 200,
    "remote.log.metadata.topic.num.partitions": 3,
    "log.retention.check.interval.ms": 200,
    "log.segment.delete.delay.ms": 0,
    "offsets.topic.replication.factor": 3,
    "replica.fetch.backoff.ms": 100,
}


def _finished(c: StrataCluster) -> list[RemoteSegment]:
    segs = remote_log_state(c.bootstrap).for_partition(TOPIC, 0)
    return [s for s in segs if s.state == "COPY_SEGMENT_FINISHED"]


def _tiered_end(c: StrataCluster) -> int:
    """End offset of the last copied segment, -1 when none."""
    return max((s.end_offset for s in _finished(c)), default=-1)


def _offsets(c: StrataCluster) -> dict[str, int]:
    admin = AdminClient(c.bootstrap, timeout=10)
    try:
        return {
            "latest-tiered": admin.list_offsets(TOPIC, [0], LATEST_TIERED)[0],
            "earliest-local": admin.list_offsets(TOPIC, [0], EARLIEST_LOCAL)[0],
        }
    finally:
        admin.close()


def test_leader_failover_under_load_leaves_one_gapless_remote_chain(
    cluster_factory: Callable[..., StrataCluster], moto: MotoServer
) -> None:
    c = cluster_factory(3, overrides={**TIERED, **s3_overrides(moto)})
    c.create_topic(
        TOPIC,
        replica_assignment=[[1, 2, 3]],
        config={
            "remote.storage.enable": True,
            "segment.bytes": 64 * 1024,
            "local.retention.bytes": 1,
            "min.insync.replicas": 2,
        },
    )
    c.wait_isr(TOPIC, 0, {1, 2, 3})
    # batches well below segment.bytes, also when the producer catches up after the failover (a larger batch is
    # RECORD_LIST_TOO_LARGE, as in Kafka)
    prod = ContinuousProducer(c.bootstrap, TOPIC, 1, name="tf", rate=400, conf={"batch.size": 8192}).start()
    try:
        wait_until(
            lambda: len(_finished(c)) >= 3,
            timeout=90,
            interval=0.2,
            message=lambda: f"segments tiered by the first leader: {len(_finished(c))}",
        )
        before = _tiered_end(c)
        c.kill9(1)
        new_leader = c.wait_leader(TOPIC, 0, not_in=[1], timeout=30)
        prod.wait_acked(400)
        # the new leader tiers on from where the remote log ended
        wait_until(
            lambda: sum(s.start_offset > before for s in _finished(c)) >= 2,
            timeout=90,
            interval=0.2,
            message=lambda: f"remote log end {_tiered_end(c)}, was {before} at the failover",
        )
        c.start(1)
        c.wait_isr(TOPIC, 0, {1, 2, 3}, timeout=60)
        prod.wait_acked(200)
    finally:
        prod.stop()

    # Once the leader has copied every closed segment and deleted it locally, the finished segments cover
    # [0, latest tiered] exactly once, whatever was in flight when the first leader died.
    def settled() -> bool:
        o = _offsets(c)
        if o["latest-tiered"] < 0 or o["earliest-local"] != o["latest-tiered"] + 1:
            return False
        try:
            check_remote_chain(_finished(c), 0, o["latest-tiered"])
        except ScenarioError:
            return False
        return True

    def chain() -> list[tuple[int, int]]:
        return [(s.start_offset, s.end_offset) for s in sorted(_finished(c), key=lambda s: s.start_offset)]

    wait_until(settled, timeout=90, interval=0.3, message=lambda: f"offsets {_offsets(c)}, chain {chain()}")
    end = _offsets(c)["latest-tiered"]
    assert end > before, (end, before)
    check_remote_chain(_finished(c), 0, end)
    assert c.leader_of(TOPIC, 0) == new_leader
    # Followers delete locally what the leader tiered too (their RLM follower task tracks the RLMM), also the
    # replica that never led and the old leader that came back.
    followers = [i for i in c.ids if i != new_leader]

    def first_local(i: int) -> int:
        d = c.partition_dir(i, TOPIC, 0)
        return min(int(p.name[:-4]) for p in d.glob("*.log"))

    wait_until(
        lambda: all(first_local(i) > before for i in followers),
        timeout=60,
        message=lambda: (
            f"followers' first local offsets {[first_local(i) for i in followers]}, "
            f"tiered up to {before} at the failover"
        ),
    )

    verdict = check(prod.history, read_all(c.bootstrap, TOPIC, 1, history=prod.history))
    assert verdict.ok, verdict.report()
    assert prod.errors() == [], prod.errors()[:5]
