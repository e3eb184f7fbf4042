"""KIP-405's divergence scenarios on a real cluster tiering to S3 (moto): remote storage ends up holding two lineages'
records at the same offsets, and every replica reads, copies and deletes by its own leader-epoch lineage. The topic
has two replicas (brokers 1 and 2); in the unclean-election scenarios a third broker keeps `__remote_log_metadata`
available (its partitions are not elected uncleanly, as in Kafka, so they need a replica that stayed in sync).

3. Multiple hard failures: the leader tiers epoch-0 segments; both replicas crash and the one that leads next (the
   last ISR member) lost its unflushed tail. It takes new writes at the offsets the old leader had tiered; it must
   resume copying at the end of epoch 0 in its own log (not at the end of the old leader's copy of epoch 0), its local
   retention must not delete what it has not copied, and consumers reading those offsets -- from remote storage -- get
   the surviving lineage's records, on it and on the old leader once that one has truncated, rebuilt and leads.
4. Unclean leader election with truncation: an out-of-sync replica is elected while the old leader's tiered epoch-0
   segments run past its log end; fetches select the segment of the surviving lineage by epoch and offset, and a
   consumer's fetch positioned in the epoch that no longer exists there is told where it diverged.
5. Log divergence in remote storage after two unclean elections: each side tiers its own records at the same offsets;
   the lineage of the second election survives (even where the other side's upload replaced its segment in the
   RLMM's epoch map), and a follower that lost its disk rebuilds from the segment carrying that lineage. The bucket
   then holds both lineages' segments, but its partition manifest lists only the survivor's: a topic recovered from
   it (issue 24) into a fresh cluster reads exactly the surviving lineage's records.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from strata.remote.bucket_manifest_reader import BucketManifestReader, PartitionPlan
from tests.cluster.scenario import ClusterScenario, Memory
from tests.cluster.test_cluster_restore import FAST, read_bucket
from tests.cluster.tiered_support import (
    TIERED_CLUSTER,
    aux_state_builds,
    copied_segments,
    epoch_end_offset,
    fetch,
    s3_overrides,
    values,
)
from tests.cluster.workload import read_all
from tests.support.cluster_proc import StrataCluster
from tests.support.kafka_wire import decode_records
from tests.support.s3_servers import MotoServer
from tests.support.waiting import wait_until

TOPIC = "kip405-divergence"
A, B = 1, 2
FENCED_LEADER_EPOCH = 74
UNCLEAN = {"remote.storage.enable": True, "segment.bytes": 4096, "unclean.leader.election.enable": True}


def _checkpoint(c: StrataCluster, i: int) -> str:
    return (c.partition_dir(i, TOPIC, 0) / "leader-epoch-checkpoint").read_text()


def _same_checkpoints(c: StrataCluster, i: int, j: int) -> bool:
    return wait_until(
        lambda: _checkpoint(c, i) == _checkpoint(c, j),
        timeout=30,
        message=lambda: f"{i}: {_checkpoint(c, i)!r} {j}: {_checkpoint(c, j)!r}",
    )


def _chain(c: StrataCluster, epoch: int) -> tuple[int, int]:
    """(start, end) covered without gaps by the copied segments holding records of `epoch`, in offset order."""
    segments = copied_segments(c, TOPIC)
    segs = sorted((s for s in segments if epoch in s.leader_epochs), key=lambda s: s.start_offset)
    assert segs, f"no copied segment of epoch {epoch}: {segments}"
    for prev, nxt in itertools.pairwise(segs):
        assert nxt.start_offset == prev.end_offset + 1, f"gap or overlap in epoch {epoch}'s chain: {prev} {nxt}"
    return segs[0].start_offset, segs[-1].end_offset


def test_scenario3_multiple_hard_failures_consumers_read_the_surviving_lineage_from_remote(
    cluster_factory: Callable[..., StrataCluster], moto: MotoServer
) -> None:
    common = 30  # what B keeps after its power loss
    # A rolls (and so tiers) 4 KiB segments; B keeps one big unflushed segment until it restarts, so that a power
    # loss can cost it offsets that A has already copied to remote storage.
    c = cluster_factory(
        2,
        overrides={**TIERED_CLUSTER, **s3_overrides(moto)},
        broker_overrides={A: {"log.segment.bytes": 4096}, B: {"log.segment.bytes": 1 << 30}},
    )

    def b_chain_covers(c: StrataCluster, m: Memory) -> None:
        start, end = _chain(c, m["epoch"])
        assert start <= common and end >= m["new_tiered"], (start, end, m)

    def old_epoch0_past_common(c: StrataCluster, m: Memory) -> bool:
        return any(s.leader_epochs == {0: s.start_offset} and s.end_offset >= common for s in copied_segments(c, TOPIC))

    survivors = [("r1", 0, common), ("r3", 0, 150)]
    (
        ClusterScenario("multiple hard failures", TOPIC)
        .replicate_metadata_topic()
        .create_topic([A, B], **{"remote.storage.enable": True})
        .expect_leader(A)
        .produce("r1", 120, expect_start=0)  # epoch 0 on both replicas
        .wait_tiered_past(common + 40, remember="old_tiered")
        .kill(A)
        .expect_leader(B)
        .kill(B)
        .power_loss(B, keep=common)
        .start(B, log_segment_bytes=4096)  # the last ISR member: elected, its log ends at 30
        .expect_leader(B, remember="epoch")
        .produce("r3", 150, expect_start=common)
        .wait_tiered_past(lambda m: m["old_tiered"] + 40, remember="new_tiered")
        .expect("remote storage holds A's epoch-0 records past where epoch 0 ends on B", old_epoch0_past_common)
        .expect("B copied its own records from the end of its epoch 0 on, without gaps", b_chain_covers)
        .drop_local_copies(lambda m: m["old_tiered"])
        .expect_read(survivors, remote_via=B)
        # A comes back: it truncates its epoch 0 to where B's ends, rebuilds below B's local start from remote
        # storage, and once it leads serves the same history through its own lineage.
        .start(A)
        .expect_isr({A, B})
        .expect("A's leader-epoch checkpoint equals B's", lambda c, m: _same_checkpoints(c, A, B))
        .kill(B)
        .expect_leader(A)
        .expect_read(survivors, remote_via=A)
        .run(c)
    )


def test_scenario4_unclean_election_fetch_selects_the_surviving_segment_and_rejects_the_lost_epoch(
    cluster_factory: Callable[..., StrataCluster], moto: MotoServer
) -> None:
    c = cluster_factory(3, overrides={**TIERED_CLUSTER, **s3_overrides(moto)})

    def consumer_on_a_read_epoch0(c: StrataCluster, m: Memory) -> None:
        seen = fetch(c, A, TOPIC, 90)
        assert seen.error_code == 0 and decode_records(seen.records)[0].value == values("r2", 120)[50]

    def b_serves_its_own_offset_100(c: StrataCluster, m: Memory) -> None:
        got = fetch(c, B, TOPIC, 100)
        assert got.error_code == 0 and got.diverging_epoch is None
        recs = decode_records(got.records)
        assert recs[0].offset <= 100
        assert [r.value for r in recs if r.offset == 100] == [values("r3", 150)[60]]

    def lost_epoch_is_rejected(c: StrataCluster, m: Memory) -> None:
        div = fetch(c, B, TOPIC, 100, last_fetched_epoch=0)
        assert div.error_code == 0 and (div.diverging_epoch.epoch, div.diverging_epoch.end_offset) == (0, 40)
        assert not decode_records(div.records)
        assert epoch_end_offset(c, B, TOPIC, 0) == (0, 0, 40)
        assert fetch(c, B, TOPIC, 100, current_leader_epoch=m["epoch"] - 1).error_code == FENCED_LEADER_EPOCH

    (
        ClusterScenario("unclean election with truncation", TOPIC)
        .replicate_metadata_topic()
        .create_topic([A, B], **UNCLEAN)
        .produce("r1", 40, expect_start=0)  # both replicas
        .stop(B)
        .expect_isr({A}, timeout=30)
        .produce("r2", 120, expect_start=40)  # A alone, epoch 0
        .wait_tiered_past(100, remember="old_tiered")
        .expect("a consumer reads A's epoch-0 records up to 99", consumer_on_a_read_epoch0)
        .kill(A)
        .start(B)  # out of sync, elected because unclean is allowed
        .expect_leader(B, remember="epoch")
        .produce("r3", 150, expect_start=40)
        .wait_tiered_past(lambda m: m["old_tiered"] + 40)
        .drop_local_copies(lambda m: m["old_tiered"])
        .expect("offset 100 is in both lineages in remote storage: B serves its own", b_serves_its_own_offset_100)
        .expect(
            "a fetch positioned after epoch-0 records is told epoch 0 ended at 40 here; an old leader epoch is fenced",
            lost_epoch_is_rejected,
        )
        .start(A)
        .expect_isr({A, B})  # A truncates to 40 and follows
        .expect_read([("r1", 0, 40), ("r3", 0, 150)])
        .run(c)
    )


def _partition_plan(s3: dict[str, object]) -> PartitionPlan | None:
    """Partition 0's plan from the newest manifest in the bucket (the segments a recovery would register)."""

    async def plan(r: BucketManifestReader) -> PartitionPlan | None:
        [(_, tid)] = [t for t in await r.list_topics() if t[0] == TOPIC]
        pm = await r.partition_manifest(TOPIC, tid, 0)
        return None if pm is None else await r.partition_plan(pm)

    p: PartitionPlan | None = read_bucket(s3, plan)
    return p


