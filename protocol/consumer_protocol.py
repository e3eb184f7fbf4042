"""The "consumer" embedded protocol: member subscription and assignment blobs (ConsumerProtocolSubscription /
ConsumerProtocolAssignment). The coordinator only reads the version-0 prefix that every later version keeps
(subscription: version int16, topics [string], ...; assignment: version int16, [topic string, [partition int32]],
...), exactly as Kafka's coordinator does, so new client versions never break it. Sans-IO and shared by the group
coordinator and ``strata groups`` (which shows members' assignments), hence here and not under broker/.
"""

from __future__ import annotations

import struct

PROTOCOL_TYPE = "consumer"

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class ConsumerProtocolError(ValueError):
    pass


def _read_str(buf: bytes, pos: int) -> tuple[str, int]:
    if pos + 2 > len(buf):
        raise ConsumerProtocolError("truncated string length")
    (n,) = _I16.unpack_from(buf, pos)
    pos += 2
    if n < 0 or pos + n > len(buf):
        raise ConsumerProtocolError("bad string")
    return buf[pos : pos + n].decode("utf-8"), pos + n


def _read_i32(buf: bytes, pos: int) -> tuple[int, int]:
    if pos + 4 > len(buf):
        raise ConsumerProtocolError("truncated int32")
    return _I32.unpack_from(buf, pos)[0], pos + 4


def subscribed_topics(subscription: bytes) -> list[str]:
    """Topics of a subscription blob (ConsumerProtocolSubscription, any version)."""
    buf = bytes(subscription)
    if len(buf) < 2:
        raise ConsumerProtocolError("subscription shorter than its version")
    n, pos = _read_i32(buf, 2)
    topics = []
    for _ in range(max(n, 0)):
        t, pos = _read_str(buf, pos)
        topics.append(t)
    return topics


def assigned_partitions(assignment: bytes) -> list[tuple[str, list[int]]]:
    """(topic, partitions) pairs of an assignment blob; an empty blob is an empty assignment."""
    buf = bytes(assignment)
    if len(buf) == 0:
        return []
    if len(buf) < 2:
        raise ConsumerProtocolError("assignment shorter than its version")
    n, pos = _read_i32(buf, 2)
    out = []
    for _ in range(max(n, 0)):
        t, pos = _read_str(buf, pos)
        count, pos = _read_i32(buf, pos)
        parts = []
        for _ in range(max(count, 0)):
            p, pos = _read_i32(buf, pos)
            parts.append(p)
        out.append((t, parts))
    return out


def encode_subscription(topics: list[str], user_data: bytes | None = None, version: int = 0) -> bytes:
    """Version-0 subscription blob (tests and tools)."""
    out = _I16.pack(version) + _I32.pack(len(topics))
    for t in topics:
        b = t.encode()
        out += _I16.pack(len(b)) + b
    out += _I32.pack(-1) if user_data is None else _I32.pack(len(user_data)) + user_data
    return out


def encode_assignment(
    partitions: list[tuple[str, list[int]]], user_data: bytes | None = None, version: int = 0
) -> bytes:
    """Version-0 assignment blob (tests and tools)."""
    out = _I16.pack(version) + _I32.pack(len(partitions))
    for t, ps in partitions:
        b = t.encode()
        out += _I16.pack(len(b)) + b + _I32.pack(len(ps)) + b"".join(_I32.pack(p) for p in ps)
    out += _I32.pack(-1) if user_data is None else _I32.pack(len(user_data)) + user_data
    return out
