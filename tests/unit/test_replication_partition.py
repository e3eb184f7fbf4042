"""Leader-side replication arithmetic of strata.broker.partition.Partition over a real UnifiedLog: followers' caught-up
times, HW = min LEO over the (maximal) ISR, ISR shrink/expand decisions, DelayedProduce completion, epoch fencing."""

from __future__ import annotations

import uuid

import pytest

from strata.broker.cluster.model import PartitionState
from strata.broker.metadata_store import TopicInfo
from strata.broker.partition import FollowerState, Partition
from strata.config import BrokerConfig
from strata.protocol.errors import ErrorCode as E
from strata.protocol.records import build_batch
from strata.storage.log import UnifiedLog

LAG = 1000.0


def make_partition(tmp_path, min_isr: int = 1, me: int = 1) -> Partition:
    cfg = BrokerConfig.from_dict({"log.dirs": str(tmp_path)}).log_config({"min.insync.replicas": str(min_isr)})
    tid = uuid.uuid4()
    ulog = UnifiedLog.open(tmp_path / "t-0", tid, cfg, needs_recovery=False)
    return Partition(TopicInfo("t", tid, 1), 0, ulog, me, LAG)


def state(leader=1, epoch=1, isr=(1, 2, 3), replicas=(1, 2, 3), pe=0) -> PartitionState:
    return PartitionState(leader, epoch, tuple(isr), tuple(replicas), pe)


def append(p: Partition, n: int = 1) -> None:
    for _ in range(n):
        p.append_records_to_leader(build_batch([b"v"]))


def test_follower_caught_up_time_follows_kafka_rules() -> None:
    fs = FollowerState(2)
    fs.update_fetch_state(fetch_offset=10, log_start_offset=0, fetch_ms=100, leader_leo=10)
    assert fs.last_caught_up_ms == 100  # asked for the leader's LEO: caught up now
    fs.update_fetch_state(fetch_offset=12, log_start_offset=0, fetch_ms=200, leader_leo=20)
    assert fs.last_caught_up_ms == 100  # behind the LEO, and the previous fetch saw LEO 10 ...
    fs.update_fetch_state(fetch_offset=20, log_start_offset=0, fetch_ms=300, leader_leo=25)
    assert fs.last_caught_up_ms == 200  # ... now it has what the leader had at 200
    assert fs.is_caught_up(25, 300 + 10 * LAG, LAG) is False
    assert fs.is_caught_up(20, 300 + 10 * LAG, LAG) is True  # at the leader's LEO: always caught up


def test_become_leader_assigns_the_epoch_at_the_leo_and_tracks_followers(tmp_path) -> None:
    p = make_partition(tmp_path)
    append(p, 3)  # leader_epoch -1 before any state: written without an epoch
    assert p.make_leader(state(epoch=4), 5000.0) is True
    assert p.log.leader_epoch_cache.latest_entry == (4, 3)
    assert p.leader_epoch_start_offset == 3
    assert sorted(p.followers) == [2, 3]
    assert all(f.log_end_offset == -1 and f.last_caught_up_ms == 5000.0 for f in p.followers.values())
    # same epoch again (an ISR change): not a new epoch, nothing reset
    p.followers[2].log_end_offset = 3
    assert p.make_leader(state(epoch=4, pe=1, isr=(1, 2)), 6000.0) is False
    assert p.followers[2].log_end_offset == 3 and p.isr == (1, 2)


def test_hw_is_the_min_leo_over_the_isr_and_never_moves_back(tmp_path) -> None:
    p = make_partition(tmp_path)
    p.make_leader(state(), 0.0)
    append(p, 10)
    assert p.high_watermark == 0  # followers' LEOs unknown
    assert p.update_follower_fetch_state(2, 6, 0, 10.0) is False  # 3 is still unknown
    assert p.update_follower_fetch_state(3, 4, 0, 10.0) is True
    assert p.high_watermark == 4
    assert p.update_follower_fetch_state(3, 8, 0, 20.0) is True
    assert p.high_watermark == 6
    # a follower that asks from lower down (it truncated) does not move the HW back
    p.update_follower_fetch_state(2, 2, 0, 30.0)
    assert p.high_watermark == 6
    assert p.update_follower_fetch_state(9, 10, 0, 30.0) is False  # not a replica: ignored


def test_hw_waits_for_a_caught_up_follower_outside_the_isr(tmp_path) -> None:
    p = make_partition(tmp_path)
    p.make_leader(state(isr=(1, 2)), 0.0)
    append(p, 10)
    p.update_follower_fetch_state(2, 10, 0, 10.0)
    assert p.high_watermark == 10
    append(p, 5)  # LEO 15
    p.update_follower_fetch_state(3, 12, 0, 20.0)  # 3 not in the ISR and behind: not caught up (never was)
    p.update_follower_fetch_state(2, 15, 0, 20.0)
    assert p.high_watermark == 15
    append(p, 5)  # LEO 20
    p.update_follower_fetch_state(3, 15, 0, 30.0)  # 3 now has what the leader had at its last fetch
    assert p.followers[3].last_caught_up_ms == 20.0
    assert p.followers[3].is_caught_up(20, 30.0, LAG)
    p.update_follower_fetch_state(2, 20, 0, 40.0)
    assert p.high_watermark == 15  # held for 3, so it can reach the HW and join
    assert p.isr_to_expand(3) == (1, 2, 3)


