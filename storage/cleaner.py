"""Log compaction: Kafka's Cleaner for one log, its bounded key -> offset map, the record codec it needs, the
crash-safe segment swap and the startup completion of an interrupted swap.

Semantics follow Apache Kafka's log cleaner (read for behaviour, not copied):

* An `OffsetMap` (Kafka's SkimpyOffsetMap: 16-byte MD5 of the key + 8-byte offset per slot, in one flat buffer
  bounded by `log.cleaner.dedupe.buffer.size`) is built over the dirty range [first dirty, first uncleanable). When it
  reaches its load factor the build stops, and only the offsets it covered count as cleaned this round.
* Every segment below the map's end (clean ones too) is rewritten in groups of at most `segment.bytes` into one
  `<base>.log.cleaned` (+ `.index.cleaned`, `.timeindex.cleaned`), keeping for each key only its latest record. A
  batch whose records all survive is copied byte for byte; otherwise it is rebuilt with its base offset, last offset
  delta (so producers' last sequence survives), producer id/epoch/base sequence, partition leader epoch, attributes
  and codec (records re-compressed with the original codec).
* Tombstones (null value) are kept until the batch's delete horizon: the first time a cleaning keeps a tombstone, its
  batch is rewritten with the delete-horizon attribute bit (0x40) and baseTimestamp = now + delete.retention.ms
  (record timestamp deltas re-based, so record timestamps are unchanged). A cleaning after the horizon drops them.
* The batch holding the last offset of each (non-expired) producer id is kept, emptied of records if none survive,
  so the producer's last sequence/epoch survive (Kafka's RETAIN_EMPTY), as is the last batch of the cleaning round.
  Strata also keeps the last batch of every group, so a cleaned segment ends exactly where its group ended: the
  startup swap completion can then delete precisely the segments a `.swap` replaced.
* Control batches are kept as they are (Strata has no transactions yet, so no marker is ever removable).

Swap protocol (per group; `swap_in_cleaned_segment` runs on the log's owner thread, i.e. the event loop):
indexes then log `.cleaned` -> `.swap` (the `.log.swap` rename is the commit point), dir fsync, old segments renamed
`.deleted` and unlinked (readers keep their fds), indexes then log `.swap` -> final names, dir fsync, the in-memory
segment list spliced. `complete_interrupted_swaps` (called by `UnifiedLog.open`) deletes `.cleaned` files and
completes any `.swap`, as Kafka's LogLoader does.
"""
from __future__ import annotations

import hashlib
import math
import os
import struct
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from strata.protocol.records import (
    COMPRESSION_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_MASK,
    GZIP,
    HEADER,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    BatchHeader,
    compute_crc,
)

from .checkpoints import fsync_dir
from .errors import InvalidRecordError
from .index import INT32_MAX, OffsetIndex, TimeIndex
from .segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    filename_prefix,
)

if TYPE_CHECKING:
    from .log import UnifiedLog

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_SEGMENT_FILE_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
_INDEX_FILE_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
_U32 = struct.Struct(">I")
_md5 = hashlib.md5

T = TypeVar("T")


class CleaningAbortedError(Exception):
    """The cleaning of a log stopped (shutdown, the log changed or went away); nothing was swapped by this step."""


class CorruptBatchError(ValueError):
    """A batch's record section cannot be parsed."""


# ---------------------------------------------------------------------------------------------------------------
# record codec (magic v2 records inside a batch)

def _varint(b: bytes | bytearray, i: int) -> tuple[int, int]:
    """Zigzag varint at `i` -> (value, next position)."""
    c = b[i]
    if c < 0x80:
        return (c >> 1) ^ -(c & 1), i + 1
    result = c & 0x7F
    shift = 7
    i += 1
    while True:
        c = b[i]
        i += 1
        result |= (c & 0x7F) << shift
        if c < 0x80:
            return (result >> 1) ^ -(result & 1), i
        shift += 7
        if shift > 63:
            raise CorruptBatchError("varint too long")


def _put_varint(out: bytearray, v: int) -> None:
    v = (v << 1) ^ (v >> 63)
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def decompress(codec: int, data: bytes) -> bytes:
    if codec == NONE:
        return data
    from kafka import codec as kc  # lazy: heavy import, off the hot path
    if codec == GZIP:
        return kc.gzip_decode(data)
    if codec == SNAPPY:
        return kc.snappy_decode(data)
    if codec == LZ4:
        return kc.lz4_decode(data)
    if codec == ZSTD:
        return kc.zstd_decode(data)
    raise CorruptBatchError(f"unknown compression codec {codec}")


