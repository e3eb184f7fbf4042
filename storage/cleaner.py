"""Log compaction: Kafka's Cleaner for one log -- it builds the offset map over the dirty range, writes each group
of segments as one cleaned segment and has it swapped in.

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
  startup swap completion can then delete precisely the segments a `.swap` replaced. A segment may so hold only
  empty batches; a Fetch there carries them on into the next segment's data (`UnifiedLog._read`), since librdkafka
  fails a partition after eleven responses that deliver no record (MSG_SIZE_TOO_LARGE).
* Transactions (storage/cleaner_txn.py, Kafka's CleanedTransactionMetadata): records of aborted transactions are
  neither mapped nor kept; an abort marker stays (its `.txnindex` entry copied into the cleaned segment) while the
  pass still saw its data; a marker with nothing left to mark gets a delete horizon and goes in a cleaning after it.
  Cleaning stops at the LSO.

The cleaned group replaces its segments through `UnifiedLog.replace_segments` (storage/segment_swap.py has the
crash-safe `.cleaned` / `.swap` file protocol and its startup completion); the offset map is storage/offset_map.py
and the record codec storage/record_codec.py.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Protocol, TypeVar

from strata.config import broker_default
from strata.protocol.records import HEADER_SIZE, BatchHeader

from .cleaner_txn import CleanedTransactions
from .index import INT32_MAX, OffsetIndex, TimeIndex
from .log import SegmentsChangedError, UnifiedLog
from .offset_map import OffsetMap
from .record_codec import (
    ParsedRecord,
    batch_payload,
    build_empty_batch,
    build_retained_batch,
    delete_horizon_of,
    iter_keys,
    parse_records,
)
from .segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LogSegment, filename_prefix
from .segment_swap import CLEANED_SUFFIX
from .txn_index import AbortedTxn, encode_entries

T = TypeVar("T")


class SwapRunner(Protocol):
    """Runs `fn` on the log's owner thread (the broker's event loop) and returns its result."""

    def __call__(self, fn: Callable[[], T], /) -> T: ...


class CleaningAbortedError(Exception):
    """The cleaning of a log stopped (shutdown, the log changed or went away); nothing was swapped by this step."""


# ---------------------------------------------------------------------------------------------------------------
# helpers over segments


def iter_segment_batches(
    seg: LogSegment,
    start: int = 0,
    end: int | None = None,
    chunk: int = 512 * 1024,
    on_read: Callable[[int], None] | None = None,
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
        yield pos, h, memoryview(buf)[rel : rel + size]
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


def group_segments_by_size(
    segments: list[LogSegment], max_size: int, max_index_size: int, first_uncleanable: int
) -> list[list[LogSegment]]:
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
            if (
                log_size + s.size <= max_size
                and idx_size + s.offset_index.size_in_bytes <= max_index_size
                and tidx_size + s.time_index.size_in_bytes <= max_index_size
                and (s.size == 0 or last - group[0].base_offset <= INT32_MAX)
            ):
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
    indexing rule as LogSegment) and, when an abort marker is kept, `.txnindex.cleaned`, buffering writes
    `io_buffer_size` bytes at a time."""

    def __init__(
        self,
        dir: Path,
        base_offset: int,
        index_interval_bytes: int,
        max_index_size: int,
        io_buffer_size: int = 512 * 1024,
    ) -> None:
        self.dir = Path(dir)
        self.base_offset = base_offset
        prefix = filename_prefix(base_offset)
        self.log_path = self.dir / (prefix + LOG_SUFFIX + CLEANED_SUFFIX)
        self.index_path = self.dir / (prefix + INDEX_SUFFIX + CLEANED_SUFFIX)
        self.time_index_path = self.dir / (prefix + TIME_INDEX_SUFFIX + CLEANED_SUFFIX)
        self.txn_index_path = self.dir / (prefix + TXN_INDEX_SUFFIX + CLEANED_SUFFIX)
        self.aborted_txns: list[AbortedTxn] = []  # entries of the abort markers kept, in offset order
        self.txn_index_path.unlink(missing_ok=True)
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
        if self.aborted_txns:
            fd = os.open(self.txn_index_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, encode_entries(self.aborted_txns))
                os.fsync(fd)
            finally:
                os.close(fd)
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
        self.txn_index_path.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------------------------
