"""LogManager: the partition logs of all `log.dirs`, their checkpoints and the clean-shutdown marker.

Per log dir Kafka keeps `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
`replication-offset-checkpoint` (HW) and, after a clean shutdown, `.kafka_cleanshutdown`. Its absence at startup
means a crash: logs are then recovered from their recovery points.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import structlog

from strata.config import LogConfig
from strata.protocol.uuids import kafka_uuid_str, parse_kafka_uuid

from .checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CheckpointFormatError,
    OffsetCheckpointFile,
    atomic_write,
    fsync_path,
    read_small_file,
)
from .epoch_cache import LEADER_EPOCH_CHECKPOINT
from .file_cache import OPEN_FILES, effective_capacity
from .log import UnifiedLog, parse_topic_partition

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
PARTITION_METADATA_FILE = "partition.metadata"
DELETE_DIR_SUFFIX = "-delete"
ZERO_UUID = uuid.UUID(int=0)
FSYNC_THREADS = 16  # threads making or fsyncing partition files together
PROGRESS_EVERY_S = 2.0  # at most one "Recovering N logs: x/N done" line this often

log = structlog.get_logger("strata.log_manager")

TopicPartition = tuple[str, int]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class NewLog:
    """A partition log whose files `make_logs` made (off the event loop), before `adopt_logs` registers it."""

    tp: TopicPartition
    log_dir: Path
    log: UnifiedLog


def write_partition_metadata(dir: Path, topic_id: uuid.UUID, sync: bool = True) -> None:
    data = f"version: 0\ntopic_id: {kafka_uuid_str(topic_id)}\n".encode()
    atomic_write(dir / PARTITION_METADATA_FILE, data, sync=sync)


def fsync_all(paths: list[Path]) -> None:
    """fsync many files and dirs at once: concurrent fsyncs share the file system's journal commits, where one after
    the other each waits for its own (2,000 partitions' metadata: ~28 s one by one on a busy disk)."""
    if len(paths) <= 1:
        for p in paths:
            fsync_path(p)
        return
    with ThreadPoolExecutor(max_workers=min(FSYNC_THREADS, len(paths)), thread_name_prefix="strata-fsync") as pool:
        for _ in pool.map(fsync_path, paths):
            pass


class _Progress:
    """Kafka's load progress: "Recovering N logs: x/N done (y%)" at most every PROGRESS_EVERY_S, and the total."""

    def __init__(self, log_dir: Path, total: int, verb: str) -> None:
        self.log_dir, self.total, self.verb = log_dir, total, verb
        self.done = 0
        self.start = self.last = time.monotonic()
        if total:
            log.info(f"{verb} {total} logs", log_dir=str(log_dir))

    def done_one(self) -> None:
        self.done += 1
        now = time.monotonic()
        if now - self.last >= PROGRESS_EVERY_S and self.done < self.total:
            self.last = now
            pct = 100 * self.done // self.total
            log.info(
                f"{self.verb} {self.total} logs: {self.done}/{self.total} done ({pct}%)", log_dir=str(self.log_dir)
            )

    def finish(self) -> None:
        if self.total:
            ms = round((time.monotonic() - self.start) * 1000)
            log.info(f"{self.verb} {self.total} logs: done in {ms} ms", log_dir=str(self.log_dir))


def read_partition_metadata(dir: Path | str) -> uuid.UUID | None:
    data = read_small_file(os.path.join(dir, PARTITION_METADATA_FILE))
    if data is None:
        return None
    fields = dict(ln.split(":", 1) for ln in data.decode(errors="replace").splitlines() if ":" in ln)
    try:
        return parse_kafka_uuid(fields["topic_id"].strip())
    except (KeyError, ValueError):
        return None


class LogManager:
    def __init__(
        self,
        log_dirs: list[Path],
        log_config_for: Callable[[str], LogConfig],
        *,
        recovery_threads: int = 1,
        open_files: int | None = None,
    ) -> None:
        """`recovery_threads`: num.recovery.threads.per.data.dir; `open_files`: log.open.files.cache.size (sizes
        the process's open-file cache, storage/file_cache.py)."""
        self.log_dirs = [Path(d) for d in log_dirs]
        self.log_config_for = log_config_for
        self.recovery_threads = max(1, recovery_threads)
        if open_files is not None:
            OPEN_FILES.resize(effective_capacity(open_files))
        self._logs: dict[TopicPartition, UnifiedLog] = {}
        self._log_dir_of: dict[TopicPartition, Path] = {}
        self._dirty: set[UnifiedLog] = set()  # logs with unflushed messages: what the flush check looks at
        self._rolled: dict[UnifiedLog, int] = {}  # logs rolled since the last flush check -> the new segment's base
        self._checkpoint_lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------------------------
    def startup(self) -> None:
        """Load every `<topic>-<partition>` dir, `num.recovery.threads.per.data.dir` logs at a time per dir (as
        Kafka's LogManager.loadLogs); recover when the dir lacks the clean-shutdown marker (only the segments from
        each log's recovery point on are scanned)."""
        for log_dir in self.log_dirs:
            self._load_dir(log_dir)

    def _load_dir(self, log_dir: Path) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        marker = log_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        recovery_points = self._read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)
        log_starts = self._read_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT)
        hws = self._read_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT)
        todo: list[tuple[TopicPartition, Path, LogConfig]] = []
        configs: dict[str, LogConfig] = {}  # one per topic, shared by its partitions' logs
        with os.scandir(log_dir) as it:
            names = sorted(e.name for e in it if e.is_dir())
        for name in names:
            d = log_dir / name
            if name.endswith(DELETE_DIR_SUFFIX):
                shutil.rmtree(d, ignore_errors=True)  # a deletion interrupted by a crash
                continue
            try:
                tp = parse_topic_partition(name)
            except ValueError:
                continue
            config = configs.get(tp[0])
            if config is None:
                config = configs[tp[0]] = self.log_config_for(tp[0])
            todo.append((tp, d, config))

        def load(tp: TopicPartition, d: Path, config: LogConfig) -> UnifiedLog:
            return UnifiedLog.open(
                d,
                read_partition_metadata(d) or ZERO_UUID,
                config,
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=log_starts.get(tp, 0),
                high_watermark=hws.get(tp, 0),
                needs_recovery=not clean,
            )

        progress = _Progress(log_dir, len(todo), "Loading" if clean else "Recovering")
        if self.recovery_threads == 1 or len(todo) <= 1:
            for tp, d, config in todo:
                self._register(tp, load(tp, d, config), log_dir)
                progress.done_one()
        else:
            with ThreadPoolExecutor(self.recovery_threads, thread_name_prefix="strata-recovery") as pool:
                futures = [(tp, pool.submit(load, tp, d, config)) for tp, d, config in todo]
                for tp, f in futures:
                    self._register(tp, f.result(), log_dir)
                    progress.done_one()
        progress.finish()
        marker.unlink(missing_ok=True)
        if clean:
            fsync_path(log_dir)

    @staticmethod
    def _read_checkpoint(path: Path) -> dict[TopicPartition, int]:
        try:
            return OffsetCheckpointFile(path).read()
        except CheckpointFormatError:
            return {}  # treated as absent: recovery from offset 0 is slower but safe

    def _register(self, tp: TopicPartition, log: UnifiedLog, log_dir: Path) -> None:
        log.on_dirty = self._dirty.add
        log.on_roll = self._on_roll
        self._logs[tp] = log
        self._log_dir_of[tp] = log_dir

    def _on_roll(self, log: UnifiedLog, new_base: int) -> None:
        self._rolled[log] = max(new_base, self._rolled.get(log, new_base))

    def roll_flushes(self) -> list[tuple[UnifiedLog, int]]:
        """Logs rolled since the last call, each with the offset to flush it up to (exclusive): the base of its new
        active segment. As Kafka's roll, which schedules that flush at once, so the recovery point (checkpointed
        every log.flush.offset.checkpoint.interval.ms) follows the rolls and recovery after a crash validates the
        active segment only, not every segment written since the log was last flushed."""
        rolled = [(lg, up_to) for lg, up_to in self._rolled.items() if self._logs.get((lg.topic, lg.partition)) is lg]
        self._rolled.clear()
        return [(lg, up_to) for lg, up_to in rolled if up_to > lg.recovery_point]

    def shutdown(self) -> None:
        """Kafka's LogManager.shutdown: flush and close every log, write the recovery-point, log-start-offset and
        high-watermark checkpoints once per log dir, then mark each dir cleanly shut down. The work is what is
        dirty (`UnifiedLog.flush_and_close`): a log with nothing unflushed and its producer snapshot at the LEO
        costs no fsync; the others are synced `shutdown_threads` at a time, as their fsyncs then share the file
        system's journal commits (one after the other, 20,000 logs outlasted any stop timeout)."""
        logs = list(self._logs.values())
        start = time.monotonic()
        synced = sum(self._each_in_pool(UnifiedLog.flush_and_close, logs))
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        self.checkpoint_high_watermarks()
        for log_dir in self.log_dirs:
            atomic_write(log_dir / CLEAN_SHUTDOWN_FILE, b"")
        if logs:
            ms = round((time.monotonic() - start) * 1000)
            log.info(f"Flushed and closed {len(logs)} logs ({synced} needed an fsync) in {ms} ms")
        self._logs.clear()
        self._dirty.clear()
        self._rolled.clear()
        self._log_dir_of.clear()

    @property
    def shutdown_threads(self) -> int:
        """Threads flushing logs at shutdown: num.recovery.threads.per.data.dir per dir as Kafka, but at least
        FSYNC_THREADS (Kafka's default of 1 leaves each fsync waiting for a journal commit of its own)."""
        return max(FSYNC_THREADS, self.recovery_threads * len(self.log_dirs))

    def _each_in_pool(self, fn: Callable[[UnifiedLog], T], logs: list[UnifiedLog]) -> list[T]:
        """`fn` on every log, `shutdown_threads` at a time."""
        if len(logs) <= 1:
            return [fn(lg) for lg in logs]
        with ThreadPoolExecutor(min(self.shutdown_threads, len(logs)), thread_name_prefix="strata-shutdown") as pool:
            return list(pool.map(fn, logs))

    # -- logs ------------------------------------------------------------------------------------------------
    def get_log(self, topic: str, partition: int) -> UnifiedLog | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[UnifiedLog]:
        return list(self._logs.values())

    def _dir_counts(self) -> dict[Path, int]:
        """Logs per log dir (a snapshot: safe to call from a worker thread)."""
        counts = dict.fromkeys(self.log_dirs, 0)
        for d in list(self._log_dir_of.values()):
            counts[d] = counts.get(d, 0) + 1
        return counts

    def _pick_log_dir(self) -> Path:
        if len(self.log_dirs) == 1:
            return self.log_dirs[0]
        counts = self._dir_counts()
        return min(self.log_dirs, key=lambda d: counts[d])

    def get_or_create_log(self, topic: str, partition: int, topic_id: uuid.UUID, config: LogConfig) -> UnifiedLog:
        tp = (topic, partition)
        log = self._logs.get(tp)
        if log is not None:
            if log.topic_id == ZERO_UUID and topic_id != ZERO_UUID:
                log.topic_id = topic_id
                write_partition_metadata(log.dir, topic_id)
            return log
        log_dir = self._pick_log_dir()
        d = log_dir / f"{topic}-{partition}"
        d.mkdir(parents=True, exist_ok=True)
        write_partition_metadata(d, topic_id)
        log = UnifiedLog.open(d, topic_id, config, needs_recovery=False)
        fsync_path(log_dir)
        self._register(tp, log, log_dir)
        return log

    def make_logs(
        self,
        topic: str,
        partitions: list[int],
        topic_id: uuid.UUID,
        config: LogConfig,
        leader_epochs: Mapping[int, int] | None = None,
    ) -> list[NewLog]:
        """Create the dirs and files of new partition logs, without registering them (`adopt_logs` does, on the
        event loop): the file-system work of a large CreateTopics may run in a worker thread. `leader_epochs`
        (partition -> the epoch this broker leads it in) are written to the logs' epoch caches here, off the event
        loop, so becoming leader finds them (each is an fsynced file write). All or nothing: on an
        OSError (say EMFILE, "Too many open files") what was made is closed and removed before it is raised, so no
        half-made partition dir is left to trouble a restart. The files are made durable together at the end."""
        counts = self._dir_counts()
        plan: list[tuple[TopicPartition, Path]] = []
        for i in partitions:
            log_dir = min(self.log_dirs, key=lambda d: counts[d])
            counts[log_dir] += 1
            plan.append(((topic, i), log_dir))
        dirs = [log_dir / f"{tp[0]}-{tp[1]}" for tp, log_dir in plan]

        def make(tp: TopicPartition, log_dir: Path, d: Path) -> NewLog:
            d.mkdir(parents=True, exist_ok=True)
            write_partition_metadata(d, topic_id, sync=False)
            log = UnifiedLog.open(d, topic_id, config, needs_recovery=False)
            if leader_epochs and (epoch := leader_epochs.get(tp[1])) is not None:
                log.leader_epoch_cache.assign(epoch, log.log_end_offset, sync=False)  # fsynced below with the rest
            return NewLog(tp, log_dir, log)

        made: list[NewLog] = []
        failure: BaseException | None = None
        # file creation waits on the file system more than on the interpreter: several partitions at once
        with ThreadPoolExecutor(max_workers=min(FSYNC_THREADS, len(plan) or 1), thread_name_prefix="strata-mk") as pool:
            futures = [pool.submit(make, tp, log_dir, d) for (tp, log_dir), d in zip(plan, dirs)]
            for f in futures:
                try:
                    made.append(f.result())
                except BaseException as e:  # noqa: BLE001 - the first failure is raised once all are settled
                    failure = failure or e
        try:
            if failure is not None:
                raise failure
            # durable before the create is answered: each partition.metadata, its dir entry, the partition dirs
            files = [d / PARTITION_METADATA_FILE for d in dirs]
            if leader_epochs:
                files += [n.log.dir / LEADER_EPOCH_CHECKPOINT for n in made if n.tp[1] in leader_epochs]
            fsync_all(files + dirs)
            fsync_all(sorted({n.log_dir for n in made}))
            for n in made:
                n.log.note_files_synced()  # the dir fsyncs above cover the segment files: no dir fsync at the flush
        except BaseException:
            self.discard_logs(made, dirs)
            raise
        return made

    @staticmethod
    def discard_logs(made: list[NewLog], dirs: list[Path] | None = None) -> None:
        """Close and remove logs `make_logs` made that were never adopted (and `dirs`, half-made ones)."""
        for n in made:
            n.log.close(take_snapshot=False)
        for d in dirs if dirs is not None else [n.log.dir for n in made]:
            shutil.rmtree(d, ignore_errors=True)

    def adopt_logs(self, logs: list[NewLog]) -> None:
        """Register logs `make_logs` made (event loop); a partition that got a log meanwhile keeps it."""
        for n in logs:
            if n.tp in self._logs:
                continue
            self._register(n.tp, n.log, n.log_dir)

    def detach_log(self, topic: str, partition: int) -> Path | None:
        """Unregister and close a log and rename its dir to `<topic>-<partition>.<uuidhex>-delete` (atomic: a crash
        leaves it for `startup` to finish, and a re-created partition gets a fresh dir at once); returns the renamed
        dir for `remove_detached`, which does the slow part."""
        tp = (topic, partition)
        log = self._logs.pop(tp, None)
        log_dir = self._log_dir_of.pop(tp, None)
        if log is None or log_dir is None:
            return None
        self._dirty.discard(log)
        self._rolled.pop(log, None)
        log.close(take_snapshot=False)  # no producer snapshot for a log about to be removed
        tomb = log_dir / f"{topic}-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
        try:
            log.dir.rename(tomb)
        except FileNotFoundError:
            return None
        return tomb

    def remove_detached(self, tombs: list[Path]) -> None:
        """Make the renames durable (each log dir fsynced once), remove the renamed dirs and rewrite the checkpoints
        once, however many partitions went. May run in a worker thread."""
        for log_dir in {t.parent for t in tombs}:
            fsync_path(log_dir)
        for tomb in tombs:
            shutil.rmtree(tomb, ignore_errors=True)
        if tombs:
            self.checkpoint_recovery_points()
            self.checkpoint_log_start_offsets()
            self.checkpoint_high_watermarks()

    def delete_log(self, topic: str, partition: int) -> None:
        """Detach and remove one log at once."""
        tomb = self.detach_log(topic, partition)
        if tomb is not None:
            self.remove_detached([tomb])

    # -- checkpoints -----------------------------------------------------------------------------------------
    def _write_checkpoint(self, name: str, value: Callable[[UnifiedLog], int]) -> None:
        """May run in a worker thread while the event loop adds logs: iterate a snapshot, serialize writers."""
        logs = list(self._logs.items())
        dirs = dict(self._log_dir_of)
        with self._checkpoint_lock:
            for log_dir in self.log_dirs:
                offsets = {tp: value(log) for tp, log in logs if dirs.get(tp) == log_dir}
                OffsetCheckpointFile(log_dir / name).write(offsets)

    def checkpoint_recovery_points(self) -> None:
        self._write_checkpoint(RECOVERY_POINT_CHECKPOINT, lambda log: log.recovery_point)

    def checkpoint_log_start_offsets(self) -> None:
        self._write_checkpoint(LOG_START_OFFSET_CHECKPOINT, lambda log: log.log_start_offset)

    def checkpoint_high_watermarks(self) -> None:
        self._write_checkpoint(REPLICATION_OFFSET_CHECKPOINT, lambda log: log.high_watermark)

    # -- background work ---------------------------------------------------------------------------------
    def run_retention(self, now_ms: int | None = None) -> int:
        """One retention pass over all logs (log.retention.check.interval.ms); returns segments deleted."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        deleted = 0
        for log in list(self._logs.values()):
            deleted += log.delete_retention_breached_segments(now)
        if deleted:
            self.checkpoint_log_start_offsets()
        return deleted

    def flush_dirty_logs(self, now_ms: int | None = None) -> list[UnifiedLog]:
        """Logs due a flush: flush.ms elapsed since the last one, or flush.messages reached, with unflushed data.
        The caller flushes them (possibly in a worker thread). Only logs appended to since their last flush are
        looked at (O(active), not O(partitions))."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        due = []
        for log in list(self._dirty):
            pending = log.unflushed_messages
            if pending <= 0:
                self._dirty.discard(log)  # flushed since: its next append adds it again
                continue
            if now - log.last_flush_time_ms >= log.config.flush_ms or pending >= log.config.flush_messages:
                due.append(log)
        return due


__all__ = [
    "LogManager",
    "NewLog",
    "CLEAN_SHUTDOWN_FILE",
    "PARTITION_METADATA_FILE",
    "write_partition_metadata",
    "read_partition_metadata",
]
