"""__consumer_offsets record formats against golden bytes written out by hand from Kafka's message schemas
(group-coordinator OffsetCommitKey/OffsetCommitValue/GroupMetadataKey/GroupMetadataValue .json), and the
group -> partition mapping against Java's String.hashCode."""

import pytest

from strata.broker.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetAndMetadata,
    OffsetCommitKey,
    RecordFormatError,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    java_string_hash,
    partition_for,
)
from strata.protocol import consumer_protocol as cp

TS = 1700000000000  # 0x0000018BCFE56800
TS_BYTES = bytes.fromhex("0000018bcfe56800")


# -- keys ---------------------------------------------------------------------------------------------------------
def test_offset_commit_key_version_1():
    raw = encode_offset_commit_key("g1", "t", 3)
    assert raw == bytes.fromhex("00010002") + b"g1" + bytes.fromhex("0001") + b"t" + bytes.fromhex("00000003")
    assert decode_key(raw) == OffsetCommitKey("g1", "t", 3)
    # key version 0 has the same layout (older brokers wrote it)
    assert decode_key(bytes.fromhex("0000") + raw[2:]) == OffsetCommitKey("g1", "t", 3)


def test_group_metadata_key_version_2():
    raw = encode_group_metadata_key("g1")
    assert raw == bytes.fromhex("00020002") + b"g1"
    assert decode_key(raw) == GroupMetadataKey("g1")


def test_keys_of_other_record_types_are_skipped():
    # version 3+ keys are KIP-848 consumer-group records: not ours, the loader ignores them
    assert decode_key(bytes.fromhex("00030002") + b"g1") is None


# -- offset commit values -------------------------------------------------------------------------------------------
def test_offset_commit_value_version_3_with_leader_epoch():
    om = OffsetAndMetadata(offset=100, leader_epoch=5, metadata="m", commit_timestamp=TS)
    raw = encode_offset_commit_value(om)
    assert raw == (bytes.fromhex("00030000000000000064000000050001") + b"m" + TS_BYTES)
    back = decode_offset_commit_value(raw)
    assert (back.offset, back.leader_epoch, back.metadata, back.commit_timestamp, back.expire_timestamp) == (
        100,
        5,
        "m",
        TS,
        -1,
    )


@pytest.mark.parametrize(
    "version,tail,expire",
    [
        (0, b"", -1),
        (1, bytes.fromhex("0000018bcfe56801"), TS + 1),  # v1 carries an expire timestamp
        (2, b"", -1),
    ],
)
def test_older_offset_commit_values_decode(version, tail, expire):
    raw = bytes([0, version]) + bytes.fromhex("000000000000002a0000") + TS_BYTES + tail
    om = decode_offset_commit_value(raw)
    assert (om.offset, om.leader_epoch, om.metadata, om.commit_timestamp, om.expire_timestamp) == (
        42,
        -1,
        "",
        TS,
        expire,
    )


def test_flexible_offset_commit_value_version_4_decodes():
    # compact string "ab" = varint(3) + bytes; then an empty tagged-field section
    raw = bytes.fromhex("00040000000000000007ffffffff03") + b"ab" + TS_BYTES + b"\x00"
    om = decode_offset_commit_value(raw)
    assert (om.offset, om.leader_epoch, om.metadata, om.commit_timestamp) == (7, -1, "ab", TS)


def test_truncated_value_is_an_error():
    with pytest.raises(RecordFormatError):
        decode_offset_commit_value(bytes.fromhex("0003000000"))


# -- group metadata values ------------------------------------------------------------------------------------------
MEMBER = MemberMetadata("m1", None, "c", "/h", 300000, 45000, b"\x00\x01", b"")
GOLDEN_V3 = (
    bytes.fromhex("00030008")
    + b"consumer"
    + bytes.fromhex("000000070005")
    + b"range"
    + bytes.fromhex("0002")
    + b"m1"
    + TS_BYTES
    + bytes.fromhex("000000010002")
    + b"m1"
    + bytes.fromhex("ffff0001")
    + b"c"
    + bytes.fromhex("0002")
    + b"/h"
    + bytes.fromhex("000493e00000afc800000002000100000000")
)


def test_group_metadata_value_version_3():
    v = GroupMetadataValue("consumer", 7, "range", "m1", TS, [MEMBER])
    assert encode_group_metadata_value(v) == GOLDEN_V3
    back = decode_group_metadata_value(GOLDEN_V3)
    assert back == v


