"""UnifiedLog: one partition's log -- segments, offsets (log start, LEO, HW, recovery point), append, read,
roll, retention, truncation and crash recovery.

Threading: the broker's event loop is the only mutator. `flush` may run in a worker thread: it snapshots the
segment list and LEO first, fsyncs, and only then publishes the new recovery point. Hot paths (append, read) do
per-batch header work only; records are never decoded.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from strata.config import LogConfig
from strata.protocol.constants import (  # ListOffsets sentinels, re-exported for storage's callers
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)
from strata.protocol.record_validation import ScannedRecords, check_records, inflate_limit, scan_records
from strata.protocol.records import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    TRANSACTIONAL_MASK,
    BatchHeader,
    RecordBatchError,
    iter_records,
    set_base_offset_and_epoch,
    set_log_append_time,
    set_max_timestamp,
    validate_batch_fields,
    validate_replicated_batch,
)

from .checkpoints import fsync_path
from .epoch_cache import LEADER_EPOCH_CHECKPOINT, EpochEntry, LeaderEpochFileCache
from .errors import (
    InvalidRecordError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    from_batch_error,
    record_validation_error,
)
from .file_cache import as_path
from .file_region import FileRegion
from .producer_state import CompletedTxn, ProducerStateEntry, ProducerStateManager, read_end_marker
from .record_codec import check_keys_present
from .segment import DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LogSegment
from .segment_swap import CLEANED_SUFFIX, SWAP_SUFFIX, complete_interrupted_swaps, swap_in_cleaned_files
from .txn_index import AbortedTxn

_TEMP_SUFFIXES = (DELETED_SUFFIX, ".tmp", CLEANED_SUFFIX, SWAP_SUFFIX)
_SEGMENT_SUFFIXES = frozenset((LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX))


class SegmentsChangedError(Exception):
    """`replace_segments`: the segments to replace are no longer exactly those the replacement was made from."""


@dataclass
class LogAppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    record_count: int
    valid_bytes: int
    duplicate: bool = False  # an idempotent producer's retry of a batch already in the log: nothing was written


@dataclass
class FetchDataInfo:
    records: bytes | memoryview  # whole batches, may be empty
    first_offset: int  # base offset of the first batch returned, or the fetch offset when empty


@dataclass
class ZeroCopyFetchDataInfo:
    """`UnifiedLog.read_zero_copy`: as FetchDataInfo, the records possibly a FileRegion not read yet."""

    records: bytes | memoryview | FileRegion
    first_offset: int


@dataclass
class TimestampAndOffset:
    timestamp: int
    offset: int
    leader_epoch: int | None


def parse_topic_partition(dir_name: str) -> tuple[str, int]:
    """`<topic>-<partition>`; topics may contain '-', so split at the last one."""
    topic, sep, part = dir_name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        raise ValueError(f"not a partition directory name: {dir_name!r}")
    return topic, int(part)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _next_offset_after(records: bytes | memoryview) -> int:
    """The offset after the last whole batch of `records` (headers only)."""
    pos, total, nxt = 0, len(records), -1
    while pos + HEADER_SIZE <= total:
        h = BatchHeader(records, pos)
        if h.size < HEADER_SIZE or pos + h.size > total:
            break
        nxt = h.last_offset + 1
        pos += h.size
    return nxt


def _next_offset_after_if_recordless(records: bytes | memoryview) -> int | None:
    """The offset after `records` when they are whole batches that hold no record and no control record (a
    compacted group's retained empty batches), else None."""
    if not records:
        return None
    pos, total, nxt = 0, len(records), None
    while pos + HEADER_SIZE <= total:
        h = BatchHeader(records, pos)
        if h.records_count or h.size < HEADER_SIZE or pos + h.size > total:
            return None
        nxt = h.last_offset + 1
        pos += h.size
    return nxt


def _read_region(region: FileRegion) -> bytes:
    """The bytes of a region, which is then released."""
    try:
        return bytes(region)
    finally:
        region.close()


class UnifiedLog:
    """A partition's local log. Invariants: log_start_offset <= local_log_start_offset <= HW <= LEO and
    log_start_offset <= LSO <= HW."""

    dir: Path
    topic: str
    partition: int
    topic_id: uuid.UUID
    config: LogConfig
    log_start_offset: int
    local_log_start_offset: int
    high_watermark: int
    recovery_point: int
    leader_epoch_cache: LeaderEpochFileCache

    def __init__(
        self, dir: Path, topic_id: uuid.UUID, config: LogConfig, *, names: Iterable[str] | None = None
    ) -> None:
        """Use `UnifiedLog.open`; this only sets fields (`names`: the dir's file names, when already listed)."""
        self.dir = as_path(dir)
        self.topic, self.partition = parse_topic_partition(self.dir.name)
        self.topic_id = topic_id
        self.config = config
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.local_log_start_offset = 0
        self.high_watermark = 0
        self.recovery_point = 0
        # called (event loop) when the log gets its first unflushed message: the LogManager's set of dirty logs
        self.on_dirty: Callable[[UnifiedLog], None] | None = None
        # called (event loop) with the new segment's base offset when the log rolls: Kafka then flushes the log up
        # to that offset, so the recovery point follows the rolls and a crash recovers only the newest segment
        self.on_roll: Callable[[UnifiedLog, int], None] | None = None
        self._appended_messages = 0  # written by the event loop only
        self._flushed_messages = 0  # written by flush only (maybe another thread)
        self._last_flush_ms = _now_ms()
        self._segments_created = 0
        self._segments_created_synced = 0
        self.leader_epoch_cache = LeaderEpochFileCache(self.dir / LEADER_EPOCH_CHECKPOINT)
        self.producer_state = ProducerStateManager(self.dir, names=names)
        # KIP-405: the highest offset copied to remote storage (-1: none yet), maintained by the RemoteLogManager.
        # Local retention may only delete segments at or below it.
        self.highest_offset_in_remote_storage = -1
        # Iceberg topics: retention keeps segments at or above the next offset to translate (None: no hold) while
        # the untranslated closed segments stay within `retention_hold_max_bytes` (-1: no cap). Set by the broker.
        self.retention_hold_offset: int | None = None
        self.retention_hold_max_bytes = -1

    @property
    def remote_log_enabled(self) -> bool:
        """Tiered topic: remote.storage.enable (only ever true when the broker's remote log system is on)."""
        return bool(self.config.values.get("remote.storage.enable", False))

    # ------------------------------------------------------------------------------------------------------
    # loading
    @classmethod
    def open(
        cls,
        dir: Path,
        topic_id: uuid.UUID,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int = 0,
        needs_recovery: bool,
    ) -> UnifiedLog:
        """Load (or create) the log in `dir`.

        needs_recovery (no clean-shutdown marker): every segment from the one holding `recovery_point` onward is
        validated batch by batch, a torn/corrupt tail is truncated (later segments dropped) and its indexes are
        rebuilt. A clean open trusts the data but rebuilds missing or insane indexes. As Kafka's LogLoader, recovery
        neither fsyncs nor moves the recovery point past its checkpoint: only a flush advances it, so a crash before
        the next flush recovers the same segments again (and 20,000 logs do not cost 20,000 fsyncs at startup).
        """
        dir = as_path(dir)
        try:
            names = os.listdir(dir)  # one listing serves the whole load (thousands of partitions load at startup)
        except FileNotFoundError:
            dir.mkdir(parents=True, exist_ok=True)
            names = []
        if any(n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX)) for n in names):
            complete_interrupted_swaps(dir)  # log cleaner: drop `.cleaned`, finish committed `.swap` (as LogLoader)
            names = os.listdir(dir)
        bases: list[int] = []
        kept: list[str] = []
        for name in names:
            if name.endswith(_TEMP_SUFFIXES):
                (dir / name).unlink(missing_ok=True)
                continue
            kept.append(name)
            if name.endswith(LOG_SUFFIX) and name[: -len(LOG_SUFFIX)].isdigit():
                bases.append(int(name[: -len(LOG_SUFFIX)]))
        bases.sort()
        known = set(bases)
        listing: dict[str, os.stat_result] = {}
        dir_str = str(dir)
        for name in kept:
            stem, dot, suffix = name.partition(".")
            if not dot or not stem.isdigit() or "." + suffix not in _SEGMENT_SUFFIXES:
                continue
            if int(stem) not in known:
                (dir / name).unlink(missing_ok=True)  # orphan index of a deleted segment
                continue
            try:
                listing[name] = os.stat(os.path.join(dir_str, name))
            except FileNotFoundError:
                pass
        self = cls(dir, topic_id, config, names=kept)
        first_to_recover = max(0, bisect_right(bases, recovery_point) - 1) if needs_recovery else len(bases)
        for i, base in enumerate(bases):
            seg, truncated = LogSegment.open(
                self.dir,
                base,
                config.index_interval_bytes,
                config.segment_index_bytes,
                recover=i >= first_to_recover,
                listing=listing,
            )
            self._add_segment(seg)
            if truncated:
                # data after a corrupt point cannot be trusted: drop the later segments (as Kafka does)
                for later in bases[i + 1 :]:
                    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                        (self.dir / f"{later:020d}{suffix}").unlink(missing_ok=True)
                break
        if not self._segments:
            self._add_segment(self._new_segment(log_start_offset))
        leo = self.log_end_offset
        if self.remote_log_enabled:
            # Tiered: the log start may lie in remote storage, below the first local segment.
            self.log_start_offset = min(log_start_offset, leo)
        else:
            self.log_start_offset = max(log_start_offset, self._segments[0].base_offset)
        if self.log_start_offset > leo:
            self.truncate_fully_and_start_at(self.log_start_offset)
            leo = self.log_end_offset
        self.local_log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
        self.recovery_point = min(max(recovery_point, self.log_start_offset), leo)
        self.high_watermark = min(max(high_watermark, self.log_start_offset), leo)
        self.leader_epoch_cache = LeaderEpochFileCache.load(self.dir / LEADER_EPOCH_CHECKPOINT)
        self.leader_epoch_cache.truncate_from_end(leo)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self.producer_state.remove_stray_snapshots(self._bases)
        self._rebuild_producer_state(reload_from_clean_shutdown=not needs_recovery)
        return self

    def _new_segment(self, base_offset: int) -> LogSegment:
        path = self.dir / f"{base_offset:020d}{LOG_SUFFIX}"
        if path.exists() and path.stat().st_size > 0:
            raise KafkaStorageError(f"segment {path} already exists with data")
        seg = LogSegment(self.dir, base_offset, self.config.index_interval_bytes, self.config.segment_index_bytes)
        self._segments_created += 1
        return seg

    def _add_segment(self, seg: LogSegment) -> None:
        self._segments.append(seg)
        self._bases.append(seg.base_offset)

    def _remove_first_segment(self) -> LogSegment:
        seg = self._segments.pop(0)
        self._bases.pop(0)
        seg.delete()
        self.producer_state.remove_snapshot(seg.base_offset)
        return seg

    # ------------------------------------------------------------------------------------------------------
    # offsets and properties
    @property
    def log_end_offset(self) -> int:
        """LEO: the offset the next appended record gets."""
        return self._segments[-1].next_offset

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> list[LogSegment]:
        """Oldest first (a copy: safe to iterate while the log changes)."""
        return list(self._segments)

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def unflushed_messages(self) -> int:
        return self._appended_messages - self._flushed_messages

    @property
    def last_flush_time_ms(self) -> int:
        return self._last_flush_ms

    @property
    def latest_epoch(self) -> int | None:
        return self.leader_epoch_cache.latest_epoch

    def epoch_for_offset(self, offset: int) -> int | None:
        return self.leader_epoch_cache.epoch_for_offset(offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetsForLeaderEpoch; (-1, -1) when unknown."""
        return self.leader_epoch_cache.end_offset_for(epoch, self.log_end_offset)

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for seg in self._segments:
            seg.index_interval_bytes = config.index_interval_bytes

    def update_high_watermark(self, hw: int) -> None:
        self.high_watermark = min(max(hw, self.log_start_offset), self.log_end_offset)

    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest transaction not yet decided and replicated (None: none), never below the
        log start offset (DeleteRecords may pass an open transaction's start, as in Kafka)."""
        first = self.producer_state.first_unstable_offset(self.high_watermark)
        return None if first is None else max(first, self.log_start_offset)

    @property
    def last_stable_offset(self) -> int:
        """LSO: READ_COMMITTED consumers read below it. min(first unstable offset, HW), so
        log start <= LSO <= HW <= LEO."""
        hw = self.high_watermark
        if not self.producer_state.ongoing_txns and not self.producer_state.unreplicated_txns:
            return hw
        first = self.first_unstable_offset
        return hw if first is None or first >= hw else first

    def collect_aborted_transactions(self, start_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start_offset, upper_bound) from the local segments' `.txnindex`
        (Kafka's collectAbortedTransactions): from the segment holding `start_offset` on, until an entry's LSO
        shows that no later abort can overlap the range (an abort's entry is in the segment of its marker, which may
        lie past `upper_bound`)."""
        out: list[AbortedTxn] = []
        segs = self._segments
        i = max(0, bisect_right(self._bases, start_offset) - 1)
        while i < len(segs):
            idx = segs[i].txn_index
            if idx.entries:
                found = idx.collect(start_offset, upper_bound)
                out.extend(found.aborted_transactions)
                if found.is_complete:
                    break
            i += 1
        return out

    def aborted_transactions_for(self, data: FetchDataInfo | ZeroCopyFetchDataInfo) -> list[AbortedTxn]:
        """The aborted transactions a READ_COMMITTED reader of `data` (a `read` result) needs: those overlapping
        the offsets it holds."""
        records = data.records
        if not records or not any(s.txn_index.entries for s in self._segments):
            return []  # the common case: no aborted transaction in the log, no need to walk the batches
        if isinstance(records, FileRegion):
            records = bytes(records)  # the batch headers of a region not read yet (READ_COMMITTED with aborts)
        return self.collect_aborted_transactions(data.first_offset, _next_offset_after(records))

    def update_highest_offset_in_remote_storage(self, offset: int) -> None:
        """KIP-405: `offset` is known to be in remote storage; the highest such offset never moves down here (only
        truncation lowers it)."""
        self.highest_offset_in_remote_storage = max(self.highest_offset_in_remote_storage, offset)

    def reset_highest_offset_in_remote_storage(self, offset: int) -> None:
        """Set the highest offset in remote storage, lower too: as the RLMM reports it for this log's lineage (a
        new leader after an unclean election may find less there), or -1 once the remote data no longer counts as
        this log's (remote storage disabled for the topic)."""
        self.highest_offset_in_remote_storage = offset

    # ------------------------------------------------------------------------------------------------------
    # append
    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        leader_epoch: int,
        now_ms: int | None = None,
        *,
        from_client: bool = True,
        verified_producers: frozenset[int] | set[int] = frozenset(),
    ) -> LogAppendInfo:
        """Validate a Produce's batches, assign offsets from the LEO, stamp the leader epoch, write.

        The batch headers are rewritten in place when `records` is a writable memoryview (a Produce request's own
        buffer, protocol/produce_records.py), else in one copy; one write. Never fsyncs.
        `from_client=False` (Kafka's AppendOrigin COORDINATOR: coordinators writing markers/offsets) allows control
        batches; a commit or abort marker completes its producer's transaction (an older producer epoch is
        INVALID_PRODUCER_EPOCH, an older coordinator epoch TRANSACTION_COORDINATOR_FENCED). A client's transactional
        batch may open a transaction only for a producer in `verified_producers` (verified with the transaction
        coordinator, KIP-890); otherwise INVALID_TXN_STATE.
        """
        mv = records if isinstance(records, memoryview) else memoryview(records)
        if mv.ndim != 1 or mv.itemsize != 1:
            mv = mv.cast("B")
        total = len(mv)
        if total == 0:
            return LogAppendInfo(-1, -1, -1, -1, self.log_start_offset, 0, 0)
        cfg = self.config
        if total > cfg.segment_bytes:
            raise RecordBatchTooLargeError(
                f"{total} bytes of records exceed the segment size {cfg.segment_bytes} of {self.topic}-{self.partition}"
            )
        now = _now_ms() if now_ms is None else now_ms
        log_append_time = cfg.message_timestamp_type == "LogAppendTime"
        max_message_bytes = cfg.max_message_bytes
        min_ts = now - cfg.values["message.timestamp.before.max.ms"]
        max_allowed_ts = now + cfg.values["message.timestamp.after.max.ms"]
        limit = inflate_limit(max_message_bytes)
        prescan = records.scan if isinstance(records, ScannedRecords) else None
        prescan_error = records.error if isinstance(records, ScannedRecords) else None
        restamp: list[tuple[int, int]] = []
        infos: list[tuple] = []
        compacted = cfg.compact
        producer_batches: list[tuple] = []
        control: list[tuple[int, int, int]] | None = None
        next_offset = self.log_end_offset
        pos = 0
        while pos < total:
            try:
                f = validate_batch_fields(mv, pos)
            except RecordBatchError as e:
                raise from_batch_error(e) from None
            # f: baseOffset, batchLength, epoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp,
            #    maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
            size = f[1] + LOG_OVERHEAD
            if size > max_message_bytes:
                raise RecordTooLargeError(f"batch of {size} bytes exceeds max.message.bytes {max_message_bytes}")
            if from_client:
                if f[5] & CONTROL_MASK:
                    raise InvalidRecordError("clients may not write control batches")
                if f[9] >= 0 and f[11] < 0:
                    raise InvalidRecordError("batch has a producer id but no base sequence")
            max_ts_of_batch = f[8]
            if from_client:
                # Kafka's LogValidator: walk the records (inflating in bounded pieces), then per-record checks
                try:
                    if prescan_error is not None and pos == 0:
                        raise prescan_error
                    scan = (prescan if pos == 0 else None) or scan_records(
                        mv, pos, size, f[5] & COMPRESSION_MASK, f[12], want_keyless=compacted, limit=limit
                    )
                    max_ts_of_batch, rejected = check_records(
                        mv,
                        pos,
                        size,
                        f,
                        scan,
                        partition=f"{self.topic}-{self.partition}",
                        compacted=compacted,
                        log_append_time=log_append_time,
                        ts_min=min_ts,
                        ts_max=max_allowed_ts,
                        limit=limit,
                    )
                except RecordBatchError as e:
                    raise from_batch_error(e) from None
                if rejected is not None:
                    raise record_validation_error(rejected.error_code, rejected.message, rejected.errors)
                if max_ts_of_batch != f[8] and not log_append_time:
                    restamp.append((pos, max_ts_of_batch))  # as Kafka: maxTimestamp = the largest record's
            elif compacted and not f[5] & CONTROL_MASK:
                check_keys_present(mv, pos, size)  # compacted topics reject null keys (INVALID_RECORD)
            infos.append((pos, size, f[12], max_ts_of_batch))
            if f[9] >= 0:  # idempotent/transactional producer: header fields only
                ts = now if log_append_time else f[8]
                producer_batches.append((f[9], f[10], f[11], f[6], ts, next_offset, bool(f[5] & TRANSACTIONAL_MASK)))
                if f[5] & CONTROL_MASK:
                    control = (control or []) + [(pos, next_offset, ts)]
            next_offset += f[12]
            pos += size
        pending = None
        if producer_batches:
            dup, pending = self.producer_state.prepare_append(
                producer_batches,
                client=from_client,
                coordinator=not from_client,
                control_epochs=self._control_markers(mv, control) if control else None,
                verified=verified_producers,
            )
            if dup is not None:
                # A retry of a batch already in the log: answer its original offsets, write nothing (as Kafka,
                # log_append_time carries the original batch's timestamp).
                return LogAppendInfo(
                    dup.first_offset,
                    dup.last_offset,
                    dup.timestamp,
                    dup.timestamp,
                    self.log_start_offset,
                    0,
                    0,
                    duplicate=True,
                )
        buf = mv if isinstance(records, memoryview) and not mv.readonly else bytearray(mv)
        for pos, ts in restamp:
            set_max_timestamp(buf, pos, ts)
        first = offset = self.log_end_offset
        max_ts = -1
        batches: list[tuple[int, int, int, int]] = []
        for pos, size, count, ts in infos:
            set_base_offset_and_epoch(buf, pos, offset, size - LOG_OVERHEAD, leader_epoch)
            if log_append_time:
                set_log_append_time(buf, pos, now)
                ts = now
            last = offset + count - 1
            batches.append((pos, size, last, ts))
            if ts > max_ts:
                max_ts = ts
            offset = last + 1
        self._write(buf, batches, first, offset, max_ts, now)
        if pending is not None:
            completed = self.producer_state.apply(pending)
            if completed:
                self._complete_txns(completed)
        self.producer_state.update_map_end_offset(offset)
        latest = self.leader_epoch_cache.latest_epoch
        if leader_epoch >= 0 and (latest is None or latest < leader_epoch):
            self.leader_epoch_cache.assign(leader_epoch, first)
        return LogAppendInfo(
            first, offset - 1, max_ts, now if log_append_time else -1, self.log_start_offset, offset - first, total
        )

    def append_as_follower(
        self, records: bytes | bytearray | memoryview, now_ms: int | None = None, epoch_sync: bool = True
    ) -> LogAppendInfo:
        """Append batches fetched from the leader with their offsets and epochs as given.

        Batches must be valid (CRC) and their offsets increasing from at least the LEO; a trailing partial batch
        (fetch responses may end with one) is ignored. Batches from a compacted leader log may be empty or have a
        lastOffsetDelta that no longer matches their record count. New epochs are added to the epoch cache
        (`epoch_sync=False`: its file written without fsync, the caller has it fsynced).
        """
        mv = records if isinstance(records, memoryview) else memoryview(records)
        if mv.ndim != 1 or mv.itemsize != 1:
            mv = mv.cast("B")
        total = len(mv)
        now = _now_ms() if now_ms is None else now_ms
        batches: list[tuple[int, int, int, int]] = []
        epochs: list[tuple[int, int]] = []
        producer_batches: list[tuple] = []
        control: list[tuple[int, int, int]] = []
        expected = self.log_end_offset
        first = -1
        max_ts = -1
        pos = 0
        while pos + HEADER_SIZE <= total:
            if BatchHeader(mv, pos).size + pos > total:
                break  # partial trailing batch
            try:
                h = validate_replicated_batch(mv, pos)
            except RecordBatchError as e:
                raise from_batch_error(e) from None
            if h.base_offset < expected:
                raise InvalidRecordError(f"out of order offset {h.base_offset}, expected at least {expected}")
            if first < 0:
                first = h.base_offset
            if h.partition_leader_epoch >= 0:
                epochs.append((h.partition_leader_epoch, h.base_offset))
            batches.append((pos, h.size, h.last_offset, h.max_timestamp))
            if h.producer_id >= 0:
                producer_batches.append(
                    (
                        h.producer_id,
                        h.producer_epoch,
                        h.base_sequence,
                        h.last_offset_delta,
                        h.max_timestamp,
                        h.base_offset,
                        h.is_transactional,
                    )
                )
                if h.is_control:
                    control.append((pos, h.base_offset, h.max_timestamp))
            max_ts = max(max_ts, h.max_timestamp)
            expected = h.last_offset + 1
            pos += h.size
        if not batches:
            return LogAppendInfo(-1, -1, -1, -1, self.log_start_offset, 0, 0)
        if pos > self.config.segment_bytes:
            raise RecordBatchTooLargeError(f"{pos} bytes exceed the segment size")
        data = mv[:pos]
        self._write(data, batches, first, expected, max_ts, now)
        if producer_batches:
            completed = self.producer_state.replay(
                producer_batches, self._control_markers(mv, control) if control else None
            )
            if completed:
                self._complete_txns(completed)
        self.producer_state.update_map_end_offset(expected)
        for epoch, start in epochs:
            latest = self.leader_epoch_cache.latest_epoch
            if latest is None or latest < epoch:
                self.leader_epoch_cache.assign(epoch, start, sync=epoch_sync)
        return LogAppendInfo(first, expected - 1, max_ts, -1, self.log_start_offset, expected - first, pos)

    def _write(
        self,
        data: bytes | bytearray | memoryview,
        batches: list[tuple[int, int, int, int]],
        first_offset: int,
        next_offset: int,
        max_ts: int,
        now: int,
    ) -> None:
        active = self._segments[-1]
        if active.should_roll(
            len(data), max_ts, next_offset - 1, self.config.segment_bytes, self.config.segment_ms, now
        ) or (active.size > 0 and first_offset - active.base_offset > 2**31 - 1):
            self._roll(max(first_offset, self.log_end_offset))
        try:
            self._segments[-1].append(data, batches, next_offset)
        except OSError as e:
            raise KafkaStorageError(f"write to {self.dir} failed: {e}") from e
        if self._appended_messages == self._flushed_messages and self.on_dirty is not None:
            self.on_dirty(self)
        self._appended_messages += next_offset - first_offset

    # ------------------------------------------------------------------------------------------------------
    # producer state (idempotent producers)
    @staticmethod
    def _control_markers(
        buf: bytes | bytearray | memoryview, control: list[tuple[int, int, int]]
    ) -> dict[int, tuple[int, int, bool] | None]:
        """{base offset: (coordinator epoch, timestamp, is abort)} of control batches (position, base offset,
        timestamp), read from their marker record; None for a control batch without one (skipped, as Kafka)."""
        out: dict[int, tuple[int, int, bool] | None] = {}
        for pos, base, ts in control:
            marker = read_end_marker(buf, pos)
            out[base] = None if marker is None else (marker[1], ts, marker[0])
        return out

    def _complete_txns(self, completed: list[CompletedTxn]) -> None:
        """Markers just written (or replayed) ended these transactions: an abort gets its `.txnindex` entry in the
        segment holding its marker, with the LSO as of its completion (Kafka's updateTxnIndex + completeTxn)."""
        psm = self.producer_state
        for txn in completed:
            if txn.is_aborted:
                lso = psm.last_stable_offset_of(txn)
                seg = self._segments[max(0, bisect_right(self._bases, txn.last_offset) - 1)]
                try:
                    seg.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso))
                except OSError as e:
                    raise KafkaStorageError(f"write to {seg.txn_index.path} failed: {e}") from e
            psm.complete_txn(txn)

    def _rebuild_producer_state(self, reload_from_clean_shutdown: bool = False) -> None:
        """Kafka's rebuildProducerState: load the newest readable snapshot at or below the LEO and replay the batch
        headers after it (open, truncation), then snapshot at the LEO.

        A clean shutdown that left no snapshot at all had no producer state to keep (`flush_and_close`), or is a
        log written before producer state existed: its batches carry no producer ids, so like Kafka's upgrade path
        we take empty state instead of scanning the log, and snapshot it unless the log is one segment (a snapshot
        would then spare a later recovery only a replay within the active segment, which that recovery reads
        anyway)."""
        psm = self.producer_state
        leo = self.log_end_offset
        if reload_from_clean_shutdown and psm.latest_snapshot_offset is None:
            if len(self._bases) > 1:
                psm.update_map_end_offset(self._bases[-2])
                psm.take_snapshot(sync=True)
            else:
                psm.update_map_end_offset(leo)
                return
            for off in (self._bases[-1], leo):
                psm.update_map_end_offset(off)
                psm.take_snapshot(sync=True)
            psm.update_map_end_offset(leo)
            return
        psm.truncate_and_reload(self.log_start_offset, leo)
        start = psm.map_end_offset
        if leo > start:
            # the aborted-transaction entries of the replayed range are rebuilt by the replay
            for seg in self._segments:
                if seg.next_offset > start:
                    seg.txn_index.truncate_to(start)
            for seg in self._segments:
                if seg.next_offset <= start or seg.size == 0:
                    continue
                pos = 0
                if start > seg.base_offset:
                    found = seg.translate_offset(start)
                    if found is None:
                        continue
                    pos = found[0]
                raw: list[tuple] = []
                markers: dict[int, tuple[int, int, bool] | None] = {}
                for p, h in seg.iter_headers(pos):
                    if h.producer_id < 0 or h.last_offset < start:
                        continue
                    if h.is_control:
                        markers.update(
                            self._control_markers(seg.read_batch(p, h.size), [(0, h.base_offset, h.max_timestamp)])
                        )
                    raw.append(
                        (
                            h.producer_id,
                            h.producer_epoch,
                            h.base_sequence,
                            h.last_offset_delta,
                            h.max_timestamp,
                            h.base_offset,
                            h.is_transactional,
                        )
                    )
                if raw:
                    completed = psm.replay(raw, markers or None)
                    if completed:
                        self._complete_txns(completed)
        psm.update_map_end_offset(leo)
        if not len(psm) and start >= self._bases[-1]:
            # No producer state, and what a snapshot at the LEO would spare the next load is a replay within the
            # active segment (which a recovery reads anyway): no file (20,000 logs after kill -9: 20,000 files).
            return
        try:
            psm.take_snapshot(sync=False)  # fsynced by the next flush: a torn one falls back to a replay
        except OSError as e:
            raise KafkaStorageError(f"producer snapshot in {self.dir} failed: {e}") from e

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """producer.id.expiration.ms: forget idle producers (the broker calls this periodically)."""
        return self.producer_state.remove_expired_producers(now_ms, expiration_ms)

    # ------------------------------------------------------------------------------------------------------
    # roll
    def roll(self) -> None:
        """Start a new active segment at the LEO (no-op when the active segment is empty)."""
        if self._segments[-1].size > 0:
            self._roll(self.log_end_offset)

    def _roll(self, new_base: int) -> None:
        active = self._segments[-1]
        if active.size == 0:
            if active.base_offset == new_base:
                return
            self._segments.pop()
            self._bases.pop()
            active.delete()
        else:
            active.on_become_inactive()
        self._add_segment(self._new_segment(new_base))
        # A snapshot at the new base offset: recovery of this segment starts from it (fsynced by the next flush).
        self.producer_state.update_map_end_offset(new_base)
        try:
            self.producer_state.take_snapshot()
        except OSError as e:
            raise KafkaStorageError(f"producer snapshot in {self.dir} failed: {e}") from e
        if self.on_roll is not None and active.size > 0:
            self.on_roll(self, new_base)

    # ------------------------------------------------------------------------------------------------------
    # read
    def read(
        self, start_offset: int, max_bytes: int, max_offset: int | None = None, min_one_message: bool = True
    ) -> FetchDataInfo:
        """Whole batches from the one holding `start_offset`, below `max_offset` (exclusive), <= max_bytes
        unless `min_one_message` and the first batch alone is larger. Data come from one segment (one pread)."""
        records, first = self._read(start_offset, max_bytes, max_offset, min_one_message, 0)
        assert not isinstance(records, FileRegion)  # zero_copy_min 0: always read
        return FetchDataInfo(records, first)

    def read_zero_copy(
        self, start_offset: int, max_bytes: int, max_offset: int | None, min_one_message: bool, zero_copy_min: int
    ) -> ZeroCopyFetchDataInfo:
        """As `read`, but data of at least `zero_copy_min` bytes come as a FileRegion, to be sent with sendfile
        (LogSegment.read); 0 reads them as `read` does."""
        return ZeroCopyFetchDataInfo(*self._read(start_offset, max_bytes, max_offset, min_one_message, zero_copy_min))

    def _read(
        self, start_offset: int, max_bytes: int, max_offset: int | None, min_one_message: bool, zero_copy_min: int
    ) -> tuple[bytes | FileRegion, int]:
        leo = self.log_end_offset
        if start_offset < self.local_log_start_offset or start_offset > leo:
            # Below the local log start: the caller decides whether remote storage serves it.
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is out of range [{self.local_log_start_offset}, {leo}] of the local log "
                f"of {self.topic}-{self.partition}"
            )
        if max_offset is None or max_offset > leo:
            max_offset = leo
        if start_offset >= max_offset:
            return b"", start_offset
        segs = self._segments
        i = max(0, bisect_right(self._bases, start_offset) - 1)
        head, head_first = b"", start_offset  # record-less batches ending a segment, carried into the next one
        while i < len(segs):
            seg = segs[i]
            i += 1
            try:
                r = seg.read(
                    start_offset,
                    max_bytes - len(head),
                    max_offset,
                    min_one_message and not head,
                    0 if head else zero_copy_min,
                )
                if r is None:
                    continue
                data, first = r
                if isinstance(data, FileRegion):
                    if BatchHeader(os.pread(data.fd, HEADER_SIZE, data.position)).records_count:
                        return data, first  # the common case: records
                    data = _read_region(data)
            except OSError as e:
                raise KafkaStorageError(f"read from {seg.log_path} failed: {e}") from e
            if not data:
                return (head, head_first) if head else (data, first)
            if head:
                data, first = head + data, head_first
            nxt = _next_offset_after_if_recordless(data)
            if nxt is None or len(data) >= max_bytes or nxt >= max_offset:
                return data, first
            # Only empty batches left in this segment (the retained last batch of a cleaned group, an active
            # producer's last batch): a response of those alone delivers nothing, and librdkafka counts every such
            # response as a message too large for its fetch size (the eleventh fails the partition with
            # MSG_SIZE_TOO_LARGE). The next segment's batches follow on in the same response.
            head, head_first, start_offset = bytes(data), first, nxt
        return head, head_first

    # ------------------------------------------------------------------------------------------------------
    # flush
    def flush(self, up_to: int | None = None) -> bool:
        """fsync segments holding data below `up_to` (default LEO) and advance the recovery point; returns whether
        anything needed an fsync. Only what changed since the last flush is synced: the segments from the
        recovery point on (their indexes only if written), snapshot files written since, and the directory only
        when a segment or snapshot file was created in it.

        Thread-safe against the appending event loop: LEO and the segment list are captured first and the
        recovery point is published only after the fsyncs.
        """
        snapshots = self.producer_state.take_unflushed_snapshots()
        segs = list(self._segments)
        appended = self._appended_messages
        created = self._segments_created
        if snapshots:
            self.producer_state.fsync_snapshots(snapshots)
        leo = segs[-1].next_offset
        target = leo if up_to is None else min(up_to, leo)
        now = _now_ms()
        rp = self.recovery_point
        sync_dir = bool(snapshots)  # a snapshot is a new file: its dir entry too
        if target > rp:
            for seg in segs:
                if seg.next_offset > rp and seg.base_offset < target and not seg.deleted:
                    try:
                        seg.flush()
                    except OSError as e:
                        raise KafkaStorageError(f"fsync of {seg.log_path} failed: {e}") from e
            sync_dir = sync_dir or created != self._segments_created_synced
        if sync_dir:
            try:
                fsync_path(self.dir)
            except OSError as e:
                raise KafkaStorageError(f"fsync of {self.dir} failed: {e}") from e
            if target > rp:
                self._segments_created_synced = created
        if target > self.recovery_point:
            self.recovery_point = target
        if up_to is None or target >= leo:
            self._flushed_messages = appended
        self._last_flush_ms = now
        return target > rp or sync_dir

    def note_files_synced(self) -> None:
        """The caller made this log's files and dir entries durable (`LogManager.make_logs` fsyncs a new log's dir
        with the others of its CreateTopics): the next flush need not fsync the dir for them."""
        self._segments_created_synced = self._segments_created

    def flush_and_close(self) -> bool:
        """Clean shutdown of this log (Kafka's LogManager.shutdown per log: flush, then close with a producer
        snapshot at the LEO, so the next start loads it instead of replaying the log). The snapshot is written
        unsynced first, so the flush fsyncs it with the segments and the directory once; a log with nothing
        unflushed whose snapshot is already at the LEO costs no fsync. Returns whether anything was synced."""
        if self._segments:
            psm = self.producer_state
            psm.update_map_end_offset(self.log_end_offset)
            # No producer state, no snapshot file and one segment: the next load takes "no snapshot after a clean
            # shutdown" as empty state without reading the log (`_rebuild_producer_state`), so no file is needed
            # (20,000 partitions of non-idempotent producers: 20,000 files and 40,000 fsyncs fewer).
            if len(psm) or psm.latest_snapshot_offset is not None or len(self._segments) > 1:
                try:
                    psm.take_snapshot(sync=False)
                except OSError as e:
                    raise KafkaStorageError(f"producer snapshot in {self.dir} failed: {e}") from e
        synced = self.flush()
        self.close(take_snapshot=False)
        return synced

    # ------------------------------------------------------------------------------------------------------
    # timestamps
    def fetch_offset_by_timestamp(self, ts: int) -> TimestampAndOffset | None:
        """ListOffsets: first offset whose record timestamp >= ts, or a sentinel (-1 latest, -2 earliest,
        -3 max timestamp, -4 earliest local). None when no record qualifies or the sentinel is not local."""
        if ts == LATEST_TIMESTAMP:
            return TimestampAndOffset(-1, self.log_end_offset, self.latest_epoch)
        if ts == EARLIEST_TIMESTAMP:
            return TimestampAndOffset(-1, self.log_start_offset, self.epoch_for_offset(self.log_start_offset))
        if ts == EARLIEST_LOCAL_TIMESTAMP:
            return TimestampAndOffset(
                -1, self.local_log_start_offset, self.epoch_for_offset(self.local_log_start_offset)
            )
        if ts == MAX_TIMESTAMP:
            return self._max_timestamp_offset()
        if ts < 0:
            return None
        for seg in list(self._segments):
            if seg.max_timestamp_so_far < ts or seg.next_offset <= self.log_start_offset:
                continue
            found = seg.find_offset_by_timestamp(ts, self.log_start_offset)
            if found is not None:
                return TimestampAndOffset(found[0], found[1], self.epoch_for_offset(found[1]))
        return None

    def _max_timestamp_offset(self) -> TimestampAndOffset:
        """KIP-734: the offset of the record with the largest timestamp (first such record)."""
        best: LogSegment | None = None
        for seg in self._segments:
            if seg.size and (best is None or seg.max_timestamp_so_far > best.max_timestamp_so_far):
                best = seg
        if best is None or best.max_timestamp_so_far < 0:
            return TimestampAndOffset(-1, -1, None)
        max_ts = best.max_timestamp_so_far
        found = best.translate_offset(best.offset_of_max_timestamp_so_far)
        offset = best.offset_of_max_timestamp_so_far
        if found is not None:
            pos, h = found
            if h.max_timestamp == max_ts:
                offset = h.base_offset
                if h.timestamp_type != LOG_APPEND_TIME:
                    for r in iter_records(best.read_batch(pos, h.size)):
                        if r.timestamp == max_ts:
                            offset = r.offset
                            break
        return TimestampAndOffset(max_ts, offset, self.epoch_for_offset(offset))

    # ------------------------------------------------------------------------------------------------------
    # log start movement and retention
    def advance_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset up (tiered topics: remote retention and DeleteRecords). Never moves it down
        or past the HW. Returns whether it moved."""
        offset = min(offset, self.high_watermark)
        if offset <= self.log_start_offset:
            return False
        self._advance_log_start(offset)
        self._delete_log_start_breached()
        return True

    def _advance_local_log_start(self, offset: int) -> None:
        """Local retention of a tiered log: the data below stays readable from remote storage."""
        if offset > self.local_log_start_offset:
            self.local_log_start_offset = offset

    def _advance_log_start(self, offset: int) -> None:
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self.leader_epoch_cache.truncate_from_start(offset)
            self.producer_state.delete_snapshots_before(offset)
            self.producer_state.on_log_start_offset_incremented(offset)
        if offset > self.local_log_start_offset:
            self.local_log_start_offset = offset
        self.high_watermark = max(self.high_watermark, self.log_start_offset)
        self.recovery_point = max(self.recovery_point, min(self.log_start_offset, self.log_end_offset))

    def _delete_log_start_breached(self) -> int:
        n = 0
        while len(self._segments) > 1 and self._segments[1].base_offset <= self.log_start_offset:
            self._remove_first_segment()
            n += 1
        return n

    def delete_records(self, new_log_start_offset: int) -> int:
        """DeleteRecords: move the log start (must be <= HW), drop segments wholly below it.

        Returns the resulting log start offset (the response's low watermark)."""
        if new_log_start_offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot move the log start of {self.topic}-{self.partition} to {new_log_start_offset}: above the "
                f"high watermark {self.high_watermark}"
            )
        if new_log_start_offset > self.log_start_offset:
            self._advance_log_start(new_log_start_offset)
            self._delete_log_start_breached()
        return self.log_start_offset

    def delete_retention_breached_segments(self, now_ms: int | None = None) -> int:
        """Delete whole closed segments below the HW breaching retention.ms, then retention.bytes, plus any wholly
        below the log start offset. Never the active segment. Returns how many were deleted."""
        now = _now_ms() if now_ms is None else now_ms
        deleted = self._delete_log_start_breached()
        cfg = self.config
        if self.remote_log_enabled:
            return deleted + self._delete_local_retention_breached(now)
        if cfg.delete:
            may_go = self._hold_allows()
            if cfg.retention_ms >= 0:
                deleted += self._delete_prefix(
                    lambda seg, nxt: may_go(nxt) and now - seg.largest_timestamp > cfg.retention_ms
                )
            if cfg.retention_bytes >= 0:
                excess = [self.size_in_bytes - cfg.retention_bytes]

                def over(seg: LogSegment, nxt: int) -> bool:
                    if may_go(nxt) and excess[0] - seg.size >= 0:
                        excess[0] -= seg.size
                        return True
                    return False

                deleted += self._delete_prefix(over)
        return deleted

    def untranslated_bytes(self) -> int:
        """Bytes of the closed segments holding offsets at or above `retention_hold_offset` (0 without a hold)."""
        hold = self.retention_hold_offset
        if hold is None:
            return 0
        segs = self._segments
        return sum(s.size for i, s in enumerate(segs[:-1]) if segs[i + 1].base_offset > hold)

    def _hold_allows(self) -> Callable[[int], bool]:
        """Whether a segment ending before `nxt` may go as far as the Iceberg hold is concerned: it is translated,
        or the untranslated bytes exceed the cap (then retention wins: the translator skips what it lost)."""
        hold, cap = self.retention_hold_offset, self.retention_hold_max_bytes
        if hold is None or (cap >= 0 and self.untranslated_bytes() > cap):
            return lambda nxt: True
        return lambda nxt: nxt <= hold

    def _delete_local_retention_breached(self, now: int) -> int:
        """Tiered log: local.retention.ms/bytes (-2: the total retention's value) over the local segments, and
        only segments already copied to remote storage; moves the local log start, not the log start.

        With `remote.log.copy.disable` (KIP-950) nothing more is copied, so local retention cannot wait for copies:
        the total retention.ms/bytes applies to the local segments, copied or not (Kafka's
        remoteLogEnabledAndRemoteCopyEnabled), else the local log would grow without bound."""
        cfg = self.config
        copy_on = not cfg.values.get("remote.log.copy.disable")
        if copy_on:
            local_ms = cfg["local.retention.ms"]
            local_bytes = cfg["local.retention.bytes"]
            local_ms = cfg.retention_ms if local_ms == -2 else local_ms
            local_bytes = cfg.retention_bytes if local_bytes == -2 else local_bytes
        else:
            local_ms, local_bytes = cfg.retention_ms, cfg.retention_bytes
        remote_end = self.highest_offset_in_remote_storage
        deleted = 0

        def copied(nxt_base: int) -> bool:
            return not copy_on or nxt_base - 1 <= remote_end

        if local_ms >= 0:
            deleted += self._delete_prefix(
                lambda seg, nxt: copied(nxt) and now - seg.largest_timestamp > local_ms, local_only=True
            )
        if local_bytes >= 0:
            excess = [self.size_in_bytes - local_bytes]

            def over(seg: LogSegment, nxt: int) -> bool:
                if copied(nxt) and excess[0] - seg.size >= 0:
                    excess[0] -= seg.size
                    return True
                return False

            deleted += self._delete_prefix(over, local_only=True)
        return deleted

    def _delete_prefix(self, predicate: Callable[[LogSegment, int], bool], local_only: bool = False) -> int:
        """Delete the oldest segments while `predicate` holds, each wholly below the HW.

        As in Kafka's deletableSegments, the active segment qualifies too when it is non-empty and everything in it
        is below the HW: a new empty segment is rolled first, so the log start moves to the LEO."""
        n = 0
        while True:
            seg = self._segments[0]
            last = len(self._segments) == 1
            upper = self.log_end_offset if last else self._segments[1].base_offset
            if upper > self.high_watermark or (last and seg.size == 0) or not predicate(seg, upper):
                break
            if last:
                self._roll(self.log_end_offset)
            self._remove_first_segment()
            n += 1
        if n:
            if local_only:
                self._advance_local_log_start(self._segments[0].base_offset)
            else:
                self._advance_log_start(self._segments[0].base_offset)
        return n

    # ------------------------------------------------------------------------------------------------------
    # truncation
    def truncate_to(self, offset: int) -> bool:
        """Follower truncation: remove everything at and after `offset`. Whole batches only, so when `offset`
        falls inside a batch that batch goes too (LEO may end below `offset`). Returns whether anything changed."""
        if offset < 0:
            raise ValueError(f"cannot truncate to a negative offset {offset}")
        if offset >= self.log_end_offset:
            return False
        if offset < self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        while len(self._segments) > 1 and self._segments[-1].base_offset > offset:
            seg = self._segments.pop()
            self._bases.pop()
            seg.delete()
        self._segments[-1].truncate_to(offset)
        leo = self.log_end_offset
        self.high_watermark = min(self.high_watermark, leo)
        self.recovery_point = min(self.recovery_point, leo)
        self.log_start_offset = min(self.log_start_offset, leo)
        self.local_log_start_offset = min(self.local_log_start_offset, leo)
        # Remote storage may hold a divergent copy of what was cut: it no longer counts as this log's tiered data
        # (local retention would otherwise delete the surviving lineage's records written at those offsets).
        self.highest_offset_in_remote_storage = min(self.highest_offset_in_remote_storage, leo - 1)
        self.leader_epoch_cache.truncate_from_end(leo)
        self._rebuild_producer_state()
        return True

    def truncate_fully_and_start_at(self, offset: int, log_start_offset: int | None = None) -> None:
        """Drop all data; the log restarts empty at `offset` (follower catching up past the leader's start).

        `log_start_offset` (Kafka's logStartOffsetOpt), when below `offset`: a tiered log whose data below `offset`
        lives in remote storage starts there; the local log start offset is `offset` either way."""
        for seg in self._segments:
            seg.delete()
        self._segments.clear()
        self._bases.clear()
        self._add_segment(self._new_segment(offset))
        self.log_start_offset = self.local_log_start_offset = offset
        self.high_watermark = self.recovery_point = offset
        self.leader_epoch_cache.clear_and_flush()
        self.producer_state.truncate_fully_and_start_at(offset)
        if log_start_offset is not None and log_start_offset < offset:
            self.log_start_offset = log_start_offset

    def restore_aux_state(self, leader_epochs: Iterable[EpochEntry], producers: Iterable[ProducerStateEntry]) -> None:
        """KIP-405 follower, right after `truncate_fully_and_start_at`: restore the auxiliary state a remote
        segment ships -- the leader's epoch lineage below the LEO (the entries at or above it are ignored) and the
        producer state as of the LEO (written as the snapshot there, as the log's own would be) -- so fetching can
        continue from the LEO (Kafka's buildRemoteLogAuxState)."""
        leo = self.log_end_offset
        self.leader_epoch_cache.assign_entries(e for e in leader_epochs if e.start_offset < leo)
        self.producer_state.restore_from_snapshot(leo, producers)

    # ------------------------------------------------------------------------------------------------------
    # compaction
    def replace_segments(
        self, base_offset: int, old_segments: list[LogSegment], old_state: list[tuple[int, int]]
    ) -> LogSegment:
        """Swap the `<base_offset>.*.cleaned` files -- a compacted copy of `old_segments` -- in for them (Kafka's
        replaceSegments): on disk crash-safely (storage/segment_swap.py), then in the segment list in one step,
        so readers see either the old segments or the new one. Producer snapshots of the segments that went (not
        the one replaced in place) go with them.

        `old_state` is each old segment's (size, next offset) when it was read. Raises SegmentsChangedError, with
        nothing changed, when `old_segments` are no longer exactly those: removed, truncated, appended to, or
        reaching the active segment. Call on the log's owner thread."""
        segs = self._segments
        old = old_segments
        try:
            i = next(k for k, s in enumerate(segs) if s is old[0])
        except StopIteration:
            raise SegmentsChangedError("the segments being cleaned were removed from the log") from None
        window = segs[i : i + len(old)]
        if len(window) != len(old) or any(a is not b for a, b in zip(window, old)) or i + len(old) >= len(segs):
            raise SegmentsChangedError("the segments being cleaned changed")
        if [(s.size, s.next_offset) for s in old] != old_state or any(s.deleted for s in old):
            raise SegmentsChangedError("the segments being cleaned were modified")
        swap_in_cleaned_files(self.dir, base_offset, old)
        new, _ = LogSegment.open(
            self.dir, base_offset, self.config.index_interval_bytes, self.config.segment_index_bytes
        )
        segs[i : i + len(old)] = [new]
        self._bases[i : i + len(old)] = [base_offset]
        for s in old:  # as Kafka: producer snapshots of segments deleted (not replaced) go with them
            if s.base_offset != base_offset:
                self.producer_state.remove_snapshot(s.base_offset)
        return new

    # ------------------------------------------------------------------------------------------------------
    def close(self, take_snapshot: bool = True) -> None:
        """Close the segments; first (clean shutdown) write a synced producer snapshot at the LEO, so the next
        open loads it instead of scanning the log."""
        if take_snapshot and self._segments:
            self.producer_state.update_map_end_offset(self.log_end_offset)
            try:
                self.producer_state.take_snapshot(sync=True)
            except OSError as e:
                raise KafkaStorageError(f"producer snapshot in {self.dir} failed: {e}") from e
        for seg in self._segments:
            seg.close()

    def delete(self) -> None:
        """Close and remove the partition directory."""
        self.close(take_snapshot=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __repr__(self) -> str:
        return (
            f"UnifiedLog({self.topic}-{self.partition}, start={self.log_start_offset}, "
            f"hw={self.high_watermark}, leo={self.log_end_offset}, segments={len(self._segments)})"
        )


__all__ = [
    "UnifiedLog",
    "LogAppendInfo",
    "FetchDataInfo",
    "ZeroCopyFetchDataInfo",
    "SegmentsChangedError",
    "TimestampAndOffset",
    "parse_topic_partition",
    "LATEST_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "EARLIEST_LOCAL_TIMESTAMP",
]
