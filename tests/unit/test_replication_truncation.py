"""Follower truncation decisions (KIP-101/KIP-279) from the leader's OffsetForLeaderEpoch answers: the leader answers
from its own epoch cache (LeaderEpochFileCache.end_offset_for, as the OffsetForLeaderEpoch handler does), the
follower decides with replica_fetcher.truncation_offset, round after round until it is done."""

from __future__ import annotations

from functools import partial

import pytest

from strata.broker.cluster.replica_fetcher import truncation_offset
from strata.storage.epoch_cache import EpochEntry, LeaderEpochFileCache


def cache(*entries: tuple[int, int]) -> LeaderEpochFileCache:
    return LeaderEpochFileCache(None, [EpochEntry(e, o) for e, o in entries])


def converge(
    follower: LeaderEpochFileCache,
    follower_leo: int,
    leader: LeaderEpochFileCache,
    leader_leo: int,
    max_rounds: int = 10,
) -> tuple[int, int]:
    """Run the truncation rounds a Truncating follower runs; returns (final LEO, rounds)."""
    leo = follower_leo
    for rounds in range(1, max_rounds + 1):
        latest = follower.latest_epoch
        assert latest is not None
        epoch, end = leader.end_offset_for(latest, leader_leo)
        offset, done = truncation_offset(leo, partial(follower.end_offset_for, log_end_offset=leo), epoch, end)
        assert offset <= leo
        leo = offset
        follower.truncate_from_end(leo)
        if done:
            return leo, rounds
    raise AssertionError("truncation did not converge")


def test_same_epoch_truncates_to_the_shorter_log() -> None:
    # both in epoch 1; the follower has more than the leader (the leader lost an unflushed tail)
    assert converge(cache((0, 0), (1, 10)), 30, cache((0, 0), (1, 10)), 20) == (20, 1)
    # the follower has less: nothing to truncate
    assert converge(cache((0, 0), (1, 10)), 15, cache((0, 0), (1, 10)), 20) == (15, 1)


def test_kip101_scenario_2_divergent_tail_goes() -> None:
    # The follower wrote 4..5 in epoch 1 as leader; the new leader (epoch 2) started at 4 with different data.
    follower = cache((0, 0), (1, 2))
    leader = cache((0, 0), (1, 2), (2, 4))
    # the follower asks for epoch 1: the leader's epoch 1 ended at 4
    assert converge(follower, 6, leader, 9) == (4, 1)


def test_leader_without_the_followers_latest_epoch_walks_back() -> None:
    # The follower led epochs 2 and 3 (writing 5..12) that the new leader never saw; the leader has 0, 1, 4.
    follower = cache((0, 0), (1, 3), (2, 5), (3, 8))
    leader = cache((0, 0), (1, 3), (4, 6))
    # asked for 3, the leader answers its greatest epoch <= 3, epoch 1, ending at 6; ours ends at 5 (epoch 2)
    leo, rounds = converge(follower, 12, leader, 20)
    assert leo == 5 and rounds == 1
    assert follower.latest_epoch == 1


def test_follower_without_the_leaders_answered_epoch_truncates_in_steps() -> None:
    # The leader answers an epoch (2) the follower never had: cut to the end of the follower's epoch below (1),
    # then ask again with epoch 1.
    follower = cache((0, 0), (1, 4), (3, 9))
    leader = cache((0, 0), (1, 4), (2, 7), (5, 11))
    leo, rounds = converge(follower, 14, leader, 30)
    assert (leo, rounds) == (7, 2)


def test_an_epoch_that_started_at_the_leo_without_data_is_dropped() -> None:
    # The follower was leader in epoch 3 without writing (entry (3, 10) at its LEO), then follower again.
    follower = cache((0, 0), (2, 5), (3, 10))
    leader = cache((0, 0), (2, 5), (4, 12))
    leo, _ = converge(follower, 10, leader, 15)
    assert leo == 10
    assert follower.latest_epoch == 2  # epoch 3 held no data and must not survive


@pytest.mark.parametrize(
    ("leader_epoch", "leader_end", "expected"),
    [
        (-1, -1, (40, True)),  # the leader knows nothing of this epoch: keep the log (OOR settles it)
        (-1, 25, (25, True)),  # an answer without an epoch: truncate to its offset
        (7, 30, (10, True)),  # our epoch 8 starts at 10: "epoch 7" ends there for us, whatever the leader has
    ],
)
def test_edge_answers(leader_epoch, leader_end, expected) -> None:
    follower = cache((8, 10))
    assert truncation_offset(40, lambda e: follower.end_offset_for(e, 40), leader_epoch, leader_end) == expected


def test_a_follower_without_epochs_takes_the_leaders_end_offset() -> None:
    empty = cache()
    assert truncation_offset(40, lambda e: empty.end_offset_for(e, 40), 3, 30) == (30, True)
