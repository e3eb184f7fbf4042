"""Admin APIs on topics and the cluster: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords,
DescribeCluster. Config APIs live in configs.py. Per-topic failures are answered per topic, never per request."""

from __future__ import annotations

import asyncio
from typing import Any

from strata.protocol.errors import ErrorCode, KafkaApiError
from strata.protocol.registry import ApiKey, response_class
from strata.storage.errors import StorageError

from ..authorization import filter_authorized
from ..authorized_ops import CLUSTER_NAME, AclOperation, ResourceType, allowed_quietly, cluster_operations
from ..read_replica import read_replica_of
from ..replica_manager import pace
from ..request_context import RequestContext
from ..services import BrokerServices
from . import configs as config_handlers

# Kafka's controller builds one batch of metadata records per admin operation and refuses the whole operation when
# it would pass QuorumController.MAX_RECORDS_PER_USER_OP (10,000): POLICY_VIOLATION for every topic of the request.
# CreateTopics writes a topic record, one per config and one per partition; CreatePartitions one per new partition.
MAX_RECORDS_PER_USER_OP = 10_000
TOO_LARGE = "Unable to perform excessively large batch operation."


def _err(e: KafkaApiError) -> tuple[int, str | None]:
    return int(e.error_code), e.message


def _create_topics_records(services: BrokerServices, req: Any, creatable: set[str]) -> int:
    """The metadata records a CreateTopics would write (topics that fail validation or authorization write none, as
    in Kafka)."""
    seen: set[str] = set()
    total = 0
    for t in req.topics:
        if t.name in seen or t.name not in creatable or services.store.topic(t.name) is not None:
            continue
        seen.add(t.name)
        partitions = len(t.assignments) if t.assignments else t.num_partitions
        if partitions == -1:
            partitions = services.config["num.partitions"]
        total += 1 + len(t.configs or []) + max(partitions, 0)
    return total


async def create_topics(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.CREATE_TOPICS)
    Result = Resp.CreatableTopicResult
    v = ctx.api_version
    validate_only = bool(getattr(req, "validate_only", False))
    seen: dict[str, int] = {}
    for t in req.topics:
        seen[t.name] = seen.get(t.name, 0) + 1
    # As Kafka's controller: CREATE on the cluster, else on each topic (TOPIC_AUTHORIZATION_FAILED, whether the topic
    # exists or not); the topic's configs are answered only with DESCRIBE_CONFIGS on it (else its
    # topic_config_error_code says TOPIC_AUTHORIZATION_FAILED)
    if allowed_quietly(ctx, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME):
        creatable = set(seen)
    else:
        creatable = filter_authorized(ctx, AclOperation.CREATE, ResourceType.TOPIC, seen)
    config_describable = {n for n in seen if allowed_quietly(ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, n)}
    if _create_topics_records(services, req, creatable) > MAX_RECORDS_PER_USER_OP:
        return Resp(
            version=v,
            throttle_time_ms=0,
            topics=[
                Result(
                    name=t.name,
                    topic_id=None,
                    error_code=ErrorCode.POLICY_VIOLATION,
                    error_message=TOO_LARGE,
                    num_partitions=-1,
                    replication_factor=-1,
                    configs=None,
                )
                for t in req.topics
            ],
        )
    results = []
    for t in req.topics:
        res = Result(
            name=t.name,
            topic_id=None,
            error_code=0,
            error_message=None,
            num_partitions=-1,
            replication_factor=-1,
            configs=None,
        )
        try:
            if seen[t.name] > 1:
                raise KafkaApiError(
                    ErrorCode.INVALID_REQUEST,
                    f"Create topics request from client contains multiple entries for topic {t.name}.",
                )
            if t.name not in creatable:
                raise KafkaApiError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            assignments = None
            if t.assignments:
                if t.num_partitions != -1 or t.replication_factor != -1:
                    raise KafkaApiError(
                        ErrorCode.INVALID_REQUEST,
                        "Both numPartitions or replicationFactor and replicasAssignments were set.",
                    )
                ordered = sorted(t.assignments, key=lambda a: a.partition_index)
                if [a.partition_index for a in ordered] != list(range(len(ordered))):
                    raise KafkaApiError(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Partitions should be 0-based and consecutive."
                    )
                assignments = [list(a.broker_ids) for a in ordered]
                partitions, rf = len(assignments), len(assignments[0])
            else:
                partitions, rf = t.num_partitions, t.replication_factor
            rf = rf if rf != -1 else services.config["default.replication.factor"]
            cfg = {c.name: c.value for c in (t.configs or [])}
            info = await services.topic_manager.create_topic(t.name, partitions, rf, cfg, validate_only, assignments)
            if info is None:  # validate_only
                partitions = partitions if partitions != -1 else services.config["num.partitions"]
                res.num_partitions, res.replication_factor = partitions, rf
            else:
                res.topic_id = info.topic_id
                res.num_partitions, res.replication_factor = info.partitions, len(info.replicas(0)) or rf
            if v >= 5 and t.name not in config_describable:
                res.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                res.num_partitions = res.replication_factor = -1
            elif v >= 5:
                res.configs = [
                    Result.CreatableTopicConfigs(
                        name=e.name,
                        value=e.value,
                        read_only=e.read_only,
                        config_source=e.source,
                        is_sensitive=e.sensitive,
                    )
                    for e in config_handlers.topic_config_entries(services, info.configs if info is not None else cfg)
                ]
        except KafkaApiError as e:
            res.error_code, res.error_message = _err(e)
        results.append(res)
    return Resp(version=v, throttle_time_ms=0, topics=results)


