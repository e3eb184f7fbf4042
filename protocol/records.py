"""Magic-v2 record batches (Kafka's DefaultRecordBatch) as bytes: header view, validation, in-place rewrites.

Sans-IO and allocation-light: the broker stores and forwards batches without decoding records, so everything on the
hot path works on the 61-byte header only. Record decoding (`iter_records`) is for dump-log, ListOffsets and tests;
a producer's records are checked by `record_validation`.

Header layout (big-endian), offsets in bytes::

    0 baseOffset int64 | 8 batchLength int32 | 12 partitionLeaderEpoch int32 | 16 magic int8 | 17 crc uint32
    21 attributes int16 | 23 lastOffsetDelta int32 | 27 baseTimestamp int64 | 35 maxTimestamp int64
    43 producerId int64 | 51 producerEpoch int16 | 53 baseSequence int32 | 57 recordsCount int32 | 61 records...

batchLength counts the bytes after itself, so a batch occupies batchLength + 12 bytes. The CRC32C covers bytes
from `attributes` to the end: baseOffset and partitionLeaderEpoch can be rewritten without recomputing it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from crc32c import crc32c

from .errors import ErrorCode

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part of a batch not counted by batchLength
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49

BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
COMPRESSION_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CREATE_TIME, LOG_APPEND_TIME = 0, 1
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_OFFSET_LEN = struct.Struct(">qi")

Buffer = bytes | bytearray | memoryview


class BufferChain:
    """Whole batches held in several buffers (chunks of a remote segment), sent as they are: the Fetch response
    writes each piece (writev) instead of a joined copy. `len` is the byte count; `bytes()` joins."""

    __slots__ = ("_len", "pieces")

    def __init__(self, pieces: Sequence[Buffer]) -> None:
        self.pieces = [p for p in pieces if len(p)]
        self._len = sum(len(p) for p in self.pieces)

    def __len__(self) -> int:
        return self._len

    def __bytes__(self) -> bytes:
        return b"".join(self.pieces)

    def __repr__(self) -> str:
        return f"BufferChain({len(self.pieces)} pieces, {self._len} bytes)"


class RecordBatchError(ValueError):
    """A batch a Produce must reject; `error_code` is the Kafka error (storage maps it to its own exceptions)."""

    error_code: int = ErrorCode.INVALID_RECORD

    def __init__(self, message: str, error_code: int | None = None) -> None:
        super().__init__(message)
        if error_code is not None:
            self.error_code = error_code


class BatchHeader:
    """Read-only view of one batch header, decoded with a single unpack (cheap enough per batch on hot paths)."""

    __slots__ = ("_f",)

    def __init__(self, buf: Buffer, pos: int = 0) -> None:
        self._f = HEADER.unpack_from(buf, pos)

    @classmethod
    def from_fields(cls, fields: tuple) -> BatchHeader:
        h = cls.__new__(cls)
        h._f = fields
        return h

    base_offset = property(lambda self: self._f[0])
    batch_length = property(lambda self: self._f[1])
    size = property(lambda self: self._f[1] + LOG_OVERHEAD)
    partition_leader_epoch = property(lambda self: self._f[2])
    magic = property(lambda self: self._f[3])
    crc = property(lambda self: self._f[4])
    attributes = property(lambda self: self._f[5])
    compression = property(lambda self: self._f[5] & COMPRESSION_MASK)
    timestamp_type = property(lambda self: LOG_APPEND_TIME if self._f[5] & TIMESTAMP_TYPE_MASK else CREATE_TIME)
    is_transactional = property(lambda self: bool(self._f[5] & TRANSACTIONAL_MASK))
    is_control = property(lambda self: bool(self._f[5] & CONTROL_MASK))
    last_offset_delta = property(lambda self: self._f[6])
    last_offset = property(lambda self: self._f[0] + self._f[6])
    next_offset = property(lambda self: self._f[0] + self._f[6] + 1)
    base_timestamp = property(lambda self: self._f[7])
    max_timestamp = property(lambda self: self._f[8])
    producer_id = property(lambda self: self._f[9])
    producer_epoch = property(lambda self: self._f[10])
    base_sequence = property(lambda self: self._f[11])
    records_count = property(lambda self: self._f[12])

    @property
    def last_sequence(self) -> int:
        """As Kafka: wraps at INT32_MAX; -1 when the batch carries no sequence."""
        if self._f[11] == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self._f[11] + self._f[6]) & 0x7FFFFFFF

    def __repr__(self) -> str:
        return (
            f"BatchHeader(base_offset={self.base_offset}, last_offset={self.last_offset}, size={self.size}, "
            f"epoch={self.partition_leader_epoch}, count={self.records_count}, "
            f"max_ts={self.max_timestamp}, attrs={self.attributes:#x})"
        )


def iter_batches(buf: Buffer, start: int = 0) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of each complete batch; stop silently at a truncated tail (fetch/torn write)."""
    end = len(buf)
    pos = start
    while pos + HEADER_SIZE <= end:
        h = BatchHeader(buf, pos)
        size = h.size
        if size < HEADER_SIZE or pos + size > end:
            return
        yield pos, h
        pos += size


