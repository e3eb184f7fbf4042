"""Controller rules over one partition state: clean/unclean election, ISR cleanup, controlled shutdown, preferred
election, reassignment steps, imbalance detection, and epoch bookkeeping."""

from __future__ import annotations

from strata.broker.cluster.controller import squash, unclean_enabled
from strata.broker.cluster.election import (
    BrokerView,
    cancel_reassignment,
    complete_reassignment,
    imbalanced_brokers,
    leadership_moved_off,
    preferred,
    reconcile,
    start_reassignment,
    unclean_election,
)
from strata.broker.cluster.model import PartitionState
from strata.config import BrokerConfig
from strata.protocol.errors import ErrorCode


def st(leader, isr, replicas=(1, 2, 3), leader_epoch=5, partition_epoch=10, **kw) -> PartitionState:
    return PartitionState(leader, leader_epoch, tuple(isr), tuple(replicas), partition_epoch, **kw)


def view(*live, shutting=(), fenced=()) -> BrokerView:
    return BrokerView(frozenset(live), frozenset(shutting), frozenset(fenced))


def test_nothing_to_do_when_everyone_is_alive():
    assert reconcile(st(1, [1, 2, 3]), view(1, 2, 3)) is None


def test_dead_leader_is_replaced_by_first_live_isr_replica_in_replica_order():
    new = reconcile(st(1, [3, 1, 2]), view(2, 3))
    assert new.leader == 2  # replicas order (1, 2, 3), not ISR order
    assert new.isr == (3, 2)
    assert (new.leader_epoch, new.partition_epoch) == (6, 11)


def test_dead_follower_leaves_the_isr_without_a_leader_epoch_bump():
    new = reconcile(st(1, [1, 2, 3]), view(1, 2))
    assert (new.leader, new.isr, new.leader_epoch, new.partition_epoch) == (1, (1, 2), 5, 11)


def test_live_replica_outside_the_isr_is_not_elected_cleanly():
    new = reconcile(st(1, [1]), view(2, 3))
    assert new.leader == -1
    assert new.isr == (1,)  # the ISR never empties: 1 holds every committed record
    assert new.leader_epoch == 6


def test_unclean_election_takes_a_live_replica_and_restarts_the_isr():
    new = reconcile(st(1, [1]), view(2, 3), unclean=True)
    assert (new.leader, new.isr) == (2, (2,))


def test_unclean_is_not_used_when_a_clean_leader_exists():
    new = reconcile(st(1, [1, 3]), view(2, 3), unclean=True)
    assert (new.leader, new.isr) == (3, (3,))


def test_last_isr_member_returning_is_elected_again():
    offline = st(-1, [1], leader_epoch=6)
    new = reconcile(offline, view(1, 2, 3))
    assert (new.leader, new.isr, new.leader_epoch) == (1, (1,), 7)


def test_everyone_dead_keeps_the_whole_isr_for_a_clean_return():
    new = reconcile(st(1, [1, 2]), view(3))
    assert (new.leader, new.isr) == (-1, (1, 2))
    back = reconcile(new, view(2, 3))
    assert (back.leader, back.isr) == (2, (2,))


def test_restarted_broker_is_treated_as_failed_once():
    # Broker 1 restarted (new incarnation): it may have lost unflushed records, so it loses leadership and ISR.
    new = reconcile(st(1, [1, 2, 3]), view(1, 2, 3, fenced=[1]))
    assert (new.leader, new.isr, new.leader_epoch) == (2, (2, 3), 6)


def test_controlled_shutdown_moves_leadership_and_isr_membership():
    s = st(1, [1, 2, 3])
    new = reconcile(s, view(1, 2, 3, shutting=[1]))
    assert (new.leader, new.isr) == (2, (2, 3))
    assert leadership_moved_off(1, [new])
    assert not leadership_moved_off(1, [s])
    # Sole ISR member: the partition goes offline (leader -1) but keeps it in the ISR.
    alone = reconcile(st(1, [1]), view(1, 2, 3, shutting=[1]))
    assert (alone.leader, alone.isr) == (-1, (1,))
    assert leadership_moved_off(1, [alone])


