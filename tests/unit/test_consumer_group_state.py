"""KIP-848 consumer group state without a broker: the `__consumer_offsets` records in Kafka's byte layout (keys
non-flexible, values flexible v0), their replay into a group, and reconciliation (a partition reaches its new owner
only once the previous owner acknowledged revoking it)."""

from __future__ import annotations

import uuid

from strata.broker.group.consumer import records as r
from strata.broker.group.consumer.manager import ConsumerGroupManager, ConsumerLoad
from strata.broker.group.consumer.member import ClassicMemberMetadata, ConsumerGroupMember, MemberState
from strata.broker.group.consumer.reconcile import reconcile
from strata.broker.group.records import encode_group_metadata_key, encode_offset_commit_key

T = uuid.UUID("11111111-2222-3333-4444-555555555555")
U = uuid.UUID("99999999-8888-7777-6666-555555555555")


def test_records_are_kafkas_bytes() -> None:
    # ConsumerGroupMetadataKey v3: int16 version, string group; ConsumerGroupMetadataValue v0: epoch, no tags
    assert r.group_epoch_record("g", 7) == (b"\x00\x03\x00\x01g", b"\x00\x00\x00\x00\x00\x07\x00")
    # ConsumerGroupTargetAssignmentMemberKey v7: group, member; value: compact array of (uuid, compact [int32])
    key, value = r.target_member_record("g", "m", {T: frozenset({2, 0})})
    assert key == b"\x00\x07\x00\x01g\x00\x01m"
    assert value == b"\x00\x00" + b"\x02" + T.bytes + b"\x03" + b"\x00\x00\x00\x00\x00\x00\x00\x02" + b"\x00" + b"\x00"
    # a member's current assignment: epoch, previous epoch, state byte, assigned, pending revocation
    m = ConsumerGroupMember("m", member_epoch=5, previous_member_epoch=4, state=MemberState.UNREVOKED_PARTITIONS)
    _, v = r.current_assignment_record("g", m)
    assert v == b"\x00\x00" + b"\x00\x00\x00\x05" + b"\x00\x00\x00\x04" + b"\x01" + b"\x01" + b"\x01" + b"\x00"
    # classic keys are not consumer group keys, and back
    assert r.decode_key(encode_group_metadata_key("g")) is None
    assert r.decode_key(encode_offset_commit_key("g", "t", 0)) is None
    assert r.decode_key(key) == r.ConsumerGroupKey(r.TARGET_ASSIGNMENT_MEMBER, "g", "m")


def test_member_records_round_trip() -> None:
    m = ConsumerGroupMember(
        "m1",
        instance_id="i1",
        rack_id="r1",
        client_id="c",
        client_host="/127.0.0.1",
        subscribed_topic_names=("a", "b"),
        subscribed_topic_regex="x.*",
        rebalance_timeout_ms=3000,
        server_assignor="range",
        classic=ClassicMemberMetadata(10000, [("range", b"\x00\x01"), ("roundrobin", b"")]),
    )
    _, v = r.member_metadata_record("g", m)
    assert r.decode_member_metadata("m1", v) == m
    m2 = ConsumerGroupMember(
        "m1",
        member_epoch=3,
        previous_member_epoch=2,
        assigned={T: frozenset({1, 2})},
        pending_revocation={U: frozenset({0})},
    )
    _, v = r.current_assignment_record("g", m2)
    c = r.decode_current_assignment(v)
    assert (c.member_epoch, c.previous_member_epoch, c.state, c.assigned, c.pending_revocation) == (
        3,
        2,
        MemberState.STABLE,
        {T: frozenset({1, 2})},
        {U: frozenset({0})},
    )
    meta = {"a": r.TopicMetadata(T, "a", 4)}
    assert r.decode_partition_metadata(r.partition_metadata_record("g", meta)[1]) == meta


