"""Metadata: brokers, topics with ids (v10+), and topic auto-creation when both broker and client allow it."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import structlog

from strata.protocol.errors import ErrorCode, KafkaApiError
from strata.protocol.registry import ApiKey, response_class

from ..authorization import filter_authorized
from ..authorized_ops import (
    CLUSTER_NAME,
    AclOperation,
    ResourceType,
    allowed_quietly,
    cluster_operations,
    requested_operations,
)
from ..metadata_store import TopicInfo, validate_topic_name
from ..replica_manager import YIELD_EVERY
from ..request_context import RequestContext
from ..services import BrokerServices
from .admin import MAX_RECORDS_PER_USER_OP, TOO_LARGE, live_brokers

log = structlog.get_logger("strata.metadata")
AUTO_CREATE_CONCURRENCY = 16

# A broker whose lease just expired while it led partitions stays in the Metadata broker list this long. The
# controller moves its leaderships at that moment, so without it one response both names the new leaders and drops
# the broker, and librdkafka (2.16) decommissions the dropped broker's handle while its partitions migrate: the
# handle's teardown undoes the migration ("Reverting from preferred replica ... to leader -1") and the partition
# waits for librdkafka's next 1 s leader query. Fail-over measured 1.0-1.7 s after the election; a listed dead broker
# only costs clients a refused connection.
DEPARTED_BROKER_GRACE_S = 3.0  # > librdkafka's 1 s re-query of unavailable leaders


async def handle(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.METADATA)
    Topic = Resp.MetadataResponseTopic
    Part = Topic.MetadataResponsePartition
    v = ctx.api_version
    store = services.store
    allow_auto = v < 4 or bool(req.allow_auto_topic_creation)
    too_many = False

    wanted: list[tuple[str | None, uuid.UUID | None]]  # (name, topic id asked for)
    if req.topics is None:
        wanted = [(t.name, None) for t in store.topics().values()]
    else:
        wanted = []
        for t in req.topics:
            if t.name is None and t.topic_id is not None:
                info = store.topic_by_id(t.topic_id)
                wanted.append((info.name if info else None, t.topic_id))
            else:
                wanted.append((t.name, None))
        wanted = list(dict.fromkeys(wanted))  # Kafka answers each topic once, however often it is asked for

    # Topics the principal may not DESCRIBE: left out of a listing of all topics; named, they answer
    # TOPIC_AUTHORIZATION_FAILED without saying whether they exist (a topic asked for by id keeps its id, which Kafka
    # does not count as secret, and loses its name). Auto-creation needs CREATE on the cluster or on the topic.
    refused: set[tuple[str | None, uuid.UUID | None]] = set()
    if req.topics is None:
        wanted = [w for w in wanted if allowed_quietly(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, w[0] or "")]
    else:
        describable = filter_authorized(
            ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (n for n, _ in wanted if n is not None)
        )
        refused = {w for w in wanted if w[0] is not None and w[0] not in describable}

    auto = allow_auto and services.config["auto.create.topics.enable"] and req.topics is not None
    to_create: list[str] = []
    if auto:
        to_create = [n for n, tid in wanted if n is not None and (n, tid) not in refused and store.topic(n) is None]
        if to_create and not allowed_quietly(ctx, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME):
            creatable = filter_authorized(ctx, AclOperation.CREATE, ResourceType.TOPIC, to_create)
            refused.update((n, None) for n in to_create if n not in creatable)
            to_create = [n for n in to_create if n in creatable]
        # Kafka creates a Metadata request's unknown topics in one CreateTopics to its controller, which refuses a
        # batch of more than MAX_RECORDS_PER_USER_OP records; the topics are then answered as being created.
        if len(to_create) * (1 + services.config["num.partitions"]) > MAX_RECORDS_PER_USER_OP:
            log.warning("not auto-creating the topics of a Metadata request: " + TOO_LARGE, topics=len(to_create))
            auto = False
            too_many = True
    created: dict[str, TopicInfo | KafkaApiError | None] = {}
    if auto:
        created = await _auto_create(services, to_create)
    live = store.brokers()
    topics = []
    work = 0  # topics and partitions answered since the last yield
    for name, tid in wanted:
        if work >= YIELD_EVERY:
            work = 0
            await asyncio.sleep(0)  # a request for thousands of topics lets other connections be served
        work += 1
        if (name, tid) in refused:
            by_id = tid is not None
            topics.append(
                Topic(
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    name=None if by_id else name,
                    topic_id=tid if by_id else None,
                    is_internal=False,
                    partitions=[],
                )
            )
            continue
        info = store.topic(name) if name is not None else None
        if info is None and name is not None and too_many:
            try:
                validate_topic_name(name)
                code = ErrorCode.LEADER_NOT_AVAILABLE
            except KafkaApiError as e:
                code = e.error_code
            topics.append(Topic(error_code=code, name=name, topic_id=None, is_internal=False, partitions=[]))
            continue
        if info is None and name is not None and name in created:
            made = created[name]
            if isinstance(made, KafkaApiError):
                topics.append(
                    Topic(error_code=made.error_code, name=name, topic_id=None, is_internal=False, partitions=[])
                )
                continue
            info = made
        if info is None:
            code = ErrorCode.UNKNOWN_TOPIC_ID if name is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            topics.append(Topic(error_code=code, name=name, topic_id=tid, is_internal=False, partitions=[]))
            continue
        parts = []
        for i in range(info.partitions):
            work += 1
            if work >= YIELD_EVERY:
                work = 0
                await asyncio.sleep(0)
            st = store.partition_state(info.name, i)
            if st is None:  # being created: its state is not written (or not seen) yet
                parts.append(
                    Part(
                        error_code=ErrorCode.LEADER_NOT_AVAILABLE,
                        partition_index=i,
                        leader_id=-1,
                        leader_epoch=-1,
                        replica_nodes=info.replicas(i),
                        isr_nodes=[],
                        offline_replicas=[],
                    )
                )
                continue
            offline = [b for b in st.replicas if b not in live]
            parts.append(
                Part(
                    error_code=ErrorCode.LEADER_NOT_AVAILABLE if st.leader < 0 else 0,
                    partition_index=i,
                    leader_id=st.leader,
                    leader_epoch=st.leader_epoch,
                    replica_nodes=list(st.replicas),
                    isr_nodes=list(st.isr),
                    offline_replicas=offline,
                )
            )
        topics.append(
            Topic(error_code=0, name=info.name, topic_id=info.topic_id, is_internal=info.internal, partitions=parts)
        )
    if v >= 8 and req.include_topic_authorized_operations:
        for t in topics:
            if t.error_code != ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                t.authorized_operations = requested_operations(ctx, True, ResourceType.TOPIC, t.name or "")
    # v8-10 only: v11 moved the cluster's operations to DescribeCluster
    cluster_ops = cluster_operations(ctx, 8 <= v <= 10 and bool(req.include_cluster_authorized_operations))
    brokers = [
        Resp.MetadataResponseBroker(node_id=b, host=host, port=port, rack=rack)
        for b, (host, port), rack in live_brokers(services, ctx.listener, DEPARTED_BROKER_GRACE_S)
    ]
    return Resp(
        version=v,
        throttle_time_ms=0,
        brokers=brokers,
        cluster_id=store.cluster_id,
        controller_id=store.controller_id,
        topics=topics,
        error_code=0,
        authorized_operations=cluster_ops,
    )


async def _auto_create(services: BrokerServices, names: list[str]) -> dict[str, TopicInfo | KafkaApiError | None]:
    """Create the unknown topics a Metadata request names, AUTO_CREATE_CONCURRENCY at a time: each waits mostly on
    fsyncs in worker threads, which then overlap (one after the other, 2,000 topics took 4 minutes)."""
    slots = asyncio.Semaphore(AUTO_CREATE_CONCURRENCY)

    async def create(name: str) -> TopicInfo | KafkaApiError | None:
        async with slots:
            try:
                return await services.topic_manager.auto_create_topic(name)
            except KafkaApiError as e:
                return e

    return dict(zip(names, await asyncio.gather(*(create(n) for n in names))))
