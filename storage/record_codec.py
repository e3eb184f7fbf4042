"""The record section of magic v2 batches, as the log cleaner and the compacted-topic key check need it: parse a
batch's records (offset delta, timestamp delta, key, tombstone), rebuild a batch with only some of them, or empty.

Moved out of storage/cleaner.py so that storage/log.py (which checks keys on append to a compacted topic) does not
import the cleaner. Varints and codecs come from strata.protocol.wire and strata.protocol.compression; the one-byte
varints are read inline in the per-record loops (the common case, measured to pay there).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from strata.protocol.compression import compress, iter_decompressed
from strata.protocol.record_validation import MIN_INFLATE_LIMIT
from strata.protocol.records import (
    COMPRESSION_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_MASK,
    HEADER,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    BatchHeader,
    compute_crc,
)
from strata.protocol.wire import WireFormatError, read_varlong, write_varint, write_varlong

from .errors import InvalidRecordError

_U32 = struct.Struct(">I")


class CorruptBatchError(WireFormatError):
    """A batch's record section cannot be parsed."""


def batch_payload(batch: bytes | memoryview, h: BatchHeader) -> bytes:
    """The (decompressed) record section of the batch `batch` (which starts at its header), inflated under the
    bound every broker-side inflation has (a stored bomb raises CorruptBatchError instead of taking the memory)."""
    raw = bytes(batch[HEADER_SIZE : h.size])
    if not h.compression:
        return raw
    try:
        return b"".join(iter_decompressed(h.compression, raw, MIN_INFLATE_LIMIT))
    except WireFormatError as e:
        raise CorruptBatchError(str(e)) from None


# A parsed record: (offset delta, timestamp delta, key or None, is tombstone, start of the key-length field,
# end of the record) -- the last two delimit the bytes that a re-based copy keeps verbatim.
ParsedRecord = tuple[int, int, "bytes | None", bool, int, int]


def parse_records(payload: bytes, count: int) -> list[ParsedRecord]:
    out: list[ParsedRecord] = []
    append = out.append
    i = 0
    n = len(payload)
    try:
        for _ in range(count):
            # each varint inlined for its common one-byte form (zigzag: value = (c >> 1) ^ -(c & 1))
            c = payload[i]
            if c < 0x80:
                length, i = (c >> 1) ^ -(c & 1), i + 1
            else:
                length, i = read_varlong(payload, i)
            end = i + length
            if length < 0 or end > n:
                raise CorruptBatchError("record length beyond the batch")
            c = payload[i + 1]  # +1: attributes
            if c < 0x80:
                ts_delta, j = (c >> 1) ^ -(c & 1), i + 2
            else:
                ts_delta, j = read_varlong(payload, i + 1)
            c = payload[j]
            if c < 0x80:
                off_delta, j = (c >> 1) ^ -(c & 1), j + 1
            else:
                off_delta, j = read_varlong(payload, j)
            tail = j
            c = payload[j]
            if c < 0x80:
                klen, j = (c >> 1) ^ -(c & 1), j + 1
            else:
                klen, j = read_varlong(payload, j)
            if klen < 0:
                key = None
            else:
                key = payload[j : j + klen]
                j += klen
            append((off_delta, ts_delta, key, payload[j] == 1, tail, end))  # value length -1 is the byte 0x01
            i = end
    except CorruptBatchError:
        raise
    except (IndexError, WireFormatError):
        raise CorruptBatchError("truncated record") from None
    return out


def iter_keys(payload: bytes, count: int) -> Iterator[tuple[int, bytes | None]]:
    """(offset delta, key) of each record: what building the offset map needs."""
    i = 0
    n = len(payload)
    try:
        for _ in range(count):
            c = payload[i]
            if c < 0x80:
                length, i = (c >> 1) ^ -(c & 1), i + 1
            else:
                length, i = read_varlong(payload, i)
            end = i + length
            if length < 0 or end > n:
                raise CorruptBatchError("record length beyond the batch")
            j = i + 1
            if payload[j] < 0x80:
                j += 1
            else:
                _, j = read_varlong(payload, j)
            c = payload[j]
            if c < 0x80:
                off_delta, j = (c >> 1) ^ -(c & 1), j + 1
            else:
                off_delta, j = read_varlong(payload, j)
            c = payload[j]
            if c < 0x80:
                klen, j = (c >> 1) ^ -(c & 1), j + 1
            else:
                klen, j = read_varlong(payload, j)
            yield off_delta, (None if klen < 0 else payload[j : j + klen])
            i = end
    except CorruptBatchError:
        raise
    except (IndexError, WireFormatError):
        raise CorruptBatchError("truncated record") from None


