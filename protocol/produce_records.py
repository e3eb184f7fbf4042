"""Point a decoded Produce request's records at the request's own (writable) buffer.

kafka-python's decoder returns each partition's records as a `bytes` copy, and the leader's append needs writable
bytes to stamp base offsets and the leader epoch into the batch headers, so a produced byte used to be copied twice
after the receive. When the request arrived in a buffer of its own (a bytearray, broker/frame_reader.py), this walk
finds where each partition's records lie in it and replaces the copy with a writable memoryview of that place: the
append stamps the headers there and writes it (`UnifiedLog.append_as_leader`). The request was decoded already, so
the walk only re-reads lengths; any disagreement with what was decoded leaves the request as it is. Sans-IO.
"""

from __future__ import annotations

import struct
from typing import Any

from .produce_codec import ProduceRequestData
from .wire import read_uvarint, skip_tagged_fields

__all__ = ["use_request_buffer"]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
FLEXIBLE = 9  # Produce v9+: compact strings and arrays, tagged fields, request header v2
TOPIC_IDS = 13  # Produce v13+: topics by id


def use_request_buffer(req: Any, payload: bytearray, version: int) -> bool:
    """Replace each partition's `records` of `req` (decoded from `payload`) by a writable view into `payload`.
    False (and `req` unchanged) if the request is not laid out as expected. A request from the Produce codec
    (`produce_codec`) holds such views already."""
    if isinstance(req, ProduceRequestData):
        return True
    try:
        views = _record_views(req, memoryview(payload), version)
    except (ValueError, IndexError, struct.error):
        return False
    if views is None:
        return False
    for pd, view in views:
        pd.records = view
    return True


def _record_views(req: Any, buf: memoryview, version: int) -> list[tuple[Any, memoryview]] | None:
    flexible = version >= FLEXIBLE
    (client_id_len,) = _I16.unpack_from(buf, 8)
    pos = 10 + max(client_id_len, 0)
    if flexible:
        pos = skip_tagged_fields(buf, pos)
    pos = _skip_string(buf, pos, flexible)  # transactional id
    pos += 6  # acks, timeout
    n_topics, pos = _count(buf, pos, flexible)
    topics = req.topic_data or []
    if n_topics != len(topics):
        return None
    views: list[tuple[Any, memoryview]] = []
    for td in topics:
        pos = pos + 16 if version >= TOPIC_IDS else _skip_string(buf, pos, flexible)
        n_parts, pos = _count(buf, pos, flexible)
        parts = td.partition_data or []
        if n_parts != len(parts):
            return None
        for pd in parts:
            (index,) = _I32.unpack_from(buf, pos)
            pos += 4
            if flexible:
                size, pos = read_uvarint(buf, pos)
                size -= 1
            else:
                (size,) = _I32.unpack_from(buf, pos)
                pos += 4
            if index != pd.index or (pd.records is None) != (size < 0):
                return None
            if size >= 0:
                if size != len(pd.records) or pos + size > len(buf):
                    return None
                if buf[pos : pos + 64] != pd.records[:64] or buf[pos + size - 64 : pos + size] != pd.records[-64:]:
                    return None  # cheap insurance: both ends of the place found hold what was decoded
                views.append((pd, buf[pos : pos + size]))
                pos += size
            if flexible:
                pos = skip_tagged_fields(buf, pos)
        if flexible:
            pos = skip_tagged_fields(buf, pos)
    return views


def _count(buf: memoryview, pos: int, flexible: bool) -> tuple[int, int]:
    if flexible:
        n, pos = read_uvarint(buf, pos)
        return n - 1, pos
    return _I32.unpack_from(buf, pos)[0], pos + 4


def _skip_string(buf: memoryview, pos: int, flexible: bool) -> int:
    if flexible:
        n, pos = read_uvarint(buf, pos)
        return pos + max(n - 1, 0)
    (n,) = _I16.unpack_from(buf, pos)
    return pos + 2 + max(n, 0)