def test_hw_is_frozen_below_min_isr_and_produce_waits_report_it(tmp_path) -> None:
    p = make_partition(tmp_path, min_isr=2)
    p.make_leader(state(isr=(1,)), 0.0)
    append(p, 3)
    assert p.is_under_min_isr and p.high_watermark == 0
    assert p.check_enough_replicas(3, p.leader_epoch) == (True, E.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    p.make_leader(state(isr=(1, 2), pe=1), 0.0)
    assert p.check_enough_replicas(3, p.leader_epoch) == (False, E.NONE)
    p.update_follower_fetch_state(2, 3, 0, 1.0)
    p.update_follower_fetch_state(3, 3, 0, 1.0)
    assert p.high_watermark == 3
    assert p.check_enough_replicas(3, p.leader_epoch) == (True, E.NONE)
    assert p.check_enough_replicas(3, p.leader_epoch - 1) == (True, E.NOT_LEADER_OR_FOLLOWER)


def test_min_isr_is_capped_by_the_replication_factor(tmp_path) -> None:
    p = make_partition(tmp_path, min_isr=3)
    p.make_leader(state(isr=(1,), replicas=(1,)), 0.0)
    assert p.effective_min_isr() == 1 and not p.is_under_min_isr
    append(p, 2)
    assert p.high_watermark == 2


def test_isr_shrinks_after_the_lag_time_and_expands_on_catching_up(tmp_path) -> None:
    p = make_partition(tmp_path)
    p.make_leader(state(), 1000.0)  # followers in the ISR count as caught up at 1000
    append(p, 5)
    p.update_follower_fetch_state(2, 5, 0, 1100.0)
    p.update_follower_fetch_state(3, 2, 0, 1100.0)  # behind, and never caught up since 1000
    assert p.isr_to_shrink(1000.0 + LAG) is None
    assert p.isr_to_shrink(1000.0 + LAG + 1) == (1, 2)
    p.pending_isr = (1, 2)
    assert p.isr_to_shrink(5000.0) is None  # one change at a time
    assert p.maximal_isr == {1, 2, 3}  # the HW keeps respecting 3 until the change commits
    p.pending_isr = None
    p.make_leader(state(isr=(1, 2), pe=1), 2100.0)
    assert p.maybe_increment_hw(2100.0) and p.high_watermark == 5  # 3 no longer holds it
    assert p.isr_to_expand(3) is None  # LEO 2 < HW 5
    p.update_follower_fetch_state(3, 5, 0, 2200.0)
    assert p.isr_to_expand(3) == (1, 2, 3)
    assert p.isr_to_expand(7) is None  # not a replica


def test_a_follower_behind_the_leaders_epoch_start_does_not_join(tmp_path) -> None:
    p = make_partition(tmp_path)
    p.make_leader(state(epoch=1, isr=(1,)), 0.0)
    append(p, 4)  # HW 4 (ISR = {1})
    p.make_leader(state(epoch=2, isr=(1,), pe=1), 0.0)  # new epoch starts at 4
    p.update_follower_fetch_state(2, 4, 0, 1.0)
    assert p.isr_to_expand(2) == (1, 2)
    p.update_follower_fetch_state(3, 3, 0, 1.0)
    assert p.isr_to_expand(3) is None


@pytest.mark.parametrize(
    ("asked", "expected"), [(-1, E.NONE), (5, E.NONE), (4, E.FENCED_LEADER_EPOCH), (6, E.UNKNOWN_LEADER_EPOCH)]
)
def test_current_leader_epoch_fencing(tmp_path, asked, expected) -> None:
    p = make_partition(tmp_path)
    p.make_leader(state(epoch=5), 0.0)
    assert p.check_epoch(asked) == expected


def test_a_follower_answers_not_leader_after_the_epoch_check(tmp_path) -> None:
    p = make_partition(tmp_path)
    assert p.make_follower(state(leader=2, epoch=3)) is True
    assert not p.is_leader and p.followers == {}
    assert p.check_epoch(3) == E.NOT_LEADER_OR_FOLLOWER
    assert p.check_epoch(3, require_leader=False) == E.NONE
    assert p.check_epoch(2) == E.FENCED_LEADER_EPOCH
    assert p.make_follower(state(leader=2, epoch=3, isr=(2, 3), pe=1)) is False  # same leader and epoch
    assert p.make_follower(state(leader=3, epoch=4, pe=2)) is True


def test_a_broker_in_controlled_shutdown_neither_joins_the_isr_nor_holds_the_hw(tmp_path) -> None:
    p = make_partition(tmp_path)
    p.make_leader(state(isr=(1, 2)), 0.0)
    append(p, 10)
    p.update_follower_fetch_state(3, 10, 0, 20.0)  # 3 (not in the ISR) at the leader's LEO: caught up
    append(p, 1)
    p.update_follower_fetch_state(2, 11, 0, 30.0)
    assert p.high_watermark == 10  # held for 3, which may join
    assert p.isr_to_expand(3) == (1, 2, 3)
    p.ineligible = lambda: frozenset({3})  # 3 is in controlled shutdown
    assert p.isr_to_expand(3) is None
    assert p.maybe_increment_hw(40.0) and p.high_watermark == 11
