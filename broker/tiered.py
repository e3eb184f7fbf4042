"""Broker side of tiered storage: builds the RSM, RLMM and RemoteLogManager from the config, and gives the RLMM
its `__remote_log_metadata` topic through the broker's own logs and, for what this broker does not host, the
partitions' leaders (the RLMM lives in `remote`, which must not know the broker, so it receives this I/O object
instead of a Kafka producer/consumer).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from strata.config import ConfigError
from strata.protocol.constants import REMOTE_LOG_METADATA_TOPIC
from strata.protocol.errors import ErrorCode, KafkaApiError
from strata.protocol.registry import REQUEST_CLASSES, ApiKey
from strata.remote.bucket_manifest_writer import ManifestWriter, PartitionManifestWriter
from strata.remote.bucket_store import manifest_store_for
from strata.remote.executors import RemoteExecutors
from strata.remote.metadata import TopicIdPartition
from strata.remote.partition_remover import RemotePartitionRemover
from strata.remote.remote_metrics import RemoteMetrics
from strata.remote.rlm import LeadershipProbe, RemoteLogManager, RemoteLogManagerConfig
from strata.remote.rlmm import TopicBasedRemoteLogMetadataManager
from strata.remote.rsm import create_remote_storage_manager

from .bucket_manifests import BucketManifestService
from .cluster.broker_client import BrokerConnection, BrokerConnectionError, inter_broker_security

if TYPE_CHECKING:
    from strata.config import BrokerConfig

    from .endpoints import BrokerEndpoints
    from .group.coordinator import GroupCoordinator
    from .metadata_store import MetadataStore
    from .metrics import BrokerMetrics
    from .partition import Partition
    from .replica_manager import ReplicaManager

log = structlog.get_logger("strata.tiered")

# Kafka's RLMM writes its records with a producer, which sends them to each metadata partition's leader. Strata's
# brokers do the same over the inter-broker listener with this client id; like Kafka's "__admin_client" for internal
# topics, it is what lets a Produce write `__remote_log_metadata`, an internal topic that other clients cannot write.
RLMM_PRODUCER_CLIENT_ID = "__remote_log_metadata_producer"
PRODUCE_VERSION = 9
# Kafka's RLMM consumer reads every metadata partition it needs from its leader; Strata reads its own replicas and
# fetches (as a consumer, READ_UNCOMMITTED up to the HW) only the partitions it does not host.
RLMM_CONSUMER_CLIENT_ID = "__remote_log_metadata_consumer"
FETCH_VERSION = 12
READ_WAIT_MS = 500  # a remote read long-polls this long for new records
# The RLMM producer's bounds (Kafka's producer defaults: request.timeout.ms 30 s, retry.backoff.ms 100 ms).
APPEND_TIMEOUT_S = 30.0
APPEND_RETRY_BACKOFF_S = 0.1
# Retried here: only errors that say nothing was appended. After an ambiguous one (REQUEST_TIMED_OUT,
# NOT_ENOUGH_REPLICAS_AFTER_APPEND, a connection lost mid-request) the record may be in the log, so the error goes up
# and the RemoteLogManager retries the whole copy under a fresh segment id instead of writing the record twice.
_RETRIABLE_APPEND_ERRORS = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
}


LEADERSHIP_PROBE_TIMEOUT_S = 5.0


def leadership_probe(replicas: ReplicaManager, store: MetadataStore, broker_id: int) -> LeadershipProbe:
    """The RLM's check before each remote deletion and copy: this broker leads the partition at `epoch` in the
    cluster's metadata as read now (a linearizable read of the partition's keys from etcd, applied to the image at
    once, so a deposed leader also becomes follower now instead of when its watch catches up), and in its replica
    manager. One etcd read per remote deletion or copy: both are per segment, rare next to produce traffic."""

    async def probe(tip: TopicIdPartition, epoch: int) -> bool:
        refresh = getattr(store, "refresh_topics", None)  # the etcd store; the single-broker store is always current
        if refresh is not None:
            await asyncio.wait_for(refresh([tip.topic]), LEADERSHIP_PROBE_TIMEOUT_S)
        state = store.partition_state(tip.topic, tip.partition)
        p = replicas.partitions.get((tip.topic, tip.partition))
        return (
            state is not None
            and state.leader == broker_id
            and state.leader_epoch == epoch
            and p is not None
            and p.topic.topic_id == tip.topic_id
            and p.is_leader
            and p.leader_epoch == epoch
        )

    return probe


class MetadataAppendError(RuntimeError):
    """A record for `__remote_log_metadata` could not be written; retriable errors were retried until the bound."""


class MetadataReadError(RuntimeError):
    """A metadata partition this broker does not host could not be read from its leader (the RLMM retries)."""


class BrokerMetadataTopicIO:
    """MetadataTopicIO over `__remote_log_metadata`: appends go to each partition's leader (this broker's own log,
    or a Produce to the leader, as Kafka's RLMM producer does); reads come from this broker's replicas."""

    def __init__(
        self, replicas: ReplicaManager, store: MetadataStore, endpoints: BrokerEndpoints, config: BrokerConfig
    ) -> None:
        """`replicas`: this broker's own replicas of the metadata partitions (read and appended to)."""
        self.replicas = replicas
        self.store = store
        self.endpoints = endpoints
        self.config = config
        self.broker_id: int = config.broker_id
        self._leader_conns: dict[int, tuple[BrokerConnection, asyncio.Lock]] = {}
        self._reader_conns: dict[int, tuple[BrokerConnection, asyncio.Lock]] = {}
        self._remote_hw: dict[int, int] = {}  # high watermarks learnt from the leaders of partitions not hosted

    async def ensure_topic(self, num_partitions: int, replication_factor: int, retention_ms: int) -> None:
        store = self.store
        if store.topic(REMOTE_LOG_METADATA_TOPIC) is None:
            cfg = {"retention.ms": str(retention_ms), "cleanup.policy": "delete"}
            await self._wait_for_brokers(replication_factor)
            rf = min(replication_factor, max(1, len(store.brokers())))  # capped by the live brokers
            try:
                info = await store.create_topic(
                    REMOTE_LOG_METADATA_TOPIC, num_partitions, cfg, internal=True, replication_factor=rf
                )
            except KafkaApiError as e:
                if e.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    raise
                return  # another broker starting at the same time created it
            if not store.clustered:  # in a cluster the replicas follow the partition states
                self.replicas.ensure_partitions(info)
            log.info("created internal topic", topic=REMOTE_LOG_METADATA_TOPIC, partitions=num_partitions)

    async def _wait_for_brokers(self, replication_factor: int) -> None:
        """As Kafka's RLMM retries creating the topic until enough brokers are registered (brokers of a cluster start
        one by one), wait up to remote.log.metadata.initialization.retry.max.timeout.ms for `replication_factor`
        brokers; past it, create with those there are (Kafka fails the broker instead) and say so. Every broker
        then holds a replica of every metadata partition, which its RLMM reads."""
        store, cfg = self.store, self.config
        if not store.clustered or len(store.brokers()) >= replication_factor:
            return
        deadline = time.monotonic() + cfg["remote.log.metadata.initialization.retry.max.timeout.ms"] / 1000.0
        interval = cfg["remote.log.metadata.initialization.retry.interval.ms"] / 1000.0
        log.info(
            "waiting for brokers to create the remote log metadata topic",
            topic=REMOTE_LOG_METADATA_TOPIC,
            replication_factor=replication_factor,
            registered=sorted(store.brokers()),
        )
        while len(store.brokers()) < replication_factor and store.topic(REMOTE_LOG_METADATA_TOPIC) is None:
            if time.monotonic() >= deadline:
                log.warning(
                    "creating the remote log metadata topic with fewer replicas than configured",
                    topic=REMOTE_LOG_METADATA_TOPIC,
                    replication_factor=replication_factor,
                    registered=sorted(store.brokers()),
                )
                return
            await asyncio.sleep(interval)  # the registrations arrive through the store's watch

    def _partition(self, partition: int) -> Partition:
        p = self.replicas.get_partition(REMOTE_LOG_METADATA_TOPIC, partition)
        if p is None:
            raise RuntimeError(f"{REMOTE_LOG_METADATA_TOPIC}-{partition} is not hosted here")
        return p

    async def append(self, partition: int, records: bytes) -> int:
        """Append with acks=all to the partition's leader, retrying errors that left the log untouched (a leader
        moving, the ISR below min.insync.replicas) for up to APPEND_TIMEOUT_S; the RLMM's records are what makes
        remote data visible."""
        deadline = time.monotonic() + APPEND_TIMEOUT_S
        while True:
            p = self.replicas.get_partition(REMOTE_LOG_METADATA_TOPIC, partition)
            if p is not None and p.is_leader:
                [res] = await self.replicas.append_records(
                    [(REMOTE_LOG_METADATA_TOPIC, partition, records)], internal=True
                )
                err, offset, why = res.error, res.base_offset, res.message or ""
            else:
                err, offset, why = await self._append_at_leader(partition, records)
            if err == ErrorCode.NONE:
                return offset
            if err not in _RETRIABLE_APPEND_ERRORS or time.monotonic() + APPEND_RETRY_BACKOFF_S > deadline:
                raise MetadataAppendError(
                    f"append to {REMOTE_LOG_METADATA_TOPIC}-{partition} failed: {err.name} {why}".rstrip()
                )
            await asyncio.sleep(APPEND_RETRY_BACKOFF_S)  # retry.backoff.ms, then ask the metadata again

    async def _append_at_leader(self, partition: int, records: bytes) -> tuple[ErrorCode, int, str]:
        """One Produce (acks=-1) to the leader the metadata names. Not reaching it is retriable; losing the
        connection once the request is sent is not (it may have been appended)."""
        st = self.store.partition_state(REMOTE_LOG_METADATA_TOPIC, partition)
        if st is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, ""
        if st.leader < 0 or st.leader == self.broker_id:
            return ErrorCode.LEADER_NOT_AVAILABLE, -1, "(leadership not applied here yet)"
        Req = REQUEST_CLASSES[ApiKey.PRODUCE][PRODUCE_VERSION]
        T = Req.TopicProduceData
        timeout_ms = int(APPEND_TIMEOUT_S * 1000)
        try:
            conn, lock = self._leader_connection(st.leader)
        except BrokerConnectionError as e:
            return ErrorCode.LEADER_NOT_AVAILABLE, -1, f"({e})"
        async with lock:
            try:
                if not conn.connected:
                    await conn.connect()
            except BrokerConnectionError as e:
                return ErrorCode.LEADER_NOT_AVAILABLE, -1, f"(broker {st.leader}: {e})"
            try:
                resp = await conn.request(
                    ApiKey.PRODUCE,
                    PRODUCE_VERSION,
                    APPEND_TIMEOUT_S + 5,
                    transactional_id=None,
                    acks=-1,
                    timeout_ms=timeout_ms,
                    topic_data=[
                        T(
                            name=REMOTE_LOG_METADATA_TOPIC,
                            partition_data=[T.PartitionProduceData(index=partition, records=records)],
                        )
                    ],
                )
            except BrokerConnectionError as e:
                return ErrorCode.NETWORK_EXCEPTION, -1, f"(broker {st.leader}: {e})"
        pr = resp.responses[0].partition_responses[0]
        return ErrorCode(pr.error_code), pr.base_offset, pr.error_message or ""

    def _leader_connection(self, broker_id: int, readers: bool = False) -> tuple[BrokerConnection, asyncio.Lock]:
        """The connection (and its request lock) to a broker: one for appends, one for reads, so that a read's
        long poll never holds up an append."""
        conns = self._reader_conns if readers else self._leader_conns
        client_id = RLMM_CONSUMER_CLIENT_ID if readers else RLMM_PRODUCER_CLIENT_ID
        entry = conns.get(broker_id)
        ep = self.endpoints.inter_broker_endpoint(broker_id)
        if ep is None:
            raise BrokerConnectionError(f"broker {broker_id} is not registered with an inter-broker endpoint")
        if entry is None or (entry[0].host, entry[0].port) != tuple(ep):
            conn = BrokerConnection(
                ep[0],
                ep[1],
                f"{client_id}-{self.broker_id}",
                self.config["replica.socket.timeout.ms"] / 1000.0,
                inter_broker_security(self.config),
            )
            entry = conns[broker_id] = (conn, asyncio.Lock())
        return entry

    async def close(self) -> None:
        conns = [*self._leader_conns.values(), *self._reader_conns.values()]
        self._leader_conns, self._reader_conns = {}, {}
        for conn, _ in conns:
            await conn.close()

    def read(self, partition: int, offset: int, max_bytes: int) -> bytes | Awaitable[bytes]:
        """From this broker's replica when it hosts the partition, else a Fetch from its leader (an awaitable)."""
        p = self.replicas.get_partition(REMOTE_LOG_METADATA_TOPIC, partition)
        if p is None:
            return self._read_from_leader(partition, offset, max_bytes)
        offset = max(offset, p.log.log_start_offset)
        return bytes(p.log.read(offset, max_bytes, p.high_watermark, True).records)

    async def _read_from_leader(self, partition: int, offset: int, max_bytes: int) -> bytes:
        st = self.store.partition_state(REMOTE_LOG_METADATA_TOPIC, partition)
        if st is None or st.leader < 0:
            raise MetadataReadError(f"{REMOTE_LOG_METADATA_TOPIC}-{partition} has no leader")
        T = REQUEST_CLASSES[ApiKey.FETCH][FETCH_VERSION].FetchTopic
        conn, lock = self._leader_connection(st.leader, readers=True)
        for _ in range(2):  # once more from the log start when `offset` is below it (retention)
            async with lock:
                try:
                    resp = await conn.request(
                        ApiKey.FETCH,
                        FETCH_VERSION,
                        READ_WAIT_MS / 1000 + 10,
                        replica_id=-1,
                        max_wait_ms=READ_WAIT_MS,
                        min_bytes=1,
                        max_bytes=max_bytes,
                        isolation_level=0,
                        session_id=0,
                        session_epoch=-1,
                        topics=[
                            T(
                                topic=REMOTE_LOG_METADATA_TOPIC,
                                partitions=[
                                    T.FetchPartition(
                                        partition=partition,
                                        current_leader_epoch=-1,
                                        fetch_offset=offset,
                                        last_fetched_epoch=-1,
                                        log_start_offset=-1,
                                        partition_max_bytes=max_bytes,
                                    )
                                ],
                            )
                        ],
                        forgotten_topics_data=[],
                        rack_id="",
                    )
                except BrokerConnectionError as e:
                    raise MetadataReadError(
                        f"{REMOTE_LOG_METADATA_TOPIC}-{partition} from broker {st.leader}: {e}"
                    ) from e
            pd = resp.responses[0].partitions[0]
            if pd.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and 0 <= offset < pd.log_start_offset:
                offset = pd.log_start_offset
                continue
            if pd.error_code != ErrorCode.NONE:
                raise MetadataReadError(
                    f"{REMOTE_LOG_METADATA_TOPIC}-{partition} from broker {st.leader}: {ErrorCode(pd.error_code).name}"
                )
            self._remote_hw[partition] = pd.high_watermark
            return bytes(pd.records or b"")
        raise MetadataReadError(f"{REMOTE_LOG_METADATA_TOPIC}-{partition}: offset {offset} out of range")

    def end_offset(self, partition: int) -> int | None:
        p = self.replicas.get_partition(REMOTE_LOG_METADATA_TOPIC, partition)
        if p is None:
            return self._remote_hw.get(partition)
        return p.high_watermark

    def replicated_end_offset(self, partition: int) -> int | None:
        """This broker's replica's log end offset (records acknowledged with acks=-1 are below it when this broker
        is in the ISR), else what the leader last reported."""
        p = self.replicas.get_partition(REMOTE_LOG_METADATA_TOPIC, partition)
        if p is None:
            return self._remote_hw.get(partition)
        return p.log.log_end_offset

    def start_offset(self, partition: int) -> int:
        return self._partition(partition).log.log_start_offset

    def is_leader(self, partition: int) -> bool:
        p = self.replicas.get_partition(REMOTE_LOG_METADATA_TOPIC, partition)
        return p is not None and p.is_leader

    async def wait_for_appends(self, partitions: list[int], timeout_s: float) -> bool:
        """Park until one of these metadata partitions gets records (True) or the timeout (False)."""
        return await self.replicas.fetch_purgatory.wait([(REMOTE_LOG_METADATA_TOPIC, p) for p in partitions], timeout_s)

    async def wait_for_data(self, partition: int, offset: int, timeout_s: float) -> None:
        if self.replicas.get_partition(REMOTE_LOG_METADATA_TOPIC, partition) is None:
            return  # read from the leader: the read itself long-polls
        if (self.end_offset(partition) or 0) > offset:
            return
        await self.replicas.fetch_purgatory.wait([(REMOTE_LOG_METADATA_TOPIC, partition)], timeout_s)


