"""KIP-848 consumer group APIs: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69). Wire <->
strata.broker.group.consumer translation only; authorization as Kafka's KafkaApis (READ on the group for a
heartbeat and DESCRIBE on the topics it names; DESCRIBE on the group, and on every topic its members subscribe to or
own, for a describe)."""

from __future__ import annotations

import uuid
from typing import Any

from strata.protocol.errors import ErrorCode
from strata.protocol.registry import ApiKey, response_class

from ..authorization import authorize, filter_authorized
from ..authorized_ops import AclOperation, ResourceType, requested_operations
from ..group.consumer.group import ConsumerGroup
from ..group.consumer.manager import HeartbeatRequest
from ..group.consumer.member import Assignment
from ..replica_manager import pace
from ..request_context import RequestContext
from ..services import BrokerServices
from .groups import _client_host

E = ErrorCode
Op = AclOperation
MEMBER_TYPE_CLASSIC = 0
MEMBER_TYPE_CONSUMER = 1


async def consumer_group_heartbeat(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.CONSUMER_GROUP_HEARTBEAT)
    v = ctx.api_version

    def error(code: ErrorCode, message: str | None = None) -> Any:
        return Resp(
            version=v,
            throttle_time_ms=0,
            error_code=code,
            error_message=message,
            member_epoch=0,
            heartbeat_interval_ms=0,
        )

    if not authorize(ctx, Op.READ, ResourceType.GROUP, req.group_id or ""):
        return error(E.GROUP_AUTHORIZATION_FAILED)
    names = list(req.subscribed_topic_names) if req.subscribed_topic_names is not None else None
    # clients may not learn of topics they cannot DESCRIBE
    if names and len(filter_authorized(ctx, Op.DESCRIBE, ResourceType.TOPIC, names)) < len(set(names)):
        return error(E.TOPIC_AUTHORIZATION_FAILED, "The client is not authorized to describe the topics.")
    owned = (
        None if req.topic_partitions is None else [(tp.topic_id, list(tp.partitions)) for tp in req.topic_partitions]
    )
    hb = HeartbeatRequest(
        group_id=req.group_id,
        member_id=req.member_id or "",
        member_epoch=req.member_epoch,
        instance_id=req.instance_id,
        rack_id=req.rack_id,
        rebalance_timeout_ms=req.rebalance_timeout_ms,
        subscribed_topic_names=names,
        subscribed_topic_regex=req.subscribed_topic_regex if v >= 1 else None,
        server_assignor=req.server_assignor,
        topic_partitions=owned,
        client_id=ctx.client_id or "",
        client_host=_client_host(ctx),
        api_version=v,
    )
    res = await services.group_coordinator.consumer_group_heartbeat(hb)
    if res.error:
        return error(res.error, res.message)
    assignment = None
    if res.assignment is not None:
        TP = Resp.Assignment.TopicPartitions
        assignment = Resp.Assignment(
            topic_partitions=[
                TP(topic_id=tid, partitions=sorted(parts)) for tid, parts in sorted(res.assignment.items(), key=str)
            ]
        )
    return Resp(
        version=v,
        throttle_time_ms=0,
        error_code=E.NONE,
        error_message=None,
        member_id=res.member_id,
        member_epoch=res.member_epoch,
        heartbeat_interval_ms=res.heartbeat_interval_ms,
        assignment=assignment,
    )


def _topic_names(services: BrokerServices, g: ConsumerGroup) -> dict[uuid.UUID, str]:
    names = {t.topic_id: n for n, t in g.subscription_metadata.items()}
    for m in g.members.values():
        for a in (m.assigned, m.pending_revocation, g.target_of(m.member_id)):
            for tid in a:
                if tid not in names:
                    info = services.store.topic_by_id(tid)
                    if info is not None:
                        names[tid] = info.name
    return names


async def consumer_group_describe(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.CONSUMER_GROUP_DESCRIBE)
    D = Resp.DescribedGroup
    M = D.Member
    A = M.Assignment
    TP = A.TopicPartitions
    v = ctx.api_version
    coord = services.group_coordinator

    def err(gid: str, code: ErrorCode, message: str | None = None, ops: set[int] | None = None) -> Any:
        return D(
            error_code=code,
            error_message=message,
            group_id=gid,
            group_state="",
            group_epoch=0,
            assignment_epoch=0,
            assignor_name="",
            members=[],
            authorized_operations=ops,
        )

    def assignment(a: Assignment, names: dict[uuid.UUID, str]) -> Any:
        return A(
            topic_partitions=[
                TP(topic_id=tid, topic_name=names.get(tid, ""), partitions=sorted(ps))
                for tid, ps in sorted(a.items(), key=str)
                if tid in names
            ]
        )

    out = []
    for n, gid in enumerate(dict.fromkeys(req.group_ids)):
        await pace(n)
        if not authorize(ctx, Op.DESCRIBE, ResourceType.GROUP, gid):
            out.append(err(gid, E.GROUP_AUTHORIZATION_FAILED))
            continue
        code, message, g = coord.describe_consumer_group(gid)
        if g is None:
            out.append(err(gid, code, message))
            continue
        names = _topic_names(services, g)
        subscribed = {t for m in g.members.values() for t in m.subscribed_topic_names} | set(names.values())
        if len(filter_authorized(ctx, Op.DESCRIBE, ResourceType.TOPIC, subscribed)) < len(subscribed):
            out.append(
                err(gid, E.TOPIC_AUTHORIZATION_FAILED, "The group has subscribed topics that are not authorized.")
            )
            continue
        members = []
        for m in g.members.values():
            member = M(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed_topic_names),
                subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=assignment(m.assigned, names),
                target_assignment=assignment(g.target_of(m.member_id), names),
            )
            if v >= 1:
                member.member_type = MEMBER_TYPE_CLASSIC if m.uses_classic_protocol else MEMBER_TYPE_CONSUMER
            members.append(member)
        out.append(
            D(
                error_code=E.NONE,
                error_message=None,
                group_id=gid,
                group_state=g.state.value,
                group_epoch=g.group_epoch,
                assignment_epoch=g.assignment_epoch,
                assignor_name=coord.consumer.preferred_assignor(g),
                members=members,
                authorized_operations=requested_operations(
                    ctx, bool(req.include_authorized_operations), ResourceType.GROUP, gid
                ),
            )
        )
    return Resp(version=v, throttle_time_ms=0, groups=out)


__all__ = ["consumer_group_describe", "consumer_group_heartbeat"]
