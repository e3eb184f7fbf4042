"""Produce request decode and response encode by hand, for every version the broker answers with data (v3-v13).

Why: with small batches (linger.ms=1 over 1,000 partitions) a Produce request carries hundreds of partitions of one
small batch each, and kafka-python's generic codec built a struct object per partition twice (request and response),
copied each partition's records out of the frame, then walked the frame again to point the records back into it
(`produce_records.use_request_buffer`). That was about a third of the broker's CPU per partition
(py-spy, bench/scale_bench.py's produce row). Here one pass over the frame yields writable views of the records in
place, and the response is packed straight from the append results.

Exactness: the decoder takes the canonical layout only. Anything else (a null or negative count, a null topic name,
a non-empty tagged-field section, bytes after the body, invalid UTF-8, a version below 3) returns None and the
request goes through the generic codec, which answers it as before. tests/unit/test_produce_codec.py compares both
codecs on the same bytes, for every version. Sans-IO.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import Any

from .wire import read_uvarint

__all__ = [
    "PartitionAnswer",
    "ProduceAnswer",
    "ProducePartitionData",
    "ProduceRequestData",
    "ProduceTopicData",
    "decode_produce_request",
]

FIRST_FAST = 3  # Produce v0-v2 (magic v0/v1 message sets) are answered UNSUPPORTED_VERSION by the generic codec
FLEXIBLE = 9  # v9+: compact strings and arrays, tagged fields, request header v2 / response header v1
TOPIC_IDS = 13  # v13+: topics by id

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_PART_V8 = struct.Struct(">ihqqq")  # index, error code, base offset, log append time, log start offset
_PART_V2 = struct.Struct(">ihqq")
_PART_V0 = struct.Struct(">ihq")
_LEADER = struct.Struct(">BBBiiB")  # one tagged field: tag 0, size 9, leader id, leader epoch, no tagged fields


class ProducePartitionData:
    """One partition of a request: `records` is a view into the request's frame (writable), or None."""

    __slots__ = ("index", "records")

    def __init__(self, index: int, records: memoryview | None) -> None:
        self.index = index
        self.records = records


class ProduceTopicData:
    __slots__ = ("name", "partition_data", "topic_id")

    def __init__(self, name: str | None, topic_id: uuid.UUID | None, partition_data: list[ProducePartitionData]):
        self.name = name
        self.topic_id = topic_id
        self.partition_data = partition_data


class ProduceRequestData:
    """A decoded Produce request, with the attribute names of kafka-python's ProduceRequest."""

    __slots__ = ("acks", "timeout_ms", "topic_data", "transactional_id")

    def __init__(
        self, transactional_id: str | None, acks: int, timeout_ms: int, topic_data: list[ProduceTopicData]
    ) -> None:
        self.transactional_id = transactional_id
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.topic_data = topic_data


class _NotCanonical(Exception):
    pass