class TieredStorage:
    """The broker's tiered storage: the RemoteLogManager (with its RSM), the topic-based RLMM, the RLMM's I/O
    over `__remote_log_metadata` and the RemotePartitionRemover, built together (build_tiered_storage) and
    started together once the broker's replicas are loaded (the RLMM reads and writes them)."""

    def __init__(
        self,
        rlm: RemoteLogManager,
        rlmm: TopicBasedRemoteLogMetadataManager,
        io: BrokerMetadataTopicIO,
        partition_remover: RemotePartitionRemover,
    ) -> None:
        self.rlm = rlm
        self.rlmm = rlmm
        self.io = io
        self.partition_remover = partition_remover
        self.started = False
        self.manifest_writer: ManifestWriter | None = None  # the bucket's manifests (None: an RSM without a store)
        self.manifests: BucketManifestService | None = None

    def start_manifests(
        self, store: MetadataStore, replicas: ReplicaManager, groups: GroupCoordinator, cluster_interval_ms: int
    ) -> None:
        """Topic, cluster and group offsets manifests (the partition manifests are the RLM's), once the group
        coordinator is up."""
        if self.manifest_writer is None:
            return
        self.manifests = BucketManifestService(
            self.manifest_writer,
            store,
            replicas,
            groups,
            broker_id=self.rlm.broker_id,
            cluster_interval_ms=cluster_interval_ms,
        )
        self.manifests.start()

    async def start(self) -> None:
        self.started = True
        self.rlm.start()
        await self.rlmm.start()
        self.partition_remover.start()

    async def close(self) -> None:
        if not self.started:
            return
        if self.manifests is not None:
            await self.manifests.close()
        await self.partition_remover.close()
        await self.rlm.close()
        await self.rlmm.close()
        await self.io.close()  # its connections to the leaders of metadata partitions


