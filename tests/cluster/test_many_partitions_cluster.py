"""3,000 partitions (replication factor 3) on a 3-broker cluster survive the kill -9 of a leader (issue 22): every
partition gets a live leader again, and every acknowledged record is read back by confluent-kafka."""

from __future__ import annotations

import time

import pytest

from tests.support.waiting import wait_until

TOPICS = 3
PER_TOPIC = 1000

pytestmark = pytest.mark.timeout(900)


def leaders(bootstrap: str, topics: list[str]) -> dict[tuple[str, int], int]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3}).list_topics(timeout=30)
    return {(t, p): pm.leader for t in topics if t in md.topics for p, pm in md.topics[t].partitions.items()}


def test_three_thousand_partitions_survive_a_leader_kill(cluster_factory) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    c = cluster_factory(3)
    topics = [f"many-{i}" for i in range(TOPICS)]
    admin = AdminClient({"bootstrap.servers": c.bootstrap, "log_level": 3})
    futs = admin.create_topics(
        [NewTopic(t, num_partitions=PER_TOPIC, replication_factor=3) for t in topics],
        operation_timeout=300,
        request_timeout=300,
    )
    for f in futs.values():
        f.result(timeout=300)
    want = TOPICS * PER_TOPIC
    wait_until(lambda: sum(1 for ld in leaders(c.bootstrap, topics).values() if ld >= 0) == want, 300, interval=1.0)

    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 50, "log_level": 3})
    for t in topics:
        for i in range(PER_TOPIC):
            p.produce(t, f"{t}/{i}".encode(), partition=i)
        p.poll(0)
    assert p.flush(180) == 0

    victim = leaders(c.bootstrap, topics)[(topics[0], 0)]
    t0 = time.monotonic()
    c.kill9(victim)
    survivor = next(i for i in c.live_ids() if i != victim)
    via = c.brokers[survivor].bootstrap

    def all_moved() -> bool:
        lds = leaders(via, topics)
        return len(lds) == want and all(ld >= 0 and ld != victim for ld in lds.values())

    wait_until(all_moved, 120, interval=1.0)
    print(f"{want} partitions led again {time.monotonic() - t0:.1f} s after the kill")

    consumer = Consumer(
        {"bootstrap.servers": via, "group.id": "many-cluster", "enable.auto.commit": False, "log_level": 3}
    )
    try:
        consumer.assign([TopicPartition(t, i, 0) for t in topics for i in range(PER_TOPIC)])
        got: set[bytes] = set()
        deadline = time.monotonic() + 180
        while len(got) < want and time.monotonic() < deadline:
            for m in consumer.consume(10_000, timeout=0.5):
                value = m.value()
                if m.error() is None and value is not None:
                    got.add(value)
    finally:
        consumer.close()
    assert got == {f"{t}/{i}".encode() for t in topics for i in range(PER_TOPIC)}
