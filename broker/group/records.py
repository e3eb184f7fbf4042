"""Records of the `__consumer_offsets` topic in Apache Kafka's formats, and group -> partition mapping.

Every record's key and value start with an int16 schema version. Formats (from Kafka's group-coordinator message
schemas; versions 0-3 are the classic encoding, version 4 of the values is the first flexible one):

* OffsetCommitKey (key version 0 or 1): group string, topic string, partition int32.
* GroupMetadataKey (key version 2): group string.
* OffsetCommitValue v0/v2: offset int64, metadata string, commitTimestamp int64; v1 adds expireTimestamp int64;
  v3 (what we write): offset int64, leaderEpoch int32, metadata string, commitTimestamp int64.
* GroupMetadataValue: protocolType string, generation int32, protocol nullable string, leader nullable string,
  currentStateTimestamp int64 (v2+), members [memberId, groupInstanceId nullable (v3+), clientId, clientHost,
  rebalanceTimeout int32 (v1+), sessionTimeout int32, subscription bytes, assignment bytes]. We write v3.

A null value is a tombstone. Key versions 3-8 are KIP-848 consumer groups' records (consumer/records.py); the
others (share and streams groups) Strata does not host: the loader skips them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from strata.protocol.wire import ByteReader, WireFormatError, write_string

# group -> partition: the coordinator runtime's (any coordinator key hashes the same way)
from ..coordinator.runtime import java_string_hash, partition_for

OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


# ---------------------------------------------------------------------------------------------------------------
# data


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1


@dataclass(slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: list[MemberMetadata] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------------------------
# encoding (classic, non-flexible versions only: that is all we write)


def _nstr(s: str | None) -> bytes:
    out = bytearray()
    write_string(out, s)
    return bytes(out)


_str = _nstr


def _bytes(b: bytes | None) -> bytes:
    return _I32.pack(-1) if b is None else _I32.pack(len(b)) + bytes(b)


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return _I16.pack(OFFSET_COMMIT_KEY_VERSION) + _str(group) + _str(topic) + _I32.pack(partition)


def encode_group_metadata_key(group: str) -> bytes:
    return _I16.pack(GROUP_METADATA_KEY_VERSION) + _str(group)


def encode_offset_commit_value(om: OffsetAndMetadata, version: int = OFFSET_COMMIT_VALUE_VERSION) -> bytes:
    out = _I16.pack(version) + _I64.pack(om.offset)
    if version >= 3:
        out += _I32.pack(om.leader_epoch)
    out += _str(om.metadata or "") + _I64.pack(om.commit_timestamp)
    if version == 1:
        out += _I64.pack(om.expire_timestamp)
    if version > 3:
        raise ValueError(f"OffsetCommitValue version {version} is not written by Strata")
    return out


def encode_group_metadata_value(v: GroupMetadataValue, version: int = GROUP_METADATA_VALUE_VERSION) -> bytes:
    if not 0 <= version <= 3:
        raise ValueError(f"GroupMetadataValue version {version} is not written by Strata")
    parts = [_I16.pack(version), _str(v.protocol_type), _I32.pack(v.generation), _nstr(v.protocol), _nstr(v.leader)]
    if version >= 2:
        parts.append(_I64.pack(v.current_state_timestamp))
    parts.append(_I32.pack(len(v.members)))
    for m in v.members:
        parts.append(_str(m.member_id))
        if version >= 3:
            parts.append(_nstr(m.group_instance_id))
        parts += [_str(m.client_id), _str(m.client_host)]
        if version >= 1:
            parts.append(_I32.pack(m.rebalance_timeout))
        parts += [_I32.pack(m.session_timeout), _bytes(m.subscription), _bytes(m.assignment)]
    return b"".join(parts)


# ---------------------------------------------------------------------------------------------------------------
# decoding (all versions Kafka has written, flexible v4 included, so a log written by Kafka loads too)


class RecordFormatError(WireFormatError):
    """A `__consumer_offsets` key or value that does not decode."""


class _Reader(ByteReader):
    """Kafka's classic encoding (int16/int32 lengths) or, with `flexible`, the compact one (uvarint
    length + 1) with tagged fields."""

    __slots__ = ("flexible",)
    error = RecordFormatError

    def __init__(self, buf: bytes, pos: int = 0, flexible: bool = False) -> None:
        super().__init__(buf, pos)
        self.flexible = flexible

    def _len(self, wide: bool) -> int:
        if self.flexible:
            return self.uvarint() - 1
        return self.int32() if wide else self.int16()

    def nstring(self) -> str | None:
        n = self._len(False)
        return None if n < 0 else self._decode(self.take(n))

    def string(self) -> str:
        s = self.nstring()
        if s is None:
            raise RecordFormatError("null in a non-nullable string")
        return s

    def nbytes(self) -> bytes | None:
        n = self._len(True)
        return None if n < 0 else bytes(self.take(n))

    def array_len(self) -> int:
        return self._len(True)

    def end_struct(self) -> None:
        """Skip the struct's tagged fields (flexible versions only have them)."""
        if self.flexible:
            self.skip_tagged_fields()


def decode_key(key: bytes) -> OffsetCommitKey | GroupMetadataKey | None:
    """The key of a `__consumer_offsets` record; None for record types a classic coordinator does not use."""
    r = _Reader(bytes(key))
    version = r.int16()
    if version in (0, 1):
        return OffsetCommitKey(r.string(), r.string(), r.int32())
    if version == 2:
        return GroupMetadataKey(r.string())
    return None


def decode_offset_commit_value(value: bytes) -> OffsetAndMetadata:
    r = _Reader(bytes(value))
    version = r.int16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown OffsetCommitValue version {version}")
    r.flexible = version >= 4
    offset = r.int64()
    epoch = r.int32() if version >= 3 else -1
    metadata = r.string()
    commit_ts = r.int64()
    expire_ts = r.int64() if version == 1 else -1
    r.end_struct()
    return OffsetAndMetadata(offset, epoch, metadata, commit_ts, expire_ts)


def decode_group_metadata_value(value: bytes) -> GroupMetadataValue:
    r = _Reader(bytes(value))
    version = r.int16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown GroupMetadataValue version {version}")
    r.flexible = version >= 4
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.nstring()
    leader = r.nstring()
    ts = r.int64() if version >= 2 else -1
    members = []
    for _ in range(max(r.array_len(), 0)):
        member_id = r.string()
        instance_id = r.nstring() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        subscription = r.nbytes() or b""
        assignment = r.nbytes() or b""
        r.end_struct()
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout
        members.append(
            MemberMetadata(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                subscription,
                assignment,
            )
        )
    r.end_struct()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, ts, members)


__all__ = [
    "OFFSETS_TOPIC",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadata",
    "OffsetAndMetadata",
    "OffsetCommitKey",
    "RecordFormatError",
    "decode_group_metadata_value",
    "decode_key",
    "decode_offset_commit_value",
    "encode_group_metadata_key",
    "encode_group_metadata_value",
    "encode_offset_commit_key",
    "encode_offset_commit_value",
    "java_string_hash",
    "partition_for",
]
