"""Record decoding for ``read.mode=direct``: magic-v2 batches (as stored in a segment's ``.log``) -> columns.

Batch framing and headers come from Strata's ``protocol.records`` (``iter_batches``, ``BatchHeader``); the records
section is decompressed with the same codecs the broker's record tools use (``kafka.codec``) and decoded here with a
tight varint loop (the executors' hot path: one Python call per varint, no per-record objects).

Semantics match what a Kafka consumer at READ_UNCOMMITTED returns: control batches (transaction markers) are
skipped, records keep their offsets (base offset + offset delta), and a LogAppendTime batch gives every record the
batch's max timestamp. Offsets outside [lo, hi) are dropped, so a read may start or stop inside a batch.
"""
from __future__ import annotations

from collections.abc import Iterator

from protocol.records import (
    CONTROL_MASK,
    GZIP,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    LZ4,
    NONE,
    SNAPPY,
    TIMESTAMP_TYPE_MASK,
    ZSTD,
    BatchHeader,
    iter_batches,
)


class CorruptSegmentError(ValueError):
    """A batch in remote storage does not decode (wrong magic, truncated records section, bad codec)."""


def _decompress(codec: int, payload: bytes) -> bytes:
    from kafka import codec as c

    if codec == GZIP:
        return c.gzip_decode(payload)
    if codec == SNAPPY:
        return c.snappy_decode(payload)
    if codec == LZ4:
        return c.lz4_decode(payload)
    if codec == ZSTD:
        return c.zstd_decode(payload)
    raise CorruptSegmentError(f"unknown compression codec {codec}")


class Columns:
    """Column lists of decoded records for one topic partition (topic and partition are constant)."""

    __slots__ = ("headers", "keys", "offsets", "timestamp_types", "timestamps", "values", "with_headers")

    def __init__(self, with_headers: bool) -> None:
        self.with_headers = with_headers
        self.clear()

    def clear(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.timestamp_types: list[int] = []
        self.headers: list[list[tuple[str, bytes | None]] | None] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def append(self, key: bytes | None, value: bytes | None, offset: int, timestamp: int, ts_type: int,
               headers: list[tuple[str, bytes | None]] | None) -> None:
        self.keys.append(key)
        self.values.append(value)
        self.offsets.append(offset)
        self.timestamps.append(timestamp)
        self.timestamp_types.append(ts_type)
        if self.with_headers:
            self.headers.append(headers or None)


def decode_batch(buf: bytes, pos: int, h: BatchHeader, lo: int, hi: int, out: Columns) -> int:
    """Append the records of the batch at ``buf[pos:]`` whose offsets are in [lo, hi) to ``out``; returns how many.

    ``buf`` must be ``bytes`` (slicing gives the key/value copies Arrow needs anyway)."""
    if h.magic != 2:
        raise CorruptSegmentError(f"batch at offset {h.base_offset}: magic {h.magic} (only v2 is supported)")
    attrs = h.attributes
    if attrs & CONTROL_MASK or h.last_offset < lo or h.base_offset >= hi:
        return 0
    codec = attrs & 0x07
    end = pos + h.size
    if codec == NONE:
        b, i = buf, pos + HEADER_SIZE
    else:
        b, i = bytes(_decompress(codec, buf[pos + HEADER_SIZE:end])), 0
        end = len(b)
    log_append = bool(attrs & TIMESTAMP_TYPE_MASK)
    ts_type = LOG_APPEND_TIME if log_append else 0
    base_offset, base_ts, max_ts = h.base_offset, h.base_timestamp, h.max_timestamp
    with_headers = out.with_headers
    keys, values, offsets = out.keys, out.values, out.offsets
    timestamps, types, headers_col = out.timestamps, out.timestamp_types, out.headers
    added = 0
    try:
        for _ in range(h.records_count):
            # length varint (zigzag): the records section is self-delimiting, so only skip it
            x = b[i]
            i += 1
            while x & 0x80:
                x = b[i]
                i += 1
            i += 1                                            # attributes (unused, int8)
            # timestamp delta (varlong, zigzag)
            x = b[i]
            i += 1
            v, shift = x & 0x7F, 7
            while x & 0x80:
                x = b[i]
                i += 1
                v |= (x & 0x7F) << shift
                shift += 7
            ts_delta = (v >> 1) ^ -(v & 1)
            # offset delta
            x = b[i]
            i += 1
            v, shift = x & 0x7F, 7
            while x & 0x80:
                x = b[i]
                i += 1
                v |= (x & 0x7F) << shift
                shift += 7
            offset = base_offset + ((v >> 1) ^ -(v & 1))
            # key
            x = b[i]
            i += 1
            v, shift = x & 0x7F, 7
            while x & 0x80:
                x = b[i]
                i += 1
                v |= (x & 0x7F) << shift
                shift += 7
            n = (v >> 1) ^ -(v & 1)
            if n < 0:
                key = None
            else:
                key = b[i:i + n]
                i += n
            # value
            x = b[i]
            i += 1
            v, shift = x & 0x7F, 7
            while x & 0x80:
                x = b[i]
                i += 1
                v |= (x & 0x7F) << shift
                shift += 7
            n = (v >> 1) ^ -(v & 1)
            if n < 0:
                value = None
            else:
                value = b[i:i + n]
                i += n
            # headers
            x = b[i]
            i += 1
            v, shift = x & 0x7F, 7
            while x & 0x80:
                x = b[i]
                i += 1
                v |= (x & 0x7F) << shift
                shift += 7
            count = (v >> 1) ^ -(v & 1)
            hdrs = None
            if count > 0:
                hdrs = []
                for _h in range(count):
                    hk, i = _zz_varint(b, i)
                    hkey = b[i:i + hk].decode("utf-8")
                    i += hk
                    hv, i = _zz_varint(b, i)
                    if hv < 0:
                        hval = None
                    else:
                        hval = b[i:i + hv]
                        i += hv
                    hdrs.append((hkey, hval))
            if lo <= offset < hi:
                keys.append(key)
                values.append(value)
                offsets.append(offset)
                timestamps.append(max_ts if log_append else base_ts + ts_delta)
                types.append(ts_type)
                if with_headers:
                    headers_col.append(hdrs)
                added += 1
    except IndexError:
        raise CorruptSegmentError(f"batch at offset {base_offset}: records section is truncated") from None
    if i > end:
        raise CorruptSegmentError(f"batch at offset {base_offset}: records run past the batch end")
    return added


def _zz_varint(b: bytes, i: int) -> tuple[int, int]:
    x = b[i]
    i += 1
    v, shift = x & 0x7F, 7
    while x & 0x80:
        x = b[i]
        i += 1
        v |= (x & 0x7F) << shift
        shift += 7
    return (v >> 1) ^ -(v & 1), i


def iter_complete_batches(buf: bytes) -> Iterator[tuple[int, BatchHeader]]:
    """``protocol.records.iter_batches``: (position, header) of each complete batch of ``buf``."""
    return iter_batches(buf)


__all__ = ["Columns", "CorruptSegmentError", "decode_batch", "iter_complete_batches"]