def compute_crc(buf: Buffer, pos: int, size: int) -> int:
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    return crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + size])


def is_crc_valid(buf: Buffer, pos: int = 0) -> bool:
    h = BatchHeader(buf, pos)
    return h.size >= HEADER_SIZE and pos + h.size <= len(buf) and compute_crc(buf, pos, h.size) == h.crc


def validate_batch_fields(buf: Buffer, pos: int = 0) -> tuple:
    """`validate_batch` returning the raw header tuple (HEADER field order): for hot paths, no view object."""
    avail = len(buf) - pos
    if avail < HEADER_SIZE:
        if avail > MAGIC_OFFSET and buf[pos + MAGIC_OFFSET] != 2:
            raise RecordBatchError(f"unsupported record batch magic {buf[pos + MAGIC_OFFSET]}")
        raise RecordBatchError(f"truncated record batch: {avail} bytes at position {pos}")
    f = HEADER.unpack_from(buf, pos)
    if f[3] != 2:
        raise RecordBatchError(f"unsupported record batch magic {f[3]} (only v2 is accepted)")
    length = f[1]
    if length < MIN_BATCH_LENGTH:
        raise RecordBatchError(f"record batch length {length} is smaller than the header")
    if length + LOG_OVERHEAD > avail:
        raise RecordBatchError(f"record batch length {length} exceeds the {avail - LOG_OVERHEAD} bytes available")
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + LOG_OVERHEAD + length]) != f[4]:
        raise RecordBatchError(f"record batch at offset {f[0]} is corrupt (CRC mismatch)", 2)
    if f[12] < 1:
        raise RecordBatchError(f"record batch has {f[12]} records")
    if f[6] != f[12] - 1:
        raise RecordBatchError(f"record batch lastOffsetDelta {f[6]} does not match its {f[12]} records")
    return f


