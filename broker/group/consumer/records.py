"""KIP-848 consumer group records of `__consumer_offsets`, in Apache Kafka's formats (group-coordinator's
ConsumerGroup*Key/Value.json). Keys are non-flexible (int16 version, then strings); values are flexible version 0
(compact strings and arrays, tagged fields). Key versions:

* 3 ConsumerGroupMetadata (group) -> epoch
* 4 ConsumerGroupPartitionMetadata (group) -> subscribed topics: id, name, partitions (racks left empty)
* 5 ConsumerGroupMemberMetadata (group, member) -> instance id, rack, client id/host, subscribed names, regex,
  rebalance timeout, server assignor, tag 0: the classic member's session timeout and protocols
* 6 ConsumerGroupTargetAssignmentMetadata (group) -> assignment epoch
* 7 ConsumerGroupTargetAssignmentMember (group, member) -> target partitions
* 8 ConsumerGroupCurrentMemberAssignment (group, member) -> member epoch, previous epoch, state, assigned and
  pending-revocation partitions

A null value is a tombstone. Decoding skips tagged fields it does not know (Kafka 4.1+ adds a metadata hash to the
group's epoch record).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from strata.protocol.wire import (
    ByteReader,
    WireFormatError,
    write_compact_bytes,
    write_compact_string,
    write_string,
    write_tagged_fields,
    write_uvarint,
)

from .member import Assignment, ClassicMemberMetadata, ConsumerGroupMember, MemberState

GROUP_EPOCH = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_EPOCH = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_ASSIGNMENT = 8
KEY_VERSIONS = frozenset(range(GROUP_EPOCH, CURRENT_ASSIGNMENT + 1))

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_VALUE_V0 = _I16.pack(0)

Record = tuple[bytes, bytes | None]  # a None value is a tombstone
KeyValue = tuple[bytes, bytes]


class ConsumerRecordError(WireFormatError):
    """A consumer group record that does not decode."""


@dataclass(frozen=True, slots=True)
class ConsumerGroupKey:
    """The key of a consumer group record: its version says which record; `member_id` for the per-member ones."""

    version: int
    group: str
    member_id: str | None = None


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    name: str
    partitions: int


@dataclass(frozen=True, slots=True)
class CurrentAssignment:
    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned: Assignment
    pending_revocation: Assignment


# -- keys -------------------------------------------------------------------------------------------------------------
def _key(version: int, group: str, member_id: str | None = None) -> bytes:
    out = bytearray(_I16.pack(version))
    write_string(out, group)
    if member_id is not None:
        write_string(out, member_id)
    return bytes(out)


def decode_key(key: bytes) -> ConsumerGroupKey | None:
    """The key of a consumer group record; None for any other `__consumer_offsets` record."""
    r = ByteReader(bytes(key))
    version = r.int16()
    if version not in KEY_VERSIONS:
        return None
    group = r.string()
    member = r.string() if version in (MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_ASSIGNMENT) else None
    return ConsumerGroupKey(version, group, member)


# -- values -----------------------------------------------------------------------------------------------------------
def _array_len(out: bytearray, n: int) -> None:
    write_uvarint(out, n + 1)


def _assignment(out: bytearray, a: Assignment) -> None:
    _array_len(out, len(a))
    for tid in sorted(a, key=str):
        out += tid.bytes
        parts = sorted(a[tid])
        _array_len(out, len(parts))
        for p in parts:
            out += _I32.pack(p)
        out.append(0)  # tagged fields


def _read_assignment(r: ByteReader) -> Assignment:
    out: dict[uuid.UUID, frozenset[int]] = {}
    for _ in range(max(r.compact_array_len(), 0)):
        tid = r.uuid()
        parts = frozenset(r.int32() for _ in range(max(r.compact_array_len(), 0)))
        r.skip_tagged_fields()
        if parts:
            out[tid] = parts
    return out


def group_epoch_record(group: str, epoch: int) -> KeyValue:
    return _key(GROUP_EPOCH, group), _VALUE_V0 + _I32.pack(epoch) + b"\x00"


def partition_metadata_record(group: str, topics: Mapping[str, TopicMetadata]) -> KeyValue:
    out = bytearray(_VALUE_V0)
    _array_len(out, len(topics))
    for name in sorted(topics):
        t = topics[name]
        out += t.topic_id.bytes
        write_compact_string(out, t.name)
        out += _I32.pack(t.partitions)
        _array_len(out, 0)  # PartitionMetadata: racks are not tracked
        out.append(0)
    out.append(0)
    return _key(PARTITION_METADATA, group), bytes(out)


def member_metadata_record(group: str, m: ConsumerGroupMember) -> KeyValue:
    out = bytearray(_VALUE_V0)
    write_compact_string(out, m.instance_id)
    write_compact_string(out, m.rack_id)
    write_compact_string(out, m.client_id)
    write_compact_string(out, m.client_host)
    _array_len(out, len(m.subscribed_topic_names))
    for n in m.subscribed_topic_names:
        write_compact_string(out, n)
    write_compact_string(out, m.subscribed_topic_regex)
    out += _I32.pack(m.rebalance_timeout_ms)
    write_compact_string(out, m.server_assignor)
    tags: list[tuple[int, bytes]] = []
    if m.classic is not None:
        c = bytearray(_I32.pack(m.classic.session_timeout_ms))
        _array_len(c, len(m.classic.protocols))
        for name, md in m.classic.protocols:
            write_compact_string(c, name)
            write_compact_bytes(c, md)
            c.append(0)
        c.append(0)
        tags.append((0, bytes(c)))
    write_tagged_fields(out, tags)
    return _key(MEMBER_METADATA, group, m.member_id), bytes(out)


def target_epoch_record(group: str, epoch: int) -> KeyValue:
    return _key(TARGET_ASSIGNMENT_EPOCH, group), _VALUE_V0 + _I32.pack(epoch) + b"\x00"


def target_member_record(group: str, member_id: str, a: Assignment) -> KeyValue:
    out = bytearray(_VALUE_V0)
    _assignment(out, a)
    out.append(0)
    return _key(TARGET_ASSIGNMENT_MEMBER, group, member_id), bytes(out)


def current_assignment_record(group: str, m: ConsumerGroupMember) -> KeyValue:
    out = bytearray(_VALUE_V0)
    out += _I32.pack(m.member_epoch) + _I32.pack(m.previous_member_epoch) + _I8.pack(int(m.state))
    _assignment(out, m.assigned)
    _assignment(out, m.pending_revocation)
    out.append(0)
    return _key(CURRENT_ASSIGNMENT, group, m.member_id), bytes(out)


def tombstone(version: int, group: str, member_id: str | None = None) -> Record:
    return _key(version, group, member_id), None


def member_tombstones(group: str, member_id: str) -> list[Record]:
    """Kafka's removeMember order: current assignment, target assignment, then the subscription."""
    return [
        tombstone(CURRENT_ASSIGNMENT, group, member_id),
        tombstone(TARGET_ASSIGNMENT_MEMBER, group, member_id),
        tombstone(MEMBER_METADATA, group, member_id),
    ]