async def delete_topics(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.DELETE_TOPICS)
    Result = Resp.DeletableTopicResult
    v = ctx.api_version
    store = services.store
    wanted = [(t.name, t.topic_id) for t in req.topics] if v >= 6 else [(n, None) for n in req.topic_names]
    # As Kafka's controller: DELETE on the cluster, else on each topic. A topic named that the principal may not
    # DESCRIBE answers TOPIC_AUTHORIZATION_FAILED whether it exists or not; one named by id loses its name in the
    # answer unless the principal may DESCRIBE it (the id itself is no secret).
    by_id = {tid: info.name for _, tid in wanted if tid is not None and (info := store.topic_by_id(tid)) is not None}
    names = {n for n, _ in wanted if n is not None} | set(by_id.values())
    if allowed_quietly(ctx, AclOperation.DELETE, ResourceType.CLUSTER, CLUSTER_NAME):
        describable = deletable = names
    else:
        describable = filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        deletable = filter_authorized(ctx, AclOperation.DELETE, ResourceType.TOPIC, names & describable)
    results = []
    for name, tid in wanted:
        res = Result(name=name, topic_id=tid, error_code=0, error_message=None)
        try:
            if name is None:
                name = by_id.get(tid) if tid is not None else None
                if name is None:
                    raise KafkaApiError(ErrorCode.UNKNOWN_TOPIC_ID, "Topic id does not exist.")
                res.name = name if name in describable else None
            elif name not in describable:
                raise KafkaApiError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            if name not in deletable:
                if store.topic(name) is None:
                    raise KafkaApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
                raise KafkaApiError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            info = await services.topic_manager.delete_topic(name)
            res.topic_id = info.topic_id
        except KafkaApiError as e:
            res.error_code, res.error_message = _err(e)
        results.append(res)
    return Resp(version=v, throttle_time_ms=0, responses=results)


async def create_partitions(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.CREATE_PARTITIONS)
    Result = Resp.CreatePartitionsTopicResult
    # ALTER on each topic, before anything says whether it exists (as Kafka's controller)
    alterable = filter_authorized(ctx, AclOperation.ALTER, ResourceType.TOPIC, (t.name for t in req.topics))
    new_partitions = 0
    for t in req.topics:
        info = services.store.topic(t.name)
        if info is not None and t.name in alterable and t.count > info.partitions:
            new_partitions += t.count - info.partitions
    if new_partitions > MAX_RECORDS_PER_USER_OP:
        return Resp(
            version=ctx.api_version,
            throttle_time_ms=0,
            results=[
                Result(name=t.name, error_code=ErrorCode.POLICY_VIOLATION, error_message=TOO_LARGE) for t in req.topics
            ],
        )
    results = []
    for t in req.topics:
        res = Result(name=t.name, error_code=0, error_message=None)
        try:
            if t.name not in alterable:
                raise KafkaApiError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            assignments = [list(a.broker_ids) for a in t.assignments] if t.assignments else None
            await services.topic_manager.create_partitions(t.name, t.count, bool(req.validate_only), assignments)
        except KafkaApiError as e:
            res.error_code, res.error_message = _err(e)
        results.append(res)
    return Resp(version=ctx.api_version, throttle_time_ms=0, results=results)


