"""Acknowledged writes survive leader crashes: RF=3, min.insync.replicas=2, acks=-1, an idempotent producer writing
continuously while brokers are killed with SIGKILL and restarted; afterwards a consumer reads everything and the
queue checker (tests/cluster/checker.py) demands: every acknowledged record read exactly once, at the offset its
acknowledgement gave, in send order per partition.

Each seed chooses the partition whose leader dies first, the second victim, the producer rate, how much is written
between faults, and whether the second kill waits for the first victim to be back in every ISR (if not, the ISR may
stay at one replica for a while: writes must then wait, not be lost).

Seed 1 runs a second time on a `sasl_ssl_tiered` cluster (tests/cluster/conftest.py): SASL_SSL on every listener,
between the brokers and for the producer and the reader, and every segment tiered to remote storage and deleted
locally, so the final read comes back through the remote log.
"""

from __future__ import annotations

import random

import pytest

from tests.cluster.checker import check
from tests.cluster.workload import ContinuousProducer, read_all

PARTITIONS = 3
SEEDS = [1, 2, 3]
SECURE = pytest.param(1, marks=pytest.mark.cluster_profile("sasl_ssl_tiered"), id="1-sasl_ssl_tiered")


@pytest.mark.parametrize("seed", [*SEEDS, SECURE])
def test_acked_records_survive_leader_kill_restart_and_second_kill(cluster_factory, queue_report, seed: int) -> None:
    rnd = random.Random(seed)
    c = cluster_factory(3)
    topic = f"queue-{seed}"
    c.create_topic(topic, PARTITIONS, 3, {"min.insync.replicas": 2})
    prod = ContinuousProducer(c.bootstrap, topic, PARTITIONS, name=f"s{seed}", rate=rnd.choice([150, 300])).start()
    try:
        prod.wait_acked(rnd.randint(50, 200))

        # fault 1: SIGKILL the leader of a random partition; writes go on once a new leader is elected
        p = rnd.randrange(PARTITIONS)
        first = c.leader_of(topic, p)
        c.kill9(first)
        c.wait_leader(topic, p, not_in=[first])
        prod.wait_acked(rnd.randint(50, 200))
        c.start(first)
        full_isr_first = rnd.random() < 0.5
        if full_isr_first:
            c.wait_full_isr(topic, PARTITIONS)
        prod.wait_acked(rnd.randint(20, 100))

        # fault 2: SIGKILL another broker
        second = rnd.choice([i for i in c.ids if i != first])
        c.kill9(second)
        for q in range(PARTITIONS):
            c.wait_leader(topic, q, not_in=[second])
        prod.wait_acked(rnd.randint(50, 200))
        c.start(second)
        c.wait_full_isr(topic, PARTITIONS)
        prod.wait_acked(50)
    finally:
        prod.stop()

    reads = read_all(c.bootstrap, topic, PARTITIONS, history=prod.history)
    verdict = check(prod.history, reads)
    line = (
        f"seed {seed}: killed {first} (leader of p{p}), then {second} "
        f"({'after' if full_isr_first else 'without waiting for'} full ISR): {verdict.summary()}"
    )
    queue_report(line)
    assert verdict.ok, f"{line}\n{verdict.report()}"
    assert not prod.errors(), f"{line}\nproduce errors: {prod.errors()[:5]}"
    assert verdict.acked == verdict.sent and verdict.unknown == 0, line
