"""Replication between broker processes (real etcd, tests/support/cluster_proc.py), from the replication side:

* RF=3, a follower killed with SIGKILL leaves the ISR after replica.lag.time.max.ms (the leader's compare-and-set
  shows in Metadata and in the ISR-shrink/under-replicated metrics), acks=-1 goes on with min.insync.replicas=2,
  the restarted follower catches up and rejoins (ISR-expand metric), every replica ends with the same log. The
  followers fetch in KIP-227 sessions (the leader's session gauges), the restarted one in a new session.
* The leader killed with SIGKILL under acks=-1 load: a new leader is elected from the ISR and no acknowledged record
  is lost; the old leader comes back as a follower with the new leader's log, leader epochs included.
* A partition a follower starts to follow while its fetch to that leader sits in the leader's purgatory is fetched at
  once (the fetcher drops the parked long poll), not after replica.fetch.wait.max.ms: acks=-1 to a new topic works.
* A reassignment [1, 2] -> [2, 3] copies the whole log to broker 3, which joins the ISR, then broker 1 leaves the
  replica set and deletes its log.
* What a follower answers (Produce v10+/Fetch v12+ name the leader, Fetch v16+ with its endpoint), and the leader
  epoch fencing of Fetch/ListOffsets/OffsetForLeaderEpoch across a leader change.
"""

from __future__ import annotations

import re
import urllib.request
from typing import Any

from strata.protocol.records import build_batch
from strata.protocol.registry import REQUEST_CLASSES, RESPONSE_CLASSES
from tests.cluster.checker import check
from tests.cluster.workload import ContinuousProducer, read_all
from tests.support.ck import produce_all
from tests.support.kafka_wire import WireClient
from tests.support.records import Rec
from tests.support.waiting import wait_until

NOT_LEADER, NOT_ENOUGH_REPLICAS, FENCED, UNKNOWN_EPOCH = 6, 19, 74, 75


def metric(c, i: int, name: str) -> float:
    text = urllib.request.urlopen(c.broker(i).metrics_url, timeout=5).read().decode()
    m = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.MULTILINE)
    assert m, f"{name} not exported by broker {i}"
    return float(m.group(1))


def call(bootstrap: str, api_key: int, version: int, **fields: Any) -> Any:
    with WireClient.connect(bootstrap) as w:
        req = REQUEST_CLASSES[api_key](version=version, **fields)
        return w.recv(RESPONSE_CLASSES[api_key], version, w.send(req))


def identical_logs(c, topic: str, ids) -> bool:
    logs = [c.log_batches(i, topic, 0) for i in ids]
    return bool(logs[0]) and all(lg == logs[0] for lg in logs[1:])


