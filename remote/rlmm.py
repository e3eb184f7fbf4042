"""TopicBasedRemoteLogMetadataManager: KIP-405 remote log metadata kept in the `__remote_log_metadata` topic.

Writes: `add_remote_log_segment_metadata`, `update_remote_log_segment_metadata` and
`put_remote_partition_delete_metadata` serialize the event (rlmm_serde, Kafka's bytes), append it as a one-record
magic-v2 batch with a null key to metadata partition `metadata_partition(tip)` (Kafka's partitioner) through the
injected `MetadataTopicIO`, and return once the apply loop of that partition has applied the record to the local
cache (Kafka waits for its consumer the same way, up to `remote.log.metadata.consume.wait.ms`). The outcome of
applying the record is the outcome of the call: an event that lost a race (say, two updates of the same segment)
raises the cache's error instead of being dropped silently.

Before appending, add/update check the event against the local cache and raise InvalidStateTransitionError for a
transition Kafka's state machine forbids, RemoteResourceNotFoundError for an update of an unknown segment or a
partition this broker does not follow, RemoteStorageNotReadyError while the partition's cache is catching up.
(Kafka appends first and lets the consumer drop such events.)

Reads: one apply loop (an asyncio task) per metadata partition that holds at least one followed user partition
(`on_partition_leadership_changes` / `on_stop_partitions`). It reads whole batches from its position, decodes the
records and applies those of followed partitions. Each user partition has its own position: a partition followed
later, or restored from a snapshot, is caught up by re-reading from its position while the others skip what they
have already applied. A user partition is ready (`is_ready`) once its position reaches the metadata partition's
end offset as of when it was followed; lookups raise RemoteStorageNotReadyError until then.

Snapshots: every `snapshot_interval_s`, when partitions are stopped and on close, the state of each followed user
partition is written to `<log_dir>/<topic>-<partition>-<topicId>/remote_log_snapshot` and the loop positions to
`<log_dir>/_rlmm_committed_offsets` (formats in rlmm_snapshot). Following a partition again, after a restart or
otherwise, starts from its snapshot and reads only the tail of the metadata partition.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import structlog

from strata.protocol.records import build_batch, iter_batches, iter_records

from .metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from .rlmm_api import RemoteLogMetadataManager
from .rlmm_cache import (
    RemoteLogMetadataCache,
    RemotePartitionMetadataStore,
    is_valid_partition_delete_transition,
)
from .rlmm_partitioner import RemoteLogMetadataTopicPartitioner
from .rlmm_serde import RemoteLogMetadata, deserialize, serialize
from .rlmm_snapshot import (
    PartitionSnapshot,
    SnapshotFormatError,
    decode_snapshot,
    delete_snapshot_file,
    encode_snapshot,
    read_committed_offsets,
    read_snapshot_file,
    write_committed_offsets,
    write_snapshot_file,
)
from .rlmm_types import (
    REMOTE_LOG_METADATA_TOPIC_NAME,
    InvalidStateTransitionError,
    MetadataDecodeError,
    MetadataTopicIO,
    RemoteLogSegmentMetadataSnapshot,
    RemoteStorageNotReadyError,
    RlmmConfig,
)
from .rsm import RemoteResourceNotFoundError, RemoteStorageError

log = structlog.get_logger("strata.remote.rlmm")

DEFAULT_READ_MAX_BYTES = 1 << 20
DEFAULT_SNAPSHOT_INTERVAL_S = 30.0
DEFAULT_POLL_TIMEOUT_S = 5.0
_ERROR_BACKOFF_S = (0.05, 2.0)


class _UserPartition:
    __slots__ = ("applied_upto", "dirty", "metadata_partition", "ready_target", "snapshot_offset", "tip")

    def __init__(
        self, tip: TopicIdPartition, metadata_partition: int, applied_upto: int, ready_target: int | None
    ) -> None:
        self.tip = tip
        self.metadata_partition = metadata_partition
        self.applied_upto = applied_upto  # every record of the metadata partition below this is applied
        # end offset of the metadata partition when we started following (None: learnt from the first read)
        self.ready_target = ready_target
        self.dirty = True  # changed since the last snapshot
        self.snapshot_offset = -1  # applied_upto of the last snapshot written


class _MetadataPartition:
    __slots__ = (
        "errors",
        "inflight",
        "partition",
        "position",
        "progress_waiters",
        "task",
        "users",
        "waiters",
        "wake",
    )

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.users: dict[TopicIdPartition, _UserPartition] = {}
        self.position = 0  # next offset the loop reads
        self.task: asyncio.Task | None = None
        self.wake = asyncio.Event()
        self.waiters: dict[int, asyncio.Future] = {}  # offset of a record we appended -> apply outcome
        self.progress_waiters: list[asyncio.Future] = []  # woken after every pass of the loop
        self.errors: dict[int, BaseException] = {}  # apply errors recorded while our own writes are in flight
        self.inflight = 0  # writes between append and apply


class TopicBasedRemoteLogMetadataManager(RemoteLogMetadataManager):
    """See the module docstring. Lookups are synchronous (in-memory); writes are coroutines."""

    def __init__(
        self,
        io: MetadataTopicIO,
        log_dir: str | Path,
        configs: Mapping[str, Any] | RlmmConfig | None = None,
        *,
        broker_id: int = -1,
        snapshot_interval_s: float = DEFAULT_SNAPSHOT_INTERVAL_S,
        read_max_bytes: int = DEFAULT_READ_MAX_BYTES,
        poll_timeout_s: float = DEFAULT_POLL_TIMEOUT_S,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.io = io
        self.log_dir = Path(log_dir)
        self.config = configs if isinstance(configs, RlmmConfig) else RlmmConfig.from_configs(configs or {})
        self.broker_id = broker_id
        self.partitioner = RemoteLogMetadataTopicPartitioner(self.config.num_partitions)
        self.store = RemotePartitionMetadataStore()
        self.snapshot_interval_s = snapshot_interval_s
        self.read_max_bytes = read_max_bytes
        self.poll_timeout_s = poll_timeout_s
        self._sleep = sleep  # the periodic snapshot timer (tests drive it)
        self._partitions: dict[int, _MetadataPartition] = {}
        self._pending_assign: set[TopicIdPartition] = set()
        self._pending_snapshots: dict[TopicIdPartition, bytes] = {}
        self._snapshot_lock = asyncio.Lock()
        self._snapshot_task: asyncio.Task | None = None
        self._background: set[asyncio.Task] = set()
        self._started = False
        self._closing = False

    # -- lifecycle ----------------------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Create `__remote_log_metadata` if needed, then follow the partitions announced before start."""
        if self._closing:
            raise RemoteStorageError("the remote log metadata manager is closed", retriable=False)
        if self._started:
            return
        await self.io.ensure_topic(self.config.num_partitions, self.config.replication_factor, self.config.retention_ms)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._check_committed_offsets()
        self._started = True
        pending, self._pending_assign = self._pending_assign, set()
        self._assign(pending)
        if self.snapshot_interval_s > 0:
            self._snapshot_task = asyncio.create_task(self._snapshot_forever(), name="rlmm-snapshots")
        log.info("rlmm started", topic=REMOTE_LOG_METADATA_TOPIC_NAME, partitions=self.config.num_partitions)

    async def close(self, *, write_snapshots: bool = True) -> None:
        """Stop the apply loops, fail pending writes, write the last snapshots (unless told not to: a crash)."""
        if self._closing:
            return
        self._closing = True
        tasks = [mp.task for mp in self._partitions.values() if mp.task is not None]
        if self._snapshot_task is not None:
            tasks.append(self._snapshot_task)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for mp in self._partitions.values():
            self._fail_waiters(mp, RemoteStorageError("the remote log metadata manager is closing"))
        if self._started and write_snapshots:
            await self._write_snapshots(force=False)
        if self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
        self.store = RemotePartitionMetadataStore()
        self._partitions.clear()

    # -- partition assignment -----------------------------------------------------------------------------------------
    def metadata_partition(self, tip: TopicIdPartition) -> int:
        return self.partitioner.metadata_partition(tip)

    def on_partition_leadership_changes(
        self, leader_partitions: Iterable[TopicIdPartition], follower_partitions: Iterable[TopicIdPartition]
    ) -> None:
        """Follow the metadata of these user partitions (this broker leads or follows them)."""
        if self._closing:
            raise RemoteStorageError("the remote log metadata manager is closing", retriable=False)
        parts = set(leader_partitions) | set(follower_partitions)
        if not self._started:
            self._pending_assign |= parts
            return
        self._assign(parts)

    def on_stop_partitions(self, partitions: Iterable[TopicIdPartition]) -> None:
        """Stop following these user partitions (snapshotting them first) and drop their caches."""
        if self._closing:
            raise RemoteStorageError("the remote log metadata manager is closing", retriable=False)
        parts = set(partitions)
        if not self._started:
            self._pending_assign -= parts
            return
        for tip in parts:
            mp = self._partitions.get(self.metadata_partition(tip))
            if mp is None or tip not in mp.users:
                continue
            self._snapshot_user_soon(mp, mp.users.pop(tip))
            self.store.clear_partition(tip)
            self._resolve_waiters(mp)  # wake anyone waiting for this partition's readiness
            if not mp.users:
                if mp.task is not None:
                    mp.task.cancel()
                self._fail_waiters(
                    mp, RemoteStorageError(f"metadata partition {mp.partition} is no longer followed by this broker")
                )
                del self._partitions[mp.partition]
        self._schedule_committed_offsets()

    def _assign(self, parts: Iterable[TopicIdPartition]) -> None:
        for tip in parts:
            p = self.metadata_partition(tip)
            mp = self._partitions.get(p)
            if mp is None:
                mp = self._partitions[p] = _MetadataPartition(p)
            if tip in mp.users:
                continue
            end = self.io.end_offset(p)
            start = self._restore(tip, p, end)
            up = _UserPartition(tip, p, start, end)
            mp.users[tip] = up
            if mp.task is None:
                mp.position = start
                mp.task = asyncio.create_task(self._apply_loop(mp), name=f"rlmm-apply-{p}")
            elif start < mp.position:
                mp.position = start  # re-read for the newcomer; the others skip what they applied
                mp.wake.set()
            self._maybe_mark_ready(up)
            log.info("rlmm following partition", partition=str(tip), metadata_partition=p, start=start, end=end)

    def _restore(self, tip: TopicIdPartition, p: int, end: int | None) -> int:
        """Load the user partition's cache from its snapshot; return the position to apply from."""
        data = self._pending_snapshots.get(tip)
        snap: PartitionSnapshot | None
        try:
            if data is not None:
                snap = decode_snapshot(data, tip)
            else:
                snap = read_snapshot_file(self.log_dir, tip)
        except (OSError, SnapshotFormatError, MetadataDecodeError) as e:
            log.warning("rlmm snapshot unreadable, rebuilding from the topic", partition=str(tip), error=str(e))
            snap = None
        if snap is not None and (
            snap.metadata_partition != p or (end is not None and snap.metadata_partition_offset > end)
        ):
            log.warning(
                "rlmm snapshot does not match the metadata topic, rebuilding from the topic",
                partition=str(tip),
                snapshot_partition=snap.metadata_partition,
                metadata_partition=p,
                snapshot_offset=snap.metadata_partition_offset,
                end_offset=end,
            )
            snap = None
        if snap is None:
            self.store.maybe_load_partition(tip)
            return 0
        self.store.caches[tip] = snap.cache
        if snap.delete_metadata is not None:
            self.store.delete_metadata[tip] = snap.delete_metadata
        return snap.metadata_partition_offset

    def _check_committed_offsets(self) -> None:
        """A metadata partition whose end is below the committed position was recreated: its snapshots are void."""
        try:
            committed = read_committed_offsets(self.log_dir)
        except (OSError, SnapshotFormatError) as e:
            log.warning("rlmm committed offsets unreadable", error=str(e))
            return
        for p, off in committed.items():
            end = self.io.end_offset(p) if 0 <= p < self.config.num_partitions else None
            if end is not None and end < off:
                log.warning(
                    "rlmm metadata partition is behind its committed offset; snapshots will be checked",
                    metadata_partition=p,
                    committed=off,
                    end_offset=end,
                )

    # -- readiness ----------------------------------------------------------------------------------------------------
    def is_ready(self, tip: TopicIdPartition) -> bool:
        """True once the partition's cache has caught up with its metadata partition (as of when it was followed)."""
        return self._started and self.store.is_initialized(tip)

    def _maybe_mark_ready(self, up: _UserPartition) -> None:
        cache = self.store.caches.get(up.tip)
        if up.ready_target is None:
            up.ready_target = self.io.end_offset(up.metadata_partition)  # known once the partition was read
        if (
            cache is not None
            and not cache.initialized
            and up.ready_target is not None
            and up.applied_upto >= up.ready_target
        ):
            cache.mark_initialized()
            log.info(
                "rlmm partition ready",
                partition=str(up.tip),
                metadata_partition=up.metadata_partition,
                offset=up.applied_upto,
            )

    async def wait_until_ready(self, tip: TopicIdPartition, timeout_s: float | None = None) -> None:
        """Wait until `is_ready(tip)`; raise RemoteStorageNotReadyError on timeout."""
        await self._wait_until(tip, lambda up: self.is_ready(tip), timeout_s)

    async def wait_for_catch_up(self, tip: TopicIdPartition, timeout_s: float | None = None) -> None:
        """Wait until the partition's cache has applied everything its metadata partition holds *now* (e.g. a new
        leader about to decide where copying resumes); RemoteStorageNotReadyError on timeout.

        "Holds" is this broker's replica's end when the IO knows it (`replicated_end_offset`), not only its high
        watermark: just after a fail-over the local high watermark can still be below records the old leader's
        RLMM wrote with acks=-1 (they are in every in-sync replica's log, the high watermark follows a fetch later),
        and a new leader that missed its predecessor's last COPY_SEGMENT_FINISHED would copy that segment again."""
        self._ensure_started()
        mp = self.metadata_partition(tip)
        target = max(self.io.end_offset(mp) or 0, self.io.replicated_end_offset(mp) or 0)
        await self._wait_until(tip, lambda up: up.applied_upto >= target and self.is_ready(tip), timeout_s)

    async def _wait_until(self, tip: TopicIdPartition, done: Any, timeout_s: float | None) -> None:
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while True:
            mp = self._partitions.get(self.metadata_partition(tip))
            if self._closing or mp is None or tip not in mp.users:
                raise RemoteStorageNotReadyError(f"{tip} is not followed by the remote log metadata manager")
            if done(mp.users[tip]):
                return
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                raise RemoteStorageNotReadyError(f"remote log metadata of {tip} did not catch up in {timeout_s}s")
            fut = loop.create_future()
            mp.progress_waiters.append(fut)
            try:
                await asyncio.wait_for(asyncio.shield(fut), remaining)
            except TimeoutError:
                pass
            finally:
                if fut in mp.progress_waiters:
                    mp.progress_waiters.remove(fut)

    # -- writes -------------------------------------------------------------------------------------------------------
    async def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        if metadata.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise InvalidStateTransitionError(
                f"Given remoteLogSegmentMetadata should have state as COPY_SEGMENT_STARTED but it contains state as: "
                f"{metadata.state.name}"
            )
        tip = metadata.remote_log_segment_id.topic_id_partition
        self._ready_cache(tip).check_transition(metadata.remote_log_segment_id, metadata.state)
        await self._store(tip, metadata, must_apply=True)

    async def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        if update.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise InvalidStateTransitionError(
                "Given remoteLogSegmentMetadata should not have the state as: COPY_SEGMENT_STARTED"
            )
        tip = update.remote_log_segment_id.topic_id_partition
        self._ready_cache(tip).check_transition(update.remote_log_segment_id, update.state)
        await self._store(tip, update, must_apply=True)

    async def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None:
        """Record a partition deletion step. For a partition this broker follows, the call returns once the event is
        applied; otherwise once it is durable in the metadata topic."""
        tip = metadata.topic_id_partition
        if self.is_ready(tip):  # we know its current state only when we follow it
            current = self.store.partition_delete_state(tip)
            if not is_valid_partition_delete_transition(current.state if current else None, metadata.state):
                raise InvalidStateTransitionError(
                    f"Current partition delete state: {current.state.name if current else None} can not be "
                    f"transitioned to: {metadata.state.name} for {tip}"
                )
        await self._store(tip, metadata, must_apply=False)

    def _ready_cache(self, tip: TopicIdPartition) -> RemoteLogMetadataCache:
        self._ensure_started()
        mp = self._partitions.get(self.metadata_partition(tip))
        if mp is None or tip not in mp.users:
            raise RemoteResourceNotFoundError(
                f"No resource found for partition: {tip} (not followed by this broker's remote log metadata manager)"
            )
        return self.store.cache_for(tip)

    def _ensure_started(self) -> None:
        if self._closing:
            raise RemoteStorageError("the remote log metadata manager is closed", retriable=False)
        if not self._started:
            raise RemoteStorageNotReadyError("the remote log metadata manager is not started yet")

    async def _store(self, tip: TopicIdPartition, metadata: RemoteLogMetadata, *, must_apply: bool) -> None:
        self._ensure_started()
        p = self.metadata_partition(tip)
        batch = build_batch([(None, serialize(metadata))], timestamp=int(time.time() * 1000))
        counted = self._partitions.get(p)
        if counted is not None:
            counted.inflight += 1  # from now on the loop keeps apply errors until we collect ours
        try:
            offset = await self.io.append(p, batch)
            mp = self._partitions.get(p)
            if mp is None or tip not in mp.users:
                if must_apply:
                    raise RemoteStorageError(
                        f"{tip} stopped being followed while its metadata was written", retriable=True
                    )
                return
            if mp.position <= offset:
                fut = asyncio.get_running_loop().create_future()
                mp.waiters[offset] = fut
                timeout = self.config.consume_wait_ms / 1000
                try:
                    await asyncio.wait_for(asyncio.shield(fut), timeout)
                except TimeoutError:
                    raise RemoteStorageError(
                        f"Timed out in catching up with the expected offset {offset} of "
                        f"{REMOTE_LOG_METADATA_TOPIC_NAME}-{p} after {timeout}s",
                        retriable=True,
                    ) from None
                finally:
                    mp.waiters.pop(offset, None)
            err = mp.errors.pop(offset, None)
            if err is not None:
                raise err
        finally:
            if counted is not None:
                counted.inflight -= 1
                if counted.inflight == 0:
                    counted.errors.clear()

    # -- lookups (Kafka's RemoteLogMetadataManager read API) -----------------------------------------------------------
    def _lookup_cache(self, tip: TopicIdPartition) -> RemoteLogMetadataCache:
        self._ensure_started()
        return self.store.cache_for(tip)

    def remote_log_segment_metadata(
        self, tip: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        return self._lookup_cache(tip).remote_log_segment_metadata(leader_epoch, offset)

    def highest_offset_for_epoch(self, tip: TopicIdPartition, leader_epoch: int) -> int | None:
        return self._lookup_cache(tip).highest_offset_for_epoch(leader_epoch)

    def list_remote_log_segments(
        self, tip: TopicIdPartition, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        cache = self._lookup_cache(tip)
        if leader_epoch is None:
            return cache.list_all_remote_log_segments()
        return cache.list_remote_log_segments(leader_epoch)

    def remote_log_size(self, tip: TopicIdPartition, leader_epoch: int | None = None) -> int:
        return self._lookup_cache(tip).remote_log_size(leader_epoch)

    def next_segment_with_txn_index(
        self, tip: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        return self._lookup_cache(tip).next_segment_with_txn_index(leader_epoch, offset)

    def partition_delete_metadata(self, tip: TopicIdPartition) -> RemotePartitionDeleteMetadata | None:
        self._ensure_started()
        return self.store.partition_delete_state(tip)

    def remote_log_metadata_count(self, tip: TopicIdPartition) -> int:
        """Metric RemoteLogMetadataCount: segment metadata entries held for the partition (not deleted)."""
        return self._lookup_cache(tip).segment_count()

    def remote_log_size_bytes(self, tip: TopicIdPartition) -> int:
        """Metric RemoteLogSizeBytes as this cache sees it: bytes of the COPY_SEGMENT_FINISHED segments."""
        return self._lookup_cache(tip).copied_size_bytes()

    def followed_partitions(self) -> set[TopicIdPartition]:
        return {tip for mp in self._partitions.values() for tip in mp.users}

    # -- apply loop ----------------------------------------------------------------------------------------------------
    async def _apply_loop(self, mp: _MetadataPartition) -> None:
        p = mp.partition
        backoff = _ERROR_BACKOFF_S[0]
        max_bytes = self.read_max_bytes
        while True:
            try:
                start = mp.position
                data = self.io.read(p, start, max_bytes)
                if not isinstance(data, (bytes, bytearray, memoryview)):
                    data = await data  # read from the partition's leader
                progressed = self._apply_batches(mp, data, start)
                if not progressed:
                    for up in mp.users.values():
                        self._maybe_mark_ready(up)  # an empty partition read from its leader: its end is known now
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 -- a broken read must not kill the loop: retry with backoff
                log.warning("rlmm apply loop error", metadata_partition=p, position=mp.position, error=repr(e))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _ERROR_BACKOFF_S[1])
                continue
            if progressed:
                backoff = _ERROR_BACKOFF_S[0]
                max_bytes = self.read_max_bytes
                continue
            if data:
                # bytes but no whole batch past our position (a batch larger than max_bytes was cut): read more
                log.warning(
                    "rlmm read returned no usable batch", metadata_partition=p, position=mp.position, nbytes=len(data)
                )
                max_bytes = min(max_bytes * 2, 1 << 30)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _ERROR_BACKOFF_S[1])
                continue
            # caught up: wait for new data or for an assignment change
            mp.wake.clear()
            waiter = asyncio.ensure_future(self.io.wait_for_data(p, mp.position, self.poll_timeout_s))
            woken = asyncio.ensure_future(mp.wake.wait())
            try:
                await asyncio.wait({waiter, woken}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
                woken.cancel()

    def _apply_batches(self, mp: _MetadataPartition, data: bytes, start: int) -> bool:
        """Apply the records of `data` at or after `start`; return True if the position moved."""
        progressed = False
        for pos, header in iter_batches(data):
            if mp.position != start:
                break  # rewound for a newly followed partition while we were busy: re-read from there
            nxt = header.next_offset
            if nxt <= start:
                continue
            if not header.is_control:
                for rec in iter_records(data, pos):
                    if rec.offset >= start:
                        self._apply_record(mp, rec.offset, rec.value)
            for up in mp.users.values():
                up.applied_upto = max(up.applied_upto, nxt)
                self._maybe_mark_ready(up)
            mp.position = start = nxt
            progressed = True
        self._resolve_waiters(mp)
        return progressed

    def _apply_record(self, mp: _MetadataPartition, offset: int, value: bytes | None) -> None:
        if value is None:
            return
        try:
            meta = deserialize(value)
        except MetadataDecodeError as e:
            log.warning(
                "rlmm skipping undecodable record", metadata_partition=mp.partition, offset=offset, error=str(e)
            )
            return
        if isinstance(meta, RemoteLogSegmentMetadataSnapshot):
            return  # snapshot entries never belong on the topic
        tip = (
            meta.topic_id_partition
            if isinstance(meta, RemotePartitionDeleteMetadata)
            else meta.remote_log_segment_id.topic_id_partition
        )
        up = mp.users.get(tip)
        if up is None or offset < up.applied_upto:
            return
        try:
            if isinstance(meta, RemoteLogSegmentMetadata):
                self.store.handle_segment_metadata(meta)
            elif isinstance(meta, RemoteLogSegmentMetadataUpdate):
                self.store.handle_segment_update(meta)
            else:
                self.store.handle_partition_delete(meta)
        except Exception as e:  # noqa: BLE001 -- Kafka logs and drops an event it cannot apply; so do we
            log.warning(
                "rlmm dropping event", metadata_partition=mp.partition, offset=offset, record=str(meta), error=repr(e)
            )
            if mp.inflight:
                mp.errors[offset] = e
        up.applied_upto = offset + 1
        up.dirty = True

    def _resolve_waiters(self, mp: _MetadataPartition) -> None:
        for off, fut in mp.waiters.items():
            if off < mp.position and not fut.done():
                fut.set_result(None)
        for fut in mp.progress_waiters:
            if not fut.done():
                fut.set_result(None)

    def _fail_waiters(self, mp: _MetadataPartition, error: BaseException) -> None:
        for fut in list(mp.waiters.values()) + mp.progress_waiters:
            if not fut.done():
                fut.set_exception(error)
                fut.exception()  # mark retrieved: nobody may be awaiting any more

    # -- snapshots -----------------------------------------------------------------------------------------------------
    def _encode_user(self, mp: _MetadataPartition, up: _UserPartition) -> bytes | None:
        cache = self.store.caches.get(up.tip)
        if cache is None:
            return None
        return encode_snapshot(mp.partition, up.applied_upto, cache, self.store.delete_metadata.get(up.tip))

    def _snapshot_user_soon(self, mp: _MetadataPartition, up: _UserPartition) -> None:
        """Capture the user partition now and write it in the background (it is about to be dropped)."""
        if not up.dirty and up.snapshot_offset == up.applied_upto:
            return
        data = self._encode_user(mp, up)
        tip = up.tip
        if data is None:
            self._spawn(asyncio.to_thread(delete_snapshot_file, self.log_dir, tip))
            return
        self._pending_snapshots[tip] = data

        async def write() -> None:
            async with self._snapshot_lock:
                if self._pending_snapshots.get(tip) is not data:
                    return
                try:
                    await asyncio.to_thread(write_snapshot_file, self.log_dir, tip, data)
                except OSError as e:
                    log.warning("rlmm snapshot write failed", partition=str(tip), error=str(e))
                finally:
                    if self._pending_snapshots.get(tip) is data:
                        del self._pending_snapshots[tip]

        self._spawn(write())

    def _spawn(self, coro: Any) -> None:
        t = asyncio.ensure_future(coro)
        self._background.add(t)
        t.add_done_callback(self._background.discard)

    def _schedule_committed_offsets(self) -> None:
        offsets = {p: mp.position for p, mp in self._partitions.items()}

        async def write() -> None:
            async with self._snapshot_lock:
                try:
                    await asyncio.to_thread(write_committed_offsets, self.log_dir, offsets)
                except OSError as e:
                    log.warning("rlmm committed offsets write failed", error=str(e))

        self._spawn(write())

    async def _write_snapshots(self, force: bool = False) -> None:
        """Snapshot every followed user partition that changed, then the committed positions."""
        jobs: list[tuple[TopicIdPartition, bytes | None, _UserPartition]] = []
        offsets: dict[int, int] = {}
        for mp in self._partitions.values():
            offsets[mp.partition] = mp.position
            for up in mp.users.values():
                if force or up.dirty or up.snapshot_offset != up.applied_upto:
                    jobs.append((up.tip, self._encode_user(mp, up), up))
                    up.dirty = False
                    up.snapshot_offset = up.applied_upto

        def write_all() -> None:
            for tip, data, _ in jobs:
                if data is None:
                    delete_snapshot_file(self.log_dir, tip)
                else:
                    write_snapshot_file(self.log_dir, tip, data)
            write_committed_offsets(self.log_dir, offsets)

        async with self._snapshot_lock:
            try:
                await asyncio.to_thread(write_all)
            except OSError as e:
                for _, _, up in jobs:
                    up.dirty = True
                log.warning("rlmm snapshot write failed", error=str(e))

    async def snapshot_now(self) -> None:
        """Write the snapshots and committed offsets now (also done periodically and on close)."""
        self._ensure_started()
        await self._write_snapshots(force=False)

    async def _snapshot_forever(self) -> None:
        while True:
            await self._sleep(self.snapshot_interval_s)
            try:
                await self._write_snapshots()
            except Exception as e:  # noqa: BLE001 -- never let the periodic writer die
                log.warning("rlmm periodic snapshot failed", error=repr(e))


__all__ = [
    "REMOTE_LOG_METADATA_TOPIC_NAME",
    "InvalidStateTransitionError",
    "MetadataTopicIO",
    "RemoteStorageNotReadyError",
    "RlmmConfig",
    "TopicBasedRemoteLogMetadataManager",
]
