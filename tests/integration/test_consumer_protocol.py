"""KIP-848 consumer groups with real clients: confluent-kafka (librdkafka 2.16) with `group.protocol=consumer`, each
member its own process (tests/support/kip848_member.py), against one broker shared by the module.

* a group of 3 on a 12-partition topic gets 4 partitions each; a 4th member joins and the 3 others keep consuming
  the partitions they retain with no pause (the largest gap in each one's record stream is measured while records
  flow steadily); a member killed with SIGKILL loses its partitions to the others once its session expires; nothing
  is skipped and no record is delivered again after its offset was committed;
* a regex subscription picks up a topic created later, and a partition added to a topic reaches a member;
* a classic group (kafka-python) becomes a consumer group when it is empty and a consumer-protocol member joins, and
  a classic group again (aiokafka) after that one leaves, each continuing from the committed offsets;
* the coordinator restarts (kill -9 of the broker) under a running group: the members carry on at their epochs.
"""

from __future__ import annotations

import time
import urllib.request
from typing import Any

import pytest

from tests.support import ck
from tests.support.kafka_wire import WireClient
from tests.support.kip848_group import (
    Member,
    MemberPool,
    SteadyProducer,
    balanced,
    check_deliveries,
    describe,
    max_gap,
    redelivered_after_commit,
)
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SESSION_MS = 6000
MODULE_BROKER_OVERRIDES = {
    "group.consumer.min.session.timeout.ms": 1000,
    "group.consumer.session.timeout.ms": SESSION_MS,
    "group.consumer.min.heartbeat.interval.ms": 100,
    "group.consumer.heartbeat.interval.ms": 500,
    "offsets.topic.num.partitions": 3,
    "group.consumer.max.size": 4,
}
HB, DESCRIBE_CG, COMMIT, FETCH, FIND, LIST, DESCRIBE, DELETE = 68, 69, 8, 9, 10, 16, 15, 42
JOIN, HEARTBEAT, SYNC, REBALANCING, MEMBER_ID_REQUIRED = 11, 12, 14, 27, 79
(UNKNOWN_MEMBER, INVALID_REQUEST, NON_EMPTY, GROUP_NOT_FOUND, MAX_SIZE, FENCED_INSTANCE) = (25, 42, 68, 69, 81, 82)
FENCED_EPOCH, UNRELEASED, UNSUPPORTED_ASSIGNOR, STALE_EPOCH, BAD_REGEX = 110, 111, 112, 113, 128


@pytest.fixture
def members(tmp_path):
    pool = MemberPool(tmp_path)
    yield pool.spawn
    pool.close()


def test_group_balances_grows_without_pause_and_survives_kill9(module_broker, members):
    bs = module_broker.bootstrap
    topic, group, n = "kip848-main", "kip848-main", 12
    ck.create_topic(bs, topic, n)
    producer = SteadyProducer(bs, topic, n)
    try:
        ms = [members("consumer", bs, topic, group) for _ in range(3)]
        wait_until(lambda: balanced(ms, n), 30, message=lambda: str([m.assignment() for m in ms]))
        assert sorted(len(m.assignment()) for m in ms) == [4, 4, 4]

        # a 4th member: the others give up one partition each and never stop on the ones they keep
        before = [m.assignment() for m in ms]
        joined = int(time.time() * 1000)
        ms.append(members("consumer", bs, topic, group))
        wait_until(lambda: balanced(ms, n), 30, message=lambda: str([m.assignment() for m in ms]))
        time.sleep(1.0)  # a second of steady consumption after the rebalance, inside the measured window
        settled = int(time.time() * 1000)
        for m, had in zip(ms[:3], before):
            kept = had & m.assignment()
            assert len(kept) == 3, (m.name, had, m.assignment())
            gap = max_gap(m.snapshot()[0], kept, joined, settled)
            assert gap < SESSION_MS / 3, f"{m.name} paused {gap} ms on the partitions it kept"

        # SIGKILL: no leave; the partitions move once the broker expires the session
        victim = ms.pop(0)
        lost = victim.assignment()
        killed = time.monotonic()
        victim.kill()
        wait_until(lambda: balanced(ms, n), SESSION_MS / 1000 + 20, message=lambda: str([m.assignment() for m in ms]))
        assert time.monotonic() - killed >= SESSION_MS / 1000 * 0.8  # not before the session expired
        assert lost <= set().union(*(m.assignment() for m in ms))
    finally:
        producer.stop()
    ends = {p: ck.watermarks(bs, topic, p)[1] for p in range(n)}

    def missing() -> list[tuple[int, int]]:
        got = {(p, o) for m in [victim, *ms] for p, o, _ in m.snapshot()[0]}
        return [(p, o) for p in range(n) for o in range(ends[p]) if (p, o) not in got]

    wait_until(lambda: not missing(), 30, message=lambda: f"not consumed: {missing()[:20]} of {ends}")  # none skipped
    # nothing committed comes again
    late = redelivered_after_commit([victim, *ms])
    assert not late, f"redelivered after their commit: {late[:5]}"