def compress(codec: int, data: bytes) -> bytes:
    if codec == NONE:
        return data
    from kafka import codec as kc
    if codec == GZIP:
        return kc.gzip_encode(data)
    if codec == SNAPPY:
        return kc.snappy_encode(data)
    if codec == LZ4:
        return kc.lz4_encode(data)
    if codec == ZSTD:
        return kc.zstd_encode(data)
    raise CorruptBatchError(f"unknown compression codec {codec}")


def batch_payload(batch: bytes | memoryview, h: BatchHeader) -> bytes:
    """The (decompressed) record section of the batch `batch` (which starts at its header)."""
    raw = bytes(batch[HEADER_SIZE:h.size])
    return decompress(h.compression, raw) if h.compression else raw


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
                length, i = _varint(payload, i)
            end = i + length
            if length < 0 or end > n:
                raise CorruptBatchError("record length beyond the batch")
            c = payload[i + 1]  # +1: attributes
            if c < 0x80:
                ts_delta, j = (c >> 1) ^ -(c & 1), i + 2
            else:
                ts_delta, j = _varint(payload, i + 1)
            c = payload[j]
            if c < 0x80:
                off_delta, j = (c >> 1) ^ -(c & 1), j + 1
            else:
                off_delta, j = _varint(payload, j)
            tail = j
            c = payload[j]
            if c < 0x80:
                klen, j = (c >> 1) ^ -(c & 1), j + 1
            else:
                klen, j = _varint(payload, j)
            if klen < 0:
                key = None
            else:
                key = payload[j:j + klen]
                j += klen
            append((off_delta, ts_delta, key, payload[j] == 1, tail, end))  # value length -1 is the byte 0x01
            i = end
    except IndexError:
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
                length, i = _varint(payload, i)
            end = i + length
            if length < 0 or end > n:
                raise CorruptBatchError("record length beyond the batch")
            j = i + 1
            if payload[j] < 0x80:
                j += 1
            else:
                _, j = _varint(payload, j)
            c = payload[j]
            if c < 0x80:
                off_delta, j = (c >> 1) ^ -(c & 1), j + 1
            else:
                off_delta, j = _varint(payload, j)
            c = payload[j]
            if c < 0x80:
                klen, j = (c >> 1) ^ -(c & 1), j + 1
            else:
                klen, j = _varint(payload, j)
            yield off_delta, (None if klen < 0 else payload[j:j + klen])
            i = end
    except IndexError:
        raise CorruptBatchError("truncated record") from None


def check_keys_present(buf: bytes | bytearray | memoryview, pos: int, size: int) -> None:
    """Compacted topics: raise InvalidRecordError (87) when a record of the batch at `pos` has a null key."""
    h = BatchHeader(buf, pos)
    if h.is_control:
        return
    payload = batch_payload(memoryview(buf)[pos:pos + size], h)
    i = 0
    n = len(payload)
    try:
        for _ in range(h.records_count):
            length, i = _varint(payload, i)
            end = i + length
            _, j = _varint(payload, i + 1)
            _, j = _varint(payload, j)
            klen, _ = _varint(payload, j)
            if klen < 0:
                raise InvalidRecordError("Compacted topic cannot accept message without key in topic partition")
            if end > n:
                raise IndexError
            i = end
    except (IndexError, CorruptBatchError):
        raise InvalidRecordError("record batch has malformed records") from None


def _finish_batch(out: bytearray) -> bytes:
    _U32.pack_into(out, CRC_OFFSET, compute_crc(out, 0, len(out)))
    return bytes(out)


def build_retained_batch(h: BatchHeader, payload: bytes, kept: list[ParsedRecord], delete_horizon: int | None
                         ) -> bytes:
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
        _put_varint(rec, ts - new_base)
        _put_varint(rec, r[0])
        rec += payload[r[4]:r[5]]
        _put_varint(body, len(rec))
        body += rec
    codec = h.compression
    records = compress(codec, bytes(body)) if codec else body
    attrs = h.attributes & ~DELETE_HORIZON_MASK
    if delete_horizon is not None:
        attrs |= DELETE_HORIZON_MASK
    max_ts = h.max_timestamp if h.timestamp_type == LOG_APPEND_TIME else max(abs_ts)
    out = bytearray(HEADER_SIZE + len(records))
    HEADER.pack_into(out, 0, h.base_offset, len(out) - LOG_OVERHEAD, h.partition_leader_epoch, 2, 0, attrs,
                     h.last_offset_delta, new_base, max_ts, h.producer_id, h.producer_epoch, h.base_sequence,
                     len(kept))
    out[HEADER_SIZE:] = records
    return _finish_batch(out)


