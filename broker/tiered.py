"""Broker side of tiered storage: builds the RSM, RLMM and RemoteLogManager from the config, and gives the RLMM
its `__remote_log_metadata` topic through the broker's own logs (the RLMM lives in `remote`, which must not know
the broker, so it receives this I/O object instead of a Kafka producer/consumer).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from protocol.errors import ErrorCode, KafkaApiError
from remote.remote_metrics import RemoteMetrics
from remote.rlm import RemoteLogManager, RemoteLogManagerConfig
from remote.rsm import create_remote_storage_manager

if TYPE_CHECKING:
    from .server import KafkaServer

log = structlog.get_logger("strata.tiered")

REMOTE_LOG_METADATA_TOPIC = "__remote_log_metadata"


class BrokerMetadataTopicIO:
    """MetadataTopicIO over this broker's partitions of `__remote_log_metadata`."""

    def __init__(self, server: "KafkaServer") -> None:
        self.server = server

    async def ensure_topic(self, num_partitions: int, replication_factor: int, retention_ms: int) -> None:
        store = self.server.store
        if store.topic(REMOTE_LOG_METADATA_TOPIC) is None:
            cfg = {"retention.ms": str(retention_ms), "cleanup.policy": "delete"}
            rf = min(replication_factor, max(1, len(store.brokers())))     # capped by the live brokers
            try:
                info = await store.create_topic(REMOTE_LOG_METADATA_TOPIC, num_partitions, cfg, internal=True,
                                                replication_factor=rf)
            except KafkaApiError as e:
                if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    raise
                return      # another broker starting at the same time created it
            if not store.clustered:     # in a cluster the replicas follow the partition states
                self.server.replica_manager.ensure_partitions(info)
            log.info("created internal topic", topic=REMOTE_LOG_METADATA_TOPIC, partitions=num_partitions)

    def _partition(self, partition: int):
        p = self.server.replica_manager.get_partition(REMOTE_LOG_METADATA_TOPIC, partition)
        if p is None:
            raise RuntimeError(f"{REMOTE_LOG_METADATA_TOPIC}-{partition} is not hosted here")
        return p

    async def append(self, partition: int, records: bytes) -> int:
        # acks=all semantics: the RLMM's records are what makes remote data visible; flush like any produce.
        [res] = await self.server.replica_manager.append_records([(REMOTE_LOG_METADATA_TOPIC, partition, records)],
                                                                internal=True)
        if res.error:
            raise RuntimeError(f"append to {REMOTE_LOG_METADATA_TOPIC}-{partition} failed: {res.error.name}")
        return res.base_offset

    def read(self, partition: int, offset: int, max_bytes: int) -> bytes:
        p = self._partition(partition)
        offset = max(offset, p.log.log_start_offset)
        return bytes(p.log.read(offset, max_bytes, p.high_watermark, True).records)

    def end_offset(self, partition: int) -> int:
        return self._partition(partition).high_watermark

    def start_offset(self, partition: int) -> int:
        return self._partition(partition).log.log_start_offset

    async def wait_for_data(self, partition: int, offset: int, timeout_s: float) -> None:
        if self.end_offset(partition) > offset:
            return
        await self.server.replica_manager.fetch_purgatory.wait([(REMOTE_LOG_METADATA_TOPIC, partition)], timeout_s)


def build_remote_log_manager(server: "KafkaServer") -> tuple[RemoteLogManager, Any]:
    """RSM from `remote.log.storage.manager.class.name` + `rsm.config.*`; topic-based RLMM; the RLM."""
    from remote.rlmm import TopicBasedRemoteLogMetadataManager

    cfg = server.config
    data_dir = server.log_dirs[0]
    # LocalTieredStorage puts its root at `<rsm.config.dir>/kafka-tiered-storage` (as Kafka's); the default dir is
    # the first log dir, so the data lands in `<log.dir>/kafka-tiered-storage`.
    rsm = create_remote_storage_manager(cfg["remote.log.storage.manager.class.name"], cfg.prefixed("rsm.config."),
                                        broker_id=server.broker_id, default_dir=data_dir)
    rlmm_cfg = {k: cfg[k] for k in ("remote.log.metadata.topic.num.partitions",
                                    "remote.log.metadata.topic.replication.factor",
                                    "remote.log.metadata.topic.retention.ms",
                                    "remote.log.metadata.consume.wait.ms")}
    rlmm_cfg.update(cfg.prefixed("rlmm.config."))
    # The metadata topic's replication factor is capped by the live brokers when it is created (ensure_topic).
    rlmm = TopicBasedRemoteLogMetadataManager(BrokerMetadataTopicIO(server), Path(data_dir) / "remote-log-metadata",
                                              rlmm_cfg, broker_id=server.broker_id)
    metrics = RemoteMetrics(server.metrics.registry)
    rlm = RemoteLogManager(RemoteLogManagerConfig.from_broker(cfg.values), rsm, rlmm, broker_id=server.broker_id,
                           index_cache_dir=Path(data_dir) / "remote-log-index-cache", metrics=metrics)
    metrics.register_storage_stats(lambda: rlm.rsm, lambda: rlm.index_cache)   # strata_rsm_s3_*, *_cache_*
    return rlm, rlmm