def _uvarint(buf: Any, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    return read_uvarint(buf, pos)


def _compact_len(buf: Any, pos: int) -> tuple[int, int]:
    """A compact array count or string length that must not be null (0)."""
    n, pos = _uvarint(buf, pos)
    if n == 0:
        raise _NotCanonical
    return n - 1, pos


def _count(buf: Any, pos: int, flexible: bool) -> tuple[int, int]:
    """An array's count, which must not be null (or negative)."""
    if flexible:
        return _compact_len(buf, pos)
    (n,) = _I32.unpack_from(buf, pos)
    if n < 0:
        raise _NotCanonical
    return n, pos + 4


def _no_tags(buf: Any, pos: int) -> int:
    if buf[pos] != 0:
        raise _NotCanonical  # unknown tagged fields: the generic codec keeps them
    return pos + 1


def decode_produce_request(
    payload: bytes | bytearray | memoryview, body_start: int, version: int
) -> ProduceRequestData | None:
    """The body of a Produce request (`payload` from the api key on; the body at `body_start`), or None where the
    generic codec must decide. A `bytes` payload is copied once into a bytearray, so every partition's records are
    writable views (the append stamps offsets and the leader epoch into the batch headers in place)."""
    if version < FIRST_FAST:
        return None
    buf = payload if isinstance(payload, bytearray) else bytearray(payload)
    mv = memoryview(buf)
    try:
        req = _decode(buf, mv, body_start, version)
    except (_NotCanonical, IndexError, struct.error, UnicodeDecodeError, ValueError):
        return None
    return req


def _decode(buf: bytearray, mv: memoryview, pos: int, version: int) -> ProduceRequestData:
    end = len(buf)
    flexible = version >= FLEXIBLE
    by_id = version >= TOPIC_IDS
    tid: str | None = None
    if flexible:
        n, pos = _uvarint(buf, pos)
        if n:
            tid = bytes(mv[pos : pos + n - 1]).decode()
            pos += n - 1
    else:
        (n,) = _I16.unpack_from(buf, pos)
        pos += 2
        if n >= 0:
            tid = bytes(mv[pos : pos + n]).decode()
            pos += n
        elif n != -1:
            raise _NotCanonical
    if pos > end:
        raise _NotCanonical
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(buf, pos)
    pos += 6
    n_topics, pos = _count(buf, pos, flexible)
    topics: list[ProduceTopicData] = []
    for _ in range(n_topics):
        name: str | None = None
        topic_id: uuid.UUID | None = None
        if by_id:
            if pos + 16 > end:
                raise _NotCanonical
            topic_id = uuid.UUID(bytes=bytes(mv[pos : pos + 16]))
            pos += 16
        elif flexible:
            n, pos = _compact_len(buf, pos)
            name = bytes(mv[pos : pos + n]).decode()
            pos += n
        else:
            (n,) = _I16.unpack_from(buf, pos)
            if n < 0:
                raise _NotCanonical
            pos += 2
            name = bytes(mv[pos : pos + n]).decode()
            pos += n
        n_parts, pos = _count(buf, pos, flexible)
        parts: list[ProducePartitionData] = []
        for _ in range(n_parts):
            (index,) = _I32.unpack_from(buf, pos)
            pos += 4
            if flexible:
                size, pos = _uvarint(buf, pos)
                size -= 1
            else:
                (size,) = _I32.unpack_from(buf, pos)
                pos += 4
                if size < -1:
                    raise _NotCanonical
            records = None
            if size >= 0:
                if pos + size > end:
                    raise _NotCanonical
                records = mv[pos : pos + size]
                pos += size
            if flexible:
                pos = _no_tags(buf, pos)
            parts.append(ProducePartitionData(index, records))
        if flexible:
            pos = _no_tags(buf, pos)
        topics.append(ProduceTopicData(name, topic_id, parts))
    if flexible:
        pos = _no_tags(buf, pos)
    if pos != end:
        raise _NotCanonical  # bytes after the body, or a string running past the end
    return ProduceRequestData(tid, acks, timeout_ms, topics)


# ---- response ----------------------------------------------------------------------------------------------------


class PartitionAnswer:
    """One partition of a Produce response (the fields of PartitionProduceResponse)."""

    __slots__ = (
        "base_offset",
        "current_leader",
        "error_code",
        "error_message",
        "index",
        "log_append_time_ms",
        "log_start_offset",
        "record_errors",
    )

    def __init__(
        self,
        index: int,
        error_code: int,
        base_offset: int = -1,
        log_append_time_ms: int = -1,
        log_start_offset: int = -1,
        error_message: str | None = None,
        record_errors: Sequence[tuple[int, str | None]] | None = None,
        current_leader: tuple[int, int] | None = None,
    ) -> None:
        self.index = index
        self.error_code = error_code
        self.base_offset = base_offset
        self.log_append_time_ms = log_append_time_ms
        self.log_start_offset = log_start_offset
        self.error_message = error_message
        self.record_errors = record_errors
        self.current_leader = current_leader


class ProduceAnswer:
    """A Produce response: per topic (name, topic id, partitions), the throttle time (quotas set it after the
    handler), the endpoints of leaders named in NOT_LEADER_OR_FOLLOWER answers (v10+)."""

    __slots__ = ("node_endpoints", "responses", "throttle_time_ms", "version")

    def __init__(
        self,
        version: int,
        responses: list[tuple[str | None, uuid.UUID | None, list[PartitionAnswer]]],
        node_endpoints: Sequence[tuple[int, str, int, str | None]] = (),
    ) -> None:
        self.version = version
        self.responses = responses
        self.throttle_time_ms = 0
        self.node_endpoints = node_endpoints

    def partition_count(self) -> int:
        return sum(len(parts) for _name, _tid, parts in self.responses)

    def encode(self, correlation_id: int) -> bytes:
        """The framed response (size, header, body)."""
        v = self.version
        out = bytearray(4)
        out += _I32.pack(correlation_id)
        if v >= FLEXIBLE:
            out.append(0)  # response header v1: no tagged fields
            _encode_flexible(out, self, v)
        else:
            _encode_classic(out, self, v)
        _I32.pack_into(out, 0, len(out) - 4)
        return bytes(out)


def _string(out: bytearray, s: str | None) -> None:
    if s is None:
        out += b"\xff\xff"
    else:
        b = s.encode()
        out += _I16.pack(len(b))
        out += b


def _compact_string(out: bytearray, s: str | None) -> None:
    if s is None:
        out.append(0)
    else:
        b = s.encode()
        _put_uvarint(out, len(b) + 1)
        out += b


def _put_uvarint(out: bytearray, v: int) -> None:
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _encode_classic(out: bytearray, a: ProduceAnswer, v: int) -> None:
    out += _I32.pack(len(a.responses))
    for name, _tid, parts in a.responses:
        _string(out, name)
        out += _I32.pack(len(parts))
        for p in parts:
            if v >= 5:
                out += _PART_V8.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms, p.log_start_offset)
            elif v >= 2:
                out += _PART_V2.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms)
            else:
                out += _PART_V0.pack(p.index, p.error_code, p.base_offset)
            if v >= 8:
                errs = p.record_errors or ()
                out += _I32.pack(len(errs))
                for batch_index, message in errs:
                    out += _I32.pack(batch_index)
                    _string(out, message)
                _string(out, p.error_message)
    if v >= 1:
        out += _I32.pack(a.throttle_time_ms)