async def delete_records(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    """Move the log start offset; -1 means 'up to the high watermark' as in Kafka.

    As Kafka's broker (a map of partition to offset), a partition named twice is answered once with the last offset
    asked, and the topics of the answer are unique. The loop yields every YIELD_EVERY partitions and the log start
    checkpoint is written once per request, in a worker thread."""
    Resp = response_class(ApiKey.DELETE_RECORDS)
    TopicRes = Resp.DeleteRecordsTopicResult
    PartRes = TopicRes.DeleteRecordsPartitionResult
    wanted: dict[tuple[str, int], int] = {}
    # DELETE on each topic, before anything says whether it exists (as Kafka)
    deletable = filter_authorized(ctx, AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in req.topics))
    n = 0
    for t in req.topics:
        for p in t.partitions:
            wanted[(t.name, p.partition_index)] = p.offset
            n += 1
            await pace(n)
    by_topic: dict[str, list[Any]] = {}
    moved = False
    for n, ((topic, index), asked) in enumerate(wanted.items()):
        await pace(n)
        parts = by_topic.setdefault(topic, [])
        if topic not in deletable:
            parts.append(
                PartRes(partition_index=index, low_watermark=-1, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            )
            continue
        partition = services.replica_manager.get_partition(topic, index)
        if partition is None or not partition.is_leader:
            # only the leader moves the log start; followers follow it through their fetches
            code = (
                ErrorCode.NOT_LEADER_OR_FOLLOWER
                if partition is not None
                else services.replica_manager.not_hosted_error(topic, index)
            )
            parts.append(PartRes(partition_index=index, low_watermark=-1, error_code=code))
            continue
        if read_replica_of(partition.topic.configs):  # read-only: its log start follows the origin's
            parts.append(PartRes(partition_index=index, low_watermark=-1, error_code=ErrorCode.POLICY_VIOLATION))
            continue
        offset = partition.high_watermark if asked == -1 else asked
        try:
            if offset < 0:
                raise KafkaApiError(ErrorCode.OFFSET_OUT_OF_RANGE)
            before = partition.log.log_start_offset
            low = partition.log.delete_records(offset)
            moved = moved or low != before
            parts.append(PartRes(partition_index=index, low_watermark=low, error_code=0))
        except (StorageError, KafkaApiError) as e:
            parts.append(PartRes(partition_index=index, low_watermark=-1, error_code=e.error_code))
    if moved:
        await asyncio.to_thread(services.log_manager.checkpoint_log_start_offsets)
    topics = [TopicRes(name=name, partitions=parts) for name, parts in by_topic.items()]
    return Resp(version=ctx.api_version, throttle_time_ms=0, topics=topics)


async def describe_cluster(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.DESCRIBE_CLUSTER)
    v = ctx.api_version
    endpoint_type = getattr(req, "endpoint_type", 1) if v >= 1 else 1
    if endpoint_type != 1:  # 1 = brokers; 2 = controllers, which a combined single node does not expose
        return Resp(
            version=v,
            throttle_time_ms=0,
            error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            error_message="Only broker endpoints are available.",
            endpoint_type=endpoint_type,
            cluster_id=services.store.cluster_id,
            controller_id=-1,
            brokers=[],
        )
    brokers = [
        Resp.DescribeClusterBroker(broker_id=b, host=host, port=port, rack=rack, is_fenced=False)
        for b, (host, port), rack in live_brokers(services, ctx.listener)
    ]
    return Resp(
        version=v,
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        endpoint_type=endpoint_type,
        cluster_id=services.store.cluster_id,
        controller_id=services.store.controller_id,
        brokers=brokers,
        authorized_operations=cluster_operations(ctx, bool(req.include_cluster_authorized_operations)),
    )


def live_brokers(
    services: BrokerServices, listener: str, departed_within_s: float = 0.0
) -> list[tuple[int, tuple[str, int], str | None]]:
    """(id, endpoint of `listener`, rack) of every live broker, sorted by id; this broker's own endpoint is what it
    bound (ephemeral ports), the others' what they registered. With `departed_within_s`, brokers whose lease ended
    that recently are listed too (see handlers/metadata.py)."""
    out = []
    me = services.endpoints.advertised_endpoint(listener), services.config["broker.rack"] or None
    brokers = services.store.brokers()
    if departed_within_s > 0:
        brokers = {**services.store.departed_brokers(departed_within_s), **brokers}
    for b, info in sorted(brokers.items()):
        if b == services.broker_id:
            out.append((b, *me))
        else:
            ep = info.endpoint(listener)
            if ep is not None:
                out.append((b, ep, info.rack))
    if not any(b == services.broker_id for b, _, _ in out) and not services.store.clustered:
        out.insert(0, (services.broker_id, *me))
    return out
