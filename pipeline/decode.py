"""Record decoding for ``read.mode=direct``: magic-v2 batches (as stored in a segment's ``.log``) -> columns.

Batch framing and headers come from Strata's ``protocol.records`` (``iter_batches``, ``BatchHeader``); the records
section is decompressed with the same codecs the broker's record tools use (``kafka.codec``) and parsed by aiokafka's
Cython record batch reader (the executors' hot path; aiokafka is part of the ``spark`` extra).

Semantics match what a Kafka consumer at READ_UNCOMMITTED returns: control batches (transaction markers) are
skipped, records keep their offsets (base offset + offset delta), and a LogAppendTime batch gives every record the
batch's max timestamp. Offsets outside [lo, hi) are dropped, so a read may start or stop inside a batch.
"""
from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

from protocol.records import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    GZIP,
    HEADER_SIZE,
    LENGTH_OFFSET,
    LOG_APPEND_TIME,
    LZ4,
    MIN_BATCH_LENGTH,
    NONE,
    SNAPPY,
    TIMESTAMP_TYPE_MASK,
    ZSTD,
    BatchHeader,
    iter_batches,
)

_LENGTH = struct.Struct(">i")
_ATTRS = struct.Struct(">h")


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


def _batch_reader(view: memoryview) -> Any:
    from aiokafka.record.default_records import DefaultRecordBatch

    return DefaultRecordBatch(view)


def _uncompressed(buf: bytes, pos: int, h: BatchHeader, records: bytes) -> memoryview:
    """The batch with its records section replaced by the decompressed one (codec bits cleared, length fixed): the
    reader then only parses, and decompression stays with kafka.codec as everywhere else in Strata."""
    head = bytearray(buf[pos:pos + HEADER_SIZE])
    _LENGTH.pack_into(head, LENGTH_OFFSET, MIN_BATCH_LENGTH + len(records))
    _ATTRS.pack_into(head, ATTRIBUTES_OFFSET, h.attributes & ~COMPRESSION_MASK)
    return memoryview(bytes(head) + records)


def decode_batch(buf: bytes, pos: int, h: BatchHeader, lo: int, hi: int, out: Columns) -> int:
    """Append the records of the batch at ``buf[pos:]`` whose offsets are in [lo, hi) to ``out``; returns how many.

    Records are parsed by aiokafka's Cython batch reader (2.3x faster than a Python varint loop, measured on 1 KiB
    records); key and value come out as the ``bytes`` Arrow needs anyway."""
    if h.magic != 2:
        raise CorruptSegmentError(f"batch at offset {h.base_offset}: magic {h.magic} (only v2 is supported)")
    attrs = h.attributes
    if attrs & CONTROL_MASK or h.last_offset < lo or h.base_offset >= hi:
        return 0
    codec = attrs & 0x07
    end = pos + h.size
    if end > len(buf):
        raise CorruptSegmentError(f"batch at offset {h.base_offset}: records section is truncated")
    if codec == NONE:
        view = memoryview(buf)[pos:end]
    else:
        view = _uncompressed(buf, pos, h, bytes(_decompress(codec, buf[pos + HEADER_SIZE:end])))
    log_append = bool(attrs & TIMESTAMP_TYPE_MASK)
    ts_type = LOG_APPEND_TIME if log_append else 0
    max_ts = h.max_timestamp
    with_headers = out.with_headers
    keys, values, offsets = out.keys, out.values, out.offsets
    timestamps, types, headers_col = out.timestamps, out.timestamp_types, out.headers
    added = 0
    try:
        for r in _batch_reader(view):
            offset = r.offset
            if lo <= offset < hi:
                keys.append(r.key)
                values.append(r.value)
                offsets.append(offset)
                timestamps.append(max_ts if log_append else r.timestamp)
                types.append(ts_type)
                if with_headers:
                    headers_col.append(r.headers or None)
                added += 1
    except CorruptSegmentError:
        raise
    except Exception as e:  # noqa: BLE001 - aiokafka raises its own errors (and IndexError) on a bad section
        raise CorruptSegmentError(f"batch at offset {h.base_offset}: records section does not decode: {e!r}"
                                  ) from None
    return added


def iter_complete_batches(buf: bytes) -> Iterator[tuple[int, BatchHeader]]:
    """``protocol.records.iter_batches``: (position, header) of each complete batch of ``buf``."""
    return iter_batches(buf)


__all__ = ["Columns", "CorruptSegmentError", "decode_batch", "iter_complete_batches"]
