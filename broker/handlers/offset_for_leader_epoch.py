"""OffsetForLeaderEpoch (API 23, v2-4): the end offset of a leader epoch in the leader's log (KIP-101/279).

Followers ask it after becoming follower, to truncate by epochs rather than by HW; consumers (replica_id -1, v3+)
ask it to validate their position after a leader change (KIP-320). The answer comes from the leader's epoch cache:
the greatest epoch <= the requested one and the start offset of the next higher epoch (the LEO for the current one);
both -1 when the requested epoch is unknown. `current_leader_epoch` fences stale callers (FENCED/UNKNOWN_LEADER_EPOCH).
"""

from __future__ import annotations

from typing import Any

from strata.protocol.errors import ErrorCode
from strata.protocol.registry import ApiKey, response_class

from ..authorization import filter_authorized
from ..authorized_ops import CLUSTER_NAME, AclOperation, ResourceType, allowed_quietly
from ..replica_manager import pace
from ..request_context import RequestContext
from ..services import BrokerServices


async def handle(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.OFFSET_FOR_LEADER_EPOCH)
    TopicRes = Resp.OffsetForLeaderTopicResult
    PartRes = TopicRes.EpochEndOffset
    rm = services.replica_manager
    # Followers asked it first and need CLUSTER_ACTION; consumers (KIP-320) may instead have DESCRIBE on the topic
    if allowed_quietly(ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        describable = {t.topic for t in req.topics}
    else:
        describable = filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.topic for t in req.topics))
    topics = []
    n = 0
    for t in req.topics:
        parts = []
        allowed = t.topic in describable
        for p in t.partitions:
            n += 1
            await pace(n)  # thousands of partitions: other connections get a turn
            partition = rm.get_partition(t.topic, p.partition) if allowed else None
            epoch, end = -1, -1
            if not allowed:
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif partition is None:
                code = rm.not_hosted_error(t.topic, p.partition)
            else:
                code = partition.check_epoch(p.current_leader_epoch, require_leader=True)
                if code == ErrorCode.NONE:
                    epoch, end = partition.log.end_offset_for_epoch(p.leader_epoch)
            parts.append(PartRes(error_code=code, partition=p.partition, leader_epoch=epoch, end_offset=end))
        topics.append(TopicRes(topic=t.topic, partitions=parts))
    return Resp(version=ctx.api_version, throttle_time_ms=0, topics=topics)
