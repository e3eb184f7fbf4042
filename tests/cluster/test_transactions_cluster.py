"""Transactions across brokers: the transaction coordinator (leader of __transaction_state-0) is one broker, and the
topic's partitions are led by both. Produces to a partition led by the other broker are verified with the
coordinator over the inter-broker listener (AddPartitionsToTxn v4 verify_only), and the commit/abort markers reach
each leader (WriteTxnMarkers). A READ_COMMITTED consumer sees exactly the committed records."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support import ck
from tests.support.txn_log import read_confluent
from tests.support.waiting import wait_until

PARTITIONS = 4


def test_transactions_span_leaders_on_two_brokers(cluster_factory) -> None:
    c = cluster_factory(2, overrides={"transaction.state.log.num.partitions": 1})
    c.create_topic("txc", PARTITIONS, 2, {"min.insync.replicas": 1})
    leaders = {p: c.leader_of("txc", p) for p in range(PARTITIONS)}
    assert len(set(leaders.values())) == 2, leaders  # both brokers lead some partition

    p = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "tx-cluster", **ck.QUIET})
    p.init_transactions(60)
    coordinator = c.leader_of("__transaction_state", 0)
    assert coordinator in leaders.values()
    p.begin_transaction()
    for part in range(PARTITIONS):
        p.produce("txc", f"commit-{part}".encode(), partition=part)
    p.commit_transaction(60)
    p.begin_transaction()
    for part in range(PARTITIONS):
        p.produce("txc", f"abort-{part}".encode(), partition=part)
    p.flush(60)
    p.abort_transaction(60)

    probe = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "probe", "isolation.level": "read_committed"})
    try:
        # each partition: commit record, its marker, abort record, its marker; every transaction ended
        def lsos() -> list[int]:
            return [
                probe.get_watermark_offsets(TopicPartition("txc", q), 10, cached=False)[1] for q in range(PARTITIONS)
            ]

        wait_until(lambda: lsos() == [4] * PARTITIONS, 60, message=lambda: f"LSOs {lsos()}")
    finally:
        probe.close()
    for part in range(PARTITIONS):
        got = read_confluent(c.bootstrap, "txc", "read_committed", stop=4, partition=part)
        assert got == [f"commit-{part}".encode()], (part, got)
