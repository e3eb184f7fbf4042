"""Topic lifecycle for one broker: the single place that validates and applies topic-level changes.

Metadata auto-creation and the admin APIs both go through here, so validation (names, partition counts, config
values) is identical on every path. In a cluster only the controller applies changes: other brokers forward the
admin requests to it (broker/cluster/forwarding.py) and answer NOT_CONTROLLER if one reaches them anyway.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from strata.config import BrokerConfig, ConfigError
from strata.protocol.errors import ErrorCode, KafkaApiError
from strata.protocol.uuids import kafka_uuid_str

from .metadata_store import MetadataStore, TopicInfo, validate_topic_name
from .read_replica import READ_REPLICA_CONFIG, read_only_message, read_replica_of
from .replica_manager import ReplicaManager
from .topic_recovery import prepare_recovery, take_recovery_request

log = structlog.get_logger("strata.topics")

MAX_PARTITIONS = 100_000
# How long DeleteTopics waits for DELETE_PARTITION_MARKED to be recorded before answering (a metadata partition
# failing over can take longer; the marks are retried in the background then).
MARK_DELETED_WAIT_S = 5.0


def _storage_error(what: str, e: OSError) -> KafkaApiError:
    log.warning(what.lower(), error=str(e))
    return KafkaApiError(ErrorCode.KAFKA_STORAGE_ERROR, f"{what}: {e.strerror or e}.")


def _ids_text(ids: list[int], shown: int = 20) -> str:
    """A client's broker id list in an error message, cut after `shown` ids: the message is a non-flexible
    response's int16-length string, which a 10,000-id assignment (the fuzzer's) would overflow."""
    if len(ids) <= shown:
        return str(list(ids))
    return "[" + ", ".join(map(str, ids[:shown])) + f", ... ({len(ids)} ids)]"


@dataclass
class TopicManager:
    config: BrokerConfig
    store: MetadataStore
    replica_manager: ReplicaManager
    # Cluster mode: whether this broker is the active controller, and Metadata's auto-creation through it.
    is_controller: Callable[[], bool] = lambda: True
    auto_create: Callable[[str], Awaitable[TopicInfo | None]] | None = None

    def _require_controller(self) -> None:
        if not self.is_controller():
            raise KafkaApiError(ErrorCode.NOT_CONTROLLER, "This is not the correct controller for this cluster.")

    async def auto_create_topic(self, name: str) -> TopicInfo | None:
        """Metadata's auto-creation with the broker defaults; in a cluster a CreateTopics to the controller."""
        if self.auto_create is not None and not self.is_controller():
            validate_topic_name(name)
            return await self.auto_create(name)
        return await self.create_topic(name)

    def validate_new_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> tuple[int, dict[str, str]]:
        validate_topic_name(name)
        topics = self.store.topics()
        if name in topics:
            raise KafkaApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        # '.' and '_' map to the same metric names, so Kafka refuses a topic whose name differs only in them
        collision = name.replace(".", "_")
        for other in topics:
            if other.replace(".", "_") == collision:
                raise KafkaApiError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic '{name}' collides with existing topic: {other}"
                )
        if partitions == -1:
            partitions = self.config["num.partitions"]
        if partitions <= 0 or partitions > MAX_PARTITIONS:
            raise KafkaApiError(
                ErrorCode.INVALID_PARTITIONS,
                f"Number of partitions must be between 1 and {MAX_PARTITIONS}, got {partitions}.",
            )
        if replication_factor == -1:
            replication_factor = self.config["default.replication.factor"]
        if replication_factor <= 0:
            raise KafkaApiError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
        live = len(self.store.brokers())
        if replication_factor > live:
            raise KafkaApiError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Replication factor: {replication_factor} larger than available brokers: {live}.",
            )
        self._validate_configs(configs, None)
        return partitions, configs

    def validate_assignments(self, assignments: list[list[int]]) -> None:
        """Manual replica assignments (CreateTopics, CreatePartitions): non-empty, no duplicate broker in a
        partition, one replication factor, registered brokers only."""
        brokers = self.store.brokers()
        for i, a in enumerate(assignments):
            if not a:
                raise KafkaApiError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment of partition {i} is empty."
                )
            if len(set(a)) != len(a):
                raise KafkaApiError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment {_ids_text(a)} contains duplicate broker ids.",
                )
            if len(a) != len(assignments[0]):
                raise KafkaApiError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT, "All partitions should have the same number of replicas."
                )
            unknown = [b for b in a if b not in brokers]
            if unknown:
                raise KafkaApiError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Unknown broker ids in assignment {_ids_text(a)}."
                )

    def _validate_configs(self, configs: dict[str, str], old: dict[str, str] | None) -> None:
        """Value checks, then Kafka's tiered-storage rules (LogConfig.validate, KIP-950)."""
        try:
            new_cfg = self.config.log_config(configs)
            old_cfg = self.config.log_config(old) if old is not None else None
        except ConfigError as e:
            raise KafkaApiError(ErrorCode.INVALID_CONFIG, str(e)) from None
        remote = new_cfg["remote.storage.enable"]
        if remote and not self.config["remote.log.storage.system.enable"]:
            raise KafkaApiError(
                ErrorCode.INVALID_CONFIG,
                "Tiered Storage functionality is disabled in the broker. Topic cannot be configured "
                "with remote log storage.",
            )
        if remote and new_cfg.compact:
            raise KafkaApiError(
                ErrorCode.INVALID_CONFIG, "Remote log storage only supports topics with cleanup.policy=delete"
            )
        if remote:
            # LogConfig.validateRemoteStorageRetentionTime/Size: the local part cannot outlive the whole
            for local_key, total_key in (
                ("local.retention.ms", "retention.ms"),
                ("local.retention.bytes", "retention.bytes"),
            ):
                local_v, total_v = new_cfg[local_key], new_cfg[total_key]
                if total_v == -1 or local_v == -2:
                    continue
                if local_v == -1:
                    raise KafkaApiError(
                        ErrorCode.INVALID_CONFIG,
                        f"Invalid value -1 for configuration {local_key}: Value must not be -1 as "
                        f"{total_key} value is set as {total_v}.",
                    )
                if local_v > total_v:
                    raise KafkaApiError(
                        ErrorCode.INVALID_CONFIG,
                        f"Invalid value {local_v} for configuration {local_key}: Value must not be "
                        f"more than {total_key} property value: {total_v}",
                    )
        if (
            old_cfg is not None
            and old_cfg["remote.storage.enable"]
            and not remote
            and not new_cfg["remote.log.delete.on.disable"]
        ):
            raise KafkaApiError(
                ErrorCode.INVALID_CONFIG,
                "It is invalid to disable remote storage without deleting remote data. If you want "
                "to keep the remote data and turn to read only, please set `remote.storage.enable="
                "true,remote.log.copy.disable=true`. If you want to disable remote storage and "
                "delete all remote data, please set `remote.storage.enable=false,"
                "remote.log.delete.on.disable=true`.",
            )

    async def create_topic(
        self,
        name: str,
        partitions: int = -1,
        replication_factor: int = -1,
        configs: dict[str, str] | None = None,
        validate_only: bool = False,
        assignments: list[list[int]] | None = None,
    ) -> TopicInfo | None:
        configs = dict(configs or {})
        request = take_recovery_request(configs)  # remote.recovery=true: from the bucket (issue 24)
        recovery = None
        if assignments:
            self.validate_assignments(assignments)
            partitions, replication_factor = len(assignments), len(assignments[0])
        if request is not None:
            recovery = await prepare_recovery(self, name, partitions, replication_factor, configs, request)
            partitions, replication_factor, configs = recovery.partitions, recovery.replication_factor, recovery.configs
        if replication_factor == -1:
            replication_factor = self.config["default.replication.factor"]
        topic_id = None
        if read_replica_of(configs):
            topic_id, partitions, configs = await self._read_replica_topic(name, configs, assignments)
        partitions, configs = self.validate_new_topic(name, partitions, replication_factor, configs)
        if validate_only:
            return None
        self._require_controller()
        record, registered = None, -1
        if recovery is not None and self.replica_manager.rlm is not None:
            registered = await recovery.register_segments(self.replica_manager.rlm)
            topic_id, record = recovery.plan.topic_id, recovery.record
        info = await self.store.create_topic(
            name,
            partitions,
            configs,
            replication_factor=replication_factor,
            assignments=assignments or None,
            topic_id=topic_id,
            recovery=record,
        )
        if recovery is not None and registered >= 0:
            recovery.log_recovered(registered)
        if not self.store.clustered:  # in a cluster, replicas follow the partition states (watch)
            try:
                await self.replica_manager.create_topic_partitions(info)
            except OSError as e:
                # Out of file descriptors or disk: the topic is not half there; it goes again, whole.
                await self.store.delete_topic(name)
                await self.replica_manager.remove_topic_async(info)
                raise _storage_error(f"Cannot create the partitions of topic '{name}'", e) from None
        log.info(
            "created topic", topic=name, partitions=partitions, topic_id=kafka_uuid_str(info.topic_id), configs=configs
        )
        return info

    async def _read_replica_topic(
        self, name: str, configs: dict[str, str], assignments: list[list[int]] | None
    ) -> tuple[uuid.UUID, int, dict[str, str]]:
        """A read replica's id, partition count and configs come from the origin's topic manifest (docs/tiered-
        storage.md, "Read-replica topics"); the configs asked for besides `remote.readreplica` are ignored, as
        Redpanda ignores them."""
        rr = self.replica_manager.read_replicas
        if rr is None:
            raise KafkaApiError(
                ErrorCode.INVALID_CONFIG,
                "Tiered Storage functionality is disabled in the broker: read-replica topics need it "
                "(remote.log.storage.system.enable=true and the remote storage manager's settings).",
            )
        topic_id, partitions, out = await rr.resolve_topic(name, configs)
        if assignments and len(assignments) != partitions:
            raise KafkaApiError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The origin topic '{name}' has {partitions} partitions, the assignment names {len(assignments)}.",
            )
        return topic_id, partitions, out

    def _refuse_read_replica(self, info: TopicInfo) -> None:
        if origin := read_replica_of(info.configs):
            raise KafkaApiError(ErrorCode.POLICY_VIOLATION, read_only_message(info.name, origin))

    async def delete_topic(self, name: str) -> TopicInfo:
        if not self.config["delete.topic.enable"]:
            raise KafkaApiError(ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled.")
        self._require_controller()
        info = await self.store.delete_topic(name)
        if self.store.clustered:
            self.replica_manager.remove_topic(info)  # idempotent: the watch may have done it already
            await self._mark_remote_partitions_deleted(info)
        else:
            # Marked first, while this broker's RLMM still follows the partitions and so sees the marks: removing a
            # partition marks it too, and a mark made after the remover had finished (the removal yields to the
            # loop) would otherwise be written again behind DELETE_PARTITION_FINISHED.
            await self._mark_remote_partitions_deleted(info)
            await self.replica_manager.remove_topic_async(info)
        log.info("deleted topic", topic=name, topic_id=kafka_uuid_str(info.topic_id))
        return info

    async def _mark_remote_partitions_deleted(self, info: TopicInfo) -> None:
        """As Kafka's controller does: DELETE_PARTITION_MARKED for every partition of a tiered topic, whether or not
        its leader is up; the RemotePartitionRemover on each metadata partition's leader deletes the data."""
        rlm = self.replica_manager.rlm
        if rlm is None or not self.config.log_config(info.configs).values.get("remote.storage.enable"):
            return
        if read_replica_of(info.configs):
            return  # the remote data is the origin's
        from strata.remote.metadata import TopicIdPartition

        tips = [TopicIdPartition(info.topic_id, info.name, i) for i in range(info.partitions)]
        pending = await rlm.mark_partitions_deleted(tips, MARK_DELETED_WAIT_S)
        if pending:  # the topic is deleted all the same; the marks keep being retried
            log.info(
                "remote partitions of a deleted topic are still being marked deleted", topic=info.name, pending=pending
            )

    async def create_partitions(
        self, name: str, count: int, validate_only: bool = False, assignments: list[list[int]] | None = None
    ) -> TopicInfo:
        info = self.store.topic(name)
        if info is None:
            raise KafkaApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        before = info.partitions
        self._refuse_read_replica(info)
        if count <= before:
            raise KafkaApiError(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {info.partitions} partitions, which is higher than or equal "
                f"to the requested {count}.",
            )
        if count > MAX_PARTITIONS:
            raise KafkaApiError(ErrorCode.INVALID_PARTITIONS, f"At most {MAX_PARTITIONS} partitions are allowed.")
        if assignments:
            if len(assignments) != count - info.partitions:
                raise KafkaApiError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Increasing the number of partitions by {count - info.partitions} but "
                    f"{len(assignments)} assignments provided.",
                )
            self.validate_assignments(assignments)
        if validate_only:
            return info
        self._require_controller()
        if assignments:
            info = await self.store.set_partition_count(name, count, assignments=assignments)
        else:
            info = await self.store.set_partition_count(name, count)
        if not self.store.clustered:
            try:
                await self.replica_manager.create_topic_partitions(info)
            except OSError as e:
                # as in create_topic: nothing of the new partitions was made, and the topic keeps those it had
                if self.store.topic(name) is not None:
                    await self.store.set_partition_count(name, before)
                raise _storage_error(f"Cannot add partitions to topic '{name}'", e) from None
        log.info("added partitions", topic=name, partitions=count)
        return info

    async def set_topic_configs(self, name: str, configs: dict[str, str], validate_only: bool = False) -> TopicInfo:
        info = self.store.topic(name)
        if info is None:
            raise KafkaApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        self._refuse_read_replica(info)
        if configs.get(READ_REPLICA_CONFIG):
            raise KafkaApiError(
                ErrorCode.INVALID_CONFIG, f"{READ_REPLICA_CONFIG} can only be set when the topic is created."
            )
        self._validate_configs(configs, info.configs)
        if validate_only:
            return info
        self._require_controller()
        was_remote = self.config.log_config(info.configs)["remote.storage.enable"]
        info = await self.store.set_topic_configs(name, configs)
        if was_remote and not self.config.log_config(configs)["remote.storage.enable"]:
            self.replica_manager.disable_remote_storage(info)
        self.replica_manager.update_topic_config(info)
        log.info("altered topic configs", topic=name, configs=configs)
        return info