def group_tombstones(group: str, member_ids: list[str]) -> list[Record]:
    """Kafka's createGroupTombstoneRecords: per-member records, then the group's own, epoch record last."""
    out = [tombstone(CURRENT_ASSIGNMENT, group, m) for m in member_ids]
    out += [tombstone(TARGET_ASSIGNMENT_MEMBER, group, m) for m in member_ids]
    out.append(tombstone(TARGET_ASSIGNMENT_EPOCH, group))
    out += [tombstone(MEMBER_METADATA, group, m) for m in member_ids]
    out.append(tombstone(PARTITION_METADATA, group))
    out.append(tombstone(GROUP_EPOCH, group))
    return out


def _value_reader(value: bytes) -> ByteReader:
    r = ByteReader(bytes(value))
    version = r.int16()
    if version != 0:
        raise ConsumerRecordError(f"unknown consumer group value version {version}")
    return r


def decode_epoch(value: bytes) -> int:
    """The value of a group epoch or target assignment epoch record."""
    return _value_reader(value).int32()


def decode_partition_metadata(value: bytes) -> dict[str, TopicMetadata]:
    r = _value_reader(value)
    out = {}
    for _ in range(max(r.compact_array_len(), 0)):
        tid = r.uuid()
        name = r.compact_string()
        n = r.int32()
        for _ in range(max(r.compact_array_len(), 0)):
            r.int32()
            for _ in range(max(r.compact_array_len(), 0)):
                r.compact_string()
            r.skip_tagged_fields()
        r.skip_tagged_fields()
        out[name] = TopicMetadata(tid, name, n)
    return out


def decode_member_metadata(member_id: str, value: bytes) -> ConsumerGroupMember:
    r = _value_reader(value)
    instance_id = r.compact_nullable_string()
    rack_id = r.compact_nullable_string()
    client_id = r.compact_string()
    client_host = r.compact_string()
    names = tuple(r.compact_string() for _ in range(max(r.compact_array_len(), 0)))
    regex = r.compact_nullable_string()
    rebalance_timeout = r.int32()
    assignor = r.compact_nullable_string()
    classic = None
    tags = r.tagged_fields()
    if 0 in tags:
        c = ByteReader(bytes(tags[0]))
        session = c.int32()
        protocols = []
        for _ in range(max(c.compact_array_len(), 0)):
            name = c.compact_string()
            md = c.compact_nullable_bytes()
            c.skip_tagged_fields()
            protocols.append((name, bytes(md or b"")))
        classic = ClassicMemberMetadata(session, protocols)
    return ConsumerGroupMember(
        member_id,
        instance_id=instance_id,
        rack_id=rack_id,
        client_id=client_id,
        client_host=client_host,
        subscribed_topic_names=names,
        subscribed_topic_regex=regex,
        rebalance_timeout_ms=rebalance_timeout,
        server_assignor=assignor,
        classic=classic,
    )


def decode_target_member(value: bytes) -> Assignment:
    return _read_assignment(_value_reader(value))


def decode_current_assignment(value: bytes) -> CurrentAssignment:
    r = _value_reader(value)
    epoch = r.int32()
    previous = r.int32()
    raw_state = r.int8()
    try:
        state = MemberState(raw_state)
    except ValueError:
        state = MemberState.UNKNOWN
    return CurrentAssignment(epoch, previous, state, _read_assignment(r), _read_assignment(r))


__all__ = [
    "KEY_VERSIONS",
    "ConsumerGroupKey",
    "ConsumerRecordError",
    "CurrentAssignment",
    "TopicMetadata",
    "current_assignment_record",
    "decode_key",
    "decode_current_assignment",
    "decode_epoch",
    "decode_member_metadata",
    "decode_partition_metadata",
    "decode_target_member",
    "group_epoch_record",
    "group_tombstones",
    "member_metadata_record",
    "member_tombstones",
    "partition_metadata_record",
    "target_epoch_record",
    "target_member_record",
]
