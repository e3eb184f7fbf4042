"""KIP-101: replication by leader epoch, not by high watermark. Both scenarios of the KIP, with real processes.

How unflushed data is lost here: `kill -9` alone loses nothing -- the written pages stay in the page cache and
reach the disk later -- so a machine crash (power loss) is simulated after the SIGKILL by cutting the killed
broker's log back (``StrataCluster.power_loss``). The brokers run without background fsync (FAST_FAILOVER:
``log.flush.interval.messages`` and ``log.flush.scheduler.interval.ms`` at their maximum), so only segment rolls and
clean shutdowns flush; what a crash may lose is everything from the offset in ``recovery-point-offset-checkpoint``
on, and ``power_loss`` refuses to cut below it. The checkpoint files and the leader-epoch file are written atomically
with fsync, so they survive as they are.

Scenario 1 (high-watermark truncation followed by an immediate leader election): a replica that becomes a follower
must not cut its log back to its high watermark (which trails its log end under load) before the new leader answers
its OffsetForLeaderEpoch; if the new leader then dies and this replica is elected, acknowledged records would be
gone. In the KIP the trigger is a follower restart; here a restarted broker leaves the ISR (its old registration is
revoked, as Kafka fences a restarted broker), so the trigger is a leader election instead: leader A dies under load,
B is elected, C becomes B's follower but cannot reach B (network namespaces, a blackhole route), then B dies and C is
elected. Whatever C has then is what it kept on its own.

Scenario 2 (replica divergence after both crash with unflushed data): the replica that leads next lost its unflushed
tail, takes new writes at the same offsets, and the other replica comes back with different records there; it must
truncate to the end offset of its last common epoch (OffsetForLeaderEpoch) and fetch. Both end with identical logs.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.cluster.checker import History, check, encode_value
from tests.cluster.workload import ContinuousProducer, read_all
from tests.support.ck import produce_all
from tests.support.records import Rec
from tests.support.waiting import wait_until


def _produce(c, topic: str, name: str, n: int, history: History) -> list[tuple[int, int]]:
    """n records to partition 0 with acks=all; each must be acknowledged; recorded in `history`."""
    values = [encode_value(name, i) for i in range(n)]
    for v in values:
        history.send(v, 0)
    conf: dict[str, Any] = {"linger.ms": 0, "batch.num.messages": 5}
    acks = produce_all(c.bootstrap, topic, [Rec(0, None, v) for v in values], **conf)
    for v, (p, off) in zip(values, acks):
        history.ack(v, p, off)
    return acks


def _values(c, topic: str) -> list[bytes | None]:
    return [r.value for r in sorted(read_all(c.bootstrap, topic, 1), key=lambda r: r.offset)]


def _identical(c, topic: str, replicas: list[int]) -> bool:
    logs = [c.log_batches(i, topic, 0) for i in replicas]
    return bool(logs[0]) and all(log == logs[0] for log in logs[1:])


def test_kip101_new_follower_does_not_truncate_to_its_high_watermark(cluster_factory) -> None:
    # followers cut off from the new leader must stay in the ISR until it dies: a generous lag time
    c = cluster_factory(3, netns=True, overrides={"replica.lag.time.max.ms": 20000})
    topic = "kip101-hw"
    a, b, cc = 1, 2, 3
    c.create_topic(topic, replica_assignment=[[a, b, cc]], config={"min.insync.replicas": 2})
    assert c.leader_of(topic, 0) == a
    prod = ContinuousProducer(c.bootstrap, topic, 1, name="hw", rate=300).start()
    try:
        prod.wait_acked(300)
        c.net.block(cc, c.net.ips[b])  # C will not reach B: no fetch, no OffsetForLeaderEpoch answer
        c.kill9(a)  # under load: the followers' high watermarks trail their logs
        assert c.wait_leader(topic, 0, among=[b]) == b
        c.wait_leader(topic, 0, among=[b], via=cc)  # C applied the change: it is B's follower now
        acked_before = dict(prod.history.acked)
        c.kill9(b)
        assert c.wait_leader(topic, 0, among=[cc]) == cc
        assert cc in c.isr_of(topic, 0)
        # C never heard from B: everything acknowledged (by A) is still in C's log. (C cannot serve it yet: with
        # an ISR below min.insync.replicas its high watermark stays frozen, as in Kafka 3.7+; the checker below
        # verifies every value at its acknowledged offset once the others are back.)
        c_end = c.log_batches(cc, topic, 0)[-1].last_offset + 1
        acked_end = max(off for _, off in acked_before.values() if off is not None) + 1
        assert c_end >= acked_end, f"C's log ends at {c_end}, below acknowledged offset {acked_end - 1}"
        c.net.heal()
        c.start(a)
        c.start(b)
        c.wait_isr(topic, 0, {a, b, cc}, timeout=60)
        prod.wait_acked(100)
    finally:
        prod.stop()
    verdict = check(prod.history, read_all(c.bootstrap, topic, 1, history=prod.history))
    assert verdict.ok, verdict.report()
    wait_until(lambda: _identical(c, topic, [a, b, cc]), timeout=15, message="identical logs on all replicas")


@pytest.mark.parametrize("tail_lost_by", ["next-leader", "other-replica"])
def test_kip101_both_replicas_crash_with_unflushed_data(cluster_factory, tail_lost_by: str) -> None:
    c = cluster_factory(3)
    topic = f"kip101-{tail_lost_by}"
    c.create_topic(topic, 1, 2, {"min.insync.replicas": 1})
    first = c.leader_of(topic, 0)  # dies first
    (second,) = [i for i in c.replicas_of(topic, 0) if i != first]  # dies last: the last ISR member, leads next
    bystander = next(i for i in c.ids if i not in (first, second))
    history = History()
    common = max(off for _, off in _produce(c, topic, "r1", 40, history)) + 1
    tail = max(off for _, off in _produce(c, topic, "r2", 25, history)) + 1
    wait_until(lambda: _identical(c, topic, [first, second]), timeout=10, message="both replicas have r1+r2")

    c.kill9(first)
    assert c.wait_leader(topic, 0, among=[second]) == second
    c.kill9(second)
    wait_until(
        lambda: c.leader_of(topic, 0, via=bystander) == -1,
        timeout=30,
        message=lambda: f"partition offline: {c.partition_meta(topic, 0, via=bystander)}",
    )
    # the power loss: one replica loses its unflushed tail (r2), the other kept everything
    loser, keeper = (second, first) if tail_lost_by == "next-leader" else (first, second)
    assert c.power_loss(loser, {(topic, 0): common}) == {(topic, 0): common}
    assert c.power_loss(keeper, {(topic, 0): tail}) == {(topic, 0): tail}

    # the last ISR member comes back first and is elected; it takes new writes (r3)
    c.start(second)
    assert c.wait_leader(topic, 0) == second
    r3 = _produce(c, topic, "r3", 20, History())
    expect_r3_at = common if tail_lost_by == "next-leader" else tail
    assert r3[0][1] == expect_r3_at, (r3[0], expect_r3_at)

    # the other comes back as a follower: divergent (or missing) records are replaced by the leader's
    c.start(first)
    c.wait_isr(topic, 0, {first, second})
    wait_until(
        lambda: _identical(c, topic, [first, second]),
        timeout=15,
        message=lambda: (
            f"identical logs: {first}: {c.log_batches(first, topic, 0)[-3:]} "
            f"{second}: {c.log_batches(second, topic, 0)[-3:]}"
        ),
    )
    values = _values(c, topic)
    r1 = [encode_value("r1", i) for i in range(40)]
    r2 = [encode_value("r2", i) for i in range(25)]
    r3v = [encode_value("r3", i) for i in range(20)]
    assert values == (r1 + r3v if tail_lost_by == "next-leader" else r1 + r2 + r3v)