def test_killed_follower_leaves_the_isr_and_rejoins_after_restart(cluster_factory) -> None:
    # The leader's own ISR shrink (replica.lag.time.max.ms), so without the controller's liveness check, which
    # would take the killed broker out of the ISR first (test_cluster_basics covers that path), and with a session
    # long enough that the lease's expiry cannot either (on a busy machine it sometimes came first)
    c = cluster_factory(
        3, overrides={"broker.liveness.connection.check.enable": False, "broker.session.timeout.ms": 60000}
    )
    topic = "repl-follower"
    c.create_topic(topic, 1, 3, {"min.insync.replicas": 2})
    leader = c.leader_of(topic, 0)
    follower = next(i for i in c.replicas_of(topic, 0) if i != leader)
    assert metric(c, leader, "strata_replica_manager_leader_count") >= 1
    shrinks = metric(c, leader, "strata_replica_manager_isr_shrinks_total")
    expands = metric(c, leader, "strata_replica_manager_isr_expands_total")
    prod = ContinuousProducer(c.bootstrap, topic, 1, name="f", rate=200).start()
    try:
        prod.wait_acked(100)
        # both followers fetch from the leader in KIP-227 sessions (privileged ones: one each)
        sessions = "strata_fetch_session_cache_num_incremental_fetch_sessions"
        wait_until(lambda: metric(c, leader, sessions) >= 2, timeout=10, message="the followers' fetch sessions")
        c.kill9(follower)
        c.wait_isr(topic, 0, set(c.ids) - {follower})
        assert c.leader_of(topic, 0) == leader
        assert metric(c, leader, "strata_replica_manager_isr_shrinks_total") == shrinks + 1
        part = f'{{partition="0",topic="{topic}"}}'
        assert metric(c, leader, f"strata_partition_in_sync_replicas_count{part}") == 2
        assert metric(c, leader, f"strata_partition_replicas_count{part}") == 3
        assert metric(c, leader, f"strata_partition_under_min_isr{part}") == 0  # 2 >= min.insync.replicas
        assert metric(c, leader, "strata_replica_manager_under_replicated_partitions") >= 1
        prod.wait_acked(200)  # acks=-1 goes on with two in-sync replicas
        c.start(follower)
        c.wait_isr(topic, 0, set(c.ids))  # caught up (truncating first) and added back
        wait_until(
            lambda: metric(c, leader, f"strata_partition_in_sync_replicas_count{part}") == 3,
            timeout=10,
            message="the leader's ISR gauge back at 3",
        )
        assert metric(c, leader, "strata_replica_manager_isr_expands_total") >= expands + 1
        # the restarted follower started a new session (the old one stays cached until evicted)
        assert metric(c, leader, sessions) >= 3
        assert metric(c, leader, "strata_fetch_session_cache_num_incremental_fetch_partitions_cached") >= 3
        prod.wait_acked(100)
    finally:
        prod.stop()
    verdict = check(prod.history, read_all(c.bootstrap, topic, 1, history=prod.history))
    assert verdict.ok, verdict.report()
    assert not prod.errors(), prod.errors()[:5]
    wait_until(lambda: identical_logs(c, topic, c.ids), timeout=15, message="replicas identical")
    wait_until(
        lambda: metric(c, leader, "strata_replica_manager_under_replicated_partitions") == 0,
        timeout=10,
        message="no under-replicated partition left",
    )


def test_acks_all_does_not_wait_for_a_dead_follower_taken_out_of_the_isr(cluster_factory) -> None:
    # The controller takes a killed follower out of the ISR at once (liveness check), while it was caught up a
    # moment ago. A leader waits for a caught-up follower outside the ISR before advancing the HW (it may be about to
    # rejoin: Kafka's shouldWaitForReplicaToJoinIsr) but not for one that is not registered any more; with
    # replica.lag.time.max.ms far above the producer's timeout, waiting for it would time every acks=-1 produce out.
    c = cluster_factory(3, overrides={"replica.lag.time.max.ms": 120000})
    topic = "repl-dead-follower"
    c.create_topic(topic, 1, 3, {"min.insync.replicas": 1})
    leader = c.leader_of(topic, 0)
    follower = next(i for i in c.replicas_of(topic, 0) if i != leader)
    acks_all: dict[str, Any] = {"acks": "all", "request.timeout.ms": 10000, "message.timeout.ms": 20000}
    produce_all(c.bootstrap, topic, [Rec(0, None, b"before")], **acks_all)
    c.wait_full_isr(topic, 1)
    c.kill9(follower)
    c.wait_isr(topic, 0, set(c.ids) - {follower})
    assert c.leader_of(topic, 0) == leader
    delivered = produce_all(
        c.bootstrap, topic, [Rec(0, None, f"after-{i}".encode()) for i in range(10)], timeout=30, **acks_all
    )
    assert [o for _, o in delivered] == list(range(1, 11))


def test_leader_kill9_loses_no_acknowledged_record_and_rejoins_as_follower(cluster_factory) -> None:
    c = cluster_factory(3)
    topic = "repl-leader"
    c.create_topic(topic, 1, 3, {"min.insync.replicas": 2})
    old = c.leader_of(topic, 0)
    epoch0 = c.epoch_of(topic, 0)
    prod = ContinuousProducer(c.bootstrap, topic, 1, name="l", rate=300).start()
    try:
        prod.wait_acked(200)
        c.kill9(old)
        new = c.wait_leader(topic, 0, not_in=[old])
        assert c.epoch_of(topic, 0) > epoch0
        prod.wait_acked(200)
        c.start(old)
        c.wait_isr(topic, 0, set(c.ids))
        prod.wait_acked(100)
    finally:
        prod.stop()
    verdict = check(prod.history, read_all(c.bootstrap, topic, 1, history=prod.history))
    assert verdict.ok, verdict.report()
    assert verdict.acked == verdict.sent and not verdict.lost
    wait_until(lambda: identical_logs(c, topic, c.ids), timeout=15, message="replicas identical")
    epochs = [b.leader_epoch for b in c.log_batches(new, topic, 0)]
    assert epochs == sorted(epochs) and epochs[-1] == c.epoch_of(topic, 0) and epochs[0] == epoch0


