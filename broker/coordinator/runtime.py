"""CoordinatorRuntime: a coordinator's state kept in an internal compacted topic, as Kafka 4.x's coordinator-common
CoordinatorRuntime does, reduced to what Strata's coordinators need. The group coordinator (`__consumer_offsets`) is a
state machine on it; the transaction coordinator (`__transaction_state`) is meant to be one too.

Each key (a group id, a transactional id) belongs to partition `abs(javaHash(key)) % partitions` of the topic, and
the broker leading that partition is the key's coordinator. The runtime

* follows the leadership of the topic's partitions: on becoming a partition's leader it replays the partition from
  its log start offset into the state machine (`CoordinatorShard`), answering COORDINATOR_LOAD_IN_PROGRESS for its
  keys meanwhile; on losing it, the state machine unloads the partition's state (NOT_COORDINATOR from then on). A
  load generation per partition makes a load that ends after a resignation (or a re-election) install nothing;
* writes records through one FIFO writer into `ReplicaManager.append_records` (internal, acks=-1): a write's future
  resolves only once the records are committed (the HW passed them) or failed. Records land in the order the state
  machine produced them -- compaction keeps the last record per key, so that order is correctness. The state machine
  awaits a write before applying it to its in-memory state, so that state never gets ahead of the log;
* creates the topic on first use (compacted, internal), as Kafka does on the first FindCoordinator.

Everything runs on the broker's event loop; state changes between awaits are atomic.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

import structlog

from strata.protocol.errors import ErrorCode
from strata.protocol.records import build_batch, iter_batches, iter_records
from strata.storage.producer_state import read_end_marker

if TYPE_CHECKING:
    from strata.storage.log import FetchDataInfo

    from ..metadata_store import TopicInfo

log = structlog.get_logger("strata.coordinator")

E = ErrorCode
LOAD_BUFFER_DEFAULT = 5 * 1024 * 1024
BUILD_OFF_LOOP_RECORDS = 1024  # writes with more records are built into a batch in a worker thread
Record = tuple[bytes, bytes | None]  # (key, value); a None value is a tombstone
L = TypeVar("L")
L_contra = TypeVar("L_contra", contravariant=True)
_Write = tuple[int, Sequence[Record], "asyncio.Future[ErrorCode]", tuple[int, int] | None]


# ---------------------------------------------------------------------------------------------------------------------
# key -> partition
# ---------------------------------------------------------------------------------------------------------------------
def java_string_hash(s: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... over UTF-16 code units, in int32 arithmetic."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, num_partitions: int) -> int:
    """Kafka's `Utils.abs(key.hashCode()) % partitions` (Utils.abs maps Integer.MIN_VALUE to 0)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# ---------------------------------------------------------------------------------------------------------------------
# what the runtime needs from the broker, and from the state machine it hosts
# ---------------------------------------------------------------------------------------------------------------------
def _build(records: Sequence[Record], now: int, producer_id: int, producer_epoch: int) -> bytes:
    """A batch of the coordinator's records; with a producer id, a transactional batch of that producer."""
    if producer_id < 0:
        return build_batch(records, timestamp=now)
    return build_batch(
        records, timestamp=now, producer_id=producer_id, producer_epoch=producer_epoch, is_transactional=True
    )