def build_empty_batch(h: BatchHeader) -> bytes:
    """A batch with no records that keeps the offsets, producer fields and max timestamp (Kafka's empty header)."""
    attrs = h.attributes & ~(COMPRESSION_MASK | DELETE_HORIZON_MASK)
    out = bytearray(HEADER_SIZE)
    HEADER.pack_into(out, 0, h.base_offset, HEADER_SIZE - LOG_OVERHEAD, h.partition_leader_epoch, 2, 0, attrs,
                     h.last_offset_delta, -1, h.max_timestamp, h.producer_id, h.producer_epoch, h.base_sequence, 0)
    return _finish_batch(out)


def delete_horizon_of(h: BatchHeader) -> int | None:
    return h.base_timestamp if h.attributes & DELETE_HORIZON_MASK else None


# ---------------------------------------------------------------------------------------------------------------
# offset map

class OffsetMap:
    """Key -> offset map in flat buffers (Kafka's SkimpyOffsetMap): each slot is the key's 16-byte MD5 (one
    bytearray) and its offset + 1 (an int64 array; 0 marks an empty slot), open addressing with linear probing.
    Memory is `slots * 24` bytes, never more than the configured dedupe buffer; the map is "full" at `load_factor`
    of its slots."""

    BYTES_PER_ENTRY = 24

    def __init__(self, memory: int, load_factor: float = 0.9, expected_entries: int | None = None) -> None:
        capacity = max(1, memory // self.BYTES_PER_ENTRY)
        slots = capacity
        if expected_entries is not None:  # no need to touch more memory than the job needs
            slots = min(capacity, max(16, int(expected_entries / load_factor) + 1))
        self.slots = slots
        self.max_entries = max(1, min(int(slots * load_factor), slots - 1))  # always an empty slot: probes end
        self._digests = bytearray(slots * 16)
        self._offsets = array("q", bytes(slots * 8))  # offset + 1; 0 = empty slot
        self.size = 0
        self.latest_offset = -1

    @property
    def full(self) -> bool:
        return self.size >= self.max_entries

    @property
    def utilization(self) -> float:
        return self.size / self.slots

    def put(self, key: bytes, offset: int) -> None:
        digest = _md5(key).digest()
        slots, digests, offsets = self.slots, self._digests, self._offsets
        i = int.from_bytes(digest[:8], "big") % slots
        while offsets[i]:  # linear probing (the hot loop: kept inline)
            if digests[i * 16:i * 16 + 16] == digest:
                break
            i += 1
            if i == slots:
                i = 0
        else:
            digests[i * 16:i * 16 + 16] = digest
            self.size += 1
        offsets[i] = offset + 1
        self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset recorded for `key`, or -1."""
        digest = _md5(key).digest()
        slots, digests, offsets = self.slots, self._digests, self._offsets
        i = int.from_bytes(digest[:8], "big") % slots
        while True:
            o = offsets[i]
            if not o or digests[i * 16:i * 16 + 16] == digest:
                return o - 1
            i += 1
            if i == slots:
                i = 0

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset


# ---------------------------------------------------------------------------------------------------------------
# helpers over segments

def iter_segment_batches(seg: LogSegment, start: int = 0, end: int | None = None, chunk: int = 512 * 1024,
                         on_read: Callable[[int], None] | None = None
                         ) -> Iterator[tuple[int, BatchHeader, memoryview]]:
    """(position, header, batch bytes) for every complete batch in [start, end) of `seg`, read `chunk` bytes at a
    time through the segment's own fd (valid even once the file is unlinked)."""
    end = seg.size if end is None else end
    pos = start
    buf = b""
    buf_start = start
    while pos + HEADER_SIZE <= end:
        rel = pos - buf_start
        if rel + HEADER_SIZE > len(buf):
            buf = seg.read_batch(pos, min(chunk, end - pos))
            buf_start, rel = pos, 0
            if on_read is not None:
                on_read(len(buf))
            if len(buf) < HEADER_SIZE:
                return
        h = BatchHeader(buf, rel)
        size = h.size
        if size < HEADER_SIZE or pos + size > end:
            return
        if rel + size > len(buf):
            buf = seg.read_batch(pos, max(size, min(chunk, end - pos)))
            buf_start, rel = pos, 0
            if on_read is not None:
                on_read(len(buf))
            if len(buf) < size:
                return
        yield pos, h, memoryview(buf)[rel:rel + size]
        pos += size


def segments_overlapping(segments: list[LogSegment], start: int, end: int) -> list[LogSegment]:
    """Kafka's logSegments(from, to): segments holding offsets in [start, end) -- the floor segment of `start`
    onward, up to those whose base offset is below `end`. Pass the log's whole segment list (the last one is taken
    to extend to infinity, as the active segment does)."""
    out = []
    for i, s in enumerate(segments):
        nxt = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if s.base_offset >= end:
            break
        if nxt is not None and nxt <= start:
            continue
        out.append(s)
    return out


def group_segments_by_size(segments: list[LogSegment], max_size: int, max_index_size: int,
                           first_uncleanable: int) -> list[list[LogSegment]]:
    """Consecutive segments grouped so each group's log data and each of its indexes stay within the limits and
    its offsets fit one segment's int32 relative offsets (Kafka's groupSegmentsBySize)."""
    groups: list[list[LogSegment]] = []
    i = 0
    n = len(segments)
    while i < n:
        group = [segments[i]]
        log_size = segments[i].size
        idx_size = segments[i].offset_index.size_in_bytes
        tidx_size = segments[i].time_index.size_in_bytes
        i += 1
        while i < n:
            s = segments[i]
            last = segments[i + 1].base_offset - 1 if i + 1 < n else first_uncleanable - 1
            if (log_size + s.size <= max_size and idx_size + s.offset_index.size_in_bytes <= max_index_size
                    and tidx_size + s.time_index.size_in_bytes <= max_index_size
                    and (s.size == 0 or last - group[0].base_offset <= INT32_MAX)):
                group.append(s)
                log_size += s.size
                idx_size += s.offset_index.size_in_bytes
                tidx_size += s.time_index.size_in_bytes
                i += 1
            else:
                break
        groups.append(group)
    return groups


class Throttler:
    """Caps the cleaner's I/O at `rate` bytes/s (log.cleaner.io.max.bytes.per.second) by sleeping the worker."""

    def __init__(self, rate: float, check: Callable[[], None] = lambda: None) -> None:
        self.rate = rate
        self.check = check
        self._window_start = time.monotonic()
        self._bytes = 0

    def maybe_throttle(self, n: int) -> None:
        if not math.isfinite(self.rate) or self.rate <= 0:
            return
        self._bytes += n
        now = time.monotonic()
        elapsed = now - self._window_start
        wanted = self._bytes / self.rate
        while wanted > elapsed:
            self.check()
            time.sleep(min(0.05, wanted - elapsed))
            elapsed = time.monotonic() - self._window_start
        if elapsed > 1.0:
            self._window_start = time.monotonic()
            self._bytes = 0


# ---------------------------------------------------------------------------------------------------------------
# the cleaned segment being written

class CleanedSegmentWriter:
    """Writes `<base>.log.cleaned` with `.index.cleaned` / `.timeindex.cleaned` (Kafka's index formats, the same
    indexing rule as LogSegment), buffering writes `io_buffer_size` bytes at a time."""

    def __init__(self, dir: Path, base_offset: int, index_interval_bytes: int, max_index_size: int,
                 io_buffer_size: int = 512 * 1024) -> None:
        self.dir = Path(dir)
        self.base_offset = base_offset
        prefix = filename_prefix(base_offset)
        self.log_path = self.dir / (prefix + LOG_SUFFIX + CLEANED_SUFFIX)
        self.index_path = self.dir / (prefix + INDEX_SUFFIX + CLEANED_SUFFIX)
        self.time_index_path = self.dir / (prefix + TIME_INDEX_SUFFIX + CLEANED_SUFFIX)
        for p in self.paths:
            p.unlink(missing_ok=True)
        self.index_interval_bytes = index_interval_bytes
        self.io_buffer_size = max(io_buffer_size, 4096)
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self.offset_index = OffsetIndex(self.index_path, base_offset, max_index_size)
        self.time_index = TimeIndex(self.time_index_path, base_offset, max_index_size)
        self._pending = bytearray()
        self._written = 0
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self._since_index = 0
        self._open = True

    @property
    def paths(self) -> tuple[Path, Path, Path]:
        return (self.log_path, self.index_path, self.time_index_path)

    def append(self, batch: bytes | memoryview, last_offset: int, max_timestamp: int) -> None:
        pos = self.size
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset
        if self._since_index > self.index_interval_bytes and not self.offset_index.is_full:
            self.offset_index.append(last_offset, pos)
            if not self.time_index.is_full:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._since_index = 0
        n = len(batch)
        self._since_index += n
        self._pending += batch
        self.size += n
        self.next_offset = last_offset + 1
        if len(self._pending) >= self.io_buffer_size:
            self._write_pending()

    def _write_pending(self) -> None:
        view = memoryview(self._pending)
        while view:
            k = os.pwrite(self._fd, view, self._written)
            self._written += k
            view = view[k:]
        view.release()
        self._pending.clear()

    def finish(self, mtime: float | None = None) -> None:
        """Write the rest, add the final time index entry (as a roll does), fsync everything and close."""
        self._write_pending()
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True)
        os.fsync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()
        self._close()
        if mtime is not None:
            os.utime(self.log_path, (mtime, mtime))

    def _close(self) -> None:
        if self._open:
            self._open = False
            os.close(self._fd)
            self.offset_index.close()
            self.time_index.close()

    def delete(self) -> None:
        self._close()
        for p in self.paths:
            p.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------------------------