def test_regex_subscription_new_topic_and_added_partition(module_broker):
    """librdkafka sends a `^`-prefixed subscription as SubscribedTopicRegex; the broker resolves it against the
    topics and bumps the group epoch when a matching topic appears or grows."""
    from confluent_kafka import ConsumerGroupType
    from confluent_kafka.admin import NewPartitions

    bs = module_broker.bootstrap
    ck.create_topic(bs, "kip848rx-a", 1)
    c = ck.consumer(bs, **{"group.id": "kip848-rx", "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["^kip848rx-.*"])
        seen: set[tuple[str, int, bytes]] = set()

        def got(*wanted: tuple[str, int, bytes]) -> bool:
            for m in c.consume(100, 0.2):
                if m.error() is None:
                    seen.add((m.topic(), m.partition(), m.value()))
            return set(wanted) <= seen

        p = ck.producer(bs)
        p.produce("kip848rx-a", b"a0", partition=0)
        p.flush(10)
        wait_until(lambda: got(("kip848rx-a", 0, b"a0")), 30, message=lambda: str(seen))
        ck.create_topic(bs, "kip848rx-b", 2)
        p.produce("kip848rx-b", b"b1", partition=1)
        p.flush(10)
        wait_until(lambda: got(("kip848rx-b", 1, b"b1")), 30, message=lambda: str(seen))
        a = ck.admin(bs)  # (the handle must outlive its future)
        a.create_partitions([NewPartitions("kip848rx-a", 2)])["kip848rx-a"].result(30)
        wait_until(lambda: ck.topic_partitions(bs, "kip848rx-a") == 2, 10)
        p = ck.producer(bs)  # (one that knows the new partition)
        p.produce("kip848rx-a", b"a1", partition=1)
        p.flush(10)
        wait_until(lambda: got(("kip848rx-a", 1, b"a1")), 30, message=lambda: str(seen))
        everything = {("kip848rx-a", 0), ("kip848rx-a", 1), ("kip848rx-b", 0), ("kip848rx-b", 1)}
        assert {(tp.topic, tp.partition) for tp in c.assignment()} == everything
        # the admin client sees it as a consumer group (ListGroups v5, ConsumerGroupDescribe)
        listed = {g.group_id: g.type for g in a.list_consumer_groups().result(10).valid}
        assert listed["kip848-rx"] == ConsumerGroupType.CONSUMER
        d = a.describe_consumer_groups(["kip848-rx"])["kip848-rx"].result(10)
        assert (d.type, d.partition_assignor, len(d.members)) == (ConsumerGroupType.CONSUMER, "uniform", 1)
        assert {(tp.topic, tp.partition) for tp in d.members[0].assignment.topic_partitions} == everything
    finally:
        c.close()


def test_transactional_offsets_of_a_consumer_group_member(module_broker):
    """send_offsets_to_transaction with a consumer-protocol member's group metadata: TxnOffsetCommit is checked
    against the member's epoch and its offsets count once the transaction commits."""
    from confluent_kafka import Producer, TopicPartition

    bs = module_broker.bootstrap
    ck.create_topic(bs, "kip848-txn", 1)
    p = ck.producer(bs)
    for i in range(5):
        p.produce("kip848-txn", str(i).encode(), partition=0)
    p.flush(10)
    c = ck.consumer(bs, **{"group.id": "kip848-txn", "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    tx = Producer({"bootstrap.servers": bs, "transactional.id": "kip848-tx", "log_level": 3})
    try:
        c.subscribe(["kip848-txn"])
        got: list[Any] = []
        wait_until(lambda: got.extend(m for m in c.consume(10, 0.2) if m.error() is None) or len(got) >= 5, 30)
        tx.init_transactions(30)
        tx.begin_transaction()
        tx.send_offsets_to_transaction([TopicPartition("kip848-txn", 0, 5)], c.consumer_group_metadata(), 30)
        tx.commit_transaction(30)
        committed = c.committed([TopicPartition("kip848-txn", 0)], timeout=10)
        assert committed[0].offset == 5
    finally:
        c.close()


def _scrape(broker: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=5).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


# -- the wire: what Kafka answers to each kind of heartbeat, and the group APIs on a consumer group ------------------
def hb(w: WireClient, group: str, member: str, epoch: int, **fields: object) -> Any:
    base: dict[str, object] = {"group_id": group, "member_id": member, "member_epoch": epoch}
    if epoch == 0:
        base.update(rebalance_timeout_ms=5000, topic_partitions=[])
    base.update(fields)
    return w.call(HB, 1, **base)


def test_heartbeat_errors_and_group_apis_on_the_wire(module_broker):
    bs = module_broker.bootstrap
    topic, group = "kip848-wire", "kip848-wire"
    ck.create_topic(bs, topic, 4)
    w = WireClient.connect(bs)
    assert w.call(FIND, 0, key=group).error_code == 0
    r = hb(w, group, "m1", 0, subscribed_topic_names=[topic])
    assert (r.error_code, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (0, "m1", 1, 500)
    assert [sorted(tp.partitions) for tp in r.assignment.topic_partitions] == [[0, 1, 2, 3]]
    epoch = r.member_epoch
    owned = [{"topic_id": r.assignment.topic_partitions[0].topic_id, "partitions": [0, 1, 2, 3]}]
    # bad input, each with Kafka's code
    assert hb(w, group, "m1", epoch + 5).error_code == FENCED_EPOCH
    assert hb(w, group, "nobody", 1).error_code == UNKNOWN_MEMBER
    assert hb(w, "no-such-group", "m9", 1).error_code == UNKNOWN_MEMBER
    bad = hb(w, group, "m2", 0, subscribed_topic_names=[topic], server_assignor="nope")
    assert bad.error_code == UNSUPPORTED_ASSIGNOR and "nope" in bad.error_message
    bad = hb(w, group, "m2", 0, subscribed_topic_regex="kip848-(")
    assert bad.error_code == BAD_REGEX and "kip848-(" in bad.error_message
    for fields in (
        {"subscribed_topic_names": [topic], "rebalance_timeout_ms": -1},
        {"subscribed_topic_names": [topic], "topic_partitions": None},
        {"subscribed_topic_names": [topic], "topic_partitions": owned},
        {},  # neither names nor a regex
    ):
        assert hb(w, group, "m2", 0, **fields).error_code == INVALID_REQUEST, fields
    assert hb(w, group, "", 0, subscribed_topic_names=[topic]).error_code == INVALID_REQUEST  # v1: client ids
    assert hb(w, group, "m1", -3).error_code == INVALID_REQUEST
    ok = hb(w, group, "m1", epoch, topic_partitions=owned)
    assert (ok.error_code, ok.member_epoch) == (0, epoch)

    # offsets: the member's epoch must be current (OffsetCommit/OffsetFetch v9)
    def commit(member: str, member_epoch: int) -> int:
        c = w.call(
            COMMIT,
            9,
            group_id=group,
            generation_id_or_member_epoch=member_epoch,
            member_id=member,
            topics=[{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 7}]}],
        )
        return int(c.topics[0].partitions[0].error_code)

    def fetch(member: str | None, member_epoch: int) -> int:
        f = w.call(
            FETCH,
            9,
            groups=[
                {
                    "group_id": group,
                    "member_id": member,
                    "member_epoch": member_epoch,
                    "topics": [{"name": topic, "partition_indexes": [0]}],
                }
            ],
            require_stable=False,
        )
        return int(f.groups[0].error_code)

    assert commit("m1", epoch + 1) == STALE_EPOCH
    assert commit("nobody", epoch) == UNKNOWN_MEMBER
    assert commit("", -1) == UNKNOWN_MEMBER  # the admin client may only commit for an empty group
    assert commit("m1", epoch) == 0
    assert fetch("m1", epoch - 1) == STALE_EPOCH
    assert fetch("nobody", epoch) == UNKNOWN_MEMBER
    assert fetch("m1", epoch) == 0 and fetch(None, -1) == 0

    # the group as the admin APIs see it
    d = w.call(DESCRIBE_CG, 1, group_ids=[group, "no-such-group"], include_authorized_operations=False)
    g, missing = d.groups
    assert (g.error_code, g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name) == (
        0,
        "Stable",
        1,
        1,
        "uniform",
    )
    [m] = g.members
    assert (m.member_id, m.member_epoch, m.member_type, m.subscribed_topic_names) == ("m1", 1, 1, [topic])
    assert [(tp.topic_id, tp.topic_name, sorted(tp.partitions)) for tp in m.assignment.topic_partitions] == [
        (owned[0]["topic_id"], topic, [0, 1, 2, 3])
    ]
    assert missing.error_code == GROUP_NOT_FOUND
    listed = w.call(LIST, 5, states_filter=[], types_filter=["consumer"]).groups
    assert (group, "consumer", "Stable", "consumer") in {
        (x.group_id, x.protocol_type, x.group_state, x.group_type) for x in listed
    }
    assert group not in {x.group_id for x in w.call(LIST, 5, states_filter=[], types_filter=["classic"]).groups}
    dg = w.call(DESCRIBE, 5, groups=[group], include_authorized_operations=False).groups[0]
    assert (dg.error_code, dg.group_state, dg.protocol_type, [x.member_id for x in dg.members]) == (
        0,
        "Stable",
        "consumer",
        ["m1"],
    )
    metrics = _scrape(module_broker)
    assert metrics[("strata_group_coordinator_groups", (("state", "Stable"), ("type", "consumer")))] >= 1
    assert metrics[("strata_group_coordinator_rebalances_total", (("protocol", "consumer"),))] >= 1
    assert w.call(DELETE, 2, groups_names=[group]).results[0].error_code == NON_EMPTY
    assert hb(w, group, "m1", -1).member_epoch == -1  # leaves
    assert w.call(DELETE, 2, groups_names=[group]).results[0].error_code == 0
    assert w.call(DESCRIBE_CG, 0, group_ids=[group], include_authorized_operations=False).groups[0].error_code == (
        GROUP_NOT_FOUND
    )
    w.close()


def test_static_membership_and_group_size_on_the_wire(module_broker):
    bs = module_broker.bootstrap
    topic = "kip848-static"
    ck.create_topic(bs, topic, 2)
    w = WireClient.connect(bs)
    assert w.call(FIND, 0, key=topic).error_code == 0
    a = hb(w, topic, "a1", 0, instance_id="i1", subscribed_topic_names=[topic])
    assert a.error_code == 0 and a.member_epoch == 1
    taken = hb(w, topic, "a2", 0, instance_id="i1", subscribed_topic_names=[topic])
    assert taken.error_code == UNRELEASED
    # epoch -2: the instance leaves for a while, keeping its slot and partitions; a new incarnation takes them over
    assert hb(w, topic, "a1", -2, instance_id="i1").member_epoch == -2
    b = hb(w, topic, "a2", 0, instance_id="i1", subscribed_topic_names=[topic])
    assert b.error_code == 0
    assert sorted(p for tp in b.assignment.topic_partitions for p in tp.partitions) == [0, 1]
    assert hb(w, topic, "a1", 1, instance_id="i1").error_code == FENCED_INSTANCE
    # group.consumer.max.size = 4
    for i in range(3):
        assert hb(w, topic, f"x{i}", 0, subscribed_topic_names=[topic]).error_code == 0
    assert hb(w, topic, "x9", 0, subscribed_topic_names=[topic]).error_code == MAX_SIZE
    v0 = w.call(HB, 0, group_id="kip848-v0", member_id="", member_epoch=0, rebalance_timeout_ms=5000,
                topic_partitions=[], subscribed_topic_names=[topic])  # fmt: skip
    assert v0.error_code == 0 and len(v0.member_id) == 22  # v0: the coordinator names the member (a Kafka Uuid)
    w.close()


def test_classic_member_in_a_consumer_group_on_the_wire(module_broker):
    """A classic JoinGroup into a consumer group: answered at once (two-step join, its member epoch as generation, no
    leader), SyncGroup hands out what the broker assigned, Heartbeat says REBALANCE_IN_PROGRESS once partitions it
    waits for are free; a classic member that joins and never syncs is fenced after its rebalance timeout."""
    from strata.protocol import consumer_protocol as cp

    bs = module_broker.bootstrap
    topic = group = "kip848-mixed"
    ck.create_topic(bs, topic, 2)
    w = WireClient.connect(bs)
    assert w.call(FIND, 0, key=group).error_code == 0
    c1 = hb(w, group, "c1", 0, subscribed_topic_names=[topic])
    owned = [{"topic_id": tp.topic_id, "partitions": list(tp.partitions)} for tp in c1.assignment.topic_partitions]
    assert sorted(owned[0]["partitions"]) == [0, 1]

    def join(member_id: str, rebalance_ms: int = 10000) -> Any:
        return w.call(
            JOIN,
            5,
            group_id=group,
            session_timeout_ms=10000,
            rebalance_timeout_ms=rebalance_ms,
            member_id=member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocols=[{"name": "range", "metadata": cp.encode_subscription([topic])}],
        )

    first = join("")
    assert first.error_code == MEMBER_ID_REQUIRED and first.member_id
    joined = join(first.member_id)
    assert (joined.error_code, joined.protocol_name, joined.leader, joined.members) == (0, "range", "", [])
    sync_fields = {"group_id": group, "member_id": first.member_id, "group_instance_id": None, "assignments": []}
    synced = w.call(SYNC, 3, generation_id=joined.generation_id, **sync_fields)
    assert (synced.error_code, cp.assigned_partitions(synced.assignment)) == (0, [])  # c1 still owns both
    # c1 learns it must give one up, and acknowledges by reporting only the other one
    c1 = hb(w, group, "c1", c1.member_epoch, topic_partitions=owned)
    kept = [{"topic_id": tp.topic_id, "partitions": list(tp.partitions)} for tp in c1.assignment.topic_partitions]
    assert len(kept[0]["partitions"]) == 1
    hb(w, group, "c1", c1.member_epoch, topic_partitions=kept)
    beat = w.call(HEARTBEAT, 3, group_id=group, generation_id=joined.generation_id, member_id=first.member_id,
                  group_instance_id=None)  # fmt: skip
    assert beat.error_code == REBALANCING  # its partition is free: rejoin to get it
    again = join(first.member_id)
    synced = w.call(SYNC, 3, generation_id=again.generation_id, **sync_fields)
    assert len(cp.assigned_partitions(synced.assignment)[0][1]) == 1
    assert w.call(HEARTBEAT, 3, group_id=group, generation_id=again.generation_id, member_id=first.member_id,
                  group_instance_id=None).error_code == 0  # fmt: skip
    # a classic member that joins and never syncs
    lazy = join(join("").member_id, rebalance_ms=500)
    assert lazy.error_code == 0
    wait_until(lambda: lazy.member_id not in {m.member_id for m in describe(bs, group).members}, 5)  # < session
    w.close()


def _group_type(bs: str, group: str) -> str | None:
    with WireClient.connect(bs) as w:
        listed = w.call(LIST, 5, states_filter=[], types_filter=[]).groups
    return next((g.group_type for g in listed if g.group_id == group), None)


def test_rolling_upgrade_and_downgrade_between_protocols(module_broker, members):
    """A classic group (kafka-python, aiokafka, confluent-kafka) is converted member by member to the consumer
    protocol (confluent-kafka) and back, while records flow: the group changes type when the first consumer-protocol
    member joins and when the last one leaves, every record is consumed, none again after its commit."""
    bs = module_broker.bootstrap
    topic, group, n = "kip848-migrate", "kip848-migrate", 4
    ck.create_topic(bs, topic, n)
    producer = SteadyProducer(bs, topic, n, interval=0.1)
    everyone: list[Member] = []

    def join(client: str) -> Member:
        everyone.append(members(client, bs, topic, group))
        return everyone[-1]

    def settle(live: list[Member], kind: str) -> None:
        wait_until(lambda: balanced(live, n), 60, message=lambda: str([m.assignment() for m in live]))
        wait_until(lambda: _group_type(bs, group) == kind, 10, message=kind)

    try:
        k1, a1, r1 = join("kafka-python"), join("aiokafka"), join("classic")
        settle([k1, a1, r1], "classic")
        c1 = join("consumer")  # online upgrade: the classic members stay, as classic members of a consumer group
        settle([k1, a1, r1, c1], "consumer")
        k1.stop()
        r1.stop()
        c2 = join("consumer")
        settle([a1, c1, c2], "consumer")
        a1.stop()
        settle([c1, c2], "consumer")
        k2, a2 = join("kafka-python"), join("aiokafka")  # and back
        settle([c1, c2, k2, a2], "consumer")
        c1.stop()
        r2 = join("classic")
        settle([c2, k2, a2, r2], "consumer")
        c2.stop()  # the last consumer-protocol member: online downgrade
        settle([k2, a2, r2], "classic")
    finally:
        producer.stop()
    check_deliveries(everyone, bs, topic, n)


def test_members_carry_on_across_a_coordinator_restart(module_broker, members):
    """kill -9 of the (single) broker: the group's records reload, so the members keep their ids and epochs and
    the group epoch does not move (a group rebuilt from scratch would count its joins again). Last in the module:
    it restarts the shared broker."""
    bs = module_broker.bootstrap
    topic, group, n = "kip848-restart", "kip848-restart", 4
    ck.create_topic(bs, topic, n)
    producer = SteadyProducer(bs, topic, n, interval=0.1)
    try:
        ms = [members("consumer", bs, topic, group) for _ in range(3)]
        wait_until(lambda: balanced(ms, n), 30, message=lambda: str([m.assignment() for m in ms]))
        everyone = list(ms)
        ms.pop().stop()  # one leaves: epoch 4 with two members, which a group rebuilt by rejoins would not reach
        wait_until(lambda: balanced(ms, n), 30, message=lambda: str([m.assignment() for m in ms]))
        stable = wait_until(lambda: (d := describe(bs, group)).group_state == "Stable" and d, 30)
        before = (stable.group_epoch, sorted((m.member_id, m.member_epoch) for m in stable.members))
        module_broker.restart(kill=True)
        t_restart = int(time.time() * 1000)
        wait_until(
            lambda: any(t > t_restart for m in ms for _, _, t in m.snapshot()[0]), 30, message="records after restart"
        )
        after = describe(bs, group)
        assert before[0] == 4
        assert (after.group_epoch, sorted((m.member_id, m.member_epoch) for m in after.members)) == before
    finally:
        producer.stop()
    check_deliveries(everyone, bs, topic, n)
