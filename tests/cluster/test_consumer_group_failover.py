"""A KIP-848 consumer group across a coordinator fail-over in the middle of a rebalance: in a 3-broker cluster, a
third member joins a group of two and the broker leading the group's `__consumer_offsets` partition is SIGKILLed
before the group has settled. The new coordinator loads the group's records (members, epochs, target assignment)
and the reconciliation completes there: the two original members keep their member ids, the group ends balanced,
every record is consumed and none again after its offset was committed."""

from __future__ import annotations

import pytest

from strata.broker.group.records import partition_for
from tests.support.kip848_group import (
    MemberPool,
    SteadyProducer,
    balanced,
    check_deliveries,
    describe,
)
from tests.support.waiting import wait_until

TOPIC = GROUP = "kip848-failover"
PARTITIONS = 6
OFFSETS_PARTITIONS = 3  # offsets.topic.num.partitions of the cluster (FAST_FAILOVER)


@pytest.fixture
def members(tmp_path):
    pool = MemberPool(tmp_path)
    yield pool.spawn
    pool.close()


def test_consumer_group_survives_coordinator_failover_mid_rebalance(cluster_factory, members) -> None:
    c = cluster_factory(
        3,
        overrides={
            "group.consumer.min.session.timeout.ms": 1000,
            "group.consumer.session.timeout.ms": 10000,  # beyond the fail-over: nobody is fenced by it
            "group.consumer.min.heartbeat.interval.ms": 100,
            "group.consumer.heartbeat.interval.ms": 500,
        },
    )
    c.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": 2})
    bs = c.bootstrap
    producer = SteadyProducer(bs, TOPIC, PARTITIONS, interval=0.1)
    try:
        ms = [members("consumer", bs, TOPIC, GROUP) for _ in range(3)]
        wait_until(lambda: balanced(ms, PARTITIONS), 60, message=lambda: str([m.assignment() for m in ms]))
        everyone = list(ms)
        ms.pop().stop()  # epoch 4 with two members: a group rebuilt from rejoins would count 3 at the end
        wait_until(lambda: balanced(ms, PARTITIONS), 60, message=lambda: str([m.assignment() for m in ms]))
        before = wait_until(lambda: (d := describe(bs, GROUP)).group_state == "Stable" and d, 30)
        ids = {m.member_id for m in before.members}
        coordinator = c.leader_of("__consumer_offsets", partition_for(GROUP, OFFSETS_PARTITIONS))
        ms.append(members("consumer", bs, TOPIC, GROUP))  # a rebalance starts ...
        everyone.append(ms[-1])
        wait_until(lambda: describe(bs, GROUP).group_epoch > before.group_epoch, 30, message="the third joined")
        c.kill9(coordinator)  # ... and its coordinator dies before the partitions have moved
        c.wait_leader("__consumer_offsets", partition_for(GROUP, OFFSETS_PARTITIONS), not_in=[coordinator])
        wait_until(lambda: balanced(ms, PARTITIONS), 60, message=lambda: str([m.assignment() for m in ms]))
        after = wait_until(lambda: (d := describe(bs, GROUP)).group_state == "Stable" and d, 30)
        assert ids <= {m.member_id for m in after.members}  # the members carried on, not rejoined as new ones
        assert (before.group_epoch, after.group_epoch) == (4, 5)  # one join more, not a group rebuilt by rejoins
    finally:
        producer.stop()
    check_deliveries(everyone, bs, TOPIC, PARTITIONS)