class CoordinatorLog(Protocol):
    """The local log of a partition of the coordinator topic, as a load reads it."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    def read(
        self, start_offset: int, max_bytes: int, max_offset: int | None = None, min_one_message: bool = True
    ) -> FetchDataInfo: ...


class CoordinatorPartition(Protocol):
    @property
    def log(self) -> CoordinatorLog: ...


class AppendResult(Protocol):
    @property
    def error(self) -> int: ...


class CoordinatorReplicaManager(Protocol):
    """The replica manager: partitions this broker hosts, and appends that wait for the ISR (acks=-1)."""

    def get_partition(self, topic: str, partition: int) -> CoordinatorPartition | None: ...

    async def append_records(
        self,
        entries: list[tuple[str, int, bytes | memoryview]],
        internal: bool = False,
        required_acks: int | None = None,
        timeout_ms: int | None = None,
        *,
        from_client: bool = True,
    ) -> Sequence[AppendResult]: ...

    def ensure_partitions(self, info: TopicInfo) -> None: ...


class CoordinatorMetadataStore(Protocol):
    """The metadata store: whether the topic exists, and creating it."""

    @property
    def clustered(self) -> bool: ...

    def topic(self, name: str) -> TopicInfo | None: ...

    def brokers(self) -> Mapping[int, object]: ...

    async def create_topic(
        self, name: str, partitions: int, configs: dict[str, str], internal: bool = False, replication_factor: int = 1
    ) -> TopicInfo: ...


@runtime_checkable
class TransactionalReplay(Protocol[L_contra]):
    """What a state machine that writes transactional records (the group coordinator's TxnOffsetCommit) adds to
    `CoordinatorShard`: a load hands it those records with their producer id, and the commit/abort markers that
    end them, in log order."""

    def replay_transactional(
        self, state: L_contra, producer_id: int, key: bytes | None, value: bytes | None
    ) -> None: ...

    def replay_end_txn(self, state: L_contra, producer_id: int, commit: bool) -> None: ...


class CoordinatorShard(Protocol[L]):
    """The state machine a runtime hosts (Kafka's CoordinatorShard). A load replays a partition's records into a
    fresh load state `L` (`begin_load`, `replay`), installed by `complete_load` only if the partition is still
    led by this broker; `unload` drops what a resigned partition held."""

    def begin_load(self, partition: int) -> L: ...

    def replay(self, state: L, key: bytes | None, value: bytes | None) -> None: ...

    def complete_load(self, partition: int, state: L) -> None: ...

    def unload(self, partition: int) -> None: ...


@dataclass(frozen=True, slots=True)
class CoordinatorTopic:
    """The internal compacted topic a coordinator keeps its state in; `partitions` applies when creating it (an
    existing topic keeps its own count)."""

    name: str
    partitions: int
    replication_factor: int
    segment_bytes: int
    load_buffer_size: int = LOAD_BUFFER_DEFAULT
    min_isr: int | None = None  # the topic's min.insync.replicas (capped by its replication factor)


# ---------------------------------------------------------------------------------------------------------------------
# the runtime
# ---------------------------------------------------------------------------------------------------------------------
class CoordinatorRuntime(Generic[L]):
    def __init__(
        self,
        topic: CoordinatorTopic,
        shard: CoordinatorShard[L],
        replica_manager: CoordinatorReplicaManager,
        store: CoordinatorMetadataStore,
        *,
        clock: Callable[[], int],
    ) -> None:
        self.topic = topic
        self.shard = shard
        self.replica_manager = replica_manager
        self.store = store
        self.now = clock
        info = store.topic(topic.name)
        self.num_partitions: int = info.partitions if info else topic.partitions
        self.loading: set[int] = set()
        # partitions this broker leads (the keys it coordinates); a load generation per partition so a load
        # finishing after a resignation does not install stale state.
        self.owned: set[int] = set()
        self._load_gen: dict[int, int] = {}
        self.active = False
        self.loaded = asyncio.Event()  # the partitions led at startup are loaded
        self._queue: asyncio.Queue[_Write] | None = None
        self._queue_taken = asyncio.Event()  # set when the writer takes the last queued write (shutdown's drain)
        self._tasks: list[asyncio.Task[None]] = []
        self._spawned: set[asyncio.Task[Any]] = set()

    # -- lifecycle -------------------------------------------------------------------------------------------------
    async def startup(self) -> None:
        """Start the writer, and load the partitions this broker leads already (`on_become_leader` before)."""
        self._queue = asyncio.Queue()
        self.active = True
        self._tasks.append(asyncio.create_task(self._write_loop(), name=f"{self.topic.name}-writer"))
        if self.topic_exists():
            self.loading = set(self.owned)
            self._tasks.append(asyncio.create_task(self._load_all(), name=f"{self.topic.name}-loader"))
        else:
            self.loaded.set()

    def deactivate(self) -> None:
        """Refuse new requests (COORDINATOR_NOT_AVAILABLE) and timers; queued writes still go to the log."""
        self.active = False

    async def shutdown(self, drain_timeout: float = 5.0) -> None:
        """Let queued writes finish (bounded), then stop the writer, the loads and spawned tasks."""
        self.active = False
        if self._queue is not None and not self._queue.empty():
            self._queue_taken.clear()
            try:
                await asyncio.wait_for(self._queue_taken.wait(), drain_timeout)
            except TimeoutError:
                pass
        for t in [*self._tasks, *self._spawned]:
            t.cancel()
        await asyncio.gather(*self._tasks, *self._spawned, return_exceptions=True)
        self._tasks.clear()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run `coro` in the background until it ends or the runtime shuts down; a failure is logged."""
        t = asyncio.get_running_loop().create_task(coro)
        self._spawned.add(t)
        t.add_done_callback(self._spawn_done)

    def _spawn_done(self, t: asyncio.Task[Any]) -> None:
        self._spawned.discard(t)
        if not t.cancelled() and t.exception() is not None:
            log.error("coordinator task failed", topic=self.topic.name, error=repr(t.exception()))

    @property
    def background_tasks(self) -> frozenset[asyncio.Task[Any]]:
        """Spawned tasks (loads, and the state machine's) still running."""
        return frozenset(self._spawned)

    # -- the topic -------------------------------------------------------------------------------------------------
    def partition_for(self, key: str) -> int:
        return partition_for(key, self.num_partitions)

    def topic_exists(self) -> bool:
        return self.store.topic(self.topic.name) is not None

    async def ensure_topic(self) -> bool:
        """Create the topic on first use (compacted, internal). False if it cannot be created."""
        store = self.store
        name = self.topic.name
        if store.topic(name) is not None:
            return True
        configs = {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(self.topic.segment_bytes),
        }
        try:
            # Capped by the live brokers (Kafka refuses instead; docs/configuration.md).
            rf = min(self.topic.replication_factor, max(1, len(store.brokers())))
            if self.topic.min_isr is not None:
                configs["min.insync.replicas"] = str(min(self.topic.min_isr, rf))
            info = await store.create_topic(name, self.num_partitions, configs, internal=True, replication_factor=rf)
            if not store.clustered:  # in a cluster the replicas follow the partition states
                self.replica_manager.ensure_partitions(info)
        except Exception:
            if store.topic(name) is not None:  # created concurrently
                return True
            log.exception("cannot create a coordinator topic", topic=name)
            return False
        log.info("created a coordinator topic", topic=name, partitions=self.num_partitions)
        return True

    def check(self, key: str) -> ErrorCode:
        """Whether this broker coordinates `key` now: COORDINATOR_NOT_AVAILABLE (stopped, or no topic yet),
        NOT_COORDINATOR (another broker leads its partition), COORDINATOR_LOAD_IN_PROGRESS, or NONE."""
        if not self.active:
            return E.COORDINATOR_NOT_AVAILABLE
        if not self.topic_exists():
            return E.COORDINATOR_NOT_AVAILABLE
        p = self.partition_for(key)
        if p not in self.owned:
            return E.NOT_COORDINATOR
        if p in self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        return E.NONE

    # -- leadership (ReplicaManager.apply_partition_state) ------------------------------------------------------------
    def on_become_leader(self, partition: int) -> None:
        """This broker now leads `partition`: load its state (Kafka's onElection)."""
        gen = self._load_gen[partition] = self._load_gen.get(partition, 0) + 1
        self.owned.add(partition)
        if not self.active:
            return  # startup() loads every owned partition
        part = self.replica_manager.get_partition(self.topic.name, partition)
        if part is None or part.log.log_end_offset <= part.log.log_start_offset:
            return  # nothing to load
        self.loading.add(partition)
        self.spawn(self._load_one(partition, part.log, gen))

    def on_resign(self, partition: int) -> None:
        """This broker no longer leads `partition`: the state machine unloads it; requests for its keys get
        NOT_COORDINATOR and find the new coordinator (Kafka's onResignation)."""
        self._load_gen[partition] = self._load_gen.get(partition, 0) + 1
        self.owned.discard(partition)
        self.loading.discard(partition)
        self.shard.unload(partition)

    async def _load_one(self, partition: int, ulog: CoordinatorLog, gen: int) -> None:
        try:
            n = await self._load_partition(partition, ulog, gen)
            log.info("loaded a coordinator partition", topic=self.topic.name, partition=partition, records=n)
        except Exception:
            log.exception("failed to load a coordinator partition", topic=self.topic.name, partition=partition)
        finally:
            if self._load_gen.get(partition) == gen:
                self.loading.discard(partition)

    async def _load_all(self) -> None:
        start = time.monotonic()
        total = 0
        for p in sorted(self.loading):
            part = self.replica_manager.get_partition(self.topic.name, p)
            try:
                if part is not None:
                    total += await self._load_partition(p, part.log, self._load_gen.get(p))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("failed to load a coordinator partition", topic=self.topic.name, partition=p)
            self.loading.discard(p)
        self.loaded.set()
        log.info(
            "loaded the coordinator partitions",
            topic=self.topic.name,
            records=total,
            ms=round((time.monotonic() - start) * 1000),
        )

    async def _load_partition(self, partition: int, ulog: CoordinatorLog, gen: int | None = None) -> int:
        """Replay one partition from its log start offset (Kafka's coordinator load); with `gen`, the state is
        installed only if the partition was not resigned (or re-won) meanwhile."""
        state = self.shard.begin_load(partition)
        txn: TransactionalReplay[L] | None = self.shard if isinstance(self.shard, TransactionalReplay) else None
        offset = ulog.log_start_offset
        end = ulog.log_end_offset
        count = 0
        while offset < end:
            data = ulog.read(offset, self.topic.load_buffer_size, end, True)
            buf = data.records
            if not len(buf):
                break
            advanced = False
            for pos, h in iter_batches(buf):
                if h.next_offset <= offset:
                    continue
                advanced = True
                offset = h.next_offset
                if h.is_control:
                    if txn is not None and h.is_transactional:
                        marker = read_end_marker(buf, pos)
                        if marker is not None:
                            txn.replay_end_txn(state, h.producer_id, not marker[0])
                    continue
                for r in iter_records(buf, pos):
                    count += 1
                    if txn is not None and h.is_transactional:
                        txn.replay_transactional(state, h.producer_id, r.key, r.value)
                    else:
                        self.shard.replay(state, r.key, r.value)
            if not advanced:
                break
            await asyncio.sleep(0)
        if gen is not None and self._load_gen.get(partition) != gen:
            return count
        self.shard.complete_load(partition, state)
        return count

    # -- writes ------------------------------------------------------------------------------------------------------
    def write(
        self, partition: int, records: Sequence[Record], producer: tuple[int, int] | None = None
    ) -> asyncio.Future[ErrorCode]:
        """Queue records for one partition now (so records keep the order in which the state machine produced
        them); the future resolves to the append's error code once the records are committed or failed.
        `producer` (id, epoch) writes them as a transactional batch of that producer (Kafka's TxnOffsetCommit
        append, origin COORDINATOR): they count only once a commit marker follows."""
        fut: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        if self._queue is None:
            fut.set_result(E.COORDINATOR_NOT_AVAILABLE)
        else:
            self._queue.put_nowait((partition, records, fut, producer))
        return fut

    def write_nowait(self, partition: int, records: Sequence[Record], what: str) -> None:
        """`write`, nobody waiting for the outcome: a failure is logged."""

        def done(fut: asyncio.Future[ErrorCode]) -> None:
            if not fut.cancelled() and fut.result():
                log.warning(
                    "failed to write coordinator records",
                    topic=self.topic.name,
                    what=what,
                    error=ErrorCode(fut.result()).name,
                )

        self.write(partition, records).add_done_callback(done)

    async def _write_loop(self) -> None:
        assert self._queue is not None
        rm = self.replica_manager
        while True:
            partition, records, fut, producer = await self._queue.get()
            if self._queue.empty():
                self._queue_taken.set()
            try:
                if not await self.ensure_topic():
                    err = E.COORDINATOR_NOT_AVAILABLE
                else:
                    pid, epoch = producer if producer is not None else (-1, -1)
                    now = self.now()
                    if len(records) > BUILD_OFF_LOOP_RECORDS:  # e.g. a commit of 100,000 offsets: ~1 s to build
                        batch = await asyncio.to_thread(partial(_build, records, now, pid, epoch))
                    else:
                        batch = _build(records, now, pid, epoch)
                    entry: list[tuple[str, int, bytes | memoryview]] = [(self.topic.name, partition, batch)]
                    if producer is None:
                        res = (await rm.append_records(entry, internal=True))[0]
                    else:  # Kafka's AppendOrigin COORDINATOR: no sequence numbers to check
                        res = (await rm.append_records(entry, internal=True, from_client=False))[0]
                    err = ErrorCode(res.error)
            except asyncio.CancelledError:
                if not fut.done():
                    fut.set_result(E.COORDINATOR_NOT_AVAILABLE)
                raise
            except Exception:
                log.exception("coordinator topic append failed", topic=self.topic.name, partition=partition)
                err = E.UNKNOWN_SERVER_ERROR
            if not fut.done():
                fut.set_result(err)


__all__ = [
    "CoordinatorLog",
    "CoordinatorMetadataStore",
    "CoordinatorReplicaManager",
    "CoordinatorRuntime",
    "CoordinatorShard",
    "CoordinatorTopic",
    "Record",
    "TransactionalReplay",
    "java_string_hash",
    "partition_for",
]
