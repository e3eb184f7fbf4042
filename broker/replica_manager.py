"""ReplicaManager: the partitions this broker hosts, their leader/follower state, and the produce/fetch paths.

Handlers speak in wire terms; the ReplicaManager speaks in partitions and offsets. Every partition state change
(become leader, become follower, stop replica) goes through `apply_partition_state`, fed by the metadata store
(docs/cluster.md). A single broker's LocalMetadataStore says "leader at epoch 0, ISR = {self}" for every partition,
so the same code makes the HW follow the LEO on every append.

Leader side (Kafka's Partition/ReplicaManager): followers' fetch offsets and caught-up times, HW = min LEO over the
ISR, ISR shrink/expand by compare-and-set in the store (`replica.lag.time.max.ms`), acks=-1 in the Produce purgatory
(DelayedProduce), min.insync.replicas. Follower side: strata.broker.cluster.replica_fetcher.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from strata.config import BrokerConfig, LogConfig
from strata.protocol.errors import ErrorCode, KafkaApiError
from strata.storage.errors import OffsetOutOfRangeError, StorageError
from strata.storage.file_region import FileRegion
from strata.storage.log import UnifiedLog
from strata.storage.log_manager import LogManager
from strata.storage.txn_index import AbortedTxn

from .cluster.epoch_flusher import EpochCheckpointFlusher
from .cluster.model import PartitionState, StaleStateError
from .cluster.replica_fetcher import ReplicaFetcherManager
from .gc_pauses import freeze_new_objects
from .metadata_store import MetadataStore, TopicInfo
from .metrics import BrokerMetrics
from .partition import Partition, now_ms
from .purgatory import Purgatory
from .read_replica import READ_ONLY_ERROR, ReadReplicaManager, read_only_message, read_replica_of
from .recovered_log import recovered_start, start_recovered_log

if TYPE_CHECKING:
    from strata.remote.rlm import RemoteLogManager
    from strata.remote.rlmm_api import RemoteLogMetadataManager
    from strata.storage.cleaner_manager import LogCleaner

    from .tiered import TieredStorage

log = structlog.get_logger("strata.replica_manager")

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
INTERNAL_APPEND_TIMEOUT_MS = 5000  # Kafka's offsets.commit.timeout.ms: the broker's own acks=-1 writes
# Loops over the partitions of one request or topic give other connections a turn every this many partitions.
YIELD_EVERY = 256
RENAMES_PER_YIELD = 32  # a partition dir's rename takes ~1 ms on a busy disk
FREEZE_AFTER_PARTITIONS = 1000  # a creation this large moves its objects out of the collector's reach
# Zero-copy Fetch: a local read this large is sent from the file with sendfile; smaller ones are read (a pread costs
# no more than the descriptor and the extra writes of a region). A response holds at most this many regions.
ZERO_COPY_MIN_BYTES = 64 << 10
ZERO_COPY_MAX_REGIONS = 64


async def pace(n: int) -> None:
    """Give other connections a turn at every YIELD_EVERY-th item of a loop over one request's entries."""
    if n % YIELD_EVERY == YIELD_EVERY - 1:
        await asyncio.sleep(0)


# Leadership listeners: callback(partition, is_leader) after a partition became leader (True) or stopped being
# leader (False: follower or no longer hosted). The group coordinator follows __consumer_offsets with it.
LeadershipListener = Callable[[Partition, bool], None]


@dataclass(slots=True)
class ProduceResult:
    error: ErrorCode = ErrorCode.NONE
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None
    current_leader: tuple[int, int] | None = None  # (leader id, leader epoch) with NOT_LEADER_OR_FOLLOWER
    record_errors: list[tuple[int, str]] | None = None  # Produce v8+: (batch index, message) of rejected records


@dataclass(slots=True)
class FetchSpec:
    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1  # Fetch v12+ (KIP-320): checked against the leader's epochs
    log_start_offset: int = -1  # a follower's log start (Fetch v5+)


@dataclass(frozen=True, slots=True)
class RemoteFetchInfo:
    """What a read pass leaves to the RemoteLogReader pool: the fetch offset lives in remote storage (Kafka's
    RemoteStorageFetchInfo in its LogReadResult)."""

    partition: Partition
    fetch_offset: int
    max_bytes: int
    rlm: RemoteLogManager  # ours, or a read-replica topic's origin's


@dataclass(slots=True)
class FetchResult:
    error: ErrorCode = ErrorCode.NONE
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes | memoryview | FileRegion = b""
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset): the fetcher must truncate
    current_leader: tuple[int, int] | None = None  # (leader id, leader epoch) with NOT_LEADER / FENCED
    remote_fetch: RemoteFetchInfo | None = None  # the read pass found the offset in remote storage
    # READ_COMMITTED: the aborted transactions overlapping `records` (AbortedTxn: producer id, first offset, ...)
    aborted_transactions: list[AbortedTxn] | None = None


def _idle_fetch(s: FetchSpec, p: Partition, ulog: UnifiedLog) -> tuple:
    """What a follower's fetch answered with "nothing new" depends on: its request (offset, last fetched epoch for
    the divergence check, current leader epoch, log start), the leader epoch, the log (object, LEO, HW, log
    start)."""
    return (
        s.fetch_offset,
        s.last_fetched_epoch,
        s.current_leader_epoch,
        s.log_start_offset,
        p.leader_epoch,
        ulog,
        ulog.log_end_offset,
        ulog.high_watermark,
        ulog.log_start_offset,
    )


