"""Which compacted log to clean next (Kafka's LogCleanerManager), the `cleaner-offset-checkpoint` files, and the
cleaner threads (Kafka's LogCleaner) driven from the broker's event loop.

Selection (on the event loop, reading log state): for each log whose `cleanup.policy` contains `compact`, the first
dirty offset is its checkpoint (reset to the log start offset when below it or past the LEO), the first uncleanable
offset the lowest of the last stable offset (the HW: no transactions yet), the active segment's base and the first
segment younger than `min.compaction.lag.ms`, rounded down to a segment start. Its dirty ratio is the bytes of the
cleanable segments over those plus the clean ones. The dirtiest log above `min.cleanable.dirty.ratio` -- or any log
with cleanable bytes whose oldest dirty segment is older than `max.compaction.lag.ms` -- is cleaned next.

Cleaning runs in a worker thread per `log.cleaner.threads`; each group's swap is executed on the event loop (see
storage/cleaner.py), so readers never see a half-swapped segment list.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from strata.config import broker_default
from strata.protocol.records import HEADER_SIZE, BatchHeader

from .checkpoints import CheckpointFormatError, OffsetCheckpointFile
from .cleaner import Cleaner, CleaningAbortedError, run_direct, segments_overlapping
from .segment import LogSegment

if TYPE_CHECKING:
    from .log import UnifiedLog

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
log = structlog.get_logger("strata.log_cleaner")

TopicPartition = tuple[str, int]


@dataclass
class CleanerConfig:
    """Kafka's CleanerConfig (broker keys log.cleaner.*)."""

    enable: bool = broker_default("log.cleaner.enable")
    num_threads: int = broker_default("log.cleaner.threads")
    dedupe_buffer_size: int = broker_default("log.cleaner.dedupe.buffer.size")
    io_buffer_size: int = broker_default("log.cleaner.io.buffer.size")
    io_buffer_load_factor: float = broker_default("log.cleaner.io.buffer.load.factor")
    max_io_bytes_per_second: float = math.inf
    backoff_ms: int = broker_default("log.cleaner.backoff.ms")
    producer_id_expiration_ms: int = broker_default("producer.id.expiration.ms")

    @classmethod
    def from_broker_config(cls, cfg: Any) -> CleanerConfig:
        get = cfg.get
        rate = get("log.cleaner.io.max.bytes.per.second", math.inf)
        return cls(
            enable=bool(get("log.cleaner.enable", cls.enable)),
            num_threads=int(get("log.cleaner.threads", cls.num_threads)),
            dedupe_buffer_size=int(get("log.cleaner.dedupe.buffer.size", cls.dedupe_buffer_size)),
            io_buffer_size=int(get("log.cleaner.io.buffer.size", cls.io_buffer_size)),
            io_buffer_load_factor=float(get("log.cleaner.io.buffer.load.factor", cls.io_buffer_load_factor)),
            max_io_bytes_per_second=float(rate) if rate is not None else math.inf,
            backoff_ms=int(get("log.cleaner.backoff.ms", cls.backoff_ms)),
            producer_id_expiration_ms=int(
                get("producer.id.expiration.ms", cls.producer_id_expiration_ms) or cls.producer_id_expiration_ms
            ),
        )


@dataclass
class LogToClean:
    log: UnifiedLog
    first_dirty: int
    first_uncleanable: int  # a segment base offset: everything from there on is left alone this round
    need_compaction_now: bool
    clean_bytes: int
    cleanable_bytes: int

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.log.topic, self.log.partition)

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def _lso(ulog: UnifiedLog) -> int:
    """The last stable offset: nothing at or above it is cleaned (an undecided transaction, as in Kafka)."""
    return ulog.last_stable_offset