def build_tiered_storage(
    replicas: ReplicaManager, store: MetadataStore, endpoints: BrokerEndpoints, metrics: BrokerMetrics
) -> TieredStorage:
    """RSM from `remote.log.storage.manager.class.name` + `rsm.config.*`; topic-based RLMM; the RLM."""
    cfg = replicas.config
    data_dir = cfg.log_dirs[0]
    # LocalTieredStorage puts its root at `<rsm.config.dir>/kafka-tiered-storage` (as Kafka's); the default dir is
    # the first log dir, so the data lands in `<log.dir>/kafka-tiered-storage`.
    try:
        rsm = create_remote_storage_manager(
            cfg["remote.log.storage.manager.class.name"],
            cfg.prefixed("rsm.config."),
            broker_id=cfg.broker_id,
            default_dir=data_dir,
        )
    except ValueError as e:  # the RSM's own settings (rsm.config.*): strata serve reports one line, exit 2
        raise ConfigError(f"remote storage manager: {e}") from None
    rlmm_cfg = {
        k: cfg[k]
        for k in (
            "remote.log.metadata.topic.num.partitions",
            "remote.log.metadata.topic.replication.factor",
            "remote.log.metadata.topic.retention.ms",
            "remote.log.metadata.consume.wait.ms",
        )
    }
    rlmm_cfg.update(cfg.prefixed("rlmm.config."))
    # The metadata topic's replication factor is capped by the live brokers when it is created (ensure_topic).
    io = BrokerMetadataTopicIO(replicas, store, endpoints, cfg)
    rlmm = TopicBasedRemoteLogMetadataManager(
        io, Path(data_dir) / "remote-log-metadata", rlmm_cfg, broker_id=cfg.broker_id
    )
    remote_metrics = RemoteMetrics(metrics.registry)
    rlm = RemoteLogManager(
        RemoteLogManagerConfig.from_broker(cfg.values),
        rsm,
        rlmm,
        broker_id=cfg.broker_id,
        index_cache_dir=Path(data_dir) / "remote-log-index-cache",
        metrics=remote_metrics,
        leadership_probe=leadership_probe(replicas, store, cfg.broker_id),
    )
    rlm_cfg = rlm.config  # Kafka's three pools, kept apart (remote/executors.py)
    rsm.use_executors(
        RemoteExecutors.create(rlm_cfg.copier_pool_size, rlm_cfg.expiration_pool_size, rlm_cfg.reader_threads)
    )
    # strata_rsm_s3_*, *_cache_*
    remote_metrics.register_storage_stats(lambda: rlm.rsm, lambda: rlm.index_cache)
    bucket = manifest_store_for(rsm)
    manifest_writer: ManifestWriter | None = None
    if bucket is not None:  # bucket manifests (issue 24): LocalTieredStorage and S3 know how to store them
        manifest_writer = ManifestWriter(bucket, keep=cfg["remote.manifest.retained.revisions"], metrics=remote_metrics)
        rlm.manifests = PartitionManifestWriter(
            manifest_writer,
            rlmm,
            broker_id=cfg.broker_id,
            interval_ms=cfg["remote.manifest.upload.interval.ms"],
            metrics=remote_metrics,
        )
    remover = RemotePartitionRemover(
        rlm,
        rlmm,
        io,
        num_partitions=cfg["remote.log.metadata.topic.num.partitions"],
        interval_ms=cfg["remote.partition.remover.task.interval.ms"],
        is_leader=io.is_leader,
        wait_for_appends=io.wait_for_appends,
    )
    tiered = TieredStorage(rlm, rlmm, io, remover)
    tiered.manifest_writer = manifest_writer
    return tiered
