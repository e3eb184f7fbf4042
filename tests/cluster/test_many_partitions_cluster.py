"""3,000 partitions (replication factor 3) on a 3-broker cluster survive the kill -9 of a leader (issue 22).

Acknowledged (acks=all) records to every 10th partition (a replication round costs ~1 s on a busy CI machine; all
3,000 cost minutes); the broker leading the most partitions is killed; every partition gets a new leader from its ISR,
every 10th of the partitions it led takes acks=all records from its new leader, every acknowledged
record is read back by confluent-kafka, and the killed broker, restarted, rejoins the ISR of every partition; no
broker loses its lease on the way (its keep-alives do not wait for a busy event loop). Each phase prints its time."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from tests.support.waiting import wait_until

TOPICS = 3
PER_TOPIC = 1000
WANT = TOPICS * PER_TOPIC
PRODUCERS = 20
SAMPLE = 10  # records go to every SAMPLE-th partition

pytestmark = pytest.mark.timeout(900)


def _states(c, via: int, topics: list[str]) -> dict[tuple[str, int], tuple[int, frozenset[int]]]:
    """(leader, ISR) of every partition as broker `via`'s Metadata answers."""
    md = c.metadata(topics, via=via, timeout=30.0)
    return {
        (t.name, p.partition_index): (p.leader_id, frozenset(p.isr_nodes))
        for t in md.topics
        if t.error_code == 0
        for p in t.partitions
    }


def _produce(bootstrap: str, partitions: list[tuple[str, int]], tag: str, timeout: float) -> set[bytes]:
    """One acks=all record to each partition, from PRODUCERS producers with a slice of the partitions each; the
    values acknowledged. librdkafka sends one partition per ProduceRequest (librdkafka#1700) and a broker serves a
    connection's requests one at a time (as Kafka), so one producer would wait for a replication round per
    partition in series; several connections let one round carry many partitions."""
    from confluent_kafka import Producer

    acked: set[bytes] = set()

    def on_delivery(err, msg) -> None:
        if err is None:
            acked.add(msg.value())

    conf = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20, "log_level": 3}
    producers = [Producer(conf) for _ in range(PRODUCERS)]
    for n, (t, i) in enumerate(partitions):
        producers[n % PRODUCERS].produce(t, f"{tag}/{t}/{i}".encode(), partition=i, on_delivery=on_delivery)
    deadline = time.monotonic() + timeout
    while True:
        left = sum(p.flush(0.2) for p in producers)
        if left == 0 or time.monotonic() > deadline:
            break
    assert left == 0, f"{left} records not acknowledged within {timeout} s"
    return acked


def test_three_thousand_partitions_survive_a_leader_kill(cluster_factory) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    t0 = time.monotonic()
    phases: list[str] = []

    def phase(name: str) -> None:
        phases.append(f"{name} {time.monotonic() - t0:.1f}s")
        print(phases[-1], flush=True)

    # a follower fetching 2,000 partitions from two leaders on a busy CI machine can go seconds between fetches
    c = cluster_factory(3, start_timeout=120, overrides={"replica.lag.time.max.ms": 10000})
    topics = [f"many-{i}" for i in range(TOPICS)]
    admin = AdminClient({"bootstrap.servers": c.bootstrap, "log_level": 3})
    futs = admin.create_topics(
        [NewTopic(t, num_partitions=PER_TOPIC, replication_factor=3) for t in topics],
        operation_timeout=300,
        request_timeout=300,
    )
    for f in futs.values():
        f.result(timeout=300)
    phase("created")
    wait_until(
        lambda: all(
            len(st := _states(c, i, topics)) == WANT and all(len(isr) == 3 and ld > 0 for ld, isr in st.values())
            for i in c.ids
        ),
        300,
        interval=1.0,
        message="every partition led with a full ISR on every broker",
    )
    phase("full ISR")
    registrations = {i: c.brokers[i].output().count("broker registered") for i in c.ids}
    assert registrations == {i: 1 for i in c.ids}, f"a broker lost its lease: {registrations}"

    acked = _produce(c.bootstrap, [(t, i) for t in topics for i in range(0, PER_TOPIC, SAMPLE)], "a", 240)
    phase("produced")

    before = _states(c, 1, topics)
    victim = Counter(ld for ld, _ in before.values()).most_common(1)[0][0]
    survivors = [i for i in c.ids if i != victim]
    c.kill9(victim)
    killed_at = time.monotonic()

    def led_again() -> bool:
        st = _states(c, survivors[0], topics)
        return len(st) == WANT and all(
            ld != victim and ld in before[k][1] and victim not in isr for k, (ld, isr) in st.items()
        )

    wait_until(led_again, 120, interval=0.5, message=f"every partition led from its ISR without broker {victim}")
    phase(f"failover of broker {victim} ({time.monotonic() - killed_at:.1f}s after the kill)")

    taken_over = sorted(k for k, (ld, _) in before.items() if ld == victim)[::SAMPLE]  # the new leaders take writes
    acked |= _produce(",".join(c.brokers[i].bootstrap for i in survivors), taken_over, "b", 240)
    phase("produced after the kill")

    consumer = Consumer(
        {
            "bootstrap.servers": c.brokers[survivors[0]].bootstrap,
            "group.id": "many-cluster",
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )
    got: set[bytes] = set()
    try:
        consumer.assign([TopicPartition(t, i, 0) for t in topics for i in range(PER_TOPIC)])
        deadline = time.monotonic() + 180
        while not acked <= got and time.monotonic() < deadline:
            for m in consumer.consume(10_000, timeout=0.5):
                value = m.value()
                if m.error() is None and value is not None:
                    got.add(value)
    finally:
        consumer.close()
    assert len(acked - got) == 0, f"{len(acked - got)} acknowledged records not read back"
    phase("consumed")

    c.start(victim)
    wait_until(
        lambda: all(victim in isr for _, isr in _states(c, victim, topics).values()),
        240,
        interval=1.0,
        message=f"broker {victim} back in every ISR",
    )
    phase("rejoined")
    registrations = {i: c.brokers[i].output().count("broker registered") for i in survivors}
    assert registrations == {i: 1 for i in survivors}, f"a broker lost its lease: {registrations}"
