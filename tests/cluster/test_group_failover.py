"""Consumer groups across a coordinator failover: SIGKILL the broker that leads the group's __consumer_offsets
partition (its coordinator). The live member keeps consuming and committing against the new coordinator, and a new
member of the group resumes exactly at the offsets committed last."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from strata.broker.group.records import partition_for
from tests.support.ck import produce_all
from tests.support.records import Rec
from tests.support.waiting import wait_until

PARTITIONS = 3
PER_PARTITION = 200
GROUP = "failover-group"
OFFSETS_PARTITIONS = 3  # offsets.topic.num.partitions of the cluster (FAST_FAILOVER)


def _consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "fetch.wait.max.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000,
            "log_level": 3,
        }
    )


def _consume(c: Consumer, n: int, timeout: float = 60.0) -> list[Any]:
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        assert time.monotonic() < deadline, f"consumed {len(out)}/{n} in {timeout}s"
        for m in c.consume(min(100, n - len(out)), timeout=0.5):
            err = m.error()
            if err is None:
                out.append(m)
            elif err.code() != KafkaError._PARTITION_EOF:
                raise AssertionError(f"consume error: {err}")
    return out


def _commit(c: Consumer) -> dict[int, int]:
    """Synchronous commit of the consumed positions, retrying retriable errors (a coordinator move is one); returns
    the group's committed offsets as the coordinator then reports them."""

    def attempt() -> list[TopicPartition] | None:
        try:
            res = c.commit(asynchronous=False)
        except KafkaException as e:
            if e.args[0].retriable() or e.args[0].code() in (
                KafkaError.NOT_COORDINATOR,
                KafkaError.COORDINATOR_NOT_AVAILABLE,
                KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
            ):
                return None
            raise
        assert all(tp.error is None for tp in res), res
        return res

    wait_until(attempt, timeout=30, interval=0.2, message="commit against the group coordinator")
    return _committed(c)


def _committed(c: Consumer) -> dict[int, int]:
    return _positions(c.committed([TopicPartition("grp", p) for p in range(PARTITIONS)], timeout=10))


def _positions(tps: list[TopicPartition]) -> dict[int, int]:
    """Committed offset per partition; 0 for a partition without one (where auto.offset.reset=earliest starts)."""
    out = {p: 0 for p in range(PARTITIONS)}
    out.update({tp.partition: max(tp.offset, 0) for tp in tps})
    return out


def test_group_resumes_from_committed_offsets_after_coordinator_failover(cluster_factory) -> None:
    c = cluster_factory(3)
    c.create_topic("grp", PARTITIONS, 3, {"min.insync.replicas": 2})
    recs = [
        Rec(p, f"k{i}".encode(), f"grp-{p}-{i:05d}".encode()) for i in range(PER_PARTITION) for p in range(PARTITIONS)
    ]
    produce_all(c.bootstrap, "grp", recs)
    end = PER_PARTITION

    c1 = _consumer(c.bootstrap)
    c1.subscribe(["grp"])
    try:
        first = _consume(c1, 200)
        committed_before = _commit(c1)
        assert sum(committed_before.values()) >= 200, committed_before

        offsets_partition = partition_for(GROUP, OFFSETS_PARTITIONS)
        coordinator = c.leader_of("__consumer_offsets", offsets_partition)
        admin = AdminClient({"bootstrap.servers": c.bootstrap, "log_level": 3})
        desc = admin.describe_consumer_groups([GROUP])[GROUP].result(timeout=10)
        assert desc.coordinator.id == coordinator, (desc.coordinator, coordinator)
        del admin

        c.kill9(coordinator)
        new_coordinator = c.wait_leader("__consumer_offsets", offsets_partition, not_in=[coordinator])
        # the committed offsets were replicated: the new coordinator serves them
        assert wait_until(
            lambda: _committed(c1) == committed_before, timeout=30, message="committed offsets from the new coordinator"
        )

        # the live member keeps consuming and committing (it may re-read from the last commit after a rebalance)
        second = _consume(c1, 150)
        committed_after = _commit(c1)
        assert all(committed_after[p] >= committed_before[p] for p in range(PARTITIONS)), (
            committed_before,
            committed_after,
        )
        # 150 more records consumed from the committed positions (fewer if a rebalance made it re-read some)
        assert sum(committed_before.values()) < sum(committed_after.values()) <= sum(committed_before.values()) + 150, (
            committed_before,
            committed_after,
        )
    finally:
        c1.close()

    # a new member resumes exactly at the last committed offsets and reads every remaining record once
    c2 = _consumer(c.bootstrap)
    c2.subscribe(["grp"])
    try:
        rest = _consume(c2, PARTITIONS * end - sum(committed_after.values()))
        firsts: dict[int, int] = {}
        for m in rest:
            firsts.setdefault(m.partition(), m.offset())
        for p, off in committed_after.items():
            if off < end:
                assert firsts.get(p) == off, f"partition {p}: resumed at {firsts.get(p)}, committed {off}"
        got = sorted((m.partition(), m.offset()) for m in rest)
        assert got == sorted((p, o) for p in range(PARTITIONS) for o in range(committed_after[p], end))
        assert {m.value() for m in rest} == {f"grp-{p}-{o:05d}".encode() for p, o in got}
        assert wait_until(lambda: _commit(c2) == {p: end for p in range(PARTITIONS)}, timeout=30)
    finally:
        c2.close()
    seen = {(m.partition(), m.offset()) for m in first + second + rest}
    assert seen == {(p, o) for p in range(PARTITIONS) for o in range(end)}, "some record was never delivered"
    assert new_coordinator != coordinator
