"""Network partitions, with each broker in its own Linux network namespace (tests/support/cluster_proc.py: veth
pairs on a bridge, links cut with blackhole routes; clients in the root namespace reach every broker throughout).

* A follower cut off from its leader stops fetching: the leader removes it from the ISR (replica.lag.time.max.ms)
  and acks=-1 writes go on with the two others (min.insync.replicas=2); after healing it catches up and rejoins.
* A leader cut off from every broker and from etcd keeps appending what clients send it for a while, but can
  acknowledge none of it (its followers cannot fetch); the controller elects a new leader once its lease expires,
  which takes new writes at the same offsets. After healing, the old leader becomes a follower and truncates its
  divergent tail by leader epoch (OffsetForLeaderEpoch), so every replica ends with the same log.
"""

from __future__ import annotations

from kafka.protocol.producer import ProduceRequest, ProduceResponse

from tests.cluster.checker import History, check, encode_value
from tests.cluster.workload import ContinuousProducer, read_all
from tests.support.kafka_wire import WireClient, build_batch
from tests.support.waiting import wait_until

STRANDED = 30


def _assert_identical_logs(c, topic: str, partition: int, replicas: list[int]) -> None:
    logs = {i: c.log_batches(i, topic, partition) for i in replicas}
    ref = logs[replicas[0]]
    assert ref, f"{topic}-{partition}: empty log on broker {replicas[0]}"
    for i in replicas[1:]:
        assert logs[i] == ref, (
            f"{topic}-{partition}: broker {i}'s log differs from broker {replicas[0]}'s: "
            f"{len(logs[i])} vs {len(ref)} batches, first difference at "
            f"{next((a, b) for a, b in zip(logs[i] + [None], ref + [None]) if a != b)}"
        )


def test_isolated_follower_leaves_the_isr_and_rejoins_after_healing(cluster_factory) -> None:
    c = cluster_factory(3, netns=True)
    topic = "iso-follower"
    c.create_topic(topic, 1, 3, {"min.insync.replicas": 2})
    leader = c.leader_of(topic, 0)
    follower, other = [i for i in c.replicas_of(topic, 0) if i != leader]

    prod = ContinuousProducer(c.bootstrap, topic, 1, name="f", rate=200).start()
    try:
        prod.wait_acked(100)
        c.net.partition(leader, follower)
        c.wait_isr(topic, 0, {leader, other})  # the leader dropped the silent follower
        assert c.leader_of(topic, 0) == leader
        prod.wait_acked(200)  # acks=-1 goes on with 2 in-sync replicas
        c.net.heal()
        c.wait_isr(topic, 0, {leader, follower, other})  # caught up and back
        prod.wait_acked(100)
    finally:
        prod.stop()

    verdict = check(prod.history, read_all(c.bootstrap, topic, 1, history=prod.history))
    assert verdict.ok, verdict.report()
    assert not prod.errors(), prod.errors()[:5]
    wait_until(
        lambda: len({len(c.log_batches(i, topic, 0)) for i in c.ids}) == 1,
        timeout=10,
        message="followers fetched the last batches",
    )
    _assert_identical_logs(c, topic, 0, c.ids)


def test_isolated_leader_truncates_its_divergent_tail_after_healing(cluster_factory) -> None:
    c = cluster_factory(3, netns=True)
    topic = "iso-leader"
    c.create_topic(topic, 1, 3, {"min.insync.replicas": 2})
    old = c.leader_of(topic, 0)
    others = [i for i in c.ids if i != old]
    old_epoch = c.epoch_of(topic, 0)

    before = ContinuousProducer(c.bootstrap, topic, 1, name="before", rate=200).start()
    before.wait_acked(100)
    before.stop()

    c.net.isolate(old)  # from both other brokers and from etcd; clients still reach it
    # A client connected to the old leader keeps writing to it (raw Produce v7, acks=-1, one record per request,
    # pipelined): appended there, never replicated, so never acknowledged.
    stranded = History()
    with WireClient(c.broker(old).host, c.broker(old).port, timeout=30) as w:
        pending = []
        for seq in range(STRANDED):
            value = encode_value("stranded", seq)
            stranded.send(value, 0)
            req = ProduceRequest[7](
                transactional_id=None,
                acks=-1,
                timeout_ms=2000,
                topic_data=[
                    ProduceRequest.TopicProduceData(
                        name=topic,
                        partition_data=[
                            ProduceRequest.TopicProduceData.PartitionProduceData(
                                index=0, records=build_batch([(None, value, [])])
                            )
                        ],
                    )
                ],
            )
            pending.append((value, w.send(req)))
        for value, corr in pending:
            part = w.recv(ProduceResponse, 7, corr).responses[0].partition_responses[0]
            if part.error_code == 0:
                stranded.ack(value, 0, part.base_offset)
            else:
                stranded.fail(value, f"error {part.error_code}")
    assert not stranded.acked, (
        f"the isolated leader acknowledged acks=-1 writes it could not replicate: {sorted(stranded.acked.items())[:5]}"
    )

    new = c.wait_leader(topic, 0, among=others, via=others[0])
    assert c.epoch_of(topic, 0, via=others[0]) > old_epoch
    after = ContinuousProducer(
        ",".join(c.broker(i).bootstrap for i in others), topic, 1, name="after", rate=200
    ).start()
    try:
        after.wait_acked(150)
    finally:
        after.stop()

    new_log = c.log_batches(new, topic, 0)
    old_log = c.log_batches(old, topic, 0)
    diverged = [b for b in old_log if b not in new_log]
    assert diverged, "the isolated leader wrote nothing of its own: no divergence to repair"
    assert all(b.leader_epoch == old_epoch for b in diverged), diverged

    c.net.heal()
    c.wait_isr(topic, 0, set(c.ids), timeout=60)
    c.wait_leader(topic, 0)
    wait_until(
        lambda: c.log_batches(old, topic, 0) == c.log_batches(new, topic, 0),
        timeout=15,
        message="old leader's log equals the new leader's",
    )
    _assert_identical_logs(c, topic, 0, c.ids)
    assert not set(diverged) & set(c.log_batches(old, topic, 0)), "divergent batches survived on the old leader"

    history = History()
    for h in (before.history, after.history, stranded):
        history.merge(h)
    reads = read_all(c.bootstrap, topic, 1, history=history)
    verdict = check(history, reads)
    assert verdict.ok, verdict.report()
    read_values = {r.value for r in reads}
    assert not read_values & set(stranded.sent), "records only the isolated leader had are readable"
    assert not before.errors() and not after.errors(), (before.errors()[:3], after.errors()[:3])