def test_scenario5_divergence_in_remote_storage_after_two_unclean_elections(
    cluster_factory: Callable[..., StrataCluster], moto: MotoServer
) -> None:
    s3 = s3_overrides(moto)
    c = cluster_factory(3, overrides={**TIERED_CLUSTER, **s3, **FAST})

    def b_lineage_in_remote(c: StrataCluster, m: Memory) -> bool:
        return any(m["b_epoch"] in s.leader_epochs for s in copied_segments(c, TOPIC))

    def b_rebuilt_from_remote(c: StrataCluster, m: Memory) -> None:
        assert aux_state_builds(c, B, TOPIC) >= 1
        assert c.log_batches(B, TOPIC, 0)[0].base_offset > 190, "B copied what A had tiered instead of rebuilding"
        _same_checkpoints(c, B, A)
        epochs = [ln.split()[0] for ln in _checkpoint(c, B).splitlines()[2:]]
        assert str(m["b_epoch"]) not in epochs, epochs

    survivors = [("r1", 0, 40), ("r2", 0, 120), ("r4", 0, 150)]
    m = (
        ClusterScenario("two unclean elections", TOPIC)
        .replicate_metadata_topic()
        .create_topic([A, B], **UNCLEAN)
        .produce("r1", 40, expect_start=0)
        .stop(B)
        .expect_isr({A}, timeout=30)
        .produce("r2", 120, expect_start=40)  # A's lineage: epoch 0 up to 159
        .wait_tiered_past(100)
        .kill(A)
        .start(B)  # first unclean election: B writes r3 at 40..
        .expect_leader(B, remember="b_epoch")
        .produce("r3", 150, expect_start=40)
        .wait_tiered_past(120)
        .kill(B)
        .start(A)  # second unclean election: A's lineage survives
        .expect_leader(A, remember="a_epoch")
        .expect("A's epoch is newer", lambda c, m: m["a_epoch"] > m["b_epoch"])
        .produce("r4", 150, expect_start=160)
        .wait_tiered_past(220, remember="tiered")
        .expect("B's divergent segments are in remote storage", b_lineage_in_remote)
        .drop_local_copies(190)
        .expect_read(survivors, remote_via=A)
        # B lost its disk: it rebuilds from the segment of A's lineage below A's local start and converges on A.
        .wipe(B)
        .start(B)
        .expect_isr({A, B})
        .expect("B rebuilt from remote storage with A's lineage", b_rebuilt_from_remote)
        .kill(A)
        .expect_leader(B)
        .expect_read(survivors)
        .run(c)
    )

    # Recovery from this bucket (issue 24): its manifest lists A's lineage only, though B's segments are still there.
    def manifest_caught_up() -> PartitionPlan | None:
        p = _partition_plan(s3)
        return p if p is not None and p.next_offset > m["tiered"] else None

    plan = wait_until(manifest_caught_up, timeout=30, interval=0.5)
    assert plan is not None and plan.manifest is not None and not plan.problems
    assert m["b_epoch"] not in {e for e, _ in plan.manifest.leader_epochs}, plan.manifest.leader_epochs
    assert all(m["b_epoch"] not in s.segment_leader_epochs for s in plan.segments), plan.segments
    assert plan.log_start_offset == 0
    assert b_lineage_in_remote(c, m), "B's segments left the RLMM before the recovery"
    # every disk and etcd lost; a fresh one-broker cluster on the same bucket recovers the topic
    c.close()
    one = {"offsets.topic.replication.factor": 1, "default.replication.factor": 1}
    fresh = cluster_factory(1, overrides={**TIERED_CLUSTER, **s3, **FAST, **one})
    fresh.create_topic(TOPIC, 1, 1, config={"remote.recovery": "true"})
    want = [v for name, lo, hi in survivors for v in values(name, hi)[lo:hi]][: plan.next_offset]
    got = sorted(read_all(fresh.bootstrap, TOPIC, 1), key=lambda r: r.offset)
    assert [r.offset for r in got] == list(range(plan.next_offset))
    assert [r.value for r in got] == want
