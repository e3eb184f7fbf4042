"""The "consumer" embedded protocol: member subscription and assignment blobs (ConsumerProtocolSubscription /
ConsumerProtocolAssignment). The coordinator only reads the version-0 prefix that every later version keeps
(subscription: version int16, topics [string], ...; assignment: version int16, [topic string, [partition int32]],
...), exactly as Kafka's coordinator does, so new client versions never break it. Sans-IO and shared by the group
coordinator and ``strata groups`` (which shows members' assignments), hence here and not under broker/.
"""

from __future__ import annotations

import struct

from .wire import ByteReader, WireFormatError, write_string

PROTOCOL_TYPE = "consumer"

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class ConsumerProtocolError(WireFormatError):
    """A subscription or assignment blob that does not decode."""


class _Reader(ByteReader):
    __slots__ = ()
    error = ConsumerProtocolError


def subscribed_topics(subscription: bytes) -> list[str]:
    """Topics of a subscription blob (ConsumerProtocolSubscription, any version)."""
    r = _Reader(bytes(subscription))
    r.int16()  # version
    return [r.string() for _ in range(max(r.int32(), 0))]


def assigned_partitions(assignment: bytes) -> list[tuple[str, list[int]]]:
    """(topic, partitions) pairs of an assignment blob; an empty blob is an empty assignment."""
    if len(assignment) == 0:
        return []
    r = _Reader(bytes(assignment))
    r.int16()  # version
    out = []
    for _ in range(max(r.int32(), 0)):
        topic = r.string()
        out.append((topic, [r.int32() for _ in range(max(r.int32(), 0))]))
    return out


def encode_subscription(topics: list[str], user_data: bytes | None = None, version: int = 0) -> bytes:
    """Version-0 subscription blob (tests and tools)."""
    out = bytearray(_I16.pack(version) + _I32.pack(len(topics)))
    for t in topics:
        write_string(out, t)
    return bytes(out + _user_data(user_data))


def encode_assignment(
    partitions: list[tuple[str, list[int]]], user_data: bytes | None = None, version: int = 0
) -> bytes:
    """Version-0 assignment blob (tests and tools)."""
    out = bytearray(_I16.pack(version) + _I32.pack(len(partitions)))
    for t, ps in partitions:
        write_string(out, t)
        out += _I32.pack(len(ps)) + b"".join(_I32.pack(p) for p in ps)
    return bytes(out + _user_data(user_data))


def _user_data(user_data: bytes | None) -> bytes:
    return _I32.pack(-1) if user_data is None else _I32.pack(len(user_data)) + user_data
