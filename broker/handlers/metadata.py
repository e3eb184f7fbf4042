"""Metadata: brokers, topics with ids (v10+), and topic auto-creation when both broker and client allow it."""

from __future__ import annotations

import uuid
from typing import Any

from strata.protocol.errors import ErrorCode, KafkaApiError
from strata.protocol.registry import ApiKey, response_class

from ..authorized_ops import CLUSTER_NAME, ResourceType, requested_operations
from ..request_context import RequestContext
from ..services import BrokerServices
from .admin import live_brokers

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

    live = store.brokers()
    topics = []
    for name, tid in wanted:
        info = store.topic(name) if name is not None else None
        if info is None and name is not None and allow_auto and services.config["auto.create.topics.enable"]:
            try:
                info = await services.topic_manager.auto_create_topic(name)
            except KafkaApiError as e:
                topics.append(
                    Topic(error_code=e.error_code, name=name, topic_id=None, is_internal=False, partitions=[])
                )
                continue
        if info is None:
            code = ErrorCode.UNKNOWN_TOPIC_ID if name is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            topics.append(Topic(error_code=code, name=name, topic_id=tid, is_internal=False, partitions=[]))
            continue
        parts = []
        for i in range(info.partitions):
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
            t.authorized_operations = requested_operations(ctx, True, ResourceType.TOPIC, t.name or "")
    # v8-10 only: v11 moved the cluster's operations to DescribeCluster
    cluster_ops = requested_operations(
        ctx, 8 <= v <= 10 and bool(req.include_cluster_authorized_operations), ResourceType.CLUSTER, CLUSTER_NAME
    )
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