# swap (owner thread) and its crash recovery (startup)

_crash_hook: Callable[[str], None] | None = None  # tests: raise at a named step to simulate a crash


def _step(name: str) -> None:
    if _crash_hook is not None:
        _crash_hook(name)


@dataclass
class PreparedSegment:
    """A cleaned group waiting to be swapped in: the `.cleaned` files and the segments (with the size and next
    offset they had when read) it replaces."""

    writer: CleanedSegmentWriter
    old: list[LogSegment]
    old_state: list[tuple[int, int]]

    @property
    def base_offset(self) -> int:
        return self.writer.base_offset


def _rename_suffix(dir: Path, base: int, suffixes: tuple[str, ...], old: str, new: str) -> None:
    prefix = filename_prefix(base)
    for suffix in suffixes:
        src = dir / (prefix + suffix + old)
        if src.exists():
            os.rename(src, dir / (prefix + suffix + new))


def swap_in_cleaned_segment(log: UnifiedLog, prepared: PreparedSegment) -> LogSegment:
    """Replace `prepared.old` by the cleaned segment, on disk and in `log`'s segment list, atomically for readers
    of the list (call it on the thread that owns the log). Raises CleaningAbortedError, with nothing changed, when the
    old segments are no longer exactly what was cleaned."""
    segs = log._segments
    old = prepared.old
    try:
        i = next(k for k, s in enumerate(segs) if s is old[0])
    except StopIteration:
        raise CleaningAbortedError("the segments being cleaned were removed from the log") from None
    window = segs[i:i + len(old)]
    if len(window) != len(old) or any(a is not b for a, b in zip(window, old)) or i + len(old) >= len(segs):
        raise CleaningAbortedError("the segments being cleaned changed")
    if [(s.size, s.next_offset) for s in old] != prepared.old_state or any(s.deleted for s in old):
        raise CleaningAbortedError("the segments being cleaned were modified")
    dir, base = log.dir, prepared.base_offset
    _step("before-swap")
    # .cleaned -> .swap: indexes first, the log last (the commit point of this replacement)
    _rename_suffix(dir, base, _INDEX_FILE_SUFFIXES, CLEANED_SUFFIX, SWAP_SUFFIX)
    _step("swap-indexes-renamed")
    _rename_suffix(dir, base, (LOG_SUFFIX,), CLEANED_SUFFIX, SWAP_SUFFIX)
    fsync_dir(dir)
    _step("swap-committed")
    for k, s in enumerate(old):
        s.delete()
        _step(f"old-deleted-{k}")
    # .swap -> final: indexes first, the log last, so a `.log.swap` means "not finished"
    _rename_suffix(dir, base, _INDEX_FILE_SUFFIXES, SWAP_SUFFIX, "")
    _step("final-indexes-renamed")
    _rename_suffix(dir, base, (LOG_SUFFIX,), SWAP_SUFFIX, "")
    fsync_dir(dir)
    _step("swapped")
    new, _ = LogSegment.open(dir, base, log.config.index_interval_bytes, log.config.segment_index_bytes)
    segs[i:i + len(old)] = [new]
    log._bases[i:i + len(old)] = [base]
    psm = getattr(log, "producer_state", None)
    if psm is not None:  # as Kafka: producer snapshots of segments deleted (not replaced) go with them
        for s in old:
            if s.base_offset != base:
                psm.remove_snapshot(s.base_offset)
    return new