def test_replay_rebuilds_the_group_and_honours_tombstones() -> None:
    a = ConsumerGroupMember("a", subscribed_topic_names=("t",), member_epoch=2, assigned={T: frozenset({0})})
    b = ConsumerGroupMember(
        "b", instance_id="i", subscribed_topic_names=("t",), member_epoch=2, state=MemberState.UNRELEASED_PARTITIONS
    )
    gone = ConsumerGroupMember("gone", subscribed_topic_names=("t",))
    recs = [
        r.group_epoch_record("g", 1),
        r.member_metadata_record("g", gone),
        r.current_assignment_record("g", gone),
        r.group_epoch_record("g", 2),
        r.partition_metadata_record("g", {"t": r.TopicMetadata(T, "t", 2)}),
        r.member_metadata_record("g", a),
        r.member_metadata_record("g", b),
        r.target_member_record("g", "a", {T: frozenset({0})}),
        r.target_member_record("g", "b", {T: frozenset({1})}),
        r.target_epoch_record("g", 2),
        r.current_assignment_record("g", a),
        r.current_assignment_record("g", b),
        *r.member_tombstones("g", "gone"),
        r.group_epoch_record("deleted", 1),
        *r.group_tombstones("deleted", []),
    ]
    load = ConsumerLoad(0)
    for k, v in recs:
        key = r.decode_key(k)
        assert key is not None
        ConsumerGroupManager.replay(load, key, v)
    groups = ConsumerGroupManager.finish_load(load)
    assert set(groups) == {"g"}
    g = groups["g"]
    assert (g.group_epoch, g.assignment_epoch, set(g.members), g.static_members) == (2, 2, {"a", "b"}, {"i": "b"})
    assert g.members["a"].assigned == {T: frozenset({0})} and g.target["b"] == {T: frozenset({1})}
    assert g.partition_epoch(T, 0) == 2 and g.partition_epoch(T, 1) == -1
    assert g.state.value == "Reconciling"  # b waits for its partition
    assert g.members["b"].state == MemberState.UNRELEASED_PARTITIONS


def test_a_partition_moves_only_after_its_owner_revoked_it() -> None:
    owner = ConsumerGroupMember("a", member_epoch=1, assigned={T: frozenset({0, 1})})
    newcomer = ConsumerGroupMember("b", member_epoch=0)
    owners = {(T, 0): 1, (T, 1): 1}  # partition -> owner's epoch

    def epoch(tid: uuid.UUID, p: int) -> int:
        return owners.get((tid, p), -1)

    # epoch 2: a keeps 0 and must give up 1; b targets 1 but must wait for it
    a2 = reconcile(owner, 2, {T: frozenset({0})}, epoch, [(T, [0, 1])])
    assert (a2.state, a2.member_epoch, a2.assigned, a2.pending_revocation) == (
        MemberState.UNREVOKED_PARTITIONS,
        1,
        {T: frozenset({0})},
        {T: frozenset({1})},
    )
    b2 = reconcile(newcomer, 2, {T: frozenset({1})}, epoch, [])
    assert (b2.state, b2.member_epoch, b2.assigned) == (MemberState.UNRELEASED_PARTITIONS, 2, {})
    # a heartbeats still owning 1: nothing moves; without 1 it reaches epoch 2
    assert reconcile(a2, 2, {T: frozenset({0})}, epoch, [(T, [0, 1])]) is a2
    assert reconcile(a2, 2, {T: frozenset({0})}, epoch, None) is a2  # (not reporting counts as still owning)
    a3 = reconcile(a2, 2, {T: frozenset({0})}, epoch, [(T, [0])])
    assert (a3.state, a3.member_epoch, a3.previous_member_epoch, a3.pending_revocation) == (
        MemberState.STABLE,
        2,
        1,
        {},
    )
    del owners[(T, 1)]
    b3 = reconcile(b2, 2, {T: frozenset({1})}, epoch, [])
    assert (b3.state, b3.member_epoch, b3.assigned) == (MemberState.STABLE, 2, {T: frozenset({1})})