def validate_batch(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Check a producer's batch at `pos`: magic 2, sane length inside the buffer, CRC, count/offset-delta agreement.

    Raises RecordBatchError with error_code 87 (INVALID_RECORD) or 2 (CORRUPT_MESSAGE, CRC mismatch).
    """
    return BatchHeader.from_fields(validate_batch_fields(buf, pos))


def check_produce_records(version: int, records: Buffer) -> None:
    """What a Produce request (v3+) may carry for one partition, checked before anything is appended (Kafka's
    ProduceRequest.validateRecords): at least one batch, magic 2, exactly one batch, and no zstd below v7.

    Raises RecordBatchError: INVALID_RECORD, or UNSUPPORTED_COMPRESSION_TYPE for zstd below v7. Only the first
    batch's header is read; the batch itself is validated on append."""
    total = len(records)
    if total == 0:
        raise RecordBatchError(
            f"Produce requests with version {version} must have at least one record batch per partition"
        )
    if total > MAGIC_OFFSET and records[MAGIC_OFFSET] != 2:
        raise RecordBatchError(
            f"Produce requests with version {version} are only allowed to contain record batches with magic version 2"
        )
    if total <= ATTRIBUTES_OFFSET + 1:
        return  # too short for a batch header: append's validation says what is wrong
    if version < 7 and records[ATTRIBUTES_OFFSET + 1] & COMPRESSION_MASK == ZSTD:
        raise RecordBatchError(
            f"Produce requests with version {version} are not allowed to use ZStandard compression",
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
        )
    (length,) = _I32.unpack_from(records, LOG_OVERHEAD - 4)
    if length >= 0 and LOG_OVERHEAD + length < total:
        raise RecordBatchError(
            f"Produce requests with version {version} are only allowed to contain exactly one record batch "
            "per partition"
        )


def validate_replicated_batch(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Check a batch a follower copies from its leader: magic 2, sane length inside the buffer, CRC.

    Unlike a producer's batch, a replicated one may come from a compacted log: the cleaner keeps empty batches
    (recordsCount 0) and batches whose lastOffsetDelta no longer matches their record count."""
    avail = len(buf) - pos
    if avail < HEADER_SIZE:
        raise RecordBatchError(f"truncated record batch: {avail} bytes at position {pos}")
    f = HEADER.unpack_from(buf, pos)
    if f[3] != 2:
        raise RecordBatchError(f"unsupported record batch magic {f[3]} (only v2 is accepted)")
    length = f[1]
    if length < MIN_BATCH_LENGTH or length + LOG_OVERHEAD > avail:
        raise RecordBatchError(f"record batch length {length} is out of range")
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + LOG_OVERHEAD + length]) != f[4]:
        raise RecordBatchError(f"record batch at offset {f[0]} is corrupt (CRC mismatch)", 2)
    if f[6] < 0 or f[12] < 0:
        raise RecordBatchError(f"record batch has lastOffsetDelta {f[6]} and {f[12]} records")
    return BatchHeader.from_fields(f)


_OFFSET_LEN_EPOCH = struct.Struct(">qii")


def set_base_offset_and_epoch(
    buf: bytearray | memoryview, pos: int, offset: int, batch_length: int, epoch: int
) -> None:
    """Both leader-side rewrites in one pack (batchLength, between them, is rewritten unchanged)."""
    _OFFSET_LEN_EPOCH.pack_into(buf, pos, offset, batch_length, epoch)


def set_base_offset(buf: bytearray | memoryview, pos: int, offset: int) -> None:
    _I64.pack_into(buf, pos + BASE_OFFSET_OFFSET, offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    _I32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp: int) -> None:
    """Mark the batch LogAppendTime with maxTimestamp = `timestamp` and fix the CRC.

    Like Kafka's in-place DefaultRecordBatch.setMaxTimestamp, baseTimestamp and record deltas are left alone:
    readers of a LogAppendTime batch use maxTimestamp for every record.
    """
    attrs = _I16.unpack_from(buf, pos + ATTRIBUTES_OFFSET)[0]
    _I16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attrs | TIMESTAMP_TYPE_MASK)
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp)
    size = _I32.unpack_from(buf, pos + LENGTH_OFFSET)[0] + LOG_OVERHEAD
    _U32.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos, size))


def set_max_timestamp(buf: bytearray | memoryview, pos: int, timestamp: int) -> None:
    """Rewrite a CreateTime batch's maxTimestamp (the largest record timestamp, as Kafka's leader sets it) and
    fix the CRC."""
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp)
    size = _I32.unpack_from(buf, pos + LENGTH_OFFSET)[0] + LOG_OVERHEAD
    _U32.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos, size))


def read_offset_and_length(buf: Buffer, pos: int) -> tuple[int, int]:
    """(baseOffset, batchLength) at `pos`: the 12 bytes every log scan needs."""
    return _OFFSET_LEN.unpack_from(buf, pos)


# ---------------------------------------------------------------------------------------------------------------
# Record level (not on hot paths)


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    sequence: int = -1


def iter_records(buf: Buffer, pos: int = 0, limit: int | None = None) -> Iterator[Record]:
    """Decode the records of the batch at `pos` lazily, inflating a compressed section in bounded pieces: never
    more than `limit` inflated bytes (default record_validation.MIN_INFLATE_LIMIT), whatever a stored batch claims.
    Raises RecordBatchError past the limit or on a malformed section. For ListOffsets, dump-log, loaders, tests."""
    from .record_validation import MIN_INFLATE_LIMIT, iter_record_fields  # imports this module

    h = BatchHeader(buf, pos)
    base_offset, base_ts, base_seq = h.base_offset, h.base_timestamp, h.base_sequence
    lat = h.timestamp_type == LOG_APPEND_TIME
    for off_delta, ts_delta, key, value, headers in iter_record_fields(
        buf, pos, h.size, h.compression, h.records_count, MIN_INFLATE_LIMIT if limit is None else limit
    ):
        seq = -1 if base_seq < 0 else (base_seq + off_delta) & 0x7FFFFFFF
        ts = h.max_timestamp if lat else base_ts + ts_delta
        yield Record(base_offset + off_delta, ts, key, value, headers, seq)


RecordSpec = bytes | None | tuple


def build_batch(
    records: Sequence[RecordSpec],
    base_offset: int = 0,
    compression: int = NONE,
    timestamp: int | None = None,
    *,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
) -> bytes:
    """Build one batch (tests/tools). Each record is a value, or a tuple (key, value[, headers[, timestamp]]).

    Timestamps default to `timestamp` (or now) for every record. Compression is applied only when it shrinks the
    payload (kafka-python's builder rule), so use compressible values when a test needs a compressed batch.
    """
    import time

    from kafka.record.default_records import DefaultRecordBatchBuilder

    if timestamp is None:
        timestamp = int(time.time() * 1000)
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=is_transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=2**31 - 1,
    )
    for i, spec in enumerate(records):
        key, headers, ts = None, [], timestamp
        if isinstance(spec, tuple):
            key, value = spec[0], spec[1]
            if len(spec) > 2 and spec[2] is not None:
                headers = list(spec[2])
            if len(spec) > 3 and spec[3] is not None:
                ts = spec[3]
        else:
            value = spec
        b.append(i, ts, key, value, headers)
    out = b.build()
    set_base_offset(out, 0, base_offset)
    set_partition_leader_epoch(out, 0, partition_leader_epoch)
    return bytes(out)


__all__ = [
    "HEADER",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "BatchHeader",
    "BufferChain",
    "RecordBatchError",
    "Record",
    "iter_batches",
    "validate_batch",
    "validate_batch_fields",
    "set_base_offset_and_epoch",
    "is_crc_valid",
    "compute_crc",
    "set_base_offset",
    "set_partition_leader_epoch",
    "set_log_append_time",
    "set_max_timestamp",
    "read_offset_and_length",
    "iter_records",
    "build_batch",
    "COMPRESSION_NAMES",
    "NONE",
    "GZIP",
    "SNAPPY",
    "LZ4",
    "ZSTD",
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "NO_TIMESTAMP",
]
