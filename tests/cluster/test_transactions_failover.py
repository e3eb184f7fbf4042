"""A transaction coordinator killed (-9) mid-transaction: the new leader of its __transaction_state partition loads
the open transaction from the log and the same producer commits it; READ_COMMITTED readers then see every record."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support import ck
from tests.support.txn_log import read_confluent
from tests.support.waiting import wait_until

PARTITIONS = 2


def test_open_transaction_survives_its_coordinator(cluster_factory) -> None:
    c = cluster_factory(3, overrides={"transaction.state.log.num.partitions": 1})
    c.create_topic("txf", PARTITIONS, 3)
    p = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "tx-failover", "acks": "all", **ck.QUIET})
    p.init_transactions(60)
    p.begin_transaction()
    for part in range(PARTITIONS):
        p.produce("txf", f"before-{part}".encode(), partition=part)
    p.flush(60)
    coordinator = c.leader_of("__transaction_state", 0)
    c.kill9(coordinator)
    c.wait_leader("__transaction_state", 0, not_in=[coordinator])
    c.wait_leader("txf", 0, not_in=[coordinator])
    c.wait_leader("txf", 1, not_in=[coordinator])
    p.commit_transaction(120)

    probe = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "probe", "isolation.level": "read_committed"})
    try:

        def lsos() -> list[int]:
            tps = [TopicPartition("txf", q) for q in range(PARTITIONS)]
            return [probe.get_watermark_offsets(tp, 10, cached=False)[1] for tp in tps]

        wait_until(lambda: lsos() == [2] * PARTITIONS, 60, message=lambda: f"LSOs {lsos()}")
    finally:
        probe.close()
    for part in range(PARTITIONS):
        assert read_confluent(c.bootstrap, "txf", "read_committed", stop=2, partition=part) == [
            f"before-{part}".encode()
        ]