def test_new_partition_is_replicated_without_waiting_out_the_parked_follower_fetch(cluster_factory) -> None:
    # Followers long-poll their leader for 60 s, and everything else on that connection (the new partition's
    # OffsetForLeaderEpoch and first fetch) would queue behind the parked fetch: an acks=-1 produce to a topic created
    # meanwhile could only time out (10 s) unless the fetcher interrupts its parked fetch.
    c = cluster_factory(3, overrides={"replica.fetch.wait.max.ms": 60000, "replica.socket.timeout.ms": 30000})
    c.create_topic("repl-idle", replica_assignment=[[1, 2, 3]])
    with WireClient.connect(c.broker(1).bootstrap) as w:
        assert w.produce("repl-idle", 0, build_batch([b"warm"])).responses[0].partition_responses[0].error_code == 0
        wait_until(
            lambda: metric(c, 1, 'strata_purgatory_size{purgatory="Fetch"}') >= 2,
            timeout=10,
            message="both followers' fetches parked on the leader",
        )
        c.create_topic("repl-new", replica_assignment=[[1, 2, 3]])
        pr = w.produce("repl-new", 0, build_batch([b"first"]), timeout_ms=10000).responses[0].partition_responses[0]
    assert pr.error_code == 0, f"acks=-1 produce to the new topic failed with error {pr.error_code}"
    wait_until(lambda: identical_logs(c, "repl-new", c.ids), timeout=10, message="new topic replicated everywhere")


def test_followers_name_the_leader_and_stale_epochs_are_fenced(cluster_factory) -> None:
    c = cluster_factory(3)
    topic = "repl-fence"
    c.create_topic(topic, 1, 3, {"min.insync.replicas": 2})
    leader = c.leader_of(topic, 0)
    follower = next(i for i in c.replicas_of(topic, 0) if i != leader)
    epoch = c.epoch_of(topic, 0)
    fb = c.broker(follower).bootstrap
    P = REQUEST_CLASSES[0].TopicProduceData
    r = call(
        fb,
        0,
        11,
        transactional_id=None,
        acks=-1,
        timeout_ms=5000,
        topic_data=[P(name=topic, partition_data=[P.PartitionProduceData(index=0, records=build_batch([b"x"]))])],
    )
    pr = r.responses[0].partition_responses[0]
    assert pr.error_code == NOT_LEADER
    assert (pr.current_leader.leader_id, pr.current_leader.leader_epoch) == (leader, epoch)
    ep = {n.node_id: (n.host, n.port) for n in r.node_endpoints}
    assert ep[leader] == (c.broker(leader).host, c.broker(leader).port)

    with WireClient.connect(c.broker(leader).bootstrap) as w:
        topic_id = w.metadata([topic], version=12).topics[0].topic_id

    def fetch(bootstrap: str, current_epoch: int, version: int = 16) -> Any:
        T = REQUEST_CLASSES[1].FetchTopic
        resp = call(
            bootstrap,
            1,
            version,
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=1 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            replica_id=-1,
            topics=[
                T(
                    topic_id=topic_id,
                    partitions=[
                        T.FetchPartition(
                            partition=0,
                            current_leader_epoch=current_epoch,
                            fetch_offset=0,
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=1 << 20,
                        )
                    ],
                )
            ],
            forgotten_topics_data=[],
            rack_id="",
        )
        return resp, resp.responses[0].partitions[0]

    resp, pd = fetch(fb, epoch)
    assert pd.error_code == NOT_LEADER and pd.current_leader.leader_id == leader
    assert {n.node_id for n in resp.node_endpoints} == {leader}
    assert fetch(c.broker(leader).bootstrap, epoch)[1].error_code == 0
    # the leader dies; a client still holding the old epoch is fenced by the new leader
    c.kill9(leader)
    new = c.wait_leader(topic, 0, not_in=[leader])
    new_epoch = c.epoch_of(topic, 0)
    wait_until(
        lambda: fetch(c.broker(new).bootstrap, new_epoch)[1].error_code == 0,
        timeout=10,
        message="the new leader serves its epoch",
    )
    _, stale = fetch(c.broker(new).bootstrap, epoch)
    assert stale.error_code == FENCED and stale.current_leader.leader_epoch == new_epoch
    assert fetch(c.broker(new).bootstrap, new_epoch + 1)[1].error_code == UNKNOWN_EPOCH
    T = REQUEST_CLASSES[23].OffsetForLeaderTopic
    r = call(
        c.broker(new).bootstrap,
        23,
        4,
        replica_id=-1,
        topics=[
            T(
                topic=topic,
                partitions=[
                    T.OffsetForLeaderPartition(partition=0, current_leader_epoch=new_epoch, leader_epoch=epoch),
                ],
            )
        ],
    )
    p = r.topics[0].partitions[0]
    assert p.error_code == 0 and p.leader_epoch == epoch and p.end_offset == 0  # nothing was written in it
    # with one replica left of three, min.insync.replicas=2 refuses acks=-1 before appending
    other = next(i for i in c.ids if i not in (leader, new))
    c.kill9(other)
    c.wait_isr(topic, 0, {new}, timeout=30)
    r = call(
        c.broker(new).bootstrap,
        0,
        9,
        transactional_id=None,
        acks=-1,
        timeout_ms=5000,
        topic_data=[P(name=topic, partition_data=[P.PartitionProduceData(index=0, records=build_batch([b"y"]))])],
    )
    assert r.responses[0].partition_responses[0].error_code == NOT_ENOUGH_REPLICAS