@dataclass
class ReplicaManager:
    config: BrokerConfig
    log_manager: LogManager
    store: MetadataStore
    metrics: BrokerMetrics
    partitions: dict[tuple[str, int], Partition] = field(default_factory=dict)
    log_cleaner: LogCleaner | None = None  # follower truncation moves its checkpoint down
    # remote.log.storage.system.enable: builds the tiered storage, whose RLMM reads and appends to this
    # replica manager's own replicas of __remote_log_metadata (so it is given the replica manager)
    tiered_storage_factory: Callable[[ReplicaManager], TieredStorage] | None = None
    # a cluster's leadership changes come in bursts: epoch checkpoints fsynced together, off the loop
    epoch_flusher: EpochCheckpointFlusher | None = None

    def __post_init__(self) -> None:
        self.broker_id: int = self.config.broker_id
        self._purgatory_gauges: dict[str, Any] = {}
        self.max_lag_ms: int = self.config["replica.lag.time.max.ms"]
        self.fetch_purgatory = Purgatory("Fetch", self._report_purgatory)
        self.produce_purgatory = Purgatory("Produce", self._report_purgatory)
        self.fetcher_manager = ReplicaFetcherManager(self)
        self.leadership_listeners: list[LeadershipListener] = []
        self._isr_tasks: set[asyncio.Task] = set()
        # per topic: the produce requests, bytes in and messages in counters (a label lookup costs more than the inc)
        self._produce_meters: dict[str, tuple[Any, Any, Any]] = {}
        self.metrics.register_replica_manager(self)
        factory = self.tiered_storage_factory
        self.tiered: TieredStorage | None = factory(self) if factory is not None else None
        # read-replica topics (issue 24): served from another cluster's bucket with the tiered read path
        self.read_replicas = ReadReplicaManager(self, self.tiered.rlm) if self.tiered is not None else None

    @property
    def rlm(self) -> RemoteLogManager | None:
        """The RemoteLogManager once tiered storage is started (start_tiered_storage), else None: leadership
        changes and partition stops reach the RLM and RLMM only from then on."""
        t = self.tiered
        return t.rlm if t is not None and t.started else None

    @property
    def rlmm(self) -> RemoteLogMetadataManager | None:
        """The RLM's RemoteLogMetadataManager, under the same condition as `rlm`."""
        t = self.tiered
        return t.rlmm if t is not None and t.started else None

    def remote_reader(self, p: Partition) -> RemoteLogManager | None:
        """The RemoteLogManager that reads a partition's remote offsets: a read replica's origin's, else ours."""
        if self.read_replicas is not None and (rlm := self.read_replicas.rlm_for(p.topic)) is not None:
            return rlm
        return self.rlm

    def _report_purgatory(self, name: str, size: int) -> None:
        g = self._purgatory_gauges.get(name)
        if g is None:
            g = self._purgatory_gauges[name] = self.metrics.purgatory_size.labels(name)
        g.set(size)

    # ---- lifecycle ---------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the replica fetchers (needs the running event loop)."""
        self.fetcher_manager.start()

    async def start_tiered_storage(self) -> None:
        """Start the RLM, the RLMM and the partition remover, then hand them every hosted tiered partition.
        Called once the replicas are loaded and, in a cluster, the broker registered: the RLMM creates and
        reads `__remote_log_metadata` through them."""
        if self.tiered is None:
            return
        await self.tiered.start()
        for info in list(self.store.topics().values()):
            self._notify_remote(info)

    async def shutdown(self) -> None:
        await self.fetcher_manager.shutdown()
        if self.read_replicas is not None:
            await self.read_replicas.close()
        for t in list(self._isr_tasks):
            t.cancel()
        await asyncio.gather(*self._isr_tasks, return_exceptions=True)

    # ---- gauges (read by the metrics thread: copy before iterating) --------------------------------------------
    @property
    def leader_count(self) -> int:
        return sum(1 for p in list(self.partitions.values()) if p.is_leader)

    @property
    def partition_count(self) -> int:
        return len(self.partitions)

    @property
    def under_replicated_count(self) -> int:
        return sum(1 for p in list(self.partitions.values()) if p.is_under_replicated)

    # ---- partition lifecycle -------------------------------------------------------------------------------
    def log_config_for(self, topic: str) -> LogConfig:
        info = self.store.topic(topic)
        return self.config.log_config(info.configs if info else None)

    def load_partitions(self) -> None:
        """Startup: apply the current state of every partition (creates the hosted ones, starts fetchers)."""
        for info in list(self.store.topics().values()):
            self.ensure_partitions(info)

    def ensure_partitions(self, info: TopicInfo) -> None:
        """Apply the state of every partition of `info` (a single broker: creates them, this broker leading); the
        topic's log config is computed once, not once per partition."""
        config = self.config.log_config(info.configs)
        for i in range(info.partitions):
            self.apply_partition_state(info.name, i, self.store.partition_state(info.name, i), config)

    def apply_partition_state(
        self, topic: str, index: int, state: PartitionState | None, config: LogConfig | None = None
    ) -> None:
        """The one entry point for partition state changes (Kafka's handling of a PartitionChangeRecord):
        become leader, become follower, or stop (and delete) the replica. `config`: the topic's log config, when
        the caller has it."""
        key = (topic, index)
        p = self.partitions.get(key)
        info = self.store.topic(topic)
        if info is None or state is None or index >= info.partitions:
            if info is None and p is not None:
                self._stop_replica(p, delete_log=True, delete_remote=p.is_leader)
            return
        if p is not None and p.topic.topic_id != info.topic_id:
            # The topic was deleted and re-created under the same name while we were not looking.
            self._stop_replica(p, delete_log=True, delete_remote=False)
            p = None
        if self.broker_id not in state.replicas and self.broker_id not in state.adding:
            if p is not None:
                log.info("no longer a replica: deleting", topic=topic, partition=index, replicas=list(state.replicas))
                self._stop_replica(p, delete_log=True, delete_remote=False)
            return
        if p is None:
            if config is None:
                config = self.config.log_config(info.configs)
            ulog = self.log_manager.get_or_create_log(topic, index, info.topic_id, config)
            entry = recovered_start(info.recovery, index)
            if entry is not None and start_recovered_log(ulog, entry):  # a topic recovered from the bucket
                self.log_manager.checkpoint_log_start_offsets()
            p = self.partitions[key] = Partition(
                info, index, ulog, self.broker_id, self.max_lag_ms, ineligible=self._ineligible_brokers
            )
        else:
            p.topic = info
            if not p.is_newer_or_same(state):
                log.debug(
                    "ignoring an older partition state",
                    topic=topic,
                    partition=index,
                    epoch=state.leader_epoch,
                    current=p.leader_epoch,
                )
                return
        if state.leader == self.broker_id:
            self._make_leader(p, state)
        else:
            self._make_follower(p, state)

    def _make_leader(self, p: Partition, state: PartitionState) -> None:
        was_leader = p.is_leader
        flusher = self.epoch_flusher
        new_epoch = p.make_leader(state, now_ms(), sync=flusher is None)
        if new_epoch:
            if flusher is not None:
                flusher.written(p.log.leader_epoch_cache.path)
            self.fetcher_manager.remove_partition(p.key)
            if state.leader_epoch > 0 or len(state.replicas) > 1:
                log.info(
                    "became leader",
                    topic=p.topic.name,
                    partition=p.index,
                    leader_epoch=state.leader_epoch,
                    isr=list(state.isr),
                    leo=p.log.log_end_offset,
                    hw=p.log.high_watermark,
                )
        self._maybe_hw_moved(p)
        # ISR changes and new epochs may settle parked acks=-1 produces (or fail them).
        self.produce_purgatory.check_and_complete(p.key)
        if not was_leader:
            self._leadership_changed(p, True)
        if new_epoch and self.rlm is not None:
            self._notify_remote_partitions([p])

    def _make_follower(self, p: Partition, state: PartitionState) -> None:
        was_leader = p.is_leader
        first = p.leader_epoch < 0
        if p.make_follower(state) or first:
            log.info(
                "became follower",
                topic=p.topic.name,
                partition=p.index,
                leader=state.leader,
                leader_epoch=state.leader_epoch,
                leo=p.log.log_end_offset,
                hw=p.log.high_watermark,
            )
            if not read_replica_of(p.topic.configs):  # a read replica's replicas all follow the bucket instead
                self.fetcher_manager.add_partition(p)  # Truncating first (OffsetForLeaderEpoch)
            # Parked produces and consumer fetches answer NOT_LEADER_OR_FOLLOWER now.
            self.produce_purgatory.check_and_complete(p.key)
            self.fetch_purgatory.check_and_complete(p.key)
            if was_leader or first:
                self._leadership_changed(p, False)
            if self.rlm is not None:
                self._notify_remote_partitions([p])

    def _stop_replica(self, p: Partition, delete_log: bool, delete_remote: bool) -> None:
        key = p.key
        was_leader = p.is_leader
        self.partitions.pop(key, None)
        self.fetcher_manager.remove_partition(key)
        p.leader_id = -1
        if self.read_replicas is not None and read_replica_of(p.topic.configs):
            self.read_replicas.stop_partition(key)  # never the origin's data: it is not ours
        elif self.rlm is not None and p.log.remote_log_enabled:
            from strata.remote.rlm import topic_id_partition

            tip = topic_id_partition(p.log)
            if delete_remote:
                self.rlm.start_marking_deleted([tip])
            else:
                self.rlm.stop_replica(tip)
                if self.rlmm is not None:
                    try:
                        self.rlmm.on_stop_partitions([tip])
                    except Exception as e:  # noqa: BLE001 - a closing RLMM must not block the stop
                        log.warning("RLMM stop failed", topic=key[0], partition=key[1], error=str(e))
        if delete_log:
            self.log_manager.delete_log(*key)
        # Wake parked requests so they notice the partition is gone.
        self.fetch_purgatory.check_and_complete(key)
        self.produce_purgatory.check_and_complete(key)
        if was_leader:
            self._leadership_changed(p, False)

    def _leadership_changed(self, p: Partition, leader: bool) -> None:
        for cb in list(self.leadership_listeners):
            try:
                cb(p, leader)
            except Exception:
                log.exception("leadership listener failed", topic=p.topic.name, partition=p.index)

    def _notify_remote(self, info: TopicInfo) -> None:
        """Leadership drives the RemoteLogManager's copy/expiration tasks (leaders only); the RLMM follows the
        metadata of every hosted tiered partition."""
        if self.rlm is None:
            return
        self._notify_remote_partitions(
            [p for i in range(info.partitions) if (p := self.partitions.get((info.name, i))) is not None]
        )

    def _notify_remote_partitions(self, parts: list[Partition]) -> None:
        from strata.remote.rlm import topic_id_partition

        rlm = self.rlm
        if rlm is None:
            return
        if self.read_replicas is not None:
            replicas = [p for p in parts if read_replica_of(p.topic.configs)]
            if replicas:  # followed through the origin's manifests, not by this broker's RLM and RLMM
                self.read_replicas.on_partitions(replicas)
                parts = [p for p in parts if not read_replica_of(p.topic.configs)]
        leaders = [p for p in parts if p.is_leader]
        followers = [p for p in parts if not p.is_leader]
        tl = [topic_id_partition(p.log) for p in leaders if p.log.remote_log_enabled]
        tf = [topic_id_partition(p.log) for p in followers if p.log.remote_log_enabled]
        if (tl or tf) and self.rlmm is not None:
            try:
                self.rlmm.on_partition_leadership_changes(tl, tf)
            except (RuntimeError, StorageError) as e:
                # The RLMM could not follow (it is closing, or the metadata topic is not there yet); leadership
                # itself must still be applied, and the tier state machine subscribes again when it needs to.
                log.warning("cannot follow remote log metadata", error=str(e), partitions=[str(t) for t in tl + tf])
        rlm.on_leadership_change([(p.log, p.leader_epoch) for p in leaders], [p.log for p in followers])

    async def create_topic_partitions(self, info: TopicInfo) -> None:
        """CreateTopics / CreatePartitions on a single broker: the partitions' dirs and files are made in a worker
        thread (thousands of files and fsyncs), then their states are applied in slices with a yield between, so
        other connections are served meanwhile. An OSError (EMFILE, ENOSPC) propagates with nothing of this call
        left on disk."""
        todo = [i for i in range(info.partitions) if self.log_manager.get_log(info.name, i) is None]
        if todo:
            cfg = self.config.log_config(info.configs)
            # the leader epoch's start is written (fsynced) with the files, off the loop: make_leader finds it there
            epochs = {
                i: st.leader_epoch
                for i in todo
                if (st := self.store.partition_state(info.name, i)) is not None and st.leader == self.broker_id
            }
            made = await asyncio.to_thread(self.log_manager.make_logs, info.name, todo, info.topic_id, cfg, epochs)
            current = self.store.topic(info.name)
            if current is None or current.topic_id != info.topic_id:  # deleted (or re-created) meanwhile
                await asyncio.to_thread(self.log_manager.discard_logs, made)
                return
            self.log_manager.adopt_logs(made)
        for i in range(info.partitions):
            self.apply_partition_state(info.name, i, self.store.partition_state(info.name, i))
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)
        if len(todo) >= FREEZE_AFTER_PARTITIONS:
            freeze_new_objects()  # as at startup: full GC passes would rescan these partitions' objects forever

    def remove_topic(self, info: TopicInfo) -> None:
        """Topic deleted: stop and delete every local replica (idempotent); the leader marks its remote data for the
        RemotePartitionRemover. The dirs are renamed here; removing them and rewriting the checkpoints (once) runs
        in a worker thread."""
        tombs = [t for i in range(info.partitions) if (t := self._detach_replica(info, i)) is not None]
        if tombs:
            fut = asyncio.get_running_loop().run_in_executor(None, self.log_manager.remove_detached, tombs)
            fut.add_done_callback(_log_removal_failure)

    async def remove_topic_async(self, info: TopicInfo) -> None:
        """`remove_topic` for DeleteTopics on a single broker: yields between slices of partitions and answers once
        the files are gone."""
        tombs: list[Path] = []
        for i in range(info.partitions):
            if (t := self._detach_replica(info, i)) is not None:
                tombs.append(t)
            if i % RENAMES_PER_YIELD == RENAMES_PER_YIELD - 1:
                await asyncio.sleep(0)
        if tombs:
            await asyncio.to_thread(self.log_manager.remove_detached, tombs)

    def _detach_replica(self, info: TopicInfo, index: int) -> Path | None:
        p = self.partitions.get((info.name, index))
        if p is not None and p.topic.topic_id == info.topic_id:
            self._stop_replica(p, delete_log=False, delete_remote=p.is_leader)
        elif p is not None:
            return None  # a newer topic of the same name
        return self.log_manager.detach_log(info.name, index)

    def on_topic_change(self, info: TopicInfo) -> None:
        """A topic's record changed in the store (configs; partition states arrive on their own)."""
        cfg = self.config.log_config(info.configs)
        for i in range(info.partitions):  # this topic's partitions only: not a scan of every hosted partition
            p = self.partitions.get((info.name, i))
            if p is not None and p.log.config.values != cfg.values:
                self.update_topic_config(info)
                return

    def disable_remote_storage(self, info: TopicInfo) -> None:
        """KIP-950 with remote.log.delete.on.disable=true: the remote data is marked for the RemotePartitionRemover;
        the log starts locally at once."""
        for i in range(info.partitions):
            p = self.partitions.get((info.name, i))
            if p is None:
                continue
            p.log.advance_log_start_offset(p.log.local_log_start_offset)
            p.log.reset_highest_offset_in_remote_storage(-1)
            if self.rlm is not None and p.is_leader:
                from strata.remote.rlm import topic_id_partition

                self.rlm.start_marking_deleted([topic_id_partition(p.log)])

    def update_topic_config(self, info: TopicInfo) -> None:
        cfg = self.config.log_config(info.configs)
        for i in range(info.partitions):
            p = self.partitions.get((info.name, i))
            if p is not None:
                p.log.update_config(cfg)
        self._notify_remote(info)

    def get_partition(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def all_logs(self) -> Iterable[UnifiedLog]:
        return [p.log for p in self.partitions.values()]

    def leader_hint(self, topic: str, index: int) -> tuple[int, int] | None:
        """(leader id, leader epoch) of a partition as the metadata image has it, for NOT_LEADER_OR_FOLLOWER answers
        (KIP-951); None when unknown."""
        st = self.store.partition_state(topic, index)
        if st is None or st.leader < 0:
            return None
        return (st.leader, st.leader_epoch)

    def not_hosted_error(self, topic: str, index: int) -> ErrorCode:
        """A partition without a local replica: NOT_LEADER_OR_FOLLOWER if it exists (clients refresh metadata),
        UNKNOWN_TOPIC_OR_PARTITION otherwise."""
        if self.store.partition_state(topic, index) is not None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    # ---- HW, ISR --------------------------------------------------------------------------------------------
    def _maybe_hw_moved(self, p: Partition) -> None:
        if p.maybe_increment_hw(now_ms()):
            self._on_hw_change(p)

    def _on_hw_change(self, p: Partition) -> None:
        self.fetch_purgatory.check_and_complete(p.key)
        self.produce_purgatory.check_and_complete(p.key)

    def on_follower_progress(self, p: Partition) -> None:
        """The replica fetcher appended to / truncated a follower log: local readers (the RLMM on a follower)."""
        self.fetch_purgatory.check_and_complete(p.key)

    def _record_follower_fetch(
        self, p: Partition, replica_id: int, s: FetchSpec, records: bytes | memoryview | FileRegion | None = None
    ) -> None:
        """Kafka's updateFollowerFetchState: the follower's position, the HW and an ISR expansion. `records`: what
        the read for this fetch found (None: not read); when it found nothing new for a follower in the ISR, the
        fetch and the log's state are remembered (`FollowerState.idle_fetch`) so that the next rounds skip the read
        while they stay the same (Kafka's leader reads every session partition each round: ~6 us per idle partition
        and pass here, ~2.4 us with the skip)."""
        if p.update_follower_fetch_state(replica_id, s.fetch_offset, s.log_start_offset, now_ms()):
            self._on_hw_change(p)
        new_isr = p.isr_to_expand(replica_id)
        if new_isr is not None:
            self._alter_isr(p, new_isr, expand=True)
        fs = p.followers.get(replica_id)
        if fs is not None:
            ulog = p.log
            idle = records is not None and not records and s.fetch_offset == ulog.log_end_offset
            fs.idle_fetch = _idle_fetch(s, p, ulog) if idle and replica_id in p.isr else None

    def maybe_shrink_isr(self) -> None:
        """Kafka's isr-expiration task (every replica.lag.time.max.ms / 2): drop followers that have not caught up
        for replica.lag.time.max.ms. The HW is looked at again too: a follower outside the ISR that was caught up
        holds it back only for replica.lag.time.max.ms, and when that runs out no fetch may come to notice."""
        t = now_ms()
        for p in list(self.partitions.values()):
            if not p.is_leader or not p.followers:  # no follower: nothing to shrink, the HW moved with each append
                continue
            if read_replica_of(p.topic.configs):  # every replica reads the origin's bucket: none fetches from us
                continue
            self._maybe_hw_moved(p)
            new_isr = p.isr_to_shrink(t)
            if new_isr is not None:
                self._alter_isr(p, new_isr, expand=False)

    def _ineligible_brokers(self) -> _Ineligible:
        return _Ineligible(self.store)

    def on_brokers_changed(self) -> None:
        """A broker registered or went away: a leader's HW may have waited for a caught-up follower outside the ISR
        that is gone now (Kafka's isReplicaIsrEligible turns false when a broker is fenced)."""
        for p in list(self.partitions.values()):
            if p.is_leader and p.followers:
                self._maybe_hw_moved(p)

    def _alter_isr(self, p: Partition, new_isr: tuple[int, ...], expand: bool) -> None:
        """AlterPartition: compare-and-set the ISR in the store. While in flight the HW respects the wider of the two
        ISRs; a lost CAS means the controller changed the partition: re-read and re-apply."""
        topic, index = p.key
        cur = self.store.partition_state(topic, index)
        if (
            cur is None
            or cur.leader != self.broker_id
            or cur.leader_epoch != p.leader_epoch
            or cur.partition_epoch != p.partition_epoch
        ):
            self.apply_partition_state(topic, index, cur)  # our view is behind the image: catch up first
            return
        proposed = cur.with_changes(isr=tuple(new_isr))
        p.pending_isr = tuple(new_isr)
        log.info(
            "expanding ISR" if expand else "shrinking ISR",
            topic=topic,
            partition=index,
            isr=list(cur.isr),
            new_isr=list(new_isr),
            leo=p.log.log_end_offset,
            hw=p.log.high_watermark,
        )
        task = asyncio.get_running_loop().create_task(self._submit_alter(p, proposed, expand))
        self._isr_tasks.add(task)
        task.add_done_callback(self._isr_tasks.discard)

    async def _submit_alter(self, p: Partition, proposed: PartitionState, expand: bool) -> None:
        topic, index = p.key
        committed: PartitionState | None = None
        try:
            committed = await self.store.alter_partition(topic, index, proposed)
            (self.metrics.isr_expands if expand else self.metrics.isr_shrinks).inc()
        except StaleStateError as e:
            log.info("ISR change lost to a concurrent change; re-reading", topic=topic, partition=index, error=str(e))
            committed = self.store.partition_state(topic, index)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - store unreachable: retried on the next check
            log.warning("ISR change failed", topic=topic, partition=index, error=repr(e))
        finally:
            if p.pending_isr == tuple(proposed.isr):
                p.pending_isr = None
        if self.partitions.get(p.key) is p:
            if committed is not None:
                self.apply_partition_state(topic, index, committed)
            if p.is_leader:
                self._maybe_hw_moved(p)  # the maximal ISR may have narrowed
            self.produce_purgatory.check_and_complete(p.key)

    # ---- produce ---------------------------------------------------------------------------------------------
    def _meters_of(self, topic: str) -> tuple[Any, Any, Any]:
        m = self.metrics
        return m.produce_requests.labels(topic), m.bytes_in.labels(topic), m.messages_in.labels(topic)

    async def append_records(
        self,
        entries: list[tuple[str, int, bytes | memoryview]],
        internal: bool = False,
        required_acks: int | None = None,
        timeout_ms: int | None = None,
        *,
        from_client: bool = True,
        verified_producers: frozenset[int] = frozenset(),
    ) -> list[ProduceResult]:
        """Append to leaders. `internal` is the broker's own writers (coordinators, RLMM): they may write internal
        topics (clients get INVALID_TOPIC_EXCEPTION) and default to acks=-1. acks=-1 refuses to append below
        min.insync.replicas (NOT_ENOUGH_REPLICAS) and waits in the Produce purgatory until the ISR has the records
        (the HW passes them) or `timeout_ms` (REQUEST_TIMED_OUT). `from_client=False` appends transaction markers
        (Kafka's AppendOrigin COORDINATOR, for WriteTxnMarkers); `verified_producers` may open transactions."""
        acks = required_acks if required_acks is not None else (-1 if internal else 1)
        if timeout_ms is None:
            timeout_ms = INTERNAL_APPEND_TIMEOUT_MS
        results: list[ProduceResult] = []
        to_flush: dict[int, UnifiedLog] = {}
        waits: list[tuple[int, Partition, int, int]] = []  # (result index, partition, required offset, epoch)
        for n, (topic, index, records) in enumerate(entries):
            if n % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)  # a produce to thousands of partitions lets other connections be served
            p = self.partitions.get((topic, index))
            info = p.topic if p is not None else self.store.topic(topic)
            if info is not None and info.internal and not internal:
                results.append(
                    ProduceResult(ErrorCode.INVALID_TOPIC_EXCEPTION, message=f"Cannot append to internal topic {topic}")
                )
                self.metrics.failed_produce.labels(topic).inc()
                continue
            if info is not None and (origin := read_replica_of(info.configs)):
                results.append(ProduceResult(READ_ONLY_ERROR, message=read_only_message(topic, origin)))
                self.metrics.failed_produce.labels(topic).inc()
                continue
            if p is None or not p.is_leader:
                err = self.not_hosted_error(topic, index) if p is None else ErrorCode.NOT_LEADER_OR_FOLLOWER
                hint = self.leader_hint(topic, index) if err == ErrorCode.NOT_LEADER_OR_FOLLOWER else None
                results.append(ProduceResult(err, current_leader=hint))
                self.metrics.failed_produce.labels(topic).inc()
                continue
            meters = self._produce_meters.get(topic)
            if meters is None:
                meters = self._produce_meters[topic] = self._meters_of(topic)
            meters[0].inc()
            if acks == -1 and len(p.isr) < p.effective_min_isr():
                results.append(
                    ProduceResult(
                        ErrorCode.NOT_ENOUGH_REPLICAS,
                        message=f"The size of the current ISR {list(p.isr)} is insufficient to satisfy the min.isr "
                        f"requirement of {p.effective_min_isr()} for partition {topic}-{index}",
                    )
                )
                self.metrics.failed_produce.labels(topic).inc()
                continue
            try:
                info_ = p.append_records_to_leader(
                    records, from_client=from_client, verified_producers=verified_producers
                )
            except StorageError as e:
                results.append(ProduceResult(ErrorCode(e.error_code), message=str(e), record_errors=e.record_errors))
                self.metrics.failed_produce.labels(topic).inc()
                self.metrics.bytes_rejected.labels(topic).inc(len(records))
                continue
            meters[1].inc(len(records))
            meters[2].inc(info_.record_count)
            results.append(
                ProduceResult(ErrorCode.NONE, info_.first_offset, info_.log_append_time, p.log.log_start_offset)
            )
            if acks == -1:
                waits.append((len(results) - 1, p, info_.last_offset + 1, p.leader_epoch))
            if p.log.unflushed_messages >= p.log.config.flush_messages:
                to_flush[id(p.log)] = p.log
            self.fetch_purgatory.check_and_complete((topic, index))  # followers and consumers
        if to_flush:
            # flush.messages: fsync before the response, so an acknowledged record survives a power loss.
            await asyncio.gather(*(self.flush_log(lg) for lg in to_flush.values()))
        if waits:
            await self._await_replication(results, waits, timeout_ms)
        return results

    async def _await_replication(
        self, results: list[ProduceResult], waits: list[tuple[int, Partition, int, int]], timeout_ms: int
    ) -> None:
        """DelayedProduce: re-check each waiting partition on every event of its key (HW, ISR, leadership)."""
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000.0
        pending = waits
        while True:
            still = []
            for i, p, required, epoch in pending:
                done, err = p.check_enough_replicas(required, epoch)
                if not done:
                    still.append((i, p, required, epoch))
                elif err:
                    self._fail_after_append(results[i], p, err)
            if not still:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                for i, p, _, _ in still:
                    self._fail_after_append(results[i], p, ErrorCode.REQUEST_TIMED_OUT)
                return
            await self.produce_purgatory.wait({p.key for _, p, _, _ in still}, remaining)
            pending = still

    def _fail_after_append(self, r: ProduceResult, p: Partition, err: ErrorCode) -> None:
        r.error = err
        if err == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            r.current_leader = self.leader_hint(*p.key)
        self.metrics.failed_produce.labels(p.topic.name).inc()

    async def flush_log(self, ulog: UnifiedLog, up_to: int | None = None) -> None:
        """fsync the log (in a worker thread) up to `up_to` (exclusive; default its LEO)."""
        start = time.perf_counter()
        await asyncio.get_running_loop().run_in_executor(None, ulog.flush, up_to)
        self.metrics.log_flush.observe(time.perf_counter() - start)

    # ---- fetch -----------------------------------------------------------------------------------------------
    async def _read_once(
        self,
        specs: list[FetchSpec],
        max_bytes: int,
        isolation: int,
        replica_id: int,
        first: bool,
        zero_copy: bool = False,
    ) -> tuple[list[FetchResult], int, bool]:
        """One read pass; returns (results, bytes, answer now). A follower's fetch position is recorded on the
        first pass, once its request passed the checks (Kafka's updateFollowerFetchState). A fetch of thousands of
        partitions yields every YIELD_EVERY of them, so other connections are served meanwhile. With `zero_copy`,
        local reads of at least ZERO_COPY_MIN_BYTES come as FileRegions (sent with sendfile), at most
        ZERO_COPY_MAX_REGIONS per response (each holds a file descriptor until sent)."""
        results: list[FetchResult] = []
        total = 0
        regions = 0
        respond = False
        min_one = True
        replica = replica_id >= 0
        now = now_ms() if replica and first else 0.0
        for n, s in enumerate(specs):
            if n % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)
            p = self.partitions.get((s.topic, s.partition))
            if replica and p is not None:
                fs = p.followers.get(replica_id)
                if fs is not None and (idle := fs.idle_fetch) is not None:
                    ulog = p.log
                    if idle == _idle_fetch(s, p, ulog) and p.is_leader and replica_id in p.isr:
                        # The follower has all of it and nothing changed since its last answer: the same answer
                        # without a read; only its fetch is recorded (caught up now: it asked for the LEO).
                        if first:
                            fs.update_fetch_state(s.fetch_offset, s.log_start_offset, now, s.fetch_offset)
                        results.append(
                            FetchResult(
                                high_watermark=ulog.high_watermark,
                                last_stable_offset=ulog.last_stable_offset,
                                log_start_offset=ulog.log_start_offset,
                            )
                        )
                        continue
            if p is None:
                err = self.not_hosted_error(s.topic, s.partition)
                results.append(
                    FetchResult(
                        err,
                        current_leader=self.leader_hint(s.topic, s.partition)
                        if err == ErrorCode.NOT_LEADER_OR_FOLLOWER
                        else None,
                    )
                )
                respond = True
                continue
            ulog = p.log
            hw = ulog.high_watermark
            res = FetchResult(
                high_watermark=hw, last_stable_offset=p.last_stable_offset, log_start_offset=ulog.log_start_offset
            )
            err = p.check_epoch(s.current_leader_epoch)
            if err:
                res.error = err
                if err in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH):
                    res.current_leader = self.leader_hint(s.topic, s.partition)
                results.append(res)
                respond = True
                continue
            if s.last_fetched_epoch >= 0:
                # KIP-320: the fetcher's last epoch must end at or after its fetch offset in our log.
                epoch, end = ulog.end_offset_for_epoch(s.last_fetched_epoch)
                if end < 0 or epoch < 0 or s.fetch_offset < ulog.log_start_offset:
                    res.error = ErrorCode.OFFSET_OUT_OF_RANGE
                    results.append(res)
                    respond = True
                    continue
                if epoch < s.last_fetched_epoch or end < s.fetch_offset:
                    res.diverging_epoch = (epoch, end)
                    results.append(res)
                    respond = True
                    continue
            limit = min(s.max_bytes, max_bytes - total)
            if limit <= 0 and not min_one:
                if replica and first and ulog.local_log_start_offset <= s.fetch_offset <= ulog.log_end_offset:
                    self._record_follower_fetch(p, replica_id, s)  # no room for data, but the position counts
                    res.high_watermark = ulog.high_watermark
                results.append(res)
                continue
            max_offset = None if replica else (p.last_stable_offset if isolation == READ_COMMITTED else hw)
            try:
                zero_copy_min = ZERO_COPY_MIN_BYTES if zero_copy and regions < ZERO_COPY_MAX_REGIONS else 0
                data = ulog.read_zero_copy(s.fetch_offset, max(limit, 0), max_offset, min_one, zero_copy_min)
            except OffsetOutOfRangeError:
                if ulog.remote_log_enabled and ulog.log_start_offset <= s.fetch_offset < ulog.local_log_start_offset:
                    if replica:
                        # KIP-405: followers rebuild from remote metadata rather than copy tiered data.
                        res.error = ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE
                        respond = True
                    elif (rlm := self.remote_reader(p)) is not None:  # read by the RemoteLogReader pool next
                        res.remote_fetch = RemoteFetchInfo(p, s.fetch_offset, s.max_bytes, rlm)
                    else:
                        res.error = ErrorCode.OFFSET_OUT_OF_RANGE
                        respond = True
                    results.append(res)
                    continue
                res.error = ErrorCode.OFFSET_OUT_OF_RANGE
                respond = True
                results.append(res)
                continue
            except StorageError as e:
                res.error = ErrorCode(e.error_code)
                respond = True
                results.append(res)
                continue
            if replica and first:
                self._record_follower_fetch(p, replica_id, s, data.records)
                res.high_watermark = ulog.high_watermark
                res.last_stable_offset = p.last_stable_offset
            n = len(data.records)
            if n:
                res.records = data.records
                regions += isinstance(data.records, FileRegion)
                total += n
                min_one = False
                if isolation == READ_COMMITTED and not replica:
                    res.aborted_transactions = ulog.aborted_transactions_for(data)
            results.append(res)
        return results, total, respond

    async def fetch(
        self,
        specs: list[FetchSpec],
        *,
        max_bytes: int,
        min_bytes: int,
        max_wait_ms: int,
        isolation: int = READ_UNCOMMITTED,
        replica_id: int = -1,
        zero_copy: bool = False,
    ) -> list[FetchResult]:
        """Read now; if fewer than min.bytes are ready, park in the Fetch purgatory until appends or max.wait.
        `replica_id` >= 0 is a follower's fetch: served by the leader only, read up to the LEO, and it reports the
        follower's position (HW, ISR). `zero_copy`: the response goes to a plaintext socket, local records may be
        FileRegions."""
        max_bytes = min(max_bytes, self.config["fetch.max.bytes"]) if max_bytes > 0 else 0
        deadline = time.monotonic() + max_wait_ms / 1000.0
        keys = [(s.topic, s.partition) for s in specs]
        first = True
        while True:
            results, total, respond = await self._read_once(specs, max_bytes, isolation, replica_id, first, zero_copy)
            first = False
            # throttled (KIP-956): no data for the remote partitions, wait as for any other
            readers = {id(r.remote_fetch.rlm): r.remote_fetch.rlm for r in results if r.remote_fetch is not None}
            if readers and not any(rlm.fetch_throttled() for rlm in readers.values()):
                total += await self._read_remote(results, max_bytes - total, isolation)
                break
            remaining = deadline - time.monotonic()
            if total >= min_bytes or respond or remaining <= 0 or not specs:
                break
            if not await self.fetch_purgatory.wait(keys, remaining):
                results, total, respond = await self._read_once(
                    specs, max_bytes, isolation, replica_id, False, zero_copy
                )
                break
        self._count_fetch(specs, results, replica_id)
        return results

    def _count_fetch(self, specs: list[FetchSpec], results: list[FetchResult], replica_id: int) -> None:
        """Fetch metrics summed per topic first: a labels() lookup per partition was a visible share of the CPU
        of many-partition fetches. Counts stay per partition, as Kafka's (Total|Failed)FetchRequestsPerSec."""
        per_topic: dict[str, list[int]] = {}
        for s, r in zip(specs, results):
            c = per_topic.get(s.topic)
            if c is None:
                c = per_topic[s.topic] = [0, 0, 0]
            c[0] += len(r.records)
            c[1] += 1
            if r.error:
                c[2] += 1
        m = self.metrics
        for topic, (nbytes, nreq, nfail) in per_topic.items():
            if nbytes and replica_id < 0:  # Kafka counts replication apart (ReplicationBytesOutPerSec)
                m.bytes_out.labels(topic).inc(nbytes)
            m.fetch_requests.labels(topic).inc(nreq)
            if nfail:
                m.failed_fetch.labels(topic).inc(nfail)

    async def _read_remote(self, results: list[FetchResult], budget: int, isolation: int) -> int:
        """DelayedRemoteFetch: read every remote partition of the fetch on the RemoteLogReader pool (several per
        fetch, KAFKA-14915), waiting at most remote.fetch.max.wait.ms. Unfinished reads answer empty (the client
        retries; the chunks they pulled stay cached); failures answer KAFKA_STORAGE_ERROR, which clients retry."""
        jobs: dict[int, asyncio.Task] = {}
        first = True
        for i, r in enumerate(results):
            if (info := r.remote_fetch) is None:
                continue
            p = info.partition
            limit = min(info.max_bytes, budget)
            if limit <= 0 and not first:
                continue
            max_offset = p.last_stable_offset if isolation == READ_COMMITTED else p.high_watermark
            jobs[i] = asyncio.ensure_future(
                _remote_read(info.rlm, p.log, info.fetch_offset, max(limit, 0), first, max_offset, isolation)
            )
            budget -= max(limit, 0)
            first = False
        if not jobs:
            return 0
        wait_s = self.config["remote.fetch.max.wait.ms"] / 1000.0
        _done, pending = await asyncio.wait(jobs.values(), timeout=wait_s)
        total = 0
        for i, task in jobs.items():
            res = results[i]
            info = res.remote_fetch
            assert info is not None
            if task in pending:
                info.rlm.metrics.delayed_remote_fetch_expires.labels(info.partition.topic.name).inc()
                task.add_done_callback(_consume_exception)
                continue
            exc = task.exception()
            if exc is None:
                res.records, res.aborted_transactions = task.result()
                total += len(res.records)
            elif isinstance(exc, OffsetOutOfRangeError):
                res.error = ErrorCode.OFFSET_OUT_OF_RANGE
            else:
                log.warning(
                    "remote fetch failed",
                    topic=info.partition.topic.name,
                    partition=info.partition.index,
                    offset=info.fetch_offset,
                    error=str(exc),
                )
                res.error = ErrorCode.KAFKA_STORAGE_ERROR
        return total

    def require_partition(self, topic: str, partition: int) -> Partition:
        p = self.partitions.get((topic, partition))
        if p is None:
            raise KafkaApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return p


