"""The ACL matrix: every API Strata serves checks what Kafka's KafkaApis (and its controller) check, with Kafka's
error codes and per-entry granularity, over real sockets.

One SASL_PLAINTEXT broker with the StandardAuthorizer and three PLAIN users: admin (a super user), alice and bob,
one connection each. ACLs (made by admin through CreateAcls):

- alice: ALL on topics and groups prefixed `alice-`; READ on topic `ro-topic`; a DENY of READ on `alice-denied`
  (inside her prefix); DESCRIBE on group `g-ro`;
- alice also holds IDEMPOTENT_WRITE on the cluster (but not DESCRIBE);
- bob: DESCRIBE on topics prefixed `bob-`; CREATE on topic `bob-made`;
- carol (a fourth user, for InitProducerId): WRITE on topic `carol-t`;
- nobody but admin: topic `secret`, groups `g-none` and `admin-g`, the cluster.

Each test asserts a denied and an allowed case of one API with the exact codes; refusals come before anything that
would say whether a topic exists (a denied unknown topic answers 29 too).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from strata.protocol.acl import AclOperation as Op
from strata.protocol.acl import AclPermissionType as Perm
from strata.protocol.acl import PatternType as PT
from strata.protocol.acl import ResourceType as RT
from tests.support.broker_proc import StrataBroker, free_port
from tests.support.kafka_wire import WireClient, build_batch
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
UNKNOWN_MEMBER_ID = 25
TOPIC_AUTH = 29
GROUP_AUTH = 30
CLUSTER_AUTH = 31
TXN_AUTH = 53
MEMBER_ID_REQUIRED = 79
ELECTION_NOT_NEEDED = 84
UNKNOWN_TOPIC_ID = 100

USERS = {"admin": "admin-pw-1", "alice": "alice-pw-2", "bob": "bob-pw-3", "carol": "carol-pw-4"}
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    + 'username="admin" password="admin-pw-1" '
    + " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
    + ";"
)
TOPICS = ["alice-rw", "ro-topic", "secret", "alice-denied", "alice-del", "alice-grow", "bob-visible"]

# API keys
PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN, HEARTBEAT, LEAVE, SYNC = 8, 9, 10, 11, 12, 13, 14
CG_HEARTBEAT, CG_DESCRIBE = 68, 69
DESCRIBE_GROUPS, LIST_GROUPS, API_VERSIONS, CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS = 15, 16, 18, 19, 20, 21
INIT_PRODUCER_ID, OFFSET_FOR_LEADER_EPOCH, CREATE_ACLS, DESCRIBE_CONFIGS, ALTER_CONFIGS = 22, 23, 30, 32, 33
DESCRIBE_LOG_DIRS, CREATE_PARTITIONS, DELETE_GROUPS, ELECT_LEADERS, INCREMENTAL_ALTER_CONFIGS = 35, 37, 42, 43, 44
ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS, OFFSET_DELETE = 45, 46, 47
DESCRIBE_SCRAM, ALTER_SCRAM, DESCRIBE_CLUSTER = 50, 51, 60
ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, WRITE_TXN_MARKERS, TXN_OFFSET_COMMIT = 24, 25, 26, 27, 28
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66
INVALID_TXN_STATE = 48
# ConfigResource types
TOPIC_RES, BROKER_RES, BROKER_LOGGER_RES, GROUP_RES = 2, 4, 8, 32


@dataclass
class Env:
    broker: StrataBroker
    sasl_port: int
    admin: WireClient
    alice: WireClient
    bob: WireClient

    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    def client_conf(self, user: str) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap(),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": USERS[user],
            "log_level": 0,
        }


def login(port: int, user: str) -> WireClient:
    c = WireClient("127.0.0.1", port, client_id=f"acl-matrix-{user}")
    c.sasl_plain(user, USERS[user])
    return c


def acl(rtype: RT, name: str, principal: str, op: Op, pattern: PT = PT.LITERAL, perm: Perm = Perm.ALLOW) -> dict:
    return {
        "resource_type": int(rtype),
        "resource_name": name,
        "resource_pattern_type": int(pattern),
        "principal": principal,
        "host": "*",
        "operation": int(op),
        "permission_type": int(perm),
    }


ACLS = [
    acl(RT.TOPIC, "alice-", "User:alice", Op.ALL, PT.PREFIXED),
    acl(RT.GROUP, "alice-", "User:alice", Op.ALL, PT.PREFIXED),
    acl(RT.TOPIC, "ro-topic", "User:alice", Op.READ),
    acl(RT.TOPIC, "alice-denied", "User:alice", Op.READ, perm=Perm.DENY),
    acl(RT.GROUP, "g-ro", "User:alice", Op.DESCRIBE),
    acl(RT.TOPIC, "bob-", "User:bob", Op.DESCRIBE, PT.PREFIXED),
    acl(RT.TOPIC, "bob-made", "User:bob", Op.CREATE),
    acl(RT.CLUSTER, "kafka-cluster", "User:alice", Op.IDEMPOTENT_WRITE),
    acl(RT.TOPIC, "carol-t", "User:carol", Op.WRITE),
    acl(RT.TRANSACTIONAL_ID, "alice-tx-ok", "User:alice", Op.WRITE),
]


def commit(c: WireClient, group: str, topic: str, partition: int = 0, offset: int = 1) -> Any:
    parts = [{"partition_index": partition, "committed_offset": offset, "committed_leader_epoch": -1}]
    return c.call(
        OFFSET_COMMIT,
        8,
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=[{"name": topic, "partitions": parts}],
    )


def commit_codes(resp: Any) -> dict[str, int]:
    return {t.name: p.error_code for t in resp.topics for p in t.partitions}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    sasl_port = free_port()
    broker = StrataBroker(tmp_path_factory.mktemp("acl-matrix"))
    broker.overrides.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
            "auto.create.topics.enable": "true",
        }
    )
    broker.start()
    clients: list[WireClient] = []
    try:
        admin, alice, bob = (login(sasl_port, u) for u in ("admin", "alice", "bob"))
        clients += [admin, alice, bob]
        T = [
            {"name": t, "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []} for t in TOPICS
        ]
        made = admin.call(CREATE_TOPICS, 7, topics=T, timeout_ms=10000, validate_only=False)
        assert [t.error_code for t in made.topics] == [0] * len(TOPICS), made
        made_acls = admin.call(CREATE_ACLS, 3, creations=ACLS)
        assert [r.error_code for r in made_acls.results] == [0] * len(ACLS), made_acls
        # the offsets topic, then offsets of groups alice may and may not see
        assert admin.call(FIND_COORDINATOR, 3, key="admin-g", key_type=0).error_code in (0, 15)
        wait_until(lambda: admin.call(FIND_COORDINATOR, 3, key="admin-g", key_type=0).error_code == 0, 30)
        for group, topic in (("admin-g", "secret"), ("alice-g", "secret"), ("alice-g", "alice-rw")):
            assert commit_codes(commit(admin, group, topic)) == {topic: NONE}
        yield Env(broker, sasl_port, admin, alice, bob)
    finally:
        for c in clients:
            c.close()
        broker.stop()


# -- the data path --------------------------------------------------------------------------------------------------
def produce(c: WireClient, topic: str) -> int:
    P = {"index": 0, "records": build_batch([(None, b"v", [])])}
    resp = c.call(
        PRODUCE, 9, transactional_id=None, acks=1, timeout_ms=5000, topic_data=[{"name": topic, "partition_data": [P]}]
    )
    return resp.responses[0].partition_responses[0].error_code


def test_produce_needs_write(env: Env) -> None:
    assert produce(env.alice, "ro-topic") == TOPIC_AUTH  # READ only
    assert produce(env.alice, "secret") == TOPIC_AUTH
    assert produce(env.alice, "no-such-topic-x") == TOPIC_AUTH  # not UNKNOWN_TOPIC_OR_PARTITION: nothing leaks
    assert produce(env.alice, "alice-rw") == NONE
    assert produce(env.alice, "alice-denied") == NONE  # the DENY is of READ only
    assert produce(env.admin, "secret") == NONE  # super user


def fetch(c: WireClient, topic: str, replica_id: int = -1) -> int:
    req = c.fetch_request(topic, 0, 0, version=12, max_wait_ms=0)
    req.replica_id = replica_id
    return c.request(req).responses[0].partitions[0].error_code


def test_fetch_needs_read_and_followers_cluster_action(env: Env) -> None:
    assert fetch(env.bob, "alice-rw") == TOPIC_AUTH
    assert fetch(env.alice, "alice-denied") == TOPIC_AUTH  # DENY over the prefixed ALLOW
    assert fetch(env.alice, "alice-rw") == NONE
    assert fetch(env.alice, "ro-topic") == NONE
    assert fetch(env.alice, "alice-rw", replica_id=1) == TOPIC_AUTH  # a follower's fetch: CLUSTER_ACTION
    assert fetch(env.admin, "alice-rw", replica_id=1) != TOPIC_AUTH


def list_offsets(c: WireClient, topic: str) -> int:
    parts = [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]
    resp = c.call(LIST_OFFSETS, 7, replica_id=-1, isolation_level=0, topics=[{"name": topic, "partitions": parts}])
    return resp.topics[0].partitions[0].error_code


def test_list_offsets_needs_describe(env: Env) -> None:
    assert list_offsets(env.bob, "alice-rw") == TOPIC_AUTH
    assert list_offsets(env.bob, "bob-absent") == UNKNOWN_TOPIC_OR_PARTITION  # DESCRIBE allowed, no such topic
    assert list_offsets(env.alice, "ro-topic") == NONE  # READ implies DESCRIBE


def epoch_end(c: WireClient, topic: str) -> int:
    parts = [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]
    resp = c.call(OFFSET_FOR_LEADER_EPOCH, 4, replica_id=-1, topics=[{"topic": topic, "partitions": parts}])
    return resp.topics[0].partitions[0].error_code


def test_offset_for_leader_epoch_needs_describe_or_cluster_action(env: Env) -> None:
    assert epoch_end(env.bob, "alice-rw") == TOPIC_AUTH
    assert epoch_end(env.alice, "alice-rw") == NONE
    assert epoch_end(env.admin, "secret") == NONE


def metadata(c: WireClient, topics: list[str] | None, auto: bool = False, version: int = 12) -> Any:
    named = None if topics is None else [{"name": t, "topic_id": None} for t in topics]
    return c.call(
        METADATA,
        version,
        topics=named,
        allow_auto_topic_creation=auto,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=True,
    )


def test_metadata_hides_what_the_principal_may_not_describe(env: Env) -> None:
    listed = {t.name for t in metadata(env.alice, None).topics}
    assert {"alice-rw", "ro-topic", "alice-denied"} <= listed
    assert "secret" not in listed and "bob-visible" not in listed
    assert {t.name for t in metadata(env.bob, None).topics} == {"bob-visible"}
    assert "secret" in {t.name for t in metadata(env.admin, None).topics}

    named = {t.name: t for t in metadata(env.alice, ["secret", "no-such-topic-y", "alice-rw"]).topics}
    assert named["secret"].error_code == TOPIC_AUTH and named["secret"].topic_id in (None, uuid.UUID(int=0))
    assert named["secret"].partitions == []
    assert named["no-such-topic-y"].error_code == TOPIC_AUTH  # an unknown topic looks the same as a hidden one
    assert named["alice-rw"].error_code == NONE and len(named["alice-rw"].partitions) == 2
    assert (
        named["alice-rw"].authorized_operations is not None and int(Op.READ) in named["alice-rw"].authorized_operations
    )
    assert named["secret"].authorized_operations is None  # not filled for a refused topic


def test_metadata_auto_creation_needs_create(env: Env) -> None:
    # bob may DESCRIBE bob-* but not create them
    got = metadata(env.bob, ["bob-auto"], auto=True).topics[0]
    assert got.error_code == TOPIC_AUTH
    assert metadata(env.bob, ["bob-auto"], auto=False).topics[0].error_code == UNKNOWN_TOPIC_OR_PARTITION
    assert metadata(env.admin, ["bob-auto"]).topics[0].error_code == UNKNOWN_TOPIC_OR_PARTITION  # not created
    # alice's prefixed ALL includes CREATE
    first = metadata(env.alice, ["alice-auto"], auto=True).topics[0]
    assert first.error_code in (NONE, 5), first  # created (LEADER_NOT_AVAILABLE while its leader starts)
    wait_until(lambda: metadata(env.alice, ["alice-auto"]).topics[0].error_code == NONE, 20)


def test_metadata_by_topic_id(env: Env) -> None:
    ids = {t.name: t.topic_id for t in metadata(env.admin, ["secret", "alice-rw"]).topics}
    resp = env.alice.call(
        METADATA,
        12,
        topics=[{"name": None, "topic_id": ids["secret"]}, {"name": None, "topic_id": ids["alice-rw"]}],
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    by_id = {t.topic_id: t for t in resp.topics}
    assert by_id[ids["secret"]].error_code == TOPIC_AUTH and by_id[ids["secret"]].name is None  # the name is secret
    assert by_id[ids["alice-rw"]].error_code == NONE and by_id[ids["alice-rw"]].name == "alice-rw"


# -- transactions ---------------------------------------------------------------------------------------------------
def test_transactional_ids_need_write(env: Env) -> None:
    """InitProducerId, AddPartitionsToTxn and a transactional Produce need WRITE on the transactional id (alice has it
    on alice-tx-ok only); AddPartitionsToTxn v4+ is for brokers (CLUSTER_ACTION); ListTransactions filters."""
    wait_until(lambda: env.alice.call(FIND_COORDINATOR, 3, key="alice-tx-ok", key_type=1).error_code == NONE, 30)
    init = env.alice.call(
        INIT_PRODUCER_ID,
        4,
        transactional_id="alice-tx-ok",
        transaction_timeout_ms=60000,
        producer_id=-1,
        producer_epoch=-1,
    )
    assert init.error_code == NONE
    pid, epoch = init.producer_id, init.producer_epoch

    def add(c: WireClient, tid: str, topic: str, version: int = 3) -> list[int]:
        fields = {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch}
        if version >= 4:
            r = c.call(
                ADD_PARTITIONS_TO_TXN,
                version,
                transactions=[{**fields, "verify_only": False, "topics": [{"name": topic, "partitions": [0]}]}],
            )
            return [r.error_code]
        r = c.call(
            ADD_PARTITIONS_TO_TXN,
            version,
            **{f"v3_and_below_{k}": v for k, v in fields.items()},
            v3_and_below_topics=[{"name": topic, "partitions": [0]}],
        )
        return [p.partition_error_code for t in r.results_by_topic_v3_and_below for p in t.results_by_partition]

    assert add(env.alice, "alice-tx", "alice-rw") == [TXN_AUTH]
    assert add(env.alice, "alice-tx-ok", "secret") == [TOPIC_AUTH]
    assert add(env.alice, "alice-tx-ok", "alice-rw", version=4) == [CLUSTER_AUTH]

    def produce_txn(tid: str) -> int:
        from strata.protocol.records import build_batch as txn_batch

        batch = txn_batch([b"v"], producer_id=pid, producer_epoch=epoch, base_sequence=0, is_transactional=True)
        r = env.alice.call(
            PRODUCE,
            9,
            transactional_id=tid,
            acks=1,
            timeout_ms=5000,
            topic_data=[{"name": "alice-rw", "partition_data": [{"index": 1, "records": batch}]}],
        )
        return r.responses[0].partition_responses[0].error_code

    assert produce_txn("alice-tx") == TXN_AUTH
    assert produce_txn("alice-tx-ok") == INVALID_TXN_STATE  # allowed, but partition 1 is not in a transaction
    listed = env.bob.call(LIST_TRANSACTIONS, 0, state_filters=[], producer_id_filters=[])
    assert listed.error_code == NONE and listed.transaction_states == []
    listed = env.admin.call(LIST_TRANSACTIONS, 0, state_filters=[], producer_id_filters=[])
    assert [t.transactional_id for t in listed.transaction_states] == ["alice-tx-ok"]  # fmt: skip


# -- groups ---------------------------------------------------------------------------------------------------------
def test_find_coordinator_needs_describe(env: Env) -> None:
    assert env.bob.call(FIND_COORDINATOR, 3, key="alice-g", key_type=0).error_code == GROUP_AUTH
    assert env.alice.call(FIND_COORDINATOR, 3, key="alice-g", key_type=0).error_code == NONE
    assert env.alice.call(FIND_COORDINATOR, 3, key="alice-txn", key_type=1).error_code == TXN_AUTH
    batched = env.alice.call(FIND_COORDINATOR, 4, key_type=0, coordinator_keys=["alice-g", "g-none"])
    assert {c.key: c.error_code for c in batched.coordinators} == {"alice-g": NONE, "g-none": GROUP_AUTH}


def join(c: WireClient, group: str) -> Any:
    return c.call(
        JOIN,
        5,
        group_id=group,
        session_timeout_ms=10000,
        rebalance_timeout_ms=10000,
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[{"name": "range", "metadata": b""}],
    )


def test_join_sync_heartbeat_leave_need_read(env: Env) -> None:
    denied = join(env.alice, "g-ro")  # DESCRIBE only
    assert (denied.error_code, denied.generation_id, denied.member_id) == (GROUP_AUTH, -1, "")
    assert join(env.alice, "alice-jg").error_code == MEMBER_ID_REQUIRED

    sync = {"generation_id": 1, "member_id": "m", "group_instance_id": None, "assignments": []}
    assert env.alice.call(SYNC, 3, group_id="g-ro", **sync).error_code == GROUP_AUTH
    assert env.alice.call(SYNC, 3, group_id="alice-jg", **sync).error_code == UNKNOWN_MEMBER_ID

    hb = {"generation_id": 1, "member_id": "m", "group_instance_id": None}
    assert env.alice.call(HEARTBEAT, 3, group_id="g-ro", **hb).error_code == GROUP_AUTH
    assert env.alice.call(HEARTBEAT, 3, group_id="alice-jg", **hb).error_code == UNKNOWN_MEMBER_ID

    members = [{"member_id": "m", "group_instance_id": None}]
    left = env.alice.call(LEAVE, 3, group_id="g-ro", members=members)
    assert (left.error_code, left.members) == (GROUP_AUTH, [])
    allowed = env.alice.call(LEAVE, 3, group_id="alice-jg", members=members)
    assert allowed.error_code != GROUP_AUTH


def test_offset_commit_needs_group_and_topic_read(env: Env) -> None:
    assert commit_codes(commit(env.alice, "g-none", "alice-rw")) == {"alice-rw": GROUP_AUTH}
    assert commit_codes(commit(env.alice, "g-ro", "alice-rw")) == {"alice-rw": GROUP_AUTH}  # DESCRIBE is not READ
    assert commit_codes(commit(env.alice, "alice-g", "secret")) == {"secret": TOPIC_AUTH}
    assert commit_codes(commit(env.alice, "alice-g", "no-such-topic-z")) == {"no-such-topic-z": TOPIC_AUTH}
    assert commit_codes(commit(env.alice, "alice-g", "alice-unknown")) == {"alice-unknown": UNKNOWN_TOPIC_OR_PARTITION}
    assert commit_codes(commit(env.alice, "alice-g", "alice-rw", offset=2)) == {"alice-rw": NONE}


def offset_fetch(c: WireClient, group: str, topics: list[str] | None) -> Any:
    asked = None if topics is None else [{"name": t, "partition_indexes": [0]} for t in topics]
    return c.call(OFFSET_FETCH, 8, groups=[{"group_id": group, "topics": asked}], require_stable=False).groups[0]


def test_offset_fetch_needs_group_and_topic_describe(env: Env) -> None:
    g = offset_fetch(env.alice, "g-none", ["alice-rw"])
    assert (g.error_code, g.topics) == (GROUP_AUTH, [])
    g = offset_fetch(env.alice, "alice-g", ["alice-rw", "secret"])
    assert g.error_code == NONE
    got = {t.name: (t.partitions[0].error_code, t.partitions[0].committed_offset) for t in g.topics}
    assert got["secret"] == (TOPIC_AUTH, -1)
    assert got["alice-rw"][0] == NONE and got["alice-rw"][1] >= 1
    # all of a group's offsets: the topics alice may not describe are left out
    everything = offset_fetch(env.alice, "alice-g", None)
    assert everything.error_code == NONE and {t.name for t in everything.topics} == {"alice-rw"}
    assert {t.name for t in offset_fetch(env.admin, "alice-g", None).topics} == {"alice-rw", "secret"}
    # v1-7: one group, the error at the top
    old = env.alice.call(OFFSET_FETCH, 5, group_id="g-none", topics=None)
    assert (old.error_code, old.topics) == (GROUP_AUTH, [])
    g_ro = env.alice.call(OFFSET_FETCH, 5, group_id="g-ro", topics=None)  # DESCRIBE on the group is enough
    assert g_ro.error_code == NONE


def offset_delete(c: WireClient, group: str, topic: str) -> Any:
    return c.call(OFFSET_DELETE, 0, group_id=group, topics=[{"name": topic, "partitions": [{"partition_index": 1}]}])


def test_offset_delete_needs_group_delete_and_topic_read(env: Env) -> None:
    denied = offset_delete(env.alice, "g-ro", "alice-rw")
    assert (denied.error_code, denied.topics) == (GROUP_AUTH, [])
    assert offset_delete(env.alice, "alice-g", "secret").topics[0].partitions[0].error_code == TOPIC_AUTH
    allowed = offset_delete(env.alice, "alice-g", "alice-rw")
    assert (allowed.error_code, allowed.topics[0].partitions[0].error_code) == (NONE, NONE)


def test_describe_groups_needs_describe(env: Env) -> None:
    resp = env.alice.call(DESCRIBE_GROUPS, 5, groups=["admin-g", "alice-g", "g-ro"], include_authorized_operations=True)
    by_id = {g.group_id: g for g in resp.groups}
    assert by_id["admin-g"].error_code == GROUP_AUTH and by_id["admin-g"].group_state == ""
    assert by_id["admin-g"].authorized_operations is None
    assert by_id["alice-g"].error_code == NONE and by_id["alice-g"].group_state == "Empty"
    assert by_id["g-ro"].error_code == NONE
    assert by_id["g-ro"].authorized_operations == {int(Op.DESCRIBE)}


def test_consumer_group_heartbeat_and_describe(env: Env) -> None:
    """KIP-848: a heartbeat needs READ on the group and DESCRIBE on the topics it names; ConsumerGroupDescribe needs
    DESCRIBE on the group, and on every topic of its members."""
    join = {"member_id": "m848", "member_epoch": 0, "rebalance_timeout_ms": 5000, "topic_partitions": []}
    hb = env.alice.call(CG_HEARTBEAT, 1, group_id="g-ro", subscribed_topic_names=["alice-rw"], **join)
    assert hb.error_code == GROUP_AUTH  # DESCRIBE is not READ
    hb = env.alice.call(CG_HEARTBEAT, 1, group_id="alice-cg", subscribed_topic_names=["secret"], **join)
    assert hb.error_code == TOPIC_AUTH
    hb = env.alice.call(CG_HEARTBEAT, 1, group_id="alice-cg", subscribed_topic_names=["alice-rw"], **join)
    assert (hb.error_code, hb.member_epoch) == (NONE, 1)
    d = env.alice.call(CG_DESCRIBE, 1, group_ids=["alice-cg", "admin-g"], include_authorized_operations=True)
    by_id = {g.group_id: g for g in d.groups}
    assert (by_id["alice-cg"].error_code, [m.member_id for m in by_id["alice-cg"].members]) == (NONE, ["m848"])
    assert int(Op.READ) in by_id["alice-cg"].authorized_operations
    assert by_id["admin-g"].error_code == GROUP_AUTH
    assert (
        env.bob.call(CG_DESCRIBE, 0, group_ids=["alice-cg"], include_authorized_operations=False).groups[0].error_code
        == GROUP_AUTH
    )
    left = env.alice.call(CG_HEARTBEAT, 1, group_id="alice-cg", member_id="m848", member_epoch=-1)
    assert left.error_code == NONE


def test_list_groups_filters_without_cluster_describe(env: Env) -> None:
    mine = {g.group_id for g in env.alice.call(LIST_GROUPS, 4, states_filter=[]).groups}
    assert "alice-g" in mine and "admin-g" not in mine
    assert {g.group_id for g in env.bob.call(LIST_GROUPS, 4, states_filter=[]).groups} == set()
    assert {"alice-g", "admin-g"} <= {g.group_id for g in env.admin.call(LIST_GROUPS, 4, states_filter=[]).groups}


def test_delete_groups_needs_delete(env: Env) -> None:
    assert commit_codes(commit(env.admin, "alice-gdel", "alice-rw")) == {"alice-rw": NONE}
    resp = env.alice.call(DELETE_GROUPS, 2, groups_names=["admin-g", "g-ro", "alice-gdel"])
    assert {r.group_id: r.error_code for r in resp.results} == {
        "admin-g": GROUP_AUTH,
        "g-ro": GROUP_AUTH,
        "alice-gdel": NONE,
    }


# -- topic admin ----------------------------------------------------------------------------------------------------
def create(c: WireClient, name: str, version: int = 7) -> Any:
    t = {"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
    return c.call(CREATE_TOPICS, version, topics=[t], timeout_ms=10000, validate_only=False).topics[0]


def test_create_topics_needs_create_and_describe_configs_for_configs(env: Env) -> None:
    denied = create(env.bob, "bob-other")  # DESCRIBE only
    assert (denied.error_code, denied.error_message) == (TOPIC_AUTH, "Authorization failed.")
    assert create(env.bob, "secret").error_code == TOPIC_AUTH  # exists, but bob may not know it
    made = create(env.bob, "bob-made")  # CREATE, not DESCRIBE_CONFIGS: created, configs withheld
    assert (made.error_code, made.topic_config_error_code, made.num_partitions) == (NONE, TOPIC_AUTH, -1)
    assert made.configs in (None, [])
    mine = create(env.alice, "alice-created")
    assert (mine.error_code, mine.topic_config_error_code, mine.num_partitions) == (NONE, NONE, 1)
    assert any(c.name == "retention.ms" for c in mine.configs)


def delete(c: WireClient, name: str | None = None, topic_id: uuid.UUID | None = None) -> Any:
    resp = c.call(DELETE_TOPICS, 6, topics=[{"name": name, "topic_id": topic_id}], timeout_ms=10000)
    return resp.responses[0]


def test_delete_topics_needs_delete(env: Env) -> None:
    assert delete(env.bob, "alice-del").error_code == TOPIC_AUTH
    assert delete(env.bob, "bob-gone").error_code == UNKNOWN_TOPIC_OR_PARTITION  # DESCRIBE: may learn it is absent
    assert delete(env.bob, "bob-visible").error_code == TOPIC_AUTH  # DESCRIBE is not DELETE
    ids = {t.name: t.topic_id for t in metadata(env.admin, ["alice-del", "bob-visible"]).topics}
    by_id = delete(env.bob, topic_id=ids["alice-del"])
    assert (by_id.error_code, by_id.name, by_id.topic_id) == (TOPIC_AUTH, None, ids["alice-del"])  # no name leaks
    by_id = delete(env.bob, topic_id=ids["bob-visible"])
    assert (by_id.error_code, by_id.name) == (TOPIC_AUTH, "bob-visible")  # bob may see this one's name
    assert delete(env.alice, "alice-del").error_code == NONE


def test_create_partitions_needs_alter(env: Env) -> None:
    def grow(c: WireClient, topic: str) -> int:
        t = {"name": topic, "count": 3, "assignments": None}
        return c.call(CREATE_PARTITIONS, 3, topics=[t], timeout_ms=10000, validate_only=False).results[0].error_code

    assert grow(env.bob, "alice-grow") == TOPIC_AUTH
    assert grow(env.alice, "ro-topic") == TOPIC_AUTH
    assert grow(env.alice, "alice-grow") == NONE


def test_delete_records_needs_delete(env: Env) -> None:
    def delete_records(c: WireClient, topic: str) -> int:
        t = {"name": topic, "partitions": [{"partition_index": 0, "offset": -1}]}
        return c.call(DELETE_RECORDS, 2, topics=[t], timeout_ms=10000).topics[0].partitions[0].error_code

    assert delete_records(env.alice, "ro-topic") == TOPIC_AUTH
    assert delete_records(env.bob, "bob-absent") == TOPIC_AUTH
    assert delete_records(env.alice, "alice-rw") == NONE


# -- configs --------------------------------------------------------------------------------------------------------
def describe_config(c: WireClient, rtype: int, name: str) -> Any:
    res = [{"resource_type": rtype, "resource_name": name, "configuration_keys": None}]
    return c.call(DESCRIBE_CONFIGS, 4, resources=res, include_synonyms=False, include_documentation=False).results[0]


def test_describe_configs_per_resource_type(env: Env) -> None:
    denied = describe_config(env.bob, TOPIC_RES, "alice-rw")
    assert (denied.error_code, denied.error_message, denied.configs) == (TOPIC_AUTH, "Topic authorization failed.", [])
    assert describe_config(env.alice, TOPIC_RES, "alice-rw").error_code == NONE
    assert describe_config(env.alice, BROKER_RES, "0").error_code == CLUSTER_AUTH
    assert describe_config(env.alice, BROKER_LOGGER_RES, "0").error_code == CLUSTER_AUTH
    assert describe_config(env.admin, BROKER_RES, "0").error_code == NONE
    assert describe_config(env.alice, GROUP_RES, "g-none").error_code == GROUP_AUTH
    assert describe_config(env.alice, GROUP_RES, "alice-g").error_code == NONE


def test_alter_configs_per_resource_type(env: Env) -> None:
    def incremental(c: WireClient, rtype: int, name: str, key: str, value: str) -> int:
        res = [
            {
                "resource_type": rtype,
                "resource_name": name,
                "configs": [{"name": key, "config_operation": 0, "value": value}],
            }
        ]
        return c.call(INCREMENTAL_ALTER_CONFIGS, 1, resources=res, validate_only=True).responses[0].error_code

    def legacy(c: WireClient, rtype: int, name: str, key: str, value: str) -> int:
        res = [{"resource_type": rtype, "resource_name": name, "configs": [{"name": key, "value": value}]}]
        return c.call(ALTER_CONFIGS, 2, resources=res, validate_only=True).responses[0].error_code

    for alter in (incremental, legacy):
        assert alter(env.bob, TOPIC_RES, "alice-rw", "retention.ms", "1000") == TOPIC_AUTH
        assert alter(env.alice, TOPIC_RES, "alice-rw", "retention.ms", "1000") == NONE
        assert alter(env.alice, BROKER_RES, "", "log.cleaner.threads", "2") == CLUSTER_AUTH
        assert alter(env.alice, GROUP_RES, "g-none", "consumer.session.timeout.ms", "45000") == GROUP_AUTH
    assert incremental(env.alice, BROKER_LOGGER_RES, "0", "strata", "DEBUG") == CLUSTER_AUTH
    assert incremental(env.admin, BROKER_LOGGER_RES, "0", "strata", "INFO") == NONE


# -- cluster --------------------------------------------------------------------------------------------------------
def test_describe_log_dirs_needs_cluster_describe(env: Env) -> None:
    denied = env.alice.call(DESCRIBE_LOG_DIRS, 4, topics=None)
    assert (denied.error_code, denied.results) == (CLUSTER_AUTH, [])
    allowed = env.admin.call(DESCRIBE_LOG_DIRS, 4, topics=None)
    assert allowed.error_code == NONE and allowed.results


def test_elect_leaders_and_reassignments_need_cluster_alter(env: Env) -> None:
    tp = [{"topic": "alice-rw", "partitions": [0]}]
    denied = env.alice.call(ELECT_LEADERS, 2, election_type=0, topic_partitions=tp, timeout_ms=10000)
    assert denied.error_code == CLUSTER_AUTH
    assert [p.error_code for t in denied.replica_election_results for p in t.partition_result] == [CLUSTER_AUTH]
    allowed = env.admin.call(ELECT_LEADERS, 2, election_type=0, topic_partitions=tp, timeout_ms=10000)
    assert [p.error_code for t in allowed.replica_election_results for p in t.partition_result] == [ELECTION_NOT_NEEDED]

    move = [{"name": "alice-rw", "partitions": [{"partition_index": 0, "replicas": None}]}]
    denied = env.alice.call(ALTER_REASSIGNMENTS, 0, timeout_ms=10000, topics=move)
    assert denied.error_code == CLUSTER_AUTH and denied.responses[0].partitions[0].error_code == CLUSTER_AUTH
    assert env.admin.call(ALTER_REASSIGNMENTS, 0, timeout_ms=10000, topics=[]).error_code == NONE

    asked = [{"name": "alice-rw", "partition_indexes": [0]}]
    assert env.alice.call(LIST_REASSIGNMENTS, 0, timeout_ms=10000, topics=asked).error_code == CLUSTER_AUTH
    assert env.admin.call(LIST_REASSIGNMENTS, 0, timeout_ms=10000, topics=None).error_code == NONE


def test_describe_cluster_operations(env: Env) -> None:
    mine = env.alice.call(DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=True, endpoint_type=1)
    # IDEMPOTENT_WRITE but no DESCRIBE on the cluster: Kafka answers no operation at all
    assert (mine.error_code, mine.authorized_operations) == (NONE, set())
    admin = env.admin.call(DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=True, endpoint_type=1)
    assert admin.authorized_operations is not None and int(Op.ALTER) in admin.authorized_operations


def test_init_producer_id_needs_idempotent_write_or_some_topic_write(env: Env) -> None:
    def init(c: WireClient) -> int:
        return c.call(
            INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout_ms=-1, producer_id=-1, producer_epoch=-1
        ).error_code

    assert init(env.bob) == CLUSTER_AUTH  # bob may write nowhere
    assert init(env.alice) == NONE  # IDEMPOTENT_WRITE on the cluster
    with login(env.sasl_port, "carol") as carol:
        assert init(carol) == NONE  # WRITE on some topic (KIP-679)
    assert init(env.admin) == NONE


def test_scram_admin_needs_cluster_describe_and_alter(env: Env) -> None:
    denied = env.alice.call(DESCRIBE_SCRAM, 0, users=None)
    assert denied.error_code == CLUSTER_AUTH
    assert env.admin.call(DESCRIBE_SCRAM, 0, users=None).error_code == NONE
    up = [{"name": "carol", "mechanism": 1, "iterations": 4096, "salt": b"s" * 16, "salted_password": b"p" * 32}]
    refused = env.alice.call(ALTER_SCRAM, 0, deletions=[], upsertions=up)
    assert [r.error_code for r in refused.results] == [CLUSTER_AUTH]


def test_api_versions_needs_nothing(env: Env) -> None:
    assert env.bob.call(API_VERSIONS, 3, client_software_name="t", client_software_version="1").error_code == NONE


def test_denials_are_counted(env: Env) -> None:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{env.broker.metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    assert 'strata_authorizer_denials_total{listener="SASL_PLAINTEXT",operation="WRITE",resource_type="TOPIC"}' in text


# -- what stock clients show ----------------------------------------------------------------------------------------
def test_confluent_producer_sees_topic_authorization_failed(env: Env) -> None:
    errors: list[KafkaError | None] = []
    p = Producer({**env.client_conf("alice"), "enable.idempotence": True, "message.timeout.ms": 10000})
    p.produce("ro-topic", b"x", on_delivery=lambda err, _m: errors.append(err))
    p.flush(20)
    assert len(errors) == 1 and errors[0] is not None, errors
    assert errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, errors
    ok: list[KafkaError | None] = []
    p.produce("alice-rw", b"x", on_delivery=lambda err, _m: ok.append(err))
    p.flush(20)
    assert ok == [None]


def _consumer_error(conf: dict[str, Any], topic: str, timeout_s: float = 20.0) -> KafkaError | None:
    c = Consumer({**conf, "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
    c.subscribe([topic])
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            err = m.error()
            if err is None:
                return None
            if err.code() != KafkaError._PARTITION_EOF:
                return err
    finally:
        c.close()
    return None


def test_confluent_consumer_sees_group_and_topic_authorization_failed(env: Env) -> None:
    group_err = _consumer_error({**env.client_conf("alice"), "group.id": "g-ro"}, "alice-rw")
    assert group_err is not None and group_err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, group_err
    topic_err = _consumer_error({**env.client_conf("alice"), "group.id": "alice-cg"}, "alice-denied")
    assert topic_err is not None and topic_err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, topic_err


def test_kafka_python_producer_sees_topic_authorization_failed(env: Env) -> None:
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    prod = KafkaProducer(
        bootstrap_servers=env.bootstrap(),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="alice",
        sasl_plain_password=USERS["alice"],
        max_block_ms=10000,
    )
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            prod.send("secret", b"x").get(timeout=10)
        assert prod.send("alice-rw", b"x").get(timeout=10).topic == "alice-rw"
    finally:
        prod.close(timeout=5)


# -- every version's refusal ----------------------------------------------------------------------------------------
def _error_codes(obj: Any) -> list[int]:
    """Every error code in a decoded response, at any depth."""
    out: list[int] = []
    for name, f in obj._struct.fields.items():
        value = getattr(obj, name, None)
        if name == "error_code" and value is not None:
            out.append(value)
        elif value is not None and f.is_struct_array():
            for item in value:
                out += _error_codes(item)
        elif value is not None and f.is_struct():
            out += _error_codes(value)
    return out


def _refusals(ids: dict[str, uuid.UUID]) -> list[tuple[int, str, int | None, dict[str, Any]]]:
    """(api key, who asks, the code every version must answer (None: the version has no field for it), fields)."""
    part = {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1}
    part |= {"log_start_offset": -1, "partition_max_bytes": 1024}
    offs = {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1, "committed_metadata": ""}
    alter = {"resource_type": TOPIC_RES, "resource_name": "alice-rw"}
    txn = {"transactional_id": "alice-tx", "producer_id": 1, "producer_epoch": 0}
    return [
        (PRODUCE, "alice", TOPIC_AUTH, {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
            {"name": "secret", "topic_id": ids["secret"],
             "partition_data": [{"index": 0, "records": build_batch([(None, b"v", [])])}]}]}),
        (FETCH, "bob", TOPIC_AUTH, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": "alice-rw", "topic_id": ids["alice-rw"], "partitions": [part]}]}),
        (LIST_OFFSETS, "bob", TOPIC_AUTH, {"replica_id": -1, "isolation_level": 0, "timeout_ms": 1000, "topics": [
            {"name": "alice-rw", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1,
                                                  "max_num_offsets": 1}]}]}),
        (METADATA, "bob", TOPIC_AUTH, {"topics": [{"name": "secret", "topic_id": None}],
            "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False}),
        (OFFSET_COMMIT, "alice", GROUP_AUTH, {"group_id": "g-none", "generation_id_or_member_epoch": -1,
            "member_id": "", "group_instance_id": None, "retention_time_ms": -1,
            "topics": [{"name": "alice-rw", "topic_id": ids["alice-rw"], "partitions": [offs]}]}),
        (OFFSET_FETCH, "alice", GROUP_AUTH, {"group_id": "g-none", "require_stable": False,
            "topics": [{"name": "alice-rw", "partition_indexes": [0]}],
            "groups": [{"group_id": "g-none", "member_id": None, "member_epoch": -1,
                        "topics": [{"name": "alice-rw", "topic_id": ids["alice-rw"], "partition_indexes": [0]}]}]}),
        (OFFSET_DELETE, "alice", GROUP_AUTH, {"group_id": "g-ro", "topics": [
            {"name": "alice-rw", "partitions": [{"partition_index": 0}]}]}),
        (FIND_COORDINATOR, "bob", GROUP_AUTH, {"key": "alice-g", "key_type": 0, "coordinator_keys": ["alice-g"]}),
        (JOIN, "alice", GROUP_AUTH, {"group_id": "g-ro", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
            "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}], "reason": None}),
        (HEARTBEAT, "alice", GROUP_AUTH, {"group_id": "g-ro", "generation_id": 1, "member_id": "m",
            "group_instance_id": None}),
        (LEAVE, "alice", GROUP_AUTH, {"group_id": "g-ro", "member_id": "m",
            "members": [{"member_id": "m", "group_instance_id": None, "reason": None}]}),
        (SYNC, "alice", GROUP_AUTH, {"group_id": "g-ro", "generation_id": 1, "member_id": "m",
            "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range", "assignments": []}),
        (DESCRIBE_GROUPS, "alice", GROUP_AUTH, {"groups": ["admin-g"], "include_authorized_operations": True}),
        (DELETE_GROUPS, "alice", GROUP_AUTH, {"groups_names": ["admin-g"]}),
        (CG_HEARTBEAT, "alice", GROUP_AUTH, {"group_id": "g-ro", "member_id": "m", "member_epoch": 0,
            "rebalance_timeout_ms": 5000, "subscribed_topic_names": ["alice-rw"], "topic_partitions": []}),
        (CG_DESCRIBE, "alice", GROUP_AUTH, {"group_ids": ["admin-g"], "include_authorized_operations": True}),
        (CREATE_TOPICS, "bob", TOPIC_AUTH, {"timeout_ms": 10000, "validate_only": True, "topics": [
            {"name": "bob-other", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}]}),
        (DELETE_TOPICS, "bob", TOPIC_AUTH, {"timeout_ms": 10000, "topic_names": ["alice-rw"],
            "topics": [{"name": "alice-rw", "topic_id": None}]}),
        (DELETE_RECORDS, "alice", TOPIC_AUTH, {"timeout_ms": 10000, "topics": [
            {"name": "ro-topic", "partitions": [{"partition_index": 0, "offset": -1}]}]}),
        (INIT_PRODUCER_ID, "bob", CLUSTER_AUTH, {"transactional_id": None, "transaction_timeout_ms": -1,
            "producer_id": -1, "producer_epoch": -1}),
        (OFFSET_FOR_LEADER_EPOCH, "bob", TOPIC_AUTH, {"replica_id": -1, "topics": [
            {"topic": "alice-rw", "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}),
        (DESCRIBE_CONFIGS, "bob", TOPIC_AUTH, {"resources": [{**alter, "configuration_keys": None}],
            "include_synonyms": False, "include_documentation": False}),
        (ALTER_CONFIGS, "bob", TOPIC_AUTH, {"validate_only": True, "resources": [
            {**alter, "configs": [{"name": "retention.ms", "value": "1000"}]}]}),
        (INCREMENTAL_ALTER_CONFIGS, "bob", TOPIC_AUTH, {"validate_only": True, "resources": [
            {**alter, "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1000"}]}]}),
        (DESCRIBE_LOG_DIRS, "alice", CLUSTER_AUTH, {"topics": None}),
        (CREATE_PARTITIONS, "bob", TOPIC_AUTH, {"timeout_ms": 10000, "validate_only": True, "topics": [
            {"name": "alice-grow", "count": 9, "assignments": None}]}),
        (ELECT_LEADERS, "alice", CLUSTER_AUTH, {"election_type": 0, "timeout_ms": 10000,
            "topic_partitions": [{"topic": "alice-rw", "partitions": [0]}]}),
        (ALTER_REASSIGNMENTS, "alice", CLUSTER_AUTH, {"timeout_ms": 10000, "allow_replication_factor_change": True,
            "topics": [{"name": "alice-rw", "partitions": [{"partition_index": 0, "replicas": None}]}]}),
        (LIST_REASSIGNMENTS, "alice", CLUSTER_AUTH, {"timeout_ms": 10000, "topics": None}),
        (DESCRIBE_SCRAM, "alice", CLUSTER_AUTH, {"users": None}),
        (ALTER_SCRAM, "alice", CLUSTER_AUTH, {"deletions": [{"name": "carol", "mechanism": 1}], "upsertions": []}),
        (INIT_PRODUCER_ID, "alice", TXN_AUTH, {"transactional_id": "alice-tx", "transaction_timeout_ms": 60000,
            "producer_id": -1, "producer_epoch": -1}),
        (ADD_OFFSETS_TO_TXN, "alice", TXN_AUTH, {**txn, "group_id": "alice-g"}),
        (END_TXN, "alice", TXN_AUTH, {**txn, "committed": True}),
        (TXN_OFFSET_COMMIT, "alice", TXN_AUTH, {**txn, "group_id": "alice-g", "generation_id": -1, "member_id": "",
            "group_instance_id": None, "topics": [{"name": "alice-rw", "partitions": [offs]}]}),
        (WRITE_TXN_MARKERS, "alice", CLUSTER_AUTH, {"markers": [{"producer_id": 1, "producer_epoch": 0,
            "transaction_result": True, "coordinator_epoch": 0,
            "topics": [{"name": "alice-rw", "partition_indexes": [0]}]}]}),
        (DESCRIBE_TRANSACTIONS, "alice", TXN_AUTH, {"transactional_ids": ["alice-tx"]}),
        (DESCRIBE_PRODUCERS, "bob", TOPIC_AUTH, {"topics": [{"name": "alice-rw", "partition_indexes": [0]}]}),
    ]  # fmt: skip


def test_every_version_answers_its_refusal(env: Env) -> None:
    """Each advertised version of each API encodes the refusal (old versions without a top-level error code carry it
    on their entries; DescribeLogDirs v1-2 has no field for it and answers no log dir)."""
    from strata.protocol.registry import SUPPORTED_VERSIONS

    ids = {t.name: t.topic_id for t in metadata(env.admin, ["secret", "alice-rw"]).topics}
    who = {"alice": env.alice, "bob": env.bob}
    checked = 0
    for api_key, user, code, fields in _refusals(ids):
        lo, hi = SUPPORTED_VERSIONS[api_key]
        for v in range(lo, hi + 1):
            if api_key == PRODUCE and v < 3:
                continue  # magic v0/v1 message sets: refused as UNSUPPORTED_VERSION before anything else
            resp = who[user].call(api_key, v, **fields)
            codes = _error_codes(resp)
            if api_key == DESCRIBE_LOG_DIRS and v < 3:
                assert resp.results == [], (api_key, v, resp)
            else:
                assert code in codes, (api_key, v, codes, resp)
            assert not set(codes) - {code, NONE}, (api_key, v, codes)
            checked += 1
    assert checked > 150
