"""Controlled shutdown: SIGTERM to the leader of every partition under load moves leadership away before the broker
exits, so an idempotent producer (confluent-kafka, enable.idempotence=true, acks=all) never sees an error, and
nothing it was told is written goes missing or twice."""

from __future__ import annotations

import time

from tests.cluster.checker import check
from tests.cluster.workload import ContinuousProducer, read_all

PARTITIONS = 3


def test_controlled_shutdown_of_the_leader_under_load_surfaces_no_produce_errors(cluster_factory, queue_report) -> None:
    c = cluster_factory(3)
    topic = "controlled"
    # every partition led by one broker: its shutdown moves all of them under load
    leader = 1
    c.create_topic(
        topic, replica_assignment=[[leader, 2, 3], [leader, 3, 2], [leader, 2, 3]], config={"min.insync.replicas": 2}
    )
    assert [c.leader_of(topic, p) for p in range(PARTITIONS)] == [leader] * PARTITIONS

    prod = ContinuousProducer(c.bootstrap, topic, PARTITIONS, name="cs", rate=400).start()
    try:
        prod.wait_acked(300)
        t0 = time.monotonic()
        rc = c.stop(leader, timeout=30)
        took = time.monotonic() - t0
        assert rc == 0, f"broker {leader} did not exit cleanly on SIGTERM (rc {rc}, {took:.1f}s)"
        # leadership had moved before the exit: the survivors already name other leaders, no election pending
        for p in range(PARTITIONS):
            views = {i: c.partition_meta(topic, p, via=i) for i in c.live_ids()}
            assert all(v.leader in c.live_ids() for v in views.values()), (p, views)
            assert all(leader not in v.isr for v in views.values()), (p, views)
        prod.wait_acked(300)
        c.start(leader)
        c.wait_full_isr(topic, PARTITIONS)
        prod.wait_acked(100)
    finally:
        prod.stop()

    reads = read_all(c.bootstrap, topic, PARTITIONS, history=prod.history)
    verdict = check(prod.history, reads)
    queue_report(f"controlled shutdown of broker {leader} ({took:.1f}s): {verdict.summary()}")
    assert prod.errors() == [], f"errors surfaced to the producer: {prod.errors()[:5]}"
    assert verdict.ok, verdict.report()
    assert verdict.acked == verdict.sent