def active_producer_last_offsets(log: UnifiedLog) -> dict[int, int] | None:
    """producer id -> offset of its last data batch, for the producers the log's producer state still tracks
    (expired ones are gone from it); None when the log keeps no producer state. Call on the log's owner thread."""
    psm = getattr(log, "producer_state", None)
    producers = getattr(psm, "producers", None)
    if not isinstance(producers, dict):
        return None
    out = {}
    for pid, entry in list(producers.items()):
        last = getattr(entry, "last_data_offset", -1)
        if last >= 0:
            out[pid] = last
    return out


def _scan_next_offset(path: Path, base: int) -> int:
    """Offset after the last complete batch of a segment file (headers only)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        end = os.fstat(fd).st_size
        pos, nxt = 0, base
        while pos + HEADER_SIZE <= end:
            h = BatchHeader(os.pread(fd, HEADER_SIZE, pos))
            if h.size < HEADER_SIZE or pos + h.size > end or h.magic != 2:
                break
            nxt = h.next_offset
            pos += h.size
        return nxt
    finally:
        os.close(fd)


def _split_name(name: str) -> tuple[int, str] | None:
    """`<20 digits><suffix>` -> (offset, suffix)."""
    if len(name) > 20 and name[:20].isdigit():
        return int(name[:20]), name[20:]
    return None


def complete_interrupted_swaps(dir: Path) -> list[int]:
    """Startup: finish or roll back a cleaning interrupted by a crash (Kafka's LogLoader rules).

    `.cleaned` files are deleted (the swap never started). A replacement whose `<base>.log.swap` exists was
    committed: the segment files it replaces -- offsets in [base, its next offset) -- are deleted and its `.swap`
    files renamed to the final names. `.swap` indexes without their `.log.swap`, or at or above the lowest
    `.cleaned` offset (KAFKA-12977), were never committed and are deleted. Returns the completed base offsets."""
    dir = Path(dir)
    if not dir.is_dir():
        return []
    files = [f for f in dir.iterdir() if f.is_file()]
    min_cleaned: int | None = None
    swaps: dict[int, list[Path]] = {}
    for f in files:
        parsed = _split_name(f.name)
        if parsed is None:
            continue
        off, suffix = parsed
        if suffix.endswith(CLEANED_SUFFIX):
            min_cleaned = off if min_cleaned is None else min(min_cleaned, off)
            f.unlink(missing_ok=True)
        elif suffix.endswith(SWAP_SUFFIX) and suffix[:-len(SWAP_SUFFIX)] in _SEGMENT_FILE_SUFFIXES:
            swaps.setdefault(off, []).append(f)
    ranges: list[tuple[int, int]] = []
    for base, paths in sorted(swaps.items()):
        log_swap = dir / (filename_prefix(base) + LOG_SUFFIX + SWAP_SUFFIX)
        if log_swap not in paths or (min_cleaned is not None and base >= min_cleaned):
            for p in paths:
                p.unlink(missing_ok=True)
            continue
        ranges.append((base, _scan_next_offset(log_swap, base)))
    if not ranges:
        return []
    for f in dir.iterdir():
        parsed = _split_name(f.name)
        if parsed is None or parsed[1] not in _SEGMENT_FILE_SUFFIXES:
            continue
        if any(lo <= parsed[0] < hi for lo, hi in ranges):
            f.unlink(missing_ok=True)  # a segment the committed swap replaces (or its half-renamed index)
    for base, _ in ranges:
        _rename_suffix(dir, base, _INDEX_FILE_SUFFIXES, SWAP_SUFFIX, "")
        _rename_suffix(dir, base, (LOG_SUFFIX,), SWAP_SUFFIX, "")
    fsync_dir(dir)
    return [b for b, _ in ranges]


# ---------------------------------------------------------------------------------------------------------------
# the cleaner

@dataclass
class CleanerStats:
    map_bytes_read: int = 0
    map_messages_read: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    messages_read: int = 0
    messages_written: int = 0
    tombstones_dropped: int = 0
    invalid_messages: int = 0
    groups: int = 0
    buffer_utilization: float = 0.0
    start_time: float = field(default_factory=time.monotonic)
    end_time: float = 0.0

    @property
    def recopy_ratio(self) -> float:
        return self.bytes_written / self.bytes_read if self.bytes_read else 0.0

    @property
    def elapsed_secs(self) -> float:
        return (self.end_time or time.monotonic()) - self.start_time


@dataclass
class CleanResult:
    end_offset: int  # first offset not cleaned: the new cleaner checkpoint
    stats: CleanerStats


def run_direct(fn: Callable[[], T]) -> T:
    return fn()


class Cleaner:
    """Cleans one log at a time. `clean` does the heavy work on the calling (worker) thread; each group's swap runs
    through `swap` (default: inline) so a broker can execute it on its event loop."""

    def __init__(self, dedupe_buffer_size: int = 128 * 1024 * 1024, load_factor: float = 0.9,
                 io_buffer_size: int = 512 * 1024, max_io_bytes_per_second: float = math.inf,
                 producer_id_expiration_ms: int = 86_400_000) -> None:
        self.dedupe_buffer_size = dedupe_buffer_size
        self.load_factor = load_factor
        self.io_buffer_size = io_buffer_size
        self.max_io_bytes_per_second = max_io_bytes_per_second
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.abort = threading.Event()
        self.last_stats: CleanerStats | None = None

    def check_done(self) -> None:
        if self.abort.is_set():
            raise CleaningAbortedError("cleaner shutting down")

    # -- producers ---------------------------------------------------------------------------------------------
    def _last_batches_of_producers(self, segments: list[LogSegment], now: int, throttler: Throttler
                                   ) -> dict[int, int]:
        """producer id -> last offset of its last batch, for producers not expired (last batch's max timestamp
        within producer.id.expiration.ms). Read from the batch headers of the whole log."""
        last: dict[int, tuple[int, int]] = {}
        for seg in segments:
            for _, h in seg.iter_headers(0, seg.size):
                pid = h.producer_id
                if pid >= 0:
                    last[pid] = (h.last_offset, h.max_timestamp)
            self.check_done()
            throttler.maybe_throttle(seg.size)
        horizon = now - self.producer_id_expiration_ms
        return {pid: off for pid, (off, ts) in last.items() if ts >= horizon or ts < 0}

    # -- the map -------------------------------------------------------------------------------------------------
    def build_offset_map(self, segments: list[LogSegment], start: int, end: int, stats: CleanerStats,
                         throttler: Throttler) -> OffsetMap:
        dirty = segments_overlapping(segments, start, end)
        expected = 0
        for seg in dirty:
            for _, h in seg.iter_headers(0, seg.size):
                if h.last_offset >= start and not h.is_control:
                    expected += h.records_count
        omap = OffsetMap(self.dedupe_buffer_size, self.load_factor, expected_entries=expected)
        omap.latest_offset = start - 1
        for k, seg in enumerate(dirty):
            next_start = dirty[k + 1].base_offset if k + 1 < len(dirty) else end
            if self._map_segment(seg, omap, start, end, stats, throttler):
                break
            omap.update_latest_offset(max(omap.latest_offset, next_start - 1))
        return omap

    def _map_segment(self, seg: LogSegment, omap: OffsetMap, start: int, end: int, stats: CleanerStats,
                     throttler: Throttler) -> bool:
        """Add the segment's keys at offsets >= start; True when the map filled up (a partial segment)."""
        _, pos = seg.offset_index.lookup(start)

        def on_read(n: int) -> None:
            stats.map_bytes_read += n
            throttler.maybe_throttle(n)
            self.check_done()

        for _, h, batch in iter_segment_batches(seg, pos, seg.size, self.io_buffer_size, on_read):
            if h.base_offset >= end:
                return False
            if not h.is_control and h.last_offset >= start:
                base = h.base_offset
                for delta, key in iter_keys(batch_payload(batch, h), h.records_count):
                    off = base + delta
                    if key is not None and off >= start:
                        if omap.full:
                            return True
                        omap.put(key, off)
                    stats.map_messages_read += 1
            if h.last_offset >= start:
                omap.update_latest_offset(max(omap.latest_offset, h.last_offset))
        return False

    # -- cleaning ------------------------------------------------------------------------------------------------
    def clean(self, log: UnifiedLog, first_dirty: int, first_uncleanable: int, now_ms: int | None = None,
              swap: Callable[[Callable[[], T]], T] = run_direct) -> CleanResult:
        """Clean `log` from its start up to where the offset map over [first_dirty, first_uncleanable) reached.

        Returns the end offset (the next cleaner checkpoint). Raises CleaningAbortedError when stopped or when the
        log changed under a group (groups swapped before that stay swapped: each swap is complete on its own)."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        stats = CleanerStats()
        throttler = Throttler(self.max_io_bytes_per_second, self.check_done)
        segments = log.segments
        active = segments[-1]
        first_uncleanable = min(first_uncleanable, active.base_offset)
        if first_uncleanable <= first_dirty:
            stats.end_time = time.monotonic()
            return CleanResult(first_dirty, stats)
        omap = self.build_offset_map(segments, first_dirty, first_uncleanable, stats, throttler)
        end_offset = omap.latest_offset + 1
        stats.buffer_utilization = omap.utilization
        if end_offset <= first_dirty:
            # the map could not hold even the first batch: no progress possible with this dedupe buffer
            stats.end_time = time.monotonic()
            self.last_stats = stats
            return CleanResult(first_dirty, stats)
        producers = swap(lambda: active_producer_last_offsets(log))
        if producers is None:
            producers = self._last_batches_of_producers(segments, now, throttler)
        to_clean = [s for s in segments[:-1] if s.base_offset < end_offset]
        cfg = log.config
        groups = group_segments_by_size(to_clean, cfg.segment_bytes, cfg.segment_index_bytes, first_uncleanable)
        delete_retention_ms = cfg.values["delete.retention.ms"]
        for group in groups:
            self.check_done()
            prepared = self._clean_group(log, group, omap, now, delete_retention_ms, producers,
                                         first_uncleanable, stats, throttler)
            try:
                swap(lambda p=prepared: swap_in_cleaned_segment(log, p))
            except BaseException:
                prepared.writer.delete()
                raise
            stats.groups += 1
        stats.end_time = time.monotonic()
        self.last_stats = stats
        return CleanResult(end_offset, stats)

    def _clean_group(self, log: UnifiedLog, group: list[LogSegment], omap: OffsetMap, now: int,
                     delete_retention_ms: int, producers: dict[int, int], upper_bound: int, stats: CleanerStats,
                     throttler: Throttler) -> PreparedSegment:
        cfg = log.config
        old_state = [(s.size, s.next_offset) for s in group]
        writer = CleanedSegmentWriter(log.dir, group[0].base_offset, cfg.index_interval_bytes,
                                      cfg.segment_index_bytes, self.io_buffer_size)
        try:
            latest = omap.latest_offset
            group_end = max(s.next_offset for s in group)

            def on_read(n: int) -> None:
                stats.bytes_read += n
                throttler.maybe_throttle(n)
                self.check_done()

            for seg in group:
                for _, h, batch in iter_segment_batches(seg, 0, seg.size, self.io_buffer_size, on_read):
                    out = self._filter_batch(h, batch, omap, latest, now, delete_retention_ms, producers,
                                             upper_bound, group_end, stats)
                    if out is not None:
                        data, max_ts = out
                        writer.append(data, h.last_offset, max_ts)
                        stats.bytes_written += len(data)
                        throttler.maybe_throttle(len(data))
            try:
                mtime: float | None = os.stat(group[-1].log_path).st_mtime  # keep the replaced files' age
            except OSError:
                mtime = None
            writer.finish(mtime)
        except BaseException:
            writer.delete()
            raise
        return PreparedSegment(writer, list(group), old_state)

    def _filter_batch(self, h: BatchHeader, batch: memoryview, omap: OffsetMap, latest: int, now: int,
                      delete_retention_ms: int, producers: dict[int, int], upper_bound: int, group_end: int,
                      stats: CleanerStats) -> tuple[bytes | memoryview, int] | None:
        """The bytes to keep for one batch (and their max timestamp), or None to drop it."""
        if h.is_control:
            stats.messages_read += h.records_count
            stats.messages_written += h.records_count
            return batch, h.max_timestamp
        retain_empty = ((h.producer_id >= 0 and producers.get(h.producer_id) == h.last_offset)
                        or h.next_offset == upper_bound or h.next_offset == group_end)
        horizon = delete_horizon_of(h)
        keep_deletes = horizon is None or now < horizon
        payload = batch_payload(batch, h)
        recs = parse_records(payload, h.records_count)
        base = h.base_offset
        kept: list[ParsedRecord] = []
        tombstones = False
        omap_get = omap.get
        for r in recs:
            off = base + r[0]
            key = r[2]
            if off > latest:
                keep = True
            elif key is None:
                stats.invalid_messages += 1
                keep = False
            else:
                keep = off >= omap_get(key) and (not r[3] or keep_deletes)
                if not keep and r[3] and off >= omap_get(key):
                    stats.tombstones_dropped += 1
            if keep:
                kept.append(r)
                if r[3]:
                    tombstones = True
        stats.messages_read += len(recs)
        stats.messages_written += len(kept)
        if kept:
            need_horizon = tombstones and horizon is None
            if len(kept) == len(recs) and not need_horizon:
                return batch, h.max_timestamp
            new_horizon = now + delete_retention_ms if need_horizon else horizon
            data = build_retained_batch(h, payload, kept, new_horizon)
            return data, BatchHeader(data).max_timestamp
        if retain_empty:
            return build_empty_batch(h), h.max_timestamp
        return None


__all__ = [
    "CLEANED_SUFFIX",
    "SWAP_SUFFIX",
    "CleanResult",
    "CleanedSegmentWriter",
    "Cleaner",
    "CleanerStats",
    "CleaningAbortedError",
    "OffsetMap",
    "PreparedSegment",
    "active_producer_last_offsets",
    "build_empty_batch",
    "build_retained_batch",
    "check_keys_present",
    "complete_interrupted_swaps",
    "group_segments_by_size",
    "iter_segment_batches",
    "parse_records",
    "run_direct",
    "segments_overlapping",
    "swap_in_cleaned_segment",
]
