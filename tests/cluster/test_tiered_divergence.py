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
   RLMM's epoch map), and a follower that lost its disk rebuilds from the segment carrying that lineage.
"""
from __future__ import annotations

import itertools
import shutil
from collections.abc import Callable

from tests.cluster.tiered_support import (
    EARLIEST_LOCAL,
    TIERED_CLUSTER,
    aux_state_builds,
    copied_segments,
    epoch_end_offset,
    fetch,
    list_offset,
    produce,
    remote_fetches,
    replicate_metadata_topic,
    s3_overrides,
    set_topic_config,
    values,
    wait_tiered_past,
)
from tests.cluster.workload import read_all
from tests.support.cluster_proc import StrataCluster
from tests.support.kafka_wire import decode_records
from tests.support.s3_servers import MotoServer
from tests.support.waiting import wait_until

TOPIC = "kip405-divergence"
A, B = 1, 2


def _read_values(c: StrataCluster) -> list[bytes]:
    return [r.value for r in sorted(read_all(c.bootstrap, TOPIC, 1), key=lambda r: r.offset)]


def _checkpoint(c: StrataCluster, i: int) -> str:
    return (c.partition_dir(i, TOPIC, 0) / "leader-epoch-checkpoint").read_text()


def _chain(segments: list, epoch: int) -> tuple[int, int]:
    """(start, end) covered without gaps by the copied segments holding records of `epoch`, in offset order."""
    segs = sorted((s for s in segments if epoch in s.leader_epochs), key=lambda s: s.start_offset)
    assert segs, f"no copied segment of epoch {epoch}: {segments}"
    for prev, nxt in itertools.pairwise(segs):
        assert nxt.start_offset == prev.end_offset + 1, f"gap or overlap in epoch {epoch}'s chain: {prev} {nxt}"
    return segs[0].start_offset, segs[-1].end_offset


def _drop_local_copies(c: StrataCluster, past: int) -> None:
    """Local retention down to one segment: the leader's earliest local offset moves past `past`, so reading below it
    goes to remote storage."""
    set_topic_config(c, TOPIC, {"local.retention.bytes": 1})
    wait_until(lambda: list_offset(c, TOPIC, EARLIEST_LOCAL) > past, timeout=60,
               message=lambda: f"earliest local offset {list_offset(c, TOPIC, EARLIEST_LOCAL)} <= {past}")


def test_scenario3_multiple_hard_failures_consumers_read_the_surviving_lineage_from_remote(
        cluster_factory: Callable[..., StrataCluster], moto: MotoServer) -> None:
    common = 30          # what B keeps after its power loss
    # A rolls (and so tiers) 4 KiB segments; B keeps one big unflushed segment until it restarts, so that a power
    # loss can cost it offsets that A has already copied to remote storage.
    c = cluster_factory(2, overrides={**TIERED_CLUSTER, **s3_overrides(moto)},
                        broker_overrides={A: {"log.segment.bytes": 4096}, B: {"log.segment.bytes": 1 << 30}})
    replicate_metadata_topic(c)
    c.create_topic(TOPIC, replica_assignment=[[A, B]], config={"remote.storage.enable": True})
    assert c.leader_of(TOPIC, 0) == A
    assert produce(c, TOPIC, "r1", 120) == 0        # epoch 0 on both replicas
    old_tiered = wait_tiered_past(c, TOPIC, common + 40)

    c.kill9(A)
    assert c.wait_leader(TOPIC, 0, among=[B]) == B
    c.kill9(B)
    assert c.power_loss(B, {(TOPIC, 0): common}) == {(TOPIC, 0): common}
    c.brokers[B].overrides["log.segment.bytes"] = "4096"
    c.start(B)                                  # the last ISR member: elected, its log ends at `common`
    assert c.wait_leader(TOPIC, 0) == B
    epoch = c.epoch_of(TOPIC, 0)
    assert produce(c, TOPIC, "r3", 150) == common
    new_tiered = wait_tiered_past(c, TOPIC, old_tiered + 40)

    # Remote storage holds both lineages at [common, old_tiered]; B's own chain starts at or below `common`.
    segments = copied_segments(c, TOPIC)
    assert any(s.leader_epochs == {0: s.start_offset} and s.end_offset >= common for s in segments), segments
    start, end = _chain(segments, epoch)
    assert start <= common and end >= new_tiered, (start, end, common, new_tiered)

    _drop_local_copies(c, old_tiered)
    before = remote_fetches(c, B, TOPIC)
    survivors = values("r1", 120)[:common] + values("r3", 150)
    assert _read_values(c) == survivors
    assert remote_fetches(c, B, TOPIC) > before

    # A comes back: it truncates its epoch 0 to where B's ends, rebuilds below B's local start from remote storage,
    # and once it leads serves the same history through its own lineage.
    c.start(A)
    c.wait_isr(TOPIC, 0, {A, B}, timeout=60)
    wait_until(lambda: _checkpoint(c, A) == _checkpoint(c, B), timeout=30,
               message=lambda: f"A: {_checkpoint(c, A)!r} B: {_checkpoint(c, B)!r}")
    c.kill9(B)
    assert c.wait_leader(TOPIC, 0, among=[A]) == A
    before = remote_fetches(c, A, TOPIC)
    assert _read_values(c) == survivors
    assert remote_fetches(c, A, TOPIC) > before


def test_scenario4_unclean_election_fetch_selects_the_surviving_segment_and_rejects_the_lost_epoch(
        cluster_factory: Callable[..., StrataCluster], moto: MotoServer) -> None:
    c = cluster_factory(3, overrides={**TIERED_CLUSTER, **s3_overrides(moto)})
    replicate_metadata_topic(c)
    c.create_topic(TOPIC, replica_assignment=[[A, B]], config={
        "remote.storage.enable": True, "segment.bytes": 4096, "unclean.leader.election.enable": True})
    assert produce(c, TOPIC, "r1", 40) == 0          # both replicas
    c.stop(B)
    c.wait_isr(TOPIC, 0, {A}, timeout=30)
    assert produce(c, TOPIC, "r2", 120) == 40     # A alone, epoch 0
    old_tiered = wait_tiered_past(c, TOPIC, 100)
    # A consumer that read A's records up to 99 (epoch 0) and will fetch 100 next.
    seen = fetch(c, A, TOPIC, 90)
    assert seen.error_code == 0 and decode_records(seen.records)[0].value == values("r2", 120)[50]

    c.kill9(A)
    c.start(B)                                  # out of sync, elected only because unclean election is enabled
    assert c.wait_leader(TOPIC, 0, timeout=30) == B
    epoch = c.epoch_of(TOPIC, 0)
    assert produce(c, TOPIC, "r3", 150) == 40
    wait_tiered_past(c, TOPIC, old_tiered + 40)
    _drop_local_copies(c, old_tiered)

    # Offset 100 exists in both lineages in remote storage: B serves its own (epoch `epoch`) segment.
    got = fetch(c, B, TOPIC, 100)
    assert got.error_code == 0 and got.diverging_epoch is None
    assert decode_records(got.records)[0].offset <= 100
    assert [r.value for r in decode_records(got.records) if r.offset == 100] == [values("r3", 150)[60]]
    # Epoch 0 ends at 40 here: the consumer positioned at 100 after epoch-0 records is told where it diverged, and
    # OffsetForLeaderEpoch gives it the same answer; a fetch naming an older current leader epoch is fenced.
    div = fetch(c, B, TOPIC, 100, last_fetched_epoch=0)
    assert div.error_code == 0 and (div.diverging_epoch.epoch, div.diverging_epoch.end_offset) == (0, 40)
    assert not decode_records(div.records)
    assert epoch_end_offset(c, B, TOPIC, 0) == (0, 0, 40)
    assert fetch(c, B, TOPIC, 100, current_leader_epoch=epoch - 1).error_code == 74      # FENCED_LEADER_EPOCH

    c.start(A)                                  # truncates to 40 and follows
    c.wait_isr(TOPIC, 0, {A, B}, timeout=60)
    assert _read_values(c) == values("r1", 40) + values("r3", 150)


def test_scenario5_divergence_in_remote_storage_after_two_unclean_elections(
        cluster_factory: Callable[..., StrataCluster], moto: MotoServer) -> None:
    c = cluster_factory(3, overrides={**TIERED_CLUSTER, **s3_overrides(moto)})
    replicate_metadata_topic(c)
    c.create_topic(TOPIC, replica_assignment=[[A, B]], config={
        "remote.storage.enable": True, "segment.bytes": 4096, "unclean.leader.election.enable": True})
    assert produce(c, TOPIC, "r1", 40) == 0
    c.stop(B)
    c.wait_isr(TOPIC, 0, {A}, timeout=30)
    assert produce(c, TOPIC, "r2", 120) == 40     # A's lineage: epoch 0 up to 159
    a_tiered = wait_tiered_past(c, TOPIC, 100)

    c.kill9(A)
    c.start(B)                                  # first unclean election: B writes r3 at 40.. and tiers it
    assert c.wait_leader(TOPIC, 0, timeout=30) == B
    b_epoch = c.epoch_of(TOPIC, 0)
    assert produce(c, TOPIC, "r3", 150) == 40
    wait_tiered_past(c, TOPIC, 120)
    c.kill9(B)
    c.start(A)                                  # second unclean election: A's lineage (r1, r2) survives
    assert c.wait_leader(TOPIC, 0, timeout=30) == A
    a_epoch = c.epoch_of(TOPIC, 0)
    assert a_epoch > b_epoch
    assert produce(c, TOPIC, "r4", 150) == 160
    wait_tiered_past(c, TOPIC, 220)
    segments = copied_segments(c, TOPIC)
    assert any(b_epoch in s.leader_epochs for s in segments), "B's divergent segments are in remote storage"
    _drop_local_copies(c, 190)
    survivors = values("r1", 40) + values("r2", 120) + values("r4", 150)
    assert a_tiered >= 100
    assert _read_values(c) == survivors

    # B lost its disk: it rebuilds from the segment of A's lineage below A's local start and converges on A.
    shutil.rmtree(c.partition_dir(B, TOPIC, 0))      # B is down since the second election
    c.start(B)
    c.wait_isr(TOPIC, 0, {A, B}, timeout=60)
    assert aux_state_builds(c, B, TOPIC) >= 1
    assert c.log_batches(B, TOPIC, 0)[0].base_offset > 190, "B copied what A had tiered instead of rebuilding"
    wait_until(lambda: _checkpoint(c, B) == _checkpoint(c, A), timeout=30,
               message=lambda: f"A: {_checkpoint(c, A)!r} B: {_checkpoint(c, B)!r}")
    assert str(b_epoch) not in [ln.split()[0] for ln in _checkpoint(c, B).splitlines()[2:]]
    c.kill9(A)
    assert c.wait_leader(TOPIC, 0, among=[B]) == B
    assert _read_values(c) == survivors