class LogCleanerManager:
    def __init__(self, log_dirs: Iterable[Path], logs: Callable[[], Iterable[UnifiedLog]]) -> None:
        self.log_dirs = [Path(d) for d in log_dirs]
        self._logs = logs
        self._lock = threading.RLock()
        self._offsets: dict[TopicPartition, int] = {}
        self._topic_ids: dict[TopicPartition, Any] = {}
        self._dirty_dirs: set[Path] = set()
        for d in self.log_dirs:
            try:
                self._offsets.update(OffsetCheckpointFile(d / CLEANER_OFFSET_CHECKPOINT).read())
            except CheckpointFormatError:
                log.warning("unreadable cleaner checkpoint, every compacted log is dirty again", dir=str(d))
        self.in_progress: set[TopicPartition] = set()
        self.uncleanable: dict[TopicPartition, Any] = {}  # -> topic id of the log that failed
        self._write_lock = threading.Lock()
        self.dirtiest_ratio = 0.0
        self.max_compaction_delay_ms = 0
        self.time_of_last_run = time.time()
        self._first_batch_ts: weakref.WeakKeyDictionary[LogSegment, int] = weakref.WeakKeyDictionary()

    # -- checkpoints ---------------------------------------------------------------------------------------
    def checkpointed_offset(self, ulog: UnifiedLog) -> int | None:
        """The last cleaned offset of `ulog`, forgotten when the partition now belongs to another topic id
        (deleted and re-created)."""
        tp = (ulog.topic, ulog.partition)
        with self._lock:
            known = self._topic_ids.get(tp)
            if known is not None and known != ulog.topic_id:
                self._offsets.pop(tp, None)
            self._topic_ids[tp] = ulog.topic_id
            return self._offsets.get(tp)

    def _set_offset(self, ulog: UnifiedLog, offset: int) -> None:
        tp = (ulog.topic, ulog.partition)
        with self._lock:
            self._offsets[tp] = offset
            self._topic_ids[tp] = ulog.topic_id
            self._dirty_dirs.add(ulog.dir.parent)

    def write_checkpoints(self, dirs: Iterable[Path] | None = None) -> None:
        """Write `cleaner-offset-checkpoint` (Kafka's offset checkpoint format) of the given or all pending dirs,
        keeping only partitions that still have a log (blocking I/O: call it off the event loop)."""
        with self._write_lock:  # serializes writers; the selection on the event loop only waits for the copy
            with self._lock:
                todo = set(self._dirty_dirs if dirs is None else dirs)
                self._dirty_dirs -= todo
                live = {(lg.topic, lg.partition): lg.dir.parent for lg in list(self._logs())}
                files = {d: {tp: off for tp, off in self._offsets.items() if live.get(tp) == d} for d in todo}
            for d, entries in files.items():
                OffsetCheckpointFile(d / CLEANER_OFFSET_CHECKPOINT).write(entries)

    @property
    def checkpoints_pending(self) -> bool:
        return bool(self._dirty_dirs)

    # -- offsets to clean ----------------------------------------------------------------------------------
    def _first_batch_timestamp(self, seg: LogSegment) -> int:
        ts = self._first_batch_ts.get(seg)
        if ts is None:
            ts = -1
            if seg.size >= HEADER_SIZE:
                try:
                    ts = BatchHeader(seg.read_batch(0, HEADER_SIZE)).base_timestamp
                except OSError:
                    ts = -1
            self._first_batch_ts[seg] = ts
        return ts

    @staticmethod
    def cleanable_offsets(ulog: UnifiedLog, last_clean: int | None, now: int) -> tuple[int, int, bool]:
        """(first dirty offset, first uncleanable offset, checkpoint must be reset) -- Kafka's cleanableOffsets."""
        start = ulog.log_start_offset
        ckpt = start if last_clean is None else last_clean
        if ckpt < start or ckpt > ulog.log_end_offset:
            first_dirty, force = start, True
        else:
            first_dirty, force = ckpt, False
        segs = ulog.segments
        active = segs[-1]
        candidates = [_lso(ulog), active.base_offset]
        lag = max(ulog.config.values["min.compaction.lag.ms"], 0)
        if lag > 0:
            for s in segments_overlapping(segs, first_dirty, active.base_offset):
                if s.largest_timestamp > now - lag:
                    candidates.append(s.base_offset)
                    break
        return first_dirty, max(first_dirty, min(candidates)), force

    @staticmethod
    def calculate_cleanable_bytes(ulog: UnifiedLog, first_dirty: int, uncleanable: int) -> tuple[int, int]:
        """(first uncleanable segment's base offset, bytes of the segments holding [first dirty, there))."""
        segs = ulog.segments
        active = segs[-1]
        non_active = segments_overlapping(segs, uncleanable, active.base_offset)
        first_unc = (non_active[0] if non_active else active).base_offset
        cleanable = sum(s.size for s in segments_overlapping(segs, min(first_dirty, first_unc), first_unc))
        return first_unc, cleanable

    def max_compaction_delay(self, ulog: UnifiedLog, first_dirty: int, now: int) -> int:
        """How far past max.compaction.lag.ms the oldest dirty non-active segment is (0: not overdue)."""
        segs = ulog.segments
        dirty = segments_overlapping(segs, first_dirty, segs[-1].base_offset)
        stamps = [t for t in (self._first_batch_timestamp(s) for s in dirty) if t > 0]
        earliest = min(stamps) if stamps else None
        clean_until = now - max(ulog.config.values["max.compaction.lag.ms"], 0)
        return clean_until - earliest if earliest is not None and earliest < clean_until else 0

    def log_to_clean(self, ulog: UnifiedLog, now: int) -> LogToClean:
        first_dirty, uncleanable, force = self.cleanable_offsets(ulog, self.checkpointed_offset(ulog), now)
        if force:
            self._set_offset(ulog, first_dirty)
        delay = self.max_compaction_delay(ulog, first_dirty, now)
        self.max_compaction_delay_ms = max(self.max_compaction_delay_ms, delay)
        first_unc, cleanable = self.calculate_cleanable_bytes(ulog, first_dirty, uncleanable)
        clean = sum(s.size for s in ulog.segments if s.base_offset < first_dirty)
        return LogToClean(ulog, first_dirty, first_unc, delay > 0, clean, cleanable)

    def grab_filthiest_log(self, now_ms: int | None = None) -> LogToClean | None:
        """The log to clean next, marked in progress; None when no compacted log qualifies."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        with self._lock:
            self.time_of_last_run = time.time()
            self.max_compaction_delay_ms = 0
            dirty: list[LogToClean] = []
            logs = list(self._logs())
            live = {(lg.topic, lg.partition): lg.topic_id for lg in logs}
            for tp in [tp for tp, tid in self.uncleanable.items() if live.get(tp) != tid]:
                del self.uncleanable[tp]  # deleted (or re-created) since it failed
            for ulog in logs:
                tp = (ulog.topic, ulog.partition)
                if not ulog.config.compact or tp in self.in_progress or tp in self.uncleanable:
                    continue
                ltc = self.log_to_clean(ulog, now)
                if ltc.total_bytes > 0:
                    dirty.append(ltc)
            self.dirtiest_ratio = max((d.cleanable_ratio for d in dirty), default=0.0)
            cleanable = [
                d
                for d in dirty
                if (d.need_compaction_now and d.cleanable_bytes > 0)
                or d.cleanable_ratio > d.log.config.values["min.cleanable.dirty.ratio"]
            ]
            if not cleanable:
                return None
            filthiest = max(cleanable, key=lambda d: d.cleanable_ratio)
            self.in_progress.add(filthiest.topic_partition)
            return filthiest

    def done_cleaning(self, ulog: UnifiedLog, end_offset: int) -> None:
        """Record `end_offset` as the log's cleaner checkpoint (written to disk) and release it."""
        with self._lock:
            self._set_offset(ulog, end_offset)
            self.in_progress.discard((ulog.topic, ulog.partition))
            self.write_checkpoints([ulog.dir.parent])

    def maybe_truncate_checkpoint(self, ulog: UnifiedLog, offset: int) -> None:
        """After truncating `ulog` to `offset` (Kafka's maybeTruncateCheckpoint): a cleaner checkpoint above it would
        make the data appended there look clean, so it moves down (written now)."""
        with self._lock:
            tp = (ulog.topic, ulog.partition)
            if not ulog.config.compact or self._offsets.get(tp, 0) <= offset:
                return
            self._set_offset(ulog, offset)
        self.write_checkpoints([ulog.dir.parent])

    def release(self, ulog: UnifiedLog, uncleanable: bool = False) -> None:
        with self._lock:
            tp = (ulog.topic, ulog.partition)
            self.in_progress.discard(tp)
            if uncleanable:
                self.uncleanable[tp] = ulog.topic_id