def test_preferred_election():
    err, new = preferred(st(2, [1, 2, 3]), view(1, 2, 3))
    assert err == ErrorCode.NONE and new.leader == 1 and new.leader_epoch == 6
    assert preferred(st(1, [1, 2]), view(1, 2))[0] == ErrorCode.ELECTION_NOT_NEEDED
    assert preferred(st(2, [2, 3]), view(1, 2, 3))[0] == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE  # not in ISR
    assert preferred(st(2, [1, 2]), view(2, 3))[0] == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE  # dead
    assert preferred(st(2, [1, 2]), view(1, 2, shutting=[1]))[0] == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE


def test_unclean_election_api():
    assert unclean_election(st(1, [1, 2]), view(1, 2))[0] == ErrorCode.ELECTION_NOT_NEEDED
    err, new = unclean_election(st(-1, [1]), view(2, 3))
    assert err == ErrorCode.NONE and (new.leader, new.isr) == (2, (2,))
    assert unclean_election(st(-1, [1]), view())[0] == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE


def test_reassignment_adds_then_completes_and_elects_from_the_target():
    s = st(1, [1, 2, 3])
    started = start_reassignment(s, [4, 5, 3], view(1, 2, 3, 4, 5))
    assert started.replicas == (4, 5, 3, 1, 2)
    assert (started.adding, started.removing) == ((4, 5), (1, 2))
    assert started.leader == 1 and started.partition_epoch == 11
    assert complete_reassignment(started, view(1, 2, 3, 4, 5)) is None  # 4, 5 not in the ISR yet
    caught_up = started.with_changes(isr=(1, 2, 3, 4, 5))
    done = complete_reassignment(caught_up, view(1, 2, 3, 4, 5))
    assert done.replicas == (4, 5, 3) and done.adding == () and done.removing == ()
    assert done.isr == (3, 4, 5)
    assert done.leader == 4 and done.leader_epoch == 6


def test_reassignment_keeps_a_leader_that_stays():
    s = st(3, [1, 2, 3])
    started = start_reassignment(s, [3, 4], view(1, 2, 3, 4))
    done = complete_reassignment(started.with_changes(isr=(1, 2, 3, 4)), view(1, 2, 3, 4))
    assert (done.leader, done.leader_epoch, done.replicas) == (3, 5, (3, 4))


def test_reassignment_cancel_restores_the_original_replicas():
    s = st(1, [1, 2, 3])
    started = start_reassignment(s, [1, 2, 4], view(1, 2, 3, 4))
    assert (started.adding, started.removing) == ((4,), (3,))
    back = cancel_reassignment(started.with_changes(isr=(1, 2, 3, 4)), view(1, 2, 3, 4))
    assert back.replicas == (1, 2, 3) and back.isr == (1, 2, 3) and back.adding == ()
    assert cancel_reassignment(s, view(1, 2, 3)) is None
    assert start_reassignment(s, [1, 2, 3], view(1, 2, 3)) is None


def test_squash_counts_one_change():
    s = st(1, [1, 2, 3])
    twice = s.with_changes(isr=(1, 2)).with_changes(leader=2)
    one = squash(s, twice)
    assert (one.partition_epoch, one.leader_epoch, one.leader, one.isr) == (11, 6, 2, (1, 2))
    same_leader = squash(s, s.with_changes(isr=(1,)).with_changes(isr=(1, 2)))
    assert (same_leader.partition_epoch, same_leader.leader_epoch) == (11, 5)


def test_imbalance():
    states = [st(1, [1, 2], replicas=(1, 2)), st(2, [1, 2], replicas=(1, 2)), st(2, [2, 1], replicas=(2, 1))]
    assert imbalanced_brokers(states, 10) == {1}
    assert imbalanced_brokers(states, 50) == set()  # exactly 50% is not above it


def test_unclean_setting_topic_override_wins():
    cfg = BrokerConfig.from_dict({"unclean.leader.election.enable": "false"})
    assert not unclean_enabled(cfg, {})
    assert unclean_enabled(cfg, {"unclean.leader.election.enable": "true"})
    cfg2 = BrokerConfig.from_dict({"unclean.leader.election.enable": "true"})
    assert unclean_enabled(cfg2, None)
    assert not unclean_enabled(cfg2, {"unclean.leader.election.enable": "false"})