async def _remote_read(
    rlm: RemoteLogManager,
    ulog: UnifiedLog,
    offset: int,
    max_bytes: int,
    min_one: bool,
    max_offset: int,
    isolation: int,
) -> tuple[Any, list[AbortedTxn] | None]:
    """One remote partition of a fetch; READ_COMMITTED adds the aborted transactions of what it read, from the
    remote transaction indexes (Kafka's RemoteLogManager.read with isolation READ_COMMITTED)."""
    data = await rlm.read(ulog, offset, max_bytes, min_one, max_offset)
    if isolation != READ_COMMITTED:
        return data, None
    return data, await rlm.aborted_transactions_for(ulog, offset, data)


class _Ineligible:
    """Brokers that may not join an ISR, nor hold a leader's HW back while they catch up (Kafka's
    isReplicaIsrEligible): those in controlled shutdown and those not registered (dead, lease revoked)."""

    __slots__ = ("_shutdown", "_store")

    def __init__(self, store: Any) -> None:
        self._store = store
        self._shutdown = store.shutting_down()

    def __contains__(self, broker_id: object) -> bool:
        return broker_id in self._shutdown or broker_id not in self._store.brokers()


def _log_removal_failure(fut: asyncio.Future) -> None:
    if not fut.cancelled() and (exc := fut.exception()) is not None:
        log.warning("removing deleted partitions' files failed", error=str(exc))


def _consume_exception(task: asyncio.Task) -> None:
    """A remote read that outlived its fetch: retrieve its outcome so asyncio does not log it as lost."""
    if not task.cancelled():
        task.exception()


__all__ = [
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "FetchResult",
    "FetchSpec",
    "Partition",
    "ProduceResult",
    "ReplicaManager",
]