class LogCleaner:
    """The cleaner threads. `start`/`shutdown` run it on the broker's event loop; `clean_filthiest_log` is one
    synchronous round (tests, tools)."""

    def __init__(
        self,
        config: CleanerConfig,
        log_dirs: Iterable[Path],
        logs: Callable[[], Iterable[UnifiedLog]],
        is_live: Callable[[UnifiedLog], bool] | None = None,
    ) -> None:
        self.config = config
        self.manager = LogCleanerManager(log_dirs, logs)
        self.cleaners = self._build_cleaners(config)
        self.is_live = is_live or (lambda _log: True)
        self.cleanings = 0
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._tasks: list[asyncio.Task] = []
        self._wake: asyncio.Event | None = None
        self._stopping = False

    @staticmethod
    def _build_cleaners(config: CleanerConfig) -> list[Cleaner]:
        threads = max(config.num_threads, 0)
        per_thread = config.dedupe_buffer_size // max(threads, 1)
        return [
            Cleaner(
                per_thread,
                config.io_buffer_load_factor,
                config.io_buffer_size,
                config.max_io_bytes_per_second,
                config.producer_id_expiration_ms,
            )
            for _ in range(threads)
        ]

    async def reconfigure(self, config: CleanerConfig) -> None:
        """Kafka's LogCleaner.reconfigure (dynamic log.cleaner.* configs): stop the threads, aborting a cleaning in
        progress, and start them again with the new settings (if they were running)."""
        running = bool(self._tasks)
        if running:
            await self.shutdown()
        self.config = config
        self.cleaners = self._build_cleaners(config)
        self._stopping = False
        if running:
            await self.start()

    # -- metrics (kafka.log:type=LogCleaner / LogCleanerManager) -----------------------------------------------
    @property
    def max_dirty_percent(self) -> int:
        return int(100 * self.manager.dirtiest_ratio)

    @property
    def time_since_last_run_ms(self) -> int:
        return int((time.time() - self.manager.time_of_last_run) * 1000)

    def _stats(self) -> list:
        return [c.last_stats for c in self.cleaners if c.last_stats is not None]

    @property
    def recopy_percent(self) -> int:
        stats = self._stats()
        if not stats:
            return 0
        return int(100 * sum(s.bytes_written / max(s.bytes_read, 1) for s in stats) / len(stats))

    @property
    def max_clean_time_secs(self) -> float:
        return max((s.elapsed_secs for s in self._stats()), default=0.0)

    @property
    def max_buffer_utilization_percent(self) -> int:
        return int(100 * max((s.buffer_utilization for s in self._stats()), default=0.0))

    @property
    def max_compaction_delay_secs(self) -> int:
        return self.manager.max_compaction_delay_ms // 1000

    @property
    def uncleanable_partitions_count(self) -> int:
        return len(self.manager.uncleanable)

    # -- one round -----------------------------------------------------------------------------------------
    def clean_filthiest_log(
        self, cleaner_index: int = 0, now_ms: int | None = None, swap: Callable[[Callable[[], Any]], Any] = run_direct
    ) -> bool:
        """Pick and clean one log on this thread; True when a log was cleaned (or its cleaning attempted)."""
        ltc = self.manager.grab_filthiest_log(now_ms)
        if self.manager.checkpoints_pending:
            self.manager.write_checkpoints()
        if ltc is None:
            return False
        self._clean(self.cleaners[cleaner_index], ltc, now_ms, swap)
        return True

    def _clean(
        self, cleaner: Cleaner, ltc: LogToClean, now_ms: int | None, swap: Callable[[Callable[[], Any]], Any]
    ) -> None:
        ulog = ltc.log

        def guarded_swap(fn: Callable[[], Any]) -> Any:
            def run() -> Any:
                if not self.is_live(ulog):
                    raise CleaningAbortedError("the log was deleted")
                return fn()

            return swap(run)

        name = f"{ulog.topic}-{ulog.partition}"
        try:
            if self.manager.checkpoints_pending:
                self.manager.write_checkpoints()
            result = cleaner.clean(ulog, ltc.first_dirty, ltc.first_uncleanable, now_ms, guarded_swap)
        except CleaningAbortedError as e:
            self.manager.release(ulog)
            log.info("log cleaning aborted", log=name, reason=str(e))
            return
        except Exception:
            if not self.is_live(ulog):  # deleted under the cleaner (closed fds, renamed dir): not the log's fault
                self.manager.release(ulog)
                log.info("log cleaning stopped: the log was deleted", log=name)
                return
            self.manager.release(ulog, uncleanable=True)
            log.exception("log cleaning failed; the partition is marked uncleanable", log=name)
            return
        self.manager.done_cleaning(ulog, result.end_offset)
        self.cleanings += 1
        s = result.stats
        log.info(
            "cleaned log",
            log=name,
            dirty_section=[ltc.first_dirty, result.end_offset],
            bytes_read=s.bytes_read,
            bytes_written=s.bytes_written,
            size_reduction_pct=round(100 * (1 - s.recopy_ratio), 1) if s.bytes_read else 0.0,
            messages_read=s.messages_read,
            messages_written=s.messages_written,
            groups=s.groups,
            map_utilization_pct=round(100 * s.buffer_utilization, 1),
            secs=round(s.elapsed_secs, 3),
        )

    # -- event loop driver ---------------------------------------------------------------------------------
    async def start(self) -> None:
        if not self.cleaners:
            return
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            len(self.cleaners), thread_name_prefix="log-cleaner-thread"
        )
        for c in self.cleaners:
            c.abort.clear()
        self._tasks = [loop.create_task(self._run(i)) for i in range(len(self.cleaners))]

    def _loop_swap(self, loop: asyncio.AbstractEventLoop, cleaner: Cleaner) -> Callable[[Callable[[], Any]], Any]:
        """Run a swap on the event loop from the worker thread and wait for it (abandoned if shutting down
        before it started)."""

        def swap(fn: Callable[[], Any]) -> Any:
            cf: concurrent.futures.Future = concurrent.futures.Future()

            def run() -> None:
                if not cf.set_running_or_notify_cancel():
                    return
                try:
                    cf.set_result(fn())
                except BaseException as e:  # noqa: BLE001 - handed to the worker
                    cf.set_exception(e)

            loop.call_soon_threadsafe(run)
            while True:
                try:
                    return cf.result(timeout=0.2)
                except concurrent.futures.TimeoutError:
                    if cleaner.abort.is_set() and cf.cancel():
                        raise CleaningAbortedError("cleaner shutting down") from None

        return swap

    async def _run(self, index: int) -> None:
        loop = asyncio.get_running_loop()
        cleaner = self.cleaners[index]
        backoff = max(self.config.backoff_ms, 1) / 1000.0
        swap = self._loop_swap(loop, cleaner)
        while not self._stopping:
            try:
                ltc = self.manager.grab_filthiest_log()
                if ltc is not None:
                    await loop.run_in_executor(self._executor, self._clean, cleaner, ltc, None, swap)
                    continue
                if self.manager.checkpoints_pending:
                    await loop.run_in_executor(self._executor, self.manager.write_checkpoints)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("log cleaner round failed")
            assert self._wake is not None
            try:
                await asyncio.wait_for(self._wake.wait(), backoff)
            except TimeoutError:
                pass

    def wakeup(self) -> None:
        if self._wake is not None:
            self._wake.set()
            self._wake.clear()

    async def shutdown(self) -> None:
        """Abort cleanings in progress (at their next check) and wait for the threads to finish."""
        self._stopping = True
        for c in self.cleaners:
            c.abort.set()
        if self._wake is not None:
            self._wake.set()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
            self._tasks = []
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None


__all__ = ["CLEANER_OFFSET_CHECKPOINT", "CleanerConfig", "LogCleaner", "LogCleanerManager", "LogToClean"]