def check_keys_present(buf: bytes | bytearray | memoryview, pos: int, size: int) -> None:
    """Compacted topics: raise InvalidRecordError (87) when a record of the batch at `pos` has a null key."""
    h = BatchHeader(buf, pos)
    if h.is_control:
        return
    payload = batch_payload(memoryview(buf)[pos : pos + size], h)
    i = 0
    n = len(payload)
    try:
        for _ in range(h.records_count):
            length, i = read_varlong(payload, i)
            end = i + length
            _, j = read_varlong(payload, i + 1)
            _, j = read_varlong(payload, j)
            klen, _ = read_varlong(payload, j)
            if klen < 0:
                raise InvalidRecordError("Compacted topic cannot accept message without key in topic partition")
            if end > n:
                raise IndexError
            i = end
    except (IndexError, WireFormatError):
        raise InvalidRecordError("record batch has malformed records") from None


def _finish_batch(out: bytearray) -> bytes:
    _U32.pack_into(out, CRC_OFFSET, compute_crc(out, 0, len(out)))
    return bytes(out)


def build_retained_batch(h: BatchHeader, payload: bytes, kept: list[ParsedRecord], delete_horizon: int | None) -> bytes:
    """Rebuild a batch with only `kept` records (Kafka's buildRetainedRecordsInto): same base offset, last offset
    delta, producer fields, leader epoch, timestamp type and codec; base timestamp = the delete horizon when set
    (attribute 0x40), else the first kept record's timestamp; record timestamps unchanged."""
    base_ts = h.base_timestamp
    abs_ts = [base_ts + r[1] for r in kept]
    new_base = delete_horizon if delete_horizon is not None else abs_ts[0]
    body = bytearray()
    rec = bytearray()
    for r, ts in zip(kept, abs_ts):
        rec.clear()
        rec.append(0)  # record attributes (unused)
        write_varlong(rec, ts - new_base)
        write_varint(rec, r[0])
        rec += payload[r[4] : r[5]]
        write_varint(body, len(rec))
        body += rec
    codec = h.compression
    records = compress(codec, bytes(body)) if codec else body
    attrs = h.attributes & ~DELETE_HORIZON_MASK
    if delete_horizon is not None:
        attrs |= DELETE_HORIZON_MASK
    max_ts = h.max_timestamp if h.timestamp_type == LOG_APPEND_TIME else max(abs_ts)
    out = bytearray(HEADER_SIZE + len(records))
    HEADER.pack_into(
        out,
        0,
        h.base_offset,
        len(out) - LOG_OVERHEAD,
        h.partition_leader_epoch,
        2,
        0,
        attrs,
        h.last_offset_delta,
        new_base,
        max_ts,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        len(kept),
    )
    out[HEADER_SIZE:] = records
    return _finish_batch(out)


def build_empty_batch(h: BatchHeader) -> bytes:
    """A batch with no records that keeps the offsets, producer fields and max timestamp (Kafka's empty header)."""
    attrs = h.attributes & ~(COMPRESSION_MASK | DELETE_HORIZON_MASK)
    out = bytearray(HEADER_SIZE)
    HEADER.pack_into(
        out,
        0,
        h.base_offset,
        HEADER_SIZE - LOG_OVERHEAD,
        h.partition_leader_epoch,
        2,
        0,
        attrs,
        h.last_offset_delta,
        -1,
        h.max_timestamp,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        0,
    )
    return _finish_batch(out)


def delete_horizon_of(h: BatchHeader) -> int | None:
    return h.base_timestamp if h.attributes & DELETE_HORIZON_MASK else None


__all__ = [
    "CorruptBatchError",
    "ParsedRecord",
    "batch_payload",
    "build_empty_batch",
    "build_retained_batch",
    "check_keys_present",
    "delete_horizon_of",
    "iter_keys",
    "parse_records",
]