def test_reassignment_copies_the_log_to_the_new_replica_and_removes_the_old_one(cluster_factory) -> None:
    # AlterPartitionReassignments [1, 2] -> [2, 3]: broker 3 is added, fetches the whole log and joins the ISR, then
    # broker 1 is removed from the replica set and deletes its log (Kafka's add, wait for ISR, remove).
    c = cluster_factory(3)
    c.create_topic("moving", replica_assignment=[[1, 2]], config={"min.insync.replicas": 1})
    with WireClient.connect(c.broker(c.leader_of("moving", 0)).bootstrap) as w:
        for i in range(20):
            r = w.produce("moving", 0, build_batch([b"r%d-%d" % (i, j) for j in range(10)]))
            assert r.responses[0].partition_responses[0].error_code == 0
    assert c.partition_dir(1, "moving", 0).is_dir()
    AR = REQUEST_CLASSES[45].ReassignableTopic
    r = call(
        c.broker(3).bootstrap,
        45,
        0,
        timeout_ms=5000,
        topics=[AR(name="moving", partitions=[AR.ReassignablePartition(partition_index=0, replicas=[2, 3])])],
    )
    assert r.error_code == 0 and r.responses[0].partitions[0].error_code == 0
    wait_until(
        lambda: sorted(c.replicas_of("moving", 0)) == [2, 3] and c.isr_of("moving", 0) == {2, 3},
        timeout=30,
        message="reassignment completed",
    )
    listed = call(c.broker(2).bootstrap, 46, 0, timeout_ms=5000, topics=None)
    assert [t.name for t in listed.topics] == []  # nothing in progress
    wait_until(lambda: identical_logs(c, "moving", [2, 3]), timeout=15, message="broker 3 holds the same log")
    assert sum(b.last_offset - b.base_offset + 1 for b in c.log_batches(3, "moving", 0)) == 200
    wait_until(lambda: not c.partition_dir(1, "moving", 0).exists(), timeout=15, message="broker 1 deleted its log")
    recs = read_all(c.bootstrap, "moving", 1)
    assert len(recs) == 200, len(recs)
