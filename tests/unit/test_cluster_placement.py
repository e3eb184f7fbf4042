"""Replica placement (Kafka's AdminUtils.assignReplicasToBrokers rules): balanced leaders and followers, rack spread,
continuation for added partitions, and the replication-factor bound."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from strata.broker.cluster.placement import assign_replicas, rack_alternated
from strata.protocol.errors import ErrorCode, KafkaApiError


def test_rack_unaware_fixed_start_matches_kafka_pattern():
    # Kafka's documented example (AdminUtils scaladoc): 5 brokers, 10 partitions, RF 3, start index 0, shift 0.
    got = assign_replicas({b: None for b in range(5)}, 10, 3, start_index=0)
    assert got == [
        [0, 1, 2],
        [1, 2, 3],
        [2, 3, 4],
        [3, 4, 0],
        [4, 0, 1],
        [0, 2, 3],
        [1, 3, 4],
        [2, 4, 0],
        [3, 0, 1],
        [4, 1, 2],
    ]


@pytest.mark.parametrize("seed", range(5))
def test_leaders_and_replicas_are_balanced(seed):
    brokers = {1: None, 2: None, 3: None}
    got = assign_replicas(brokers, 30, 3, rng=random.Random(seed))
    assert len(got) == 30
    assert all(len(set(a)) == 3 and set(a) <= set(brokers) for a in got)
    leaders = Counter(a[0] for a in got)
    assert leaders == {1: 10, 2: 10, 3: 10}
    # With 3 brokers and RF 3 every broker holds every partition; second replicas are balanced too.
    seconds = Counter(a[1] for a in got)
    assert max(seconds.values()) - min(seconds.values()) <= 1


def test_rack_alternated_list():
    brokers = {0: "a", 1: "a", 2: "b", 3: "c", 4: "c", 5: "b"}
    assert rack_alternated(brokers) == [0, 2, 3, 1, 5, 4]


@pytest.mark.parametrize("seed", range(8))
def test_rack_aware_spreads_every_partition_over_racks(seed):
    brokers = {1: "r1", 2: "r1", 3: "r2", 4: "r2", 5: "r3", 6: "r3"}
    got = assign_replicas(brokers, 24, 3, rng=random.Random(seed))
    for a in got:
        assert len(set(a)) == 3
        assert len({brokers[b] for b in a}) == 3, a  # one replica per rack
    leaders = Counter(a[0] for a in got)
    assert set(leaders.values()) == {4}  # 24 partitions / 6 brokers


def test_rack_aware_with_fewer_racks_than_rf_uses_every_rack_then_other_brokers():
    brokers = {1: "r1", 2: "r1", 3: "r2", 4: "r2"}
    got = assign_replicas(brokers, 8, 3, rng=random.Random(1))
    for a in got:
        assert len(set(a)) == 3
        assert {brokers[b] for b in a} == {"r1", "r2"}


def test_partial_racks_fall_back_to_rack_unaware():
    brokers = {1: "r1", 2: None, 3: "r2"}
    got = assign_replicas(brokers, 3, 2, start_index=0)
    assert got == [[1, 2], [2, 3], [3, 1]]


def test_added_partitions_continue_the_leader_round_robin():
    # Partition addition passes the index of partition 0's first replica: leaders go on round-robin from there.
    brokers = {b: None for b in range(5)}
    tail = assign_replicas(brokers, 4, 3, start_index=2, start_partition=6)
    assert [a[0] for a in tail] == [(p + 2) % 5 for p in range(6, 10)]
    assert all(len(set(a)) == 3 for a in tail)


def test_replication_factor_larger_than_brokers_is_refused():
    with pytest.raises(KafkaApiError) as e:
        assign_replicas({1: None, 2: None}, 1, 3)
    assert e.value.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    with pytest.raises(KafkaApiError):
        assign_replicas({1: None}, 1, 0)