def _encode_flexible(out: bytearray, a: ProduceAnswer, v: int) -> None:
    _put_uvarint(out, len(a.responses) + 1)
    by_id = v >= TOPIC_IDS
    for name, tid, parts in a.responses:
        if by_id:
            out += (tid or uuid.UUID(int=0)).bytes
        else:
            _compact_string(out, name)
        _put_uvarint(out, len(parts) + 1)
        for p in parts:
            out += _PART_V8.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms, p.log_start_offset)
            errs = p.record_errors
            if errs:
                _put_uvarint(out, len(errs) + 1)
                for batch_index, message in errs:
                    out += _I32.pack(batch_index)
                    _compact_string(out, message)
                    out.append(0)
            else:
                out.append(1)  # an empty array
            _compact_string(out, p.error_message)
            leader = p.current_leader
            if leader is not None and v >= 10 and leader != (-1, -1):
                out += _LEADER.pack(1, 0, 9, leader[0], leader[1], 0)
            else:
                out.append(0)
        out.append(0)  # topic: no tagged fields
    out += _I32.pack(a.throttle_time_ms)
    if v >= 10 and a.node_endpoints:
        section = bytearray()
        _put_uvarint(section, len(a.node_endpoints) + 1)
        for node_id, host, port, rack in a.node_endpoints:
            section += _I32.pack(node_id)
            _compact_string(section, host)
            section += _I32.pack(port)
            _compact_string(section, rack)
            section.append(0)
        out.append(1)
        out.append(0)  # tag 0
        _put_uvarint(out, len(section))
        out += section
    else:
        out.append(0)