def test_empty_group_metadata_value():
    v = GroupMetadataValue("consumer", 9, None, None, TS, [])
    raw = encode_group_metadata_value(v)
    assert raw == (
        bytes.fromhex("00030008")
        + b"consumer"
        + bytes.fromhex("00000009ffffffff")
        + TS_BYTES
        + bytes.fromhex("00000000")
    )
    assert decode_group_metadata_value(raw) == v


def test_group_metadata_value_version_0_and_static_member_v3():
    # v0: no rebalanceTimeout (falls back to the session timeout), no timestamp, no instance id
    raw0 = (
        bytes.fromhex("00000008")
        + b"consumer"
        + bytes.fromhex("000000010005")
        + b"range"
        + bytes.fromhex("0002")
        + b"m1"
        + bytes.fromhex("000000010002")
        + b"m1"
        + bytes.fromhex("0001")
        + b"c"
        + bytes.fromhex("0002")
        + b"/h"
        + bytes.fromhex("0000afc80000000000000000")
    )
    v0 = decode_group_metadata_value(raw0)
    assert v0.current_state_timestamp == -1
    assert v0.members[0] == MemberMetadata("m1", None, "c", "/h", 45000, 45000, b"", b"")
    static = MemberMetadata("i1-x", "i1", "c", "/h", 1000, 2000, b"s", b"a")
    v3 = GroupMetadataValue("consumer", 2, "range", "i1-x", TS, [static])
    assert decode_group_metadata_value(encode_group_metadata_value(v3)).members[0].group_instance_id == "i1"


def test_flexible_group_metadata_value_version_4_decodes():
    raw = (
        bytes.fromhex("000409")
        + b"consumer"
        + bytes.fromhex("0000000306")
        + b"range"
        + bytes.fromhex("03")
        + b"m1"
        + TS_BYTES
        + bytes.fromhex("02")
        + bytes.fromhex("03")
        + b"m1"
        + bytes.fromhex("0002")
        + b"c"
        + bytes.fromhex("03")
        + b"/h"
        + bytes.fromhex("000493e00000afc803")
        + b"\x00\x01"
        + bytes.fromhex("0100")
        + b"\x00"
    )
    v = decode_group_metadata_value(raw)
    assert (v.protocol_type, v.generation, v.protocol, v.leader, v.current_state_timestamp) == (
        "consumer",
        3,
        "range",
        "m1",
        TS,
    )
    assert v.members == [MEMBER]


# -- partitioning ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "s,h",
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Hello World", -862545276),
        ("polygenelubricants", -2147483648),  # Integer.MIN_VALUE: Utils.abs maps it to 0
        ("\U0001f600", 1772899),  # hashed as two UTF-16 surrogates, as Java does
    ],
)
def test_java_string_hash(s, h):
    assert java_string_hash(s) == h


def test_partition_for_matches_kafka():
    assert partition_for("Hello World", 50) == 862545276 % 50 == 26
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert all(0 <= partition_for(f"group-{i}", 7) < 7 for i in range(200))


# -- consumer protocol blobs ----------------------------------------------------------------------------------------
def test_consumer_protocol_prefix_parsing():
    sub = cp.encode_subscription(["a", "bb"], user_data=b"u", version=3)
    assert cp.subscribed_topics(sub + b"trailing fields of newer versions") == ["a", "bb"]
    asg = cp.encode_assignment([("a", [0, 2]), ("bb", [1])], version=1)
    assert cp.assigned_partitions(asg) == [("a", [0, 2]), ("bb", [1])]
    assert cp.assigned_partitions(b"") == []
    with pytest.raises(cp.ConsumerProtocolError):
        cp.subscribed_topics(b"\x00\x00\x00\x00\x00\x05\x00\x09ab")


def test_consumer_protocol_matches_kafka_python_encoding():
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

    sub = bytes(ConsumerProtocolSubscription(0, ["x", "y"], b"").encode())
    assert cp.subscribed_topics(sub) == ["x", "y"]
    assert sub == cp.encode_subscription(["x", "y"], user_data=b"")
    asg = bytes(ConsumerProtocolAssignment(0, [("x", [3, 4])], b"").encode())
    assert cp.assigned_partitions(asg) == [("x", [3, 4])]
    assert asg == cp.encode_assignment([("x", [3, 4])], user_data=b"")