# swap (on the owner thread)


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


def swap_in_cleaned_segment(log: UnifiedLog, prepared: PreparedSegment) -> LogSegment:
    """Replace `prepared.old` by the cleaned segment, on disk and in `log`'s segment list, atomically for readers
    of the list (call it on the thread that owns the log). Raises CleaningAbortedError, with nothing changed, when the
    old segments are no longer exactly what was cleaned."""
    try:
        return log.replace_segments(prepared.base_offset, prepared.old, prepared.old_state)
    except SegmentsChangedError as e:
        raise CleaningAbortedError(str(e)) from e


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

    def __init__(
        self,
        dedupe_buffer_size: int = broker_default("log.cleaner.dedupe.buffer.size"),
        load_factor: float = broker_default("log.cleaner.io.buffer.load.factor"),
        io_buffer_size: int = broker_default("log.cleaner.io.buffer.size"),
        max_io_bytes_per_second: float = math.inf,
        producer_id_expiration_ms: int = broker_default("producer.id.expiration.ms"),
    ) -> None:
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
    def _last_batches_of_producers(self, segments: list[LogSegment], now: int, throttler: Throttler) -> dict[int, int]:
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
    def build_offset_map(
        self,
        segments: list[LogSegment],
        start: int,
        end: int,
        stats: CleanerStats,
        throttler: Throttler,
        aborted: Iterable[AbortedTxn] = (),
    ) -> OffsetMap:
        """The latest offset of each key in [start, end), records of aborted transactions (`aborted`: the log's
        entries overlapping the range) left out."""
        dirty = segments_overlapping(segments, start, end)
        expected = 0
        for seg in dirty:
            for _, h in seg.iter_headers(0, seg.size):
                if h.last_offset >= start and not h.is_control:
                    expected += h.records_count
        omap = OffsetMap(self.dedupe_buffer_size, self.load_factor, expected_entries=expected)
        omap.latest_offset = start - 1
        txns = CleanedTransactions()
        txns.add_aborted(aborted)
        for k, seg in enumerate(dirty):
            next_start = dirty[k + 1].base_offset if k + 1 < len(dirty) else end
            if self._map_segment(seg, omap, start, end, stats, throttler, txns):
                break
            omap.update_latest_offset(max(omap.latest_offset, next_start - 1))
        return omap

    def _map_segment(
        self,
        seg: LogSegment,
        omap: OffsetMap,
        start: int,
        end: int,
        stats: CleanerStats,
        throttler: Throttler,
        txns: CleanedTransactions,
    ) -> bool:
        """Add the segment's keys at offsets >= start; True when the map filled up (a partial segment)."""
        _, pos = seg.offset_index.lookup(start)

        def on_read(n: int) -> None:
            stats.map_bytes_read += n
            throttler.maybe_throttle(n)
            self.check_done()

        for _, h, batch in iter_segment_batches(seg, pos, seg.size, self.io_buffer_size, on_read):
            if h.base_offset >= end:
                return False
            if h.is_control:
                txns.on_control(h, batch)
            elif not txns.on_batch(h) and h.last_offset >= start:
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
    def clean(
        self,
        log: UnifiedLog,
        first_dirty: int,
        first_uncleanable: int,
        now_ms: int | None = None,
        swap: SwapRunner = run_direct,
    ) -> CleanResult:
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
        aborted = swap(lambda: log.collect_aborted_transactions(first_dirty, first_uncleanable))
        omap = self.build_offset_map(segments, first_dirty, first_uncleanable, stats, throttler, aborted)
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
        txns = CleanedTransactions()  # one walk over the groups, oldest first, as Kafka's doClean
        for group in groups:
            self.check_done()
            start, stop = group[0].base_offset, max(s.next_offset for s in group)
            txns.add_aborted(swap(lambda: log.collect_aborted_transactions(start, stop)))  # noqa: B023 - run now
            prepared = self._clean_group(
                log,
                group,
                omap,
                now,
                delete_retention_ms,
                producers,
                first_uncleanable,
                stats,
                throttler,
                txns,
            )
            try:
                swap(partial(swap_in_cleaned_segment, log, prepared))
            except BaseException:
                prepared.writer.delete()
                raise
            stats.groups += 1
        stats.end_time = time.monotonic()
        self.last_stats = stats
        return CleanResult(end_offset, stats)

    def _clean_group(
        self,
        log: UnifiedLog,
        group: list[LogSegment],
        omap: OffsetMap,
        now: int,
        delete_retention_ms: int,
        producers: dict[int, int],
        upper_bound: int,
        stats: CleanerStats,
        throttler: Throttler,
        txns: CleanedTransactions,
    ) -> PreparedSegment:
        cfg = log.config
        old_state = [(s.size, s.next_offset) for s in group]
        writer = CleanedSegmentWriter(
            log.dir, group[0].base_offset, cfg.index_interval_bytes, cfg.segment_index_bytes, self.io_buffer_size
        )
        txns.retained_aborts = writer.aborted_txns  # the abort markers this group keeps
        try:
            latest = omap.latest_offset
            group_end = max(s.next_offset for s in group)

            def on_read(n: int) -> None:
                stats.bytes_read += n
                throttler.maybe_throttle(n)
                self.check_done()

            for seg in group:
                for _, h, batch in iter_segment_batches(seg, 0, seg.size, self.io_buffer_size, on_read):
                    out = self._filter_batch(
                        h, batch, omap, latest, now, delete_retention_ms, producers, upper_bound, group_end, stats, txns
                    )
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

    def _filter_batch(
        self,
        h: BatchHeader,
        batch: memoryview,
        omap: OffsetMap,
        latest: int,
        now: int,
        delete_retention_ms: int,
        producers: dict[int, int],
        upper_bound: int,
        group_end: int,
        stats: CleanerStats,
        txns: CleanedTransactions,
    ) -> tuple[bytes | memoryview, int] | None:
        """The bytes to keep for one batch (and their max timestamp), or None to drop it."""
        retain_empty = (
            (h.producer_id >= 0 and producers.get(h.producer_id) == h.last_offset)
            or h.next_offset == upper_bound
            or h.next_offset == group_end
        )
        horizon = delete_horizon_of(h)
        stats.messages_read += h.records_count
        if h.is_control:
            if not txns.on_control(h, batch) or (h.records_count == 0 and retain_empty):
                stats.messages_written += h.records_count
                return batch, h.max_timestamp
            if h.records_count and horizon is None:  # a marker with nothing left to mark: removable after
                payload = batch_payload(batch, h)  # delete.retention.ms (KIP-534)
                data = build_retained_batch(
                    h, payload, parse_records(payload, h.records_count), now + delete_retention_ms
                )
                stats.messages_written += h.records_count
                return data, BatchHeader(data).max_timestamp
            if horizon is not None and now < horizon:
                stats.messages_written += h.records_count
                return batch, h.max_timestamp
            return (build_empty_batch(h), h.max_timestamp) if retain_empty else None
        if txns.on_batch(h):  # an aborted transaction's records
            return (build_empty_batch(h), h.max_timestamp) if retain_empty else None
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
    "CleanResult",
    "CleanedSegmentWriter",
    "Cleaner",
    "CleanerStats",
    "CleaningAbortedError",
    "PreparedSegment",
    "SwapRunner",
    "active_producer_last_offsets",
    "group_segments_by_size",
    "iter_segment_batches",
    "run_direct",
    "segments_overlapping",
    "swap_in_cleaned_segment",
]
