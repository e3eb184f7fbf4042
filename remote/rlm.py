"""RemoteLogManager (KIP-405): copies closed segments to remote storage, expires them, and serves remote reads.

Per leader partition it runs a copy task and an expiration task every `remote.log.manager.task.interval.ms`, on
separate bounded pools (asyncio semaphores sized by `remote.log.manager.copier.thread.pool.size` and
`...expiration.thread.pool.size`); per follower partition a follower task (Kafka's RLMFollowerTask) keeps the
replica's `highest_offset_in_remote_storage` in step with the RLMM, so that local retention deletes what the leader
tiered. Everything follows the replica's own leader-epoch lineage: after unclean elections remote storage holds other
lineages' records at the same offsets. Reads go through a bounded RemoteLogReader pool (`remote.log.reader.threads`
running, `remote.log.reader.max.pending.tasks` queued, rejected beyond). Nothing here blocks the event loop: the RSM
does its I/O in threads or asynchronously, and the local log is only inspected (never mutated) except for the
`highest_offset_in_remote_storage` / log start updates the KIP prescribes.

The invariants (docs/architecture.md, invariants): only segments whose last offset is below the LSO/HW are copied,
oldest first; every attempt gets a fresh segment id; COPY_SEGMENT_STARTED -> copy -> COPY_SEGMENT_FINISHED, and only
then may local retention delete the local copy; deletion is DELETE_SEGMENT_STARTED -> delete -> FINISHED.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import struct
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import crc32c
import structlog

from strata.config import broker_default
from strata.protocol.errors import ErrorCode
from strata.protocol.records import BufferChain, iter_batches, iter_records
from strata.storage.errors import OffsetOutOfRangeError
from strata.storage.log import TimestampAndOffset, UnifiedLog
from strata.storage.txn_index import AbortedTxn

from .bucket_manifest_writer import PartitionManifestWriter
from .executors import COPY, EXPIRATION, POOL, READ
from .index_cache import RemoteIndexCache
from .metadata import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from .pieces import Pieces
from .quota import RateQuota
from .remote_metrics import RemoteMetrics
from .rlmm_api import RemoteLogMetadataManager
from .rlmm_types import InvalidStateTransitionError
from .rsm import RemoteStorageError, RemoteStorageManager, RemoteStorageTimeoutError

log = structlog.get_logger("strata.remote")

COPY_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
COPY_STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
NEW_LEADER_CATCH_UP_S = 30.0  # bound on _catch_up_as_new_leader


LeadershipProbe = Callable[[TopicIdPartition, int], Awaitable[bool]]
"""Asks the broker whether it still leads a partition at a leader epoch, from the cluster's authoritative metadata
(not this broker's possibly stale view): a broker frozen past its session resumes believing it leads."""


class RemoteReaderQueueFullError(RemoteStorageError):
    """remote.log.reader.max.pending.tasks reached: the fetch is answered with a retriable error."""


class RemoteListOffsetsTimeoutError(RemoteStorageTimeoutError):
    """A remote timestamp lookup outlived remote.list.offsets.request.timeout.ms (Kafka's DelayedRemoteListOffsets
    expiry, KIP-1075): the partition is answered REQUEST_TIMED_OUT, which clients retry."""

    error_code = ErrorCode.REQUEST_TIMED_OUT


@dataclass
class RemoteLogManagerConfig:
    task_interval_ms: int = broker_default("remote.log.manager.task.interval.ms")
    retry_backoff_ms: int = broker_default("remote.log.manager.task.retry.backoff.ms")
    retry_backoff_max_ms: int = broker_default("remote.log.manager.task.retry.backoff.max.ms")
    copier_pool_size: int = broker_default("remote.log.manager.copier.thread.pool.size")
    expiration_pool_size: int = broker_default("remote.log.manager.expiration.thread.pool.size")
    reader_threads: int = broker_default("remote.log.reader.threads")
    reader_max_pending_tasks: int = broker_default("remote.log.reader.max.pending.tasks")
    index_cache_bytes: int = broker_default("remote.log.index.file.cache.total.size.bytes")
    copy_max_bytes_per_second: int = broker_default("remote.log.manager.copy.max.bytes.per.second")
    fetch_max_bytes_per_second: int = broker_default("remote.log.manager.fetch.max.bytes.per.second")
    copy_quota_window_num: int = broker_default("remote.log.manager.copy.quota.window.num")
    copy_quota_window_size_s: int = broker_default("remote.log.manager.copy.quota.window.size.seconds")
    fetch_quota_window_num: int = broker_default("remote.log.manager.fetch.quota.window.num")
    fetch_quota_window_size_s: int = broker_default("remote.log.manager.fetch.quota.window.size.seconds")
    list_offsets_timeout_ms: int = broker_default("remote.list.offsets.request.timeout.ms")

    @classmethod
    def from_broker(cls, v: Mapping[str, Any]) -> RemoteLogManagerConfig:
        def g(key: str) -> int:
            val = v.get(key)
            return int(broker_default(key) if val is None else val)

        return cls(
            task_interval_ms=g("remote.log.manager.task.interval.ms"),
            retry_backoff_ms=g("remote.log.manager.task.retry.backoff.ms"),
            retry_backoff_max_ms=g("remote.log.manager.task.retry.backoff.max.ms"),
            copier_pool_size=g("remote.log.manager.copier.thread.pool.size"),
            expiration_pool_size=g("remote.log.manager.expiration.thread.pool.size"),
            reader_threads=g("remote.log.reader.threads"),
            reader_max_pending_tasks=g("remote.log.reader.max.pending.tasks"),
            index_cache_bytes=g("remote.log.index.file.cache.total.size.bytes"),
            copy_max_bytes_per_second=g("remote.log.manager.copy.max.bytes.per.second"),
            fetch_max_bytes_per_second=g("remote.log.manager.fetch.max.bytes.per.second"),
            copy_quota_window_num=g("remote.log.manager.copy.quota.window.num"),
            copy_quota_window_size_s=g("remote.log.manager.copy.quota.window.size.seconds"),
            fetch_quota_window_num=g("remote.log.manager.fetch.quota.window.num"),
            fetch_quota_window_size_s=g("remote.log.manager.fetch.quota.window.size.seconds"),
            list_offsets_timeout_ms=g("remote.list.offsets.request.timeout.ms"),
        )


def lineage_end_in_segment(ulog: UnifiedLog, meta: RemoteLogSegmentMetadata, epoch: int) -> int:
    """Last offset of `meta`, read from its records of `epoch` on, that belongs to this log's lineage.

    A segment found by (epoch, offset) holds the right records for that epoch, but past the epoch's end in this log
    it may continue with another lineage's records at the same offsets (its leader went on writing in that epoch, or
    in an epoch this log never had): a read must not run on into them."""
    cache = ulog.leader_epoch_cache
    starts = {e.epoch: e.start_offset for e in cache.entries}
    seg = [(e, s) for e, s in sorted(meta.segment_leader_epochs.items()) if e >= epoch]
    for i, (e, start) in enumerate(seg):
        if i > 0 and starts.get(e) != start:
            return start - 1
        seg_end = seg[i + 1][1] - 1 if i + 1 < len(seg) else meta.end_offset
        got, ours = cache.end_offset_for(e, ulog.log_end_offset)
        if got != e:
            return start - 1
        if ours - 1 < seg_end:
            return ours - 1
    return meta.end_offset


def topic_id_partition(ulog: UnifiedLog) -> TopicIdPartition:
    return TopicIdPartition(ulog.topic_id, ulog.topic, ulog.partition)


def empty_producer_snapshot() -> bytes:
    """A Kafka producer-state snapshot with no entries (version 1, CRC32C over the entry array)."""
    body = struct.pack(">i", 0)
    return struct.pack(">hI", 1, crc32c.crc32c(body)) + body


def epoch_checkpoint_bytes(entries: list[tuple[int, int]]) -> bytes:
    """leader-epoch-checkpoint text (version 0) for the entries given."""
    lines = ["0", str(len(entries))] + [f"{e} {o}" for e, o in entries]
    return ("\n".join(lines) + "\n").encode()


@dataclass
class _FollowerTask:
    ulog: UnifiedLog
    task: asyncio.Task | None = None


@dataclass
class _PartitionTasks:
    ulog: UnifiedLog
    tip: TopicIdPartition
    leader_epoch: int
    copy_task: asyncio.Task | None = None
    expire_task: asyncio.Task | None = None
    copying: set[uuid.UUID] = field(default_factory=set)
    failures: int = 0
    resigned: bool = False  # leadership lost: finish the copy in flight, start no other


class RemoteLogManager:
    def __init__(
        self,
        config: RemoteLogManagerConfig,
        rsm: RemoteStorageManager,
        rlmm: RemoteLogMetadataManager,
        *,
        broker_id: int,
        index_cache_dir: Path,
        metrics: RemoteMetrics | None = None,
        leadership_probe: LeadershipProbe | None = None,
    ) -> None:
        self.config = config
        self.rsm = rsm
        self.rlmm = rlmm
        self.broker_id = broker_id
        self.leadership_probe = leadership_probe
        self.metrics = metrics or RemoteMetrics()
        self.index_cache = RemoteIndexCache(rsm, index_cache_dir, config.index_cache_bytes)
        self._empty_snapshot_dir = Path(index_cache_dir).parent / "remote-log-empty-snapshots"
        self._leaders: dict[TopicIdPartition, _PartitionTasks] = {}
        self._followers: dict[TopicIdPartition, _FollowerTask] = {}
        self._resigning: set[asyncio.Task] = set()  # copy tasks of former leaderships finishing their copy
        self._deletions: set[asyncio.Task] = set()  # topic deletions in progress (retried through outages)
        self._background: set[asyncio.Task] = set()  # read-ahead for sequential readers, RSM warm-up
        self._read_ahead_done: OrderedDict[uuid.UUID, None] = OrderedDict()  # segments whose successor was asked
        self._copy_slots = asyncio.Semaphore(max(1, config.copier_pool_size))
        self._expire_slots = asyncio.Semaphore(max(1, config.expiration_pool_size))
        self._reader_slots = asyncio.Semaphore(max(1, config.reader_threads))
        self._reader_pending = 0
        self._reader_busy = 0
        self._tasks_busy = 0
        self.metrics.tasks_avg_idle.set(100.0)
        self.copy_quota = RateQuota(
            config.copy_max_bytes_per_second, config.copy_quota_window_num, config.copy_quota_window_size_s
        )
        self.fetch_quota = RateQuota(
            config.fetch_max_bytes_per_second, config.fetch_quota_window_num, config.fetch_quota_window_size_s
        )
        self._closed = False
        #: bucket manifests (issue 24): told when a partition's remote segments change; None: not written
        self.manifests: PartitionManifestWriter | None = None

    def start(self) -> None:
        """Warm the RSM's clients up in the background, so the first remote read after a start does not pay it."""

        async def warm() -> None:
            try:
                await self.rsm.warm_up()
            except Exception as e:  # noqa: BLE001 - the first real request reports and retries it
                log.warning("remote storage client warm-up failed", error=repr(e))

        self._spawn(warm())

    def _spawn(self, coro: Any) -> asyncio.Task:
        """A background task of this RLM, cancelled by close()."""
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # ---- leadership ---------------------------------------------------------------------------------------------
    def on_leadership_change(self, leaders: list[tuple[UnifiedLog, int]], followers: list[UnifiedLog]) -> None:
        """Start copy/expiration tasks for tiered partitions we lead and a follower task for those we follow."""
        for ulog, epoch in leaders:
            tip = topic_id_partition(ulog)
            self._stop_follower(tip)
            if not ulog.remote_log_enabled:
                self.stop_partition(tip)
                continue
            st = self._leaders.get(tip)
            if st is None:
                st = self._leaders[tip] = _PartitionTasks(ulog, tip, epoch)
                st.copy_task = asyncio.create_task(self._copy_loop(st), name=f"rlm-copy-{tip}")
                st.expire_task = asyncio.create_task(self._expire_loop(st), name=f"rlm-expire-{tip}")
            st.ulog, st.leader_epoch = ulog, epoch
        for ulog in followers:
            tip = topic_id_partition(ulog)
            self._resign(tip)
            if not ulog.remote_log_enabled:
                continue
            ft = self._followers.get(tip)
            if ft is None:
                ft = self._followers[tip] = _FollowerTask(ulog)
                ft.task = asyncio.create_task(self._follower_loop(tip, ft), name=f"rlm-follower-{tip}")
            ft.ulog = ulog

    def _remote_changed(self, ulog: UnifiedLog, st: _PartitionTasks | None) -> None:
        """A copy or deletion finished: the leader's manifest writer records the partition's new remote state."""
        if self.manifests is not None and st is not None:
            epoch = st.leader_epoch
            self.manifests.request(ulog, st.tip, epoch, lambda: self.still_leader(st, epoch))

    def stop_partition(self, tip: TopicIdPartition) -> None:
        if self.manifests is not None:
            self.manifests.stop(tip)
        st = self._leaders.pop(tip, None)
        if st is not None:
            for t in (st.copy_task, st.expire_task):
                if t is not None:
                    t.cancel()

    def _resign(self, tip: TopicIdPartition) -> None:
        """Leadership moved away: expiration stops now; a segment copy in flight finishes (KIP-405: the new leader may
        copy the same offsets again; such duplicates are allowed and expire with retention), then the copy task
        ends."""
        if self.manifests is not None:
            self.manifests.stop(tip)
        st = self._leaders.pop(tip, None)
        if st is None:
            return
        st.resigned = True
        if st.expire_task is not None:
            st.expire_task.cancel()
        if st.copy_task is not None and not st.copying:
            st.copy_task.cancel()
        elif st.copy_task is not None:
            self._resigning.add(st.copy_task)
            st.copy_task.add_done_callback(self._resigning.discard)

    def _stop_follower(self, tip: TopicIdPartition) -> None:
        ft = self._followers.pop(tip, None)
        if ft is not None and ft.task is not None:
            ft.task.cancel()

    def stop_replica(self, tip: TopicIdPartition) -> None:
        """The replica is gone from this broker (deleted, reassigned away): no task of any kind for it."""
        self.stop_partition(tip)
        self._stop_follower(tip)

    async def close(self) -> None:
        self._closed = True
        tasks = [t for st in self._leaders.values() for t in (st.copy_task, st.expire_task) if t is not None]
        tasks += [ft.task for ft in self._followers.values() if ft.task is not None]
        tasks += list(self._resigning)
        tasks += self._deletions  # partition deletions retrying through an outage
        tasks += list(self._background)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.manifests is not None:
            await self.manifests.close()
        self._leaders.clear()
        self._followers.clear()
        await self.index_cache.close()
        await self.rsm.close()
        if self.rsm.executors is not None:
            self.rsm.executors.shutdown()

    # ---- task loops ---------------------------------------------------------------------------------------------
    def _backoff_s(self, failures: int) -> float:
        base = min(self.config.retry_backoff_ms * (2 ** max(0, failures - 1)), self.config.retry_backoff_max_ms)
        return base * (1 + random.uniform(-0.2, 0.2)) / 1000.0

    async def _wait_ready(self, tip: TopicIdPartition) -> None:
        """The RLMM must have caught up on this partition before we decide what is (not) copied."""
        while not self._closed:
            try:
                await self.rlmm.wait_until_ready(tip, 30.0)
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - not ready yet (or the RLMM failing): wait and ask again
                log.info("waiting for remote log metadata", partition=str(tip), reason=str(e))
                await asyncio.sleep(self._backoff_s(2))

    async def _catch_up_as_new_leader(self, tip: TopicIdPartition) -> None:
        """Before choosing where copying resumes: apply what the metadata partition holds now, including the previous
        leader's last COPY_SEGMENT_FINISHED (bounded: a replica whose tail is truncated away never gets there)."""
        try:
            await self.rlmm.wait_for_catch_up(tip, NEW_LEADER_CATCH_UP_S)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - copying resumes from what is known, as before
            log.warning("remote log metadata did not catch up before copying", partition=str(tip), error=str(e))

    async def _copy_loop(self, st: _PartitionTasks) -> None:
        POOL.set(COPY)  # this task's blocking RSM work runs on the copier pool
        await self._wait_ready(st.tip)
        await self._catch_up_as_new_leader(st.tip)
        await self.sync_highest_copied_offset(st.ulog)
        if self.rlmm.list_remote_log_segments(st.tip):
            self._remote_changed(st.ulog, st)  # a new leader's manifest: its lineage, its epoch (fences the old one)
        while not self._closed and not st.resigned:
            delay = self.config.task_interval_ms / 1000.0
            try:
                async with self._copy_slots, self._task_busy():
                    await self.copy_eligible_segments(st.ulog, st)
                st.failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - remote outage: back off and retry, never give up on the partition
                st.failures += 1
                delay = max(delay, self._backoff_s(st.failures)) if st.failures > 1 else self._backoff_s(1)
                log.warning("remote copy failed", partition=str(st.tip), error=str(e), retry_in_s=round(delay, 2))
            self._update_copy_lag(st.ulog)
            await asyncio.sleep(delay)

    @contextlib.asynccontextmanager
    async def _task_busy(self) -> AsyncIterator[None]:
        """RemoteLogManagerTasksAvgIdlePercent: the share of the copier and expiration pools not running a task."""
        pool = max(1, self.config.copier_pool_size) + max(1, self.config.expiration_pool_size)
        self._tasks_busy += 1
        self.metrics.tasks_avg_idle.set(100.0 * (1 - self._tasks_busy / pool))
        try:
            yield
        finally:
            self._tasks_busy -= 1
            self.metrics.tasks_avg_idle.set(100.0 * (1 - self._tasks_busy / pool))

    async def _follower_loop(self, tip: TopicIdPartition, ft: _FollowerTask) -> None:
        """Kafka's RLMFollowerTask: what the leader tiers becomes deletable here once the RLMM shows it copied."""
        await self._wait_ready(tip)
        failures = 0
        while not self._closed:
            delay = self.config.task_interval_ms / 1000.0
            try:
                await self.sync_highest_copied_offset(ft.ulog)
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the follower task must not die: back off and retry
                failures += 1
                delay = max(delay, self._backoff_s(failures))
                log.warning("remote follower task failed", partition=str(tip), error=str(e))
            await asyncio.sleep(delay)

    async def _expire_loop(self, st: _PartitionTasks) -> None:
        POOL.set(EXPIRATION)
        await self._wait_ready(st.tip)
        while not self._closed and not st.resigned:  # the flag holds even if a library swallowed the cancellation
            delay = self.config.task_interval_ms / 1000.0
            try:
                async with self._expire_slots, self._task_busy():
                    await self.expire_remote_segments(st.ulog, st)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the expiration task must not die: retried after a backoff
                delay = self._backoff_s(2)
                log.warning("remote expiration failed", partition=str(st.tip), error=str(e))
            await asyncio.sleep(delay)

    # ---- leadership checks ------------------------------------------------------------------------------------
    def _holds(self, st: _PartitionTasks, epoch: int) -> bool:
        """This broker's own view: the task's leadership is current and still at `epoch`."""
        return not self._closed and not st.resigned and self._leaders.get(st.tip) is st and st.leader_epoch == epoch

    async def still_leader(self, st: _PartitionTasks, epoch: int) -> bool:
        """Checked before every remote deletion and before every new copy (Kafka's RLMTask checks per segment): the
        leadership the pass started with is still this broker's, in its own view and in the cluster's (the probe).
        Cancellation alone is not enough: a library that turns a CancelledError into its own timeout error (all
        timers fire at once when a frozen process resumes) would let the pass run on, and a broker resumed after
        a SIGSTOP believes it leads until the metadata watch catches up. A probe that fails counts as "no"."""
        if not self._holds(st, epoch):
            return False
        if self.leadership_probe is None:
            return True
        try:
            ok = await self.leadership_probe(st.tip, epoch)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - unknown leadership: do nothing this pass
            log.warning("cannot confirm leadership", partition=str(st.tip), leader_epoch=epoch, error=repr(e))
            return False
        return ok and self._holds(st, epoch)

    # ---- copy -----------------------------------------------------------------------------------------------
    async def find_highest_remote_offset(self, ulog: UnifiedLog) -> int | None:
        """The highest offset of this log's lineage held in remote storage, None when the lineage is unknown.

        Walk the leader-epoch cache backwards and take the first epoch the RLMM has copied data of (KIP-405
        "Follower to leader"), capped at that epoch's end in this log: after an unclean election (or both replicas
        losing an unflushed tail) remote storage can hold a divergent segment of the same epoch running past
        where the epoch ends here, and counting it would skip copying, and let local retention delete, records of
        the surviving lineage that remote storage does not have."""
        tip = topic_id_partition(ulog)
        cache = ulog.leader_epoch_cache
        if not cache.entries:
            return None
        for entry in reversed(cache.entries):
            h = self.rlmm.highest_offset_for_epoch(tip, entry.epoch)
            if h is not None and h >= 0:
                _, epoch_end = cache.end_offset_for(entry.epoch, ulog.log_end_offset)
                return min(h, epoch_end - 1)
        return -1

    async def sync_highest_copied_offset(self, ulog: UnifiedLog) -> int:
        """Set the log's highest offset in remote storage from the RLMM: where a new leader resumes copying (never
        re-copying, never skipping) and up to where a replica's local retention may delete."""
        highest = await self.find_highest_remote_offset(ulog)
        if highest is not None:
            ulog.reset_highest_offset_in_remote_storage(highest)
        return ulog.highest_offset_in_remote_storage

    def copy_candidates(self, ulog: UnifiedLog) -> list[tuple[Any, int]]:
        """(segment, end offset) of closed segments above the highest copied offset and wholly below the LSO (so
        below the HW too): an open transaction's data is never tiered before its marker is replicated, and each
        copied segment's `.txnindex` is final."""
        segs = ulog.segments
        out = []
        upper = ulog.last_stable_offset
        highest = ulog.highest_offset_in_remote_storage
        for seg, nxt in itertools.pairwise(segs):
            end = nxt.base_offset - 1
            if end <= highest or seg.base_offset < ulog.local_log_start_offset:
                continue
            if nxt.base_offset > upper:
                break
            if seg.size == 0:
                continue
            out.append((seg, end))
        return out

    async def copy_eligible_segments(self, ulog: UnifiedLog, st: _PartitionTasks | None = None) -> int:
        if ulog.config.values.get("remote.log.copy.disable"):
            return 0
        copied = 0
        epoch = st.leader_epoch if st is not None else -1
        for seg, end in self.copy_candidates(ulog):
            if st is not None and not await self.still_leader(st, epoch):
                break  # deposed: no new copy (one already in flight finishes, as in Kafka)
            self.metrics.copy_throttle_ms.inc(await self.copy_quota.acquire(seg.size))
            if st is not None and not await self.still_leader(st, epoch):
                break  # the quota wait can be long
            await self._copy_segment(ulog, seg, end, st)
            copied += 1
        return copied

    async def _copy_segment(self, ulog: UnifiedLog, seg: Any, end: int, st: _PartitionTasks | None) -> None:
        tip = topic_id_partition(ulog)
        base = seg.base_offset
        entries = [(e.epoch, e.start_offset) for e in ulog.leader_epoch_cache.entries]
        seg_epochs: dict[int, int] = {}
        for i, (epoch, start) in enumerate(entries):
            nxt_start = entries[i + 1][1] if i + 1 < len(entries) else None
            if start <= end and (nxt_start is None or nxt_start > base):
                seg_epochs[epoch] = max(start, base)
        if not seg_epochs:
            seg_epochs = {st.leader_epoch if st else 0: base}
        checkpoint = epoch_checkpoint_bytes([(e, o) for e, o in entries if o <= end])
        snapshot = self._producer_snapshot_path(ulog, end + 1)
        seg_id = RemoteLogSegmentId(tip, uuid.uuid4())
        # A segment without aborted transactions uploads no transaction index: KIP-1058's flag spares readers its GET.
        txn_index = seg.txn_index.path if seg.txn_index.entries else None
        meta = RemoteLogSegmentMetadata(
            seg_id,
            base,
            end,
            seg.largest_timestamp,
            self.broker_id,
            _now_ms(),
            seg.size,
            seg_epochs,
            COPY_STARTED,
            txn_idx_empty=txn_index is None,
        )
        if st is not None:
            st.copying.add(seg_id.id)
        try:
            await self.rlmm.add_remote_log_segment_metadata(meta)
            data = LogSegmentData(
                seg.log_path, seg.offset_index.path, seg.time_index.path, txn_index, snapshot, checkpoint
            )
            self.metrics.copy_requests.labels(ulog.topic).inc()
            try:
                custom = await self.rsm.copy_log_segment_data(meta, data)
            except Exception:
                self.metrics.copy_errors.labels(ulog.topic).inc()
                raise
            await self.rlmm.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(seg_id, _now_ms(), custom, COPY_FINISHED, self.broker_id)
            )
        finally:
            if st is not None:
                st.copying.discard(seg_id.id)
        self.metrics.copy_bytes.labels(ulog.topic).inc(seg.size)
        ulog.update_highest_offset_in_remote_storage(end)
        self._remote_changed(ulog, st)
        log.info(
            "copied segment to remote storage",
            partition=str(tip),
            base_offset=base,
            end_offset=end,
            bytes=seg.size,
            segment_id=seg_id.id_str,
        )

    def _producer_snapshot_path(self, ulog: UnifiedLog, offset: int) -> Path:
        """The producer snapshot taken at the segment's end (Kafka ships one with every copied segment). When the
        log has none for that offset (segments written before producer state existed), an empty snapshot is made
        outside the partition directory, so log recovery never mistakes it for real producer state."""
        path = ulog.producer_state.snapshot_file(offset)
        if path is not None and path.exists():
            return path
        empty = self._empty_snapshot_dir / f"{offset:020d}.snapshot"
        if not empty.exists():
            empty.parent.mkdir(parents=True, exist_ok=True)
            tmp = empty.with_suffix(".tmp")
            tmp.write_bytes(empty_producer_snapshot())
            tmp.replace(empty)
        return empty

    def _update_copy_lag(self, ulog: UnifiedLog) -> None:
        cands = self.copy_candidates(ulog)
        labels = (ulog.topic, str(ulog.partition))
        self.metrics.copy_lag_segments.labels(*labels).set(len(cands))
        self.metrics.copy_lag_bytes.labels(*labels).set(sum(s.size for s, _ in cands))

    # ---- expiration -------------------------------------------------------------------------------------------
    def _segments(self, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        return list(self.rlmm.list_remote_log_segments(tip))

    async def expire_remote_segments(
        self, ulog: UnifiedLog, st: _PartitionTasks | None = None, now_ms: int | None = None
    ) -> int:
        """Apply retention.ms / retention.bytes over local + remote, the log start offset, and orphan cleanup.

        With `st` (the leader's task), every deletion first checks that this broker still leads at the epoch the
        pass started with; the first "no" ends the pass, leaving the rest to the new leader."""
        tip = topic_id_partition(ulog)
        epoch = st.leader_epoch if st is not None else -1
        if st is not None and not self._holds(st, epoch):
            return 0
        now = _now_ms() if now_ms is None else now_ms
        cfg = ulog.config
        listed = time.perf_counter()
        all_segs = self._segments(tip)
        finished = sorted((s for s in all_segs if s.state == COPY_FINISHED), key=lambda s: s.start_offset)
        copying = st.copying if st is not None else set()
        doomed: list[RemoteLogSegmentMetadata] = []
        # orphans: failed/abandoned copies (a segment of another lineage goes only once below the log start offset)
        # Another broker's COPY_SEGMENT_STARTED may be a former leader's copy still in flight (it finishes after
        # resigning): only once it is older than the grace period is it abandoned.
        grace_ms = max(self.config.task_interval_ms * 4, 60_000)
        for s in all_segs:
            if s.state == RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
                doomed.append(s)  # a deletion that failed (remote storage down): retried until done, as Kafka does
            elif s.state == COPY_STARTED and s.segment_id not in copying:
                aged = now - s.event_timestamp_ms > grace_ms
                mine = s.broker_id == self.broker_id
                if (s.end_offset <= ulog.highest_offset_in_remote_storage and (mine or aged)) or (mine and aged):
                    doomed.append(s)
        kept = []
        for s in finished:
            if s.end_offset < ulog.log_start_offset:
                doomed.append(s)
            else:
                kept.append(s)
        if cfg.delete:
            if cfg.retention_ms >= 0:
                while kept and now - kept[0].max_timestamp_ms > cfg.retention_ms:
                    doomed.append(kept.pop(0))
            if cfg.retention_bytes >= 0:
                remote_size = sum(s.segment_size_in_bytes for s in kept)
                local_only = sum(
                    seg.size for seg in ulog.segments if seg.base_offset > ulog.highest_offset_in_remote_storage
                )
                excess = remote_size + local_only - cfg.retention_bytes
                while kept and excess - kept[0].segment_size_in_bytes >= 0:
                    excess -= kept[0].segment_size_in_bytes
                    doomed.append(kept.pop(0))
        labels = (ulog.topic, str(ulog.partition))
        self.metrics.log_size_computation_ms.labels(*labels).set((time.perf_counter() - listed) * 1000)
        deleted = 0
        lag = list(doomed)  # RemoteDeleteLag*: eligible for deletion, not deleted yet
        self._update_delete_lag(labels, lag)
        deposed = False
        for s in doomed:
            if st is not None and not await self.still_leader(st, epoch):
                deposed = True
                log.info("leadership lost: remote expiration pass stopped", partition=str(tip), leader_epoch=epoch)
                break
            if await self._delete_segment(ulog.topic, s):
                deleted += 1
                lag.remove(s)
                self._update_delete_lag(labels, lag)
        if kept:
            new_start = kept[0].start_offset
        else:
            new_start = ulog.local_log_start_offset
        if deleted and not deposed and new_start > ulog.log_start_offset:
            ulog.advance_log_start_offset(new_start)
        if deleted and not deposed:
            self._remote_changed(ulog, st)
        self._update_size_metrics(ulog, kept)
        return deleted

    async def _delete_segment(self, topic: str, s: RemoteLogSegmentMetadata) -> bool:
        self.metrics.delete_requests.labels(topic).inc()
        try:
            if s.state != RemoteLogSegmentState.DELETE_SEGMENT_STARTED:  # a retry does not record it again
                await self.rlmm.update_remote_log_segment_metadata(
                    RemoteLogSegmentMetadataUpdate(
                        s.remote_log_segment_id,
                        _now_ms(),
                        None,
                        RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
                        self.broker_id,
                    )
                )
            await self.rsm.delete_log_segment_data(s)
            self.index_cache.remove(s.segment_id)
            await self.rlmm.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(
                    s.remote_log_segment_id,
                    _now_ms(),
                    None,
                    RemoteLogSegmentState.DELETE_SEGMENT_FINISHED,
                    self.broker_id,
                )
            )
        except Exception as e:  # noqa: BLE001 - remote storage failing: counted, and retried by the next pass
            self.metrics.delete_errors.labels(topic).inc()
            log.warning("remote segment deletion failed", segment=str(s.remote_log_segment_id), error=str(e))
            return False
        log.info(
            "deleted remote segment",
            partition=str(s.topic_id_partition),
            start_offset=s.start_offset,
            end_offset=s.end_offset,
            segment_id=s.remote_log_segment_id.id_str,
        )
        return True

    def _update_delete_lag(self, labels: tuple[str, str], lag: list[RemoteLogSegmentMetadata]) -> None:
        self.metrics.delete_lag_segments.labels(*labels).set(len(lag))
        self.metrics.delete_lag_bytes.labels(*labels).set(sum(s.segment_size_in_bytes for s in lag))

    def _update_size_metrics(self, ulog: UnifiedLog, kept: list[RemoteLogSegmentMetadata]) -> None:
        labels = (ulog.topic, str(ulog.partition))
        self.metrics.log_size_bytes.labels(*labels).set(sum(s.segment_size_in_bytes for s in kept))
        self.metrics.metadata_count.labels(*labels).set(len(kept))

    async def delete_partition(self, tip: TopicIdPartition) -> int:
        """Delete a partition's remote data (the RemotePartitionRemover runs it): from where the RLMM says it is,
        DELETE_PARTITION_MARKED -> STARTED -> delete every segment -> FINISHED. While remote storage fails, what is
        left is retried with the task backoff (remote.log.manager.task.retry.backoff.*) until it is gone or the RLM
        closes; the partition stays DELETE_PARTITION_STARTED meanwhile."""
        self.stop_replica(tip)
        task = asyncio.current_task()
        if task is not None:
            self._deletions.add(task)
        pool = POOL.set(EXPIRATION)
        try:
            return await self._delete_partition(tip)
        finally:
            POOL.reset(pool)
            self._deletions.discard(task)

    async def mark_partition_deleted(self, tip: TopicIdPartition) -> None:
        """Topic deletion (or KIP-950's delete on disable) as the controller records it: DELETE_PARTITION_MARKED, for
        the RemotePartitionRemover on the leader of the partition's metadata partition to act on. A partition
        already further along is left as it is."""
        self.stop_replica(tip)
        current = self._delete_state(tip)
        if current is not None:
            return
        try:
            await self._mark(tip, RemotePartitionDeleteState.DELETE_PARTITION_MARKED)
        except InvalidStateTransitionError:
            pass  # marked (or started) meanwhile by another broker

    def start_marking_deleted(self, tips: list[TopicIdPartition]) -> list[asyncio.Task]:
        """mark_partition_deleted for each partition, at once, each retried with the task backoff in the background
        until it is recorded or the RLM closes: a mark that is never written leaves the data in remote storage for
        good when no replica of the topic is left to mark it."""
        return [self._spawn(self._mark_deleted_until_recorded(tip)) for tip in tips]

    async def mark_partitions_deleted(self, tips: list[TopicIdPartition], wait_s: float) -> int:
        """start_marking_deleted, then wait up to `wait_s`; returns how many marks are still pending."""
        tasks = self.start_marking_deleted(tips)
        if not tasks:
            return 0
        _, pending = await asyncio.wait(tasks, timeout=wait_s)
        return len(pending)

    async def _mark_deleted_until_recorded(self, tip: TopicIdPartition) -> None:
        failures = 0
        while not self._closed:
            try:
                await self.mark_partition_deleted(tip)
                return
            except Exception as e:  # noqa: BLE001 - a metadata partition without a leader, a timed-out append
                failures += 1
                delay = self._backoff_s(failures)
                log.warning(
                    "could not mark remote partition deleted",
                    partition=str(tip),
                    error=str(e),
                    retry_in_s=round(delay, 2),
                )
                await asyncio.sleep(delay)

    def _delete_state(self, tip: TopicIdPartition) -> RemotePartitionDeleteState | None:
        if not self.rlmm.is_ready(tip):
            return None
        m = self.rlmm.partition_delete_metadata(tip)
        return None if m is None else m.state

    async def _mark(self, tip: TopicIdPartition, state: RemotePartitionDeleteState) -> None:
        await self.rlmm.put_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(tip, state, _now_ms(), self.broker_id)
        )

    async def _delete_partition(self, tip: TopicIdPartition) -> int:
        current = self._delete_state(tip)
        if current == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
            return 0
        if current is None:
            await self._mark(tip, RemotePartitionDeleteState.DELETE_PARTITION_MARKED)
        if current != RemotePartitionDeleteState.DELETE_PARTITION_STARTED:
            await self._mark(tip, RemotePartitionDeleteState.DELETE_PARTITION_STARTED)
        n = failures = 0
        while True:
            left = 0
            for s in self._segments(tip):
                if s.state != RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
                    if await self._delete_segment(tip.topic, s):
                        n += 1
                    else:
                        left += 1
            try:
                if left:
                    raise RemoteStorageError(f"{left} segment(s) could not be deleted")
                await self.rsm.delete_partition(tip)
                if self.manifests is not None:
                    await self.manifests.delete_partition(tip)
                break
            except Exception as e:  # remote outage: back off and retry
                failures += 1
                delay = self._backoff_s(failures)
                log.warning(
                    "remote partition deletion failed", partition=str(tip), error=str(e), retry_in_s=round(delay, 2)
                )
                if self._closed:
                    raise
                await asyncio.sleep(delay)
        await self._mark(tip, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED)
        return n

    # ---- reads ------------------------------------------------------------------------------------------------
    @property
    def reader_queue_size(self) -> int:
        return self._reader_pending

    async def read(
        self, ulog: UnifiedLog, offset: int, max_bytes: int, min_one_message: bool, max_offset: int | None = None
    ) -> bytes | memoryview | BufferChain:
        """Whole batches from remote storage starting with the batch holding `offset` (RemoteLogReader)."""
        if self._reader_pending >= self.config.reader_max_pending_tasks + self.config.reader_threads:
            self.metrics.fetch_errors.labels(ulog.topic).inc()
            raise RemoteReaderQueueFullError("remote log reader queue is full")
        self._reader_pending += 1
        self.metrics.reader_queue_size.set(max(0, self._reader_pending - self.config.reader_threads))
        pool = POOL.set(READ)  # blocking work of this read (and of the loads it spawns): reader pool
        try:
            async with self._reader_slots:
                self._reader_busy += 1
                self.metrics.reader_avg_idle.set(100.0 * (1 - self._reader_busy / max(1, self.config.reader_threads)))
                try:
                    started = time.perf_counter()
                    self.metrics.fetch_requests.labels(ulog.topic).inc()
                    try:
                        data = await self._read(ulog, offset, max_bytes, min_one_message, max_offset)
                    except Exception:
                        self.metrics.fetch_errors.labels(ulog.topic).inc()
                        raise
                    self.metrics.reader_fetch_time.observe(time.perf_counter() - started)
                    self.metrics.fetch_bytes.labels(ulog.topic).inc(len(data))
                    self.fetch_quota.record(len(data))
                    return data
                finally:
                    self._reader_busy -= 1
                    self.metrics.reader_avg_idle.set(
                        100.0 * (1 - self._reader_busy / max(1, self.config.reader_threads))
                    )
        finally:
            POOL.reset(pool)
            self._reader_pending -= 1
            self.metrics.reader_queue_size.set(max(0, self._reader_pending - self.config.reader_threads))

    def fetch_throttled(self) -> bool:
        """KIP-956: while remote reads are over remote.log.manager.fetch.max.bytes.per.second, a fetch does not
        schedule remote reads; its remote partitions answer empty (Kafka's ReplicaManager), and the time it would
        take to get back within quota is recorded as throttle time."""
        delay = self.fetch_quota.throttle_delay_s()
        if delay <= 0:
            return False
        self.metrics.fetch_throttle_ms.inc(delay * 1000)
        return True

    def _read_ahead_next(self, ulog: UnifiedLog, meta: RemoteLogSegmentMetadata) -> None:
        """A read reached the end of `meta`: have the RSM load the next segment of the lineage (its start), so a
        sequential consumer does not wait for it at the segment boundary. Its indexes are not needed there: a read
        from a segment's start offset begins at position 0."""
        if self._closed or meta.remote_log_segment_id.id in self._read_ahead_done:
            return
        self._read_ahead_done[meta.remote_log_segment_id.id] = None
        while len(self._read_ahead_done) > 1024:
            self._read_ahead_done.popitem(last=False)

        async def run() -> None:
            try:
                nxt = await self.find_segment(ulog, meta.end_offset + 1)
                if nxt is None or nxt.remote_log_segment_id == meta.remote_log_segment_id:
                    return
                self.rsm.read_ahead(nxt, 0)
            except Exception as e:  # noqa: BLE001 - a hint: the read that needs it reports any error
                log.debug("remote read-ahead failed", topic=ulog.topic, partition=ulog.partition, error=repr(e))

        self._spawn(run())

    async def find_segment(self, ulog: UnifiedLog, offset: int) -> RemoteLogSegmentMetadata | None:
        """The copied segment holding `offset` in this log's lineage (epoch of the offset, from the epoch cache)."""
        tip = topic_id_partition(ulog)
        epoch = ulog.epoch_for_offset(offset)
        if epoch is not None:
            # Only a segment of this lineage: remote storage may hold another lineage's records at the same offsets.
            return self.rlmm.remote_log_segment_metadata(tip, epoch, offset)
        # No epoch known for this offset (epoch cache trimmed): fall back to any copied segment covering it.
        for s in self._segments(tip):
            if s.state == COPY_FINISHED and s.start_offset <= offset <= s.end_offset:
                return s
        return None

    async def _read(
        self, ulog: UnifiedLog, offset: int, max_bytes: int, min_one: bool, max_offset: int | None
    ) -> bytes | memoryview | BufferChain:
        target = offset
        while True:
            meta = await self.find_segment(ulog, target)
            if meta is None:
                raise OffsetOutOfRangeError(
                    f"offset {offset} of {ulog.topic}-{ulog.partition} is not in remote storage"
                )
            epoch = ulog.epoch_for_offset(target)
            last = meta.end_offset if epoch is None else lineage_end_in_segment(ulog, meta, epoch)
            stop = last + 1 if max_offset is None else min(last + 1, max_offset)
            # A segment's first batch is at position 0: a read from its start (every segment boundary of a
            # sequential reader) needs no index, so it does not wait for (or fetch) the segment's indexes
            pos = 0 if target <= meta.start_offset else await self.index_cache.lookup_offset(meta, target)
            window = max(max_bytes, 1) + 64 * 1024
            end = min(pos + window, meta.segment_size_in_bytes) - 1
            if meta.segment_size_in_bytes - (end + 1) < self.rsm.read_ahead_bytes:
                self._read_ahead_next(ulog, meta)
            buf = Pieces(await self.rsm.fetch_log_segment_pieces(meta, pos, end))
            first = last_end = -1  # the batches returned are contiguous in the segment: one range
            size = 0
            for bpos, base, last_offset, bsize in buf.batches():
                if last_offset < target:
                    continue
                if base >= stop:
                    break
                if size + bsize > max_bytes and (size > 0 or not min_one):
                    break
                if first < 0:
                    first = bpos
                last_end = bpos + bsize
                size += bsize
            if first >= 0:
                # views, not copies: the Fetch response writes them to the socket as they are
                return buf.view(first, last_end)
            # Nothing whole in the window: the first relevant batch is larger than the window (fetch it alone
            # when at least one message is owed), or the offset lies past this segment's data (next segment).
            nxt = buf.first_batch(target)
            if nxt is not None:
                if not min_one:
                    return b""
                bpos, bsize = nxt
                return await self.rsm.fetch_log_segment(meta, pos + bpos, pos + bpos + bsize - 1)
            if pos + len(buf) < meta.segment_size_in_bytes:
                return b""
            target = last + 1
            if target >= ulog.local_log_start_offset or (max_offset is not None and target >= max_offset):
                return b""

    async def aborted_transactions_for(
        self, ulog: UnifiedLog, fetch_offset: int, records: bytes | memoryview | BufferChain
    ) -> list[AbortedTxn]:
        """READ_COMMITTED remote read: the aborted transactions overlapping the batches `records` returned from
        `fetch_offset` (Kafka's RemoteLogManager.collectAbortedTransactions): the remote `.txnindex` of each
        segment of this lineage from the one holding `fetch_offset` (an abort's entry is in the segment of its
        marker, maybe a later one), through the index cache, until an entry shows that no later one can overlap;
        then the local segments. Segments copied without aborted transactions (KIP-1058's txn_idx_empty) are
        skipped without loading their indexes."""
        if not len(records):
            return []
        pieces = Pieces(records.pieces if isinstance(records, BufferChain) else [records])
        upper = -1
        for _pos, _base, last_offset, _size in pieces.batches():
            upper = last_offset + 1
        if upper <= fetch_offset:
            return []
        out: list[AbortedTxn] = []
        seen: set[AbortedTxn] = set()

        def add(txns: list[AbortedTxn]) -> None:
            for t in txns:
                if t not in seen:
                    seen.add(t)
                    out.append(t)

        meta = await self.find_segment(ulog, fetch_offset)
        while meta is not None:
            if not meta.txn_idx_empty:
                found = await self.index_cache.collect_aborted_transactions(meta, fetch_offset, upper)
                add(found.aborted_transactions)
                if found.is_complete:
                    return out
            nxt = await self.find_segment(ulog, meta.end_offset + 1)
            if nxt is None or nxt.remote_log_segment_id == meta.remote_log_segment_id:
                break
            meta = nxt
        add(ulog.collect_aborted_transactions(max(fetch_offset, ulog.local_log_start_offset), upper))
        return out

    async def find_offset_by_timestamp(
        self, ulog: UnifiedLog, timestamp: int, timeout_ms: int | None = None
    ) -> TimestampAndOffset | None:
        """ListOffsets by timestamp: remote time indexes first (oldest segment whose max timestamp >= ts). Bounded by
        `timeout_ms` (the request's, ListOffsets v10+) or remote.list.offsets.request.timeout.ms, as Kafka bounds it
        (KIP-1075): an unreachable remote store must not hold the request for the S3 client's own deadlines."""
        limit = (timeout_ms if timeout_ms and timeout_ms > 0 else self.config.list_offsets_timeout_ms) / 1000.0
        pool = POOL.set(READ)
        cm = asyncio.timeout(limit)
        try:
            async with cm:
                return await self._find_offset_by_timestamp(ulog, timestamp)
        except TimeoutError:
            if not cm.expired():
                raise
            raise RemoteListOffsetsTimeoutError(
                f"remote timestamp lookup of {ulog.topic}-{ulog.partition} took more than {limit:.1f}s"
            ) from None
        finally:
            POOL.reset(pool)

    async def _find_offset_by_timestamp(self, ulog: UnifiedLog, timestamp: int) -> TimestampAndOffset | None:
        tip = topic_id_partition(ulog)
        for s in sorted(self._segments(tip), key=lambda m: m.start_offset):
            if s.state != COPY_FINISHED or s.max_timestamp_ms < timestamp or s.end_offset < ulog.log_start_offset:
                continue
            start = max(s.start_offset, ulog.log_start_offset)
            idx = await self.index_cache.lookup_timestamp(s, timestamp, start)
            # Scan forward in bounded windows (time index entries are index.interval.bytes apart).
            pos = idx.position
            while pos < s.segment_size_in_bytes:
                buf = await self.rsm.fetch_log_segment(s, pos, min(pos + 256 * 1024, s.segment_size_in_bytes) - 1)
                batches = list(iter_batches(buf))
                if not batches:  # one batch larger than the window: fetch exactly that batch
                    first = Pieces([buf]).first_batch(-1)
                    if first is None:
                        break
                    buf = await self.rsm.fetch_log_segment(s, pos, pos + first[1] - 1)
                    batches = list(iter_batches(buf))
                    if not batches:
                        break
                for bpos, h in batches:
                    if h.last_offset < start or h.max_timestamp < timestamp:
                        continue
                    for r in iter_records(buf, bpos):
                        if r.offset >= start and r.timestamp >= timestamp:
                            return TimestampAndOffset(r.timestamp, r.offset, ulog.epoch_for_offset(r.offset))
                last_pos, last = batches[-1]
                pos += last_pos + last.size
        return None

    async def remote_log_start_offset(self, ulog: UnifiedLog) -> int | None:
        segs = [s for s in self._segments(topic_id_partition(ulog)) if s.state == COPY_FINISHED]
        return min((s.start_offset for s in segs), default=None)


def _now_ms() -> int:
    return int(time.time() * 1000)
