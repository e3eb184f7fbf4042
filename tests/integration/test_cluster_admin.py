"""Cluster-aware metadata and admin APIs on three broker processes over a real etcd: Metadata (all brokers, leaders,
replicas, ISR, offline replicas), DescribeCluster, CreateTopics on any broker (rack-aware placement, replication
factor bound, manual assignment), FindCoordinator (the leader of the group's __consumer_offsets partition),
ElectLeaders, Alter/ListPartitionReassignments, controlled shutdown on SIGTERM and leader election after kill -9.

Replication itself (fetchers, ISR changes, acks=-1) is tested in tests/cluster; here the partition states are what
the controller and the admin paths write.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from strata.broker.handlers.metadata import DEPARTED_BROKER_GRACE_S
from strata.protocol.registry import REQUEST_CLASSES, RESPONSE_CLASSES, ApiKey
from tests.support.broker_proc import StrataBroker
from tests.support.etcd_proc import EtcdProcess, etcd_binary
from tests.support.kafka_wire import WireClient
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

SESSION_MS = 2000
RACKS = ["rack-a", "rack-b", "rack-c"]


def call(b: StrataBroker, api_key: int, version: int, **fields):
    with WireClient.connect(b.bootstrap) as c:
        req = REQUEST_CLASSES[api_key][version](**fields)
        corr = c.send(req)
        return c.recv(RESPONSE_CLASSES[api_key], version, corr)


def metadata(b: StrataBroker, topics=None, version: int = 12):
    Req = REQUEST_CLASSES[ApiKey.METADATA][version]
    req_topics = None if topics is None else [Req.MetadataRequestTopic(name=t, topic_id=None) for t in topics]
    return call(
        b,
        ApiKey.METADATA,
        version,
        topics=req_topics,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def partitions_of(b: StrataBroker, topic: str) -> dict[int, object]:
    md = metadata(b, [topic])
    [t] = md.topics
    assert t.error_code == 0, t
    return {p.partition_index: p for p in t.partitions}


def create_topic(b: StrataBroker, name: str, partitions: int = -1, rf: int = -1, assignments=None, configs=None):
    Req = REQUEST_CLASSES[ApiKey.CREATE_TOPICS][7]
    T = Req.CreatableTopic
    asg = [T.CreatableReplicaAssignment(partition_index=i, broker_ids=a) for i, a in enumerate(assignments or [])]
    cfg = [T.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()]
    resp = call(
        b,
        ApiKey.CREATE_TOPICS,
        7,
        topics=[T(name=name, num_partitions=partitions, replication_factor=rf, assignments=asg, configs=cfg)],
        timeout_ms=10000,
        validate_only=False,
    )
    return resp.topics[0]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if etcd_binary() is None:
        pytest.skip("etcd not installed")
    tmp: Path = tmp_path_factory.mktemp("cluster")
    e = EtcdProcess(tmp / "etcd").start()
    brokers = []
    try:
        for i in range(3):
            brokers.append(
                StrataBroker(
                    tmp / f"b{i}",
                    {
                        "broker.id": i,
                        "broker.rack": RACKS[i],
                        "metadata.store.connect": e.connect,
                        "broker.session.timeout.ms": SESSION_MS,
                        "broker.heartbeat.interval.ms": 300,
                        "auto.create.topics.enable": False,
                        "offsets.topic.num.partitions": 3,
                        "offsets.topic.replication.factor": 3,
                        "default.replication.factor": 3,
                        "controlled.shutdown.max.retries": 1,
                        "leader.imbalance.check.interval.seconds": 3600,
                    },
                    name=f"strata{i}",
                ).start()
            )
        wait_until(lambda: all(len(metadata(b).brokers) == 3 for b in brokers), 20, message="3 brokers registered")
        yield e, brokers
    finally:
        for b in brokers:
            b.kill9() if b.is_running() else None
        e.stop()


def test_metadata_and_describe_cluster_list_every_broker(cluster):
    _, brokers = cluster
    ports = {i: b.port for i, b in enumerate(brokers)}
    for b in brokers:
        md = metadata(b)
        assert {(x.node_id, x.port, x.rack) for x in md.brokers} == {(i, ports[i], RACKS[i]) for i in range(3)}
        assert md.controller_id in (0, 1, 2)
        dc = call(b, ApiKey.DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=False, endpoint_type=1)
        assert dc.error_code == 0
        assert {(x.broker_id, x.port, x.rack) for x in dc.brokers} == {(i, ports[i], RACKS[i]) for i in range(3)}
        assert dc.controller_id == md.controller_id
        assert dc.cluster_id == md.cluster_id and dc.cluster_id
    assert len({metadata(b).cluster_id for b in brokers}) == 1


def test_create_topic_on_any_broker_is_rack_aware_and_visible_everywhere(cluster):
    _, brokers = cluster
    res = create_topic(brokers[2], "spread", 6, 3)
    assert res.error_code == 0 and res.num_partitions == 6 and res.replication_factor == 3
    for b in brokers:
        parts = wait_until(lambda b=b: len(partitions_of(b, "spread")) == 6 and partitions_of(b, "spread"), 10)
        for p in parts.values():
            assert p.error_code == 0
            assert sorted(p.replica_nodes) == [0, 1, 2]  # three racks: one replica on each
            assert p.leader_id == p.replica_nodes[0] and sorted(p.isr_nodes) == [0, 1, 2]
            assert p.offline_replicas == []
            assert p.leader_epoch == 0
    leaders = [p.leader_id for p in partitions_of(brokers[0], "spread").values()]
    assert sorted(leaders) == [0, 0, 1, 1, 2, 2]  # leadership balanced


def test_replication_factor_and_assignment_validation(cluster):
    _, brokers = cluster
    too_big = create_topic(brokers[0], "rf4", 1, 4)
    assert too_big.error_code == 38  # INVALID_REPLICATION_FACTOR
    assert "larger than available brokers: 3" in too_big.error_message
    unknown = create_topic(brokers[0], "bad-asg", assignments=[[0, 7]])
    assert unknown.error_code == 39  # INVALID_REPLICA_ASSIGNMENT
    manual = create_topic(brokers[1], "manual", assignments=[[2, 0], [1, 2]])
    assert manual.error_code == 0 and manual.replication_factor == 2
    parts = wait_until(lambda: len(partitions_of(brokers[0], "manual")) == 2 and partitions_of(brokers[0], "manual"))
    assert [list(parts[i].replica_nodes) for i in range(2)] == [[2, 0], [1, 2]]
    assert [parts[i].leader_id for i in range(2)] == [2, 1]
    dup = create_topic(brokers[2], "manual", 1, 1)
    assert dup.error_code == 36  # TOPIC_ALREADY_EXISTS


def test_find_coordinator_answers_the_offsets_partition_leader(cluster):
    _, brokers = cluster
    for v in (3, 4):
        fields = {"key": "grp-1", "key_type": 0} if v < 4 else {"key_type": 0, "coordinator_keys": ["grp-1", "g2"]}

        def ready(v=v, fields=fields):
            r = call(brokers[1], ApiKey.FIND_COORDINATOR, v, **fields)
            coords = r.coordinators if v >= 4 else [r]
            return r if all(c.error_code == 0 for c in coords) else None

        r = wait_until(ready, 15, message="coordinator available")
        offsets = partitions_of(brokers[0], "__consumer_offsets")
        assert len(offsets) == 3 and all(len(p.replica_nodes) == 3 for p in offsets.values())
        from strata.broker.group import partition_for

        coords = r.coordinators if v >= 4 else [r]
        keys = ["grp-1", "g2"] if v >= 4 else ["grp-1"]
        for key, c in zip(keys, coords):
            leader = offsets[partition_for(key, 3)].leader_id
            assert c.node_id == leader and c.port == brokers[leader].port


def test_elect_leaders_and_partition_reassignment_apis(cluster):
    _, brokers = cluster
    assert create_topic(brokers[0], "moves", assignments=[[0, 1]]).error_code == 0
    wait_until(lambda: len(partitions_of(brokers[2], "moves")) == 1)
    EL = REQUEST_CLASSES[ApiKey.ELECT_LEADERS][2]
    r = call(
        brokers[2],
        ApiKey.ELECT_LEADERS,
        2,
        election_type=0,
        timeout_ms=5000,
        topic_partitions=[EL.TopicPartitions(topic="moves", partitions=[0, 5])],
    )
    assert r.error_code == 0
    res = {p.partition_id: p.error_code for t in r.replica_election_results for p in t.partition_result}
    assert res == {0: 84, 5: 3}  # ELECTION_NOT_NEEDED, UNKNOWN_TOPIC_OR_PARTITION
    r0 = call(brokers[2], ApiKey.ELECT_LEADERS, 0, timeout_ms=5000, topic_partitions=None)
    assert all(p.error_code != 84 for t in r0.replica_election_results for p in t.partition_result)
    AR = REQUEST_CLASSES[ApiKey.ALTER_PARTITION_REASSIGNMENTS][0]
    RT = AR.ReassignableTopic

    def reassign(replicas):
        return call(
            brokers[1],
            ApiKey.ALTER_PARTITION_REASSIGNMENTS,
            0,
            timeout_ms=5000,
            topics=[RT(name="moves", partitions=[RT.ReassignablePartition(partition_index=0, replicas=replicas)])],
        )

    ok = reassign([1, 2])
    assert ok.error_code == 0 and ok.responses[0].partitions[0].error_code == 0

    def listed():
        lr = call(brokers[0], ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, timeout_ms=5000, topics=None)
        return {
            (t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
            for t in lr.topics
            for p in t.partitions
        }

    # Replica 2 must join the ISR before the move completes; replication decides when. Either it is still listed
    # as in progress, or (with replication running) it completed onto [1, 2].
    state = wait_until(
        lambda: listed() or (sorted(partitions_of(brokers[0], "moves")[0].replica_nodes) == [1, 2] and "done"), 10
    )
    if state != "done":
        assert state == {("moves", 0): ([1, 2, 0], [2], [0])}
        assert reassign(None).responses[0].partitions[0].error_code in (0, 85)  # cancel (85: it just completed)
        wait_until(lambda: not listed(), 10)
    bad = reassign([1, 1])
    assert bad.responses[0].partitions[0].error_code == 39
    # KIP-860 (v1): a target of another size is refused when the replication factor may not change
    AR1 = REQUEST_CLASSES[ApiKey.ALTER_PARTITION_REASSIGNMENTS][1]
    r1 = call(
        brokers[1],
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        1,
        timeout_ms=5000,
        allow_replication_factor_change=False,
        topics=[
            AR1.ReassignableTopic(
                name="moves",
                partitions=[AR1.ReassignableTopic.ReassignablePartition(partition_index=0, replicas=[0, 1, 2])],
            )
        ],
    )
    assert r1.allow_replication_factor_change is False
    p1 = r1.responses[0].partitions[0]
    assert p1.error_code == 38 and "from 2 to 3" in p1.error_message, p1  # INVALID_REPLICATION_FACTOR


def test_controlled_shutdown_moves_leadership_before_exit(cluster):
    _, brokers = cluster
    victim = brokers[1]
    assert create_topic(brokers[0], "cs", assignments=[[1, 0, 2], [1, 2, 0]]).error_code == 0
    wait_until(lambda: [p.leader_id for p in partitions_of(brokers[0], "cs").values()] == [1, 1])
    t0 = time.monotonic()
    victim.stop()
    took = time.monotonic() - t0
    assert took < SESSION_MS / 1000 * 2 + 10
    parts = partitions_of(brokers[0], "cs")
    # Leadership had moved off before the broker was gone (no wait for a session timeout afterwards).
    assert all(p.leader_id in (0, 2) and 1 not in p.isr_nodes for p in parts.values()), parts
    assert all(1 in p.offline_replicas for p in parts.values())
    assert {b.node_id for b in metadata(brokers[0]).brokers} == {0, 2}
    assert "controlled shutdown complete" in victim.tail(200)
    victim.start()
    wait_until(lambda: {b.node_id for b in metadata(brokers[0]).brokers} == {0, 1, 2}, 15)


def test_restarted_broker_deletes_logs_of_topics_deleted_while_it_was_down(cluster):
    import uuid

    from strata.storage.log_manager import write_partition_metadata

    _, brokers = cluster
    created = create_topic(brokers[1], "gone", assignments=[[0, 1, 2]])
    assert created.error_code == 0
    b0 = brokers[0]
    b0.stop()
    wait_until(lambda: {b.node_id for b in metadata(brokers[1]).brokers} == {1, 2})
    DT = REQUEST_CLASSES[ApiKey.DELETE_TOPICS][6]
    r = call(
        brokers[1], ApiKey.DELETE_TOPICS, 6, topics=[DT.DeleteTopicState(name="gone", topic_id=None)], timeout_ms=5000
    )
    assert r.responses[0].error_code == 0
    # The replica broker 0 held (created here, as replication would have): same topic id as the deleted topic.
    data = b0.log_dir
    (data / "gone-0").mkdir(exist_ok=True)
    write_partition_metadata(data / "gone-0", created.topic_id)
    (data / "keepme-0").mkdir()
    write_partition_metadata(data / "keepme-0", uuid.uuid4())  # unknown to the metadata: kept, not served
    b0.start()
    wait_until(lambda: not (data / "gone-0").exists(), 10, message="stray log deleted")
    assert (data / "keepme-0").exists()
    assert "deleting the log of a topic deleted while this broker was down" in b0.tail(400)
    md = metadata(b0, ["keepme"])
    assert md.topics[0].error_code == 3
    wait_until(lambda: {b.node_id for b in metadata(brokers[1]).brokers} == {0, 1, 2}, 15)


def test_kill9_leader_is_replaced_after_the_session_timeout(cluster):
    _, brokers = cluster
    assert create_topic(brokers[0], "k9", assignments=[[2, 0, 1]]).error_code == 0
    wait_until(lambda: partitions_of(brokers[0], "k9")[0].leader_id == 2)
    epoch = partitions_of(brokers[0], "k9")[0].leader_epoch
    t0 = time.monotonic()
    brokers[2].kill9()
    p = wait_until(
        lambda: (q := partitions_of(brokers[0], "k9")[0]).leader_id in (0, 1) and q,
        SESSION_MS / 1000 + 10,
        message="new leader after kill -9",
    )
    assert time.monotonic() - t0 < SESSION_MS / 1000 + 8  # lease expiry + a controller pass, under load
    assert p.leader_epoch > epoch and 2 not in p.isr_nodes and p.offline_replicas == [2]
    # listed a moment longer than its lease (DEPARTED_BROKER_GRACE_S: librdkafka must see the new leader first)
    wait_until(
        lambda: {b.node_id for b in metadata(brokers[1]).brokers} == {0, 1},
        DEPARTED_BROKER_GRACE_S + 5,
        message="the killed broker gone from Metadata",
    )
