"""Consumer-group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
ListGroups, DescribeGroups, DeleteGroups, OffsetDelete. Wire <-> strata.broker.group.GroupCoordinator translation only.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from strata.protocol.errors import ErrorCode
from strata.protocol.registry import ApiKey, response_class

from ..authorized_ops import ResourceType, requested_operations
from ..group import OFFSETS_TOPIC
from ..group.coordinator import JoinParams
from ..group.group import GROUP_TYPE, GroupState
from ..group.records import OffsetAndMetadata
from ..replica_manager import YIELD_EVERY
from ..request_context import RequestContext
from ..services import BrokerServices

E = ErrorCode
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


def _client_host(ctx: RequestContext) -> str:
    """Kafka reports member hosts as InetAddress.toString(): '/<ip>'."""
    peer = ctx.client_address
    host = peer.rpartition(":")[0] if ":" in peer else peer
    return "/" + host.strip("[]")


def req_key_type(req, version: int) -> int:
    return req.key_type if version >= 1 else KEY_TYPE_GROUP


# -- FindCoordinator ------------------------------------------------------------------------------------------------
async def find_coordinator(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.FIND_COORDINATOR)
    v = ctx.api_version
    listener = ctx.listener
    coord = services.group_coordinator
    store = services.store

    if req_key_type(req, v) == KEY_TYPE_GROUP and coord.active:
        await coord.ensure_offsets_topic()  # Kafka creates the offsets topic on the first FindCoordinator

    def answer(key: str, key_type: int) -> tuple[ErrorCode, str | None, int, str, int]:
        """The coordinator of a group is the leader of its __consumer_offsets partition."""
        if key_type == KEY_TYPE_GROUP:
            if not coord.active or not coord.offsets_topic_exists():
                return E.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.", -1, "", -1
            state = store.partition_state(OFFSETS_TOPIC, coord.partition_for(key))
            leader = state.leader if state is not None else -1
            if leader == services.broker_id:
                host, port = services.endpoints.advertised_endpoint(listener)
                return E.NONE, None, leader, host, port
            info = store.brokers().get(leader) if leader >= 0 else None
            ep = info.endpoint(listener) if info is not None else None
            if ep is None:
                return E.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.", -1, "", -1
            return E.NONE, None, leader, ep[0], ep[1]
        if key_type == KEY_TYPE_TRANSACTION:
            return E.COORDINATOR_NOT_AVAILABLE, "This broker has no transaction coordinator.", -1, "", -1
        return E.INVALID_REQUEST, f"Unsupported key type {key_type}.", -1, "", -1

    if v >= 4:
        coords = []
        for key in req.coordinator_keys or []:
            err, msg, node, host, port = answer(key, req.key_type)
            coords.append(
                Resp.Coordinator(key=key, node_id=node, host=host, port=port, error_code=err, error_message=msg)
            )
        return Resp(version=v, throttle_time_ms=0, coordinators=coords)
    err, msg, node, host, port = answer(req.key, req.key_type if v >= 1 else KEY_TYPE_GROUP)
    return Resp(
        version=v,
        throttle_time_ms=0,
        error_code=err,
        error_message=msg if v >= 1 else None,
        node_id=node,
        host=host,
        port=port,
    )


# -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup -----------------------------------------------------------------
async def join_group(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.JOIN_GROUP)
    v = ctx.api_version
    session = req.session_timeout_ms
    rebalance = req.rebalance_timeout_ms if v >= 1 else session
    if rebalance is None or rebalance < 0:
        rebalance = session
    params = JoinParams(
        group_id=req.group_id,
        member_id=req.member_id or "",
        group_instance_id=req.group_instance_id if v >= 5 else None,
        client_id=ctx.client_id or "",
        client_host=_client_host(ctx),
        session_timeout_ms=session,
        rebalance_timeout_ms=rebalance,
        protocol_type=req.protocol_type,
        protocols=[(p.name, bytes(p.metadata or b"")) for p in req.protocols],
        api_version=v,
    )
    res = await services.group_coordinator.join_group(params)
    members = [Resp.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=md) for m, i, md in res.members]
    return Resp(
        version=v,
        throttle_time_ms=0,
        error_code=res.error,
        generation_id=res.generation_id,
        protocol_type=res.protocol_type,
        protocol_name=res.protocol_name if v >= 7 else (res.protocol_name or ""),
        leader=res.leader,
        skip_assignment=res.skip_assignment,
        member_id=res.member_id,
        members=members,
    )


async def sync_group(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.SYNC_GROUP)
    v = ctx.api_version
    res = await services.group_coordinator.sync_group(
        req.group_id,
        req.generation_id,
        req.member_id,
        req.group_instance_id if v >= 3 else None,
        req.protocol_type if v >= 5 else None,
        req.protocol_name if v >= 5 else None,
        [(a.member_id, bytes(a.assignment or b"")) for a in req.assignments],
    )
    return Resp(
        version=v,
        throttle_time_ms=0,
        error_code=res.error,
        protocol_type=res.protocol_type,
        protocol_name=res.protocol_name,
        assignment=res.assignment,
    )


async def heartbeat(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.HEARTBEAT)
    v = ctx.api_version
    err = services.group_coordinator.heartbeat(
        req.group_id, req.member_id, req.group_instance_id if v >= 3 else None, req.generation_id
    )
    return Resp(version=v, throttle_time_ms=0, error_code=err)


async def leave_group(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.LEAVE_GROUP)
    v = ctx.api_version
    members: list[tuple[str, str | None]]
    if v < 3:
        members = [(req.member_id, None)]
    else:
        members = [(m.member_id, m.group_instance_id) for m in req.members]
    top, results = services.group_coordinator.leave_group(req.group_id, members)
    if v < 3:
        err = top or (results[0][2] if results else E.NONE)
        return Resp(version=v, throttle_time_ms=0, error_code=err)
    out = [] if top else [Resp.MemberResponse(member_id=m, group_instance_id=i, error_code=e) for m, i, e in results]
    return Resp(version=v, throttle_time_ms=0, error_code=top, members=out)


# -- OffsetCommit / OffsetFetch / OffsetDelete ----------------------------------------------------------------------
async def offset_commit(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.OFFSET_COMMIT)
    T = Resp.OffsetCommitResponseTopic
    P = T.OffsetCommitResponsePartition
    v = ctx.api_version
    now = int(time.time() * 1000)
    store = services.store
    pre: dict[tuple[str, int], ErrorCode] = {}
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    order: list[tuple[str, list[int], uuid.UUID | None]] = []
    retention = req.retention_time_ms if 2 <= v <= 4 else None
    for t in req.topics:
        parts = []
        name, info, unknown = _commit_topic(store, t, v)
        for p in t.partitions:
            parts.append(p.partition_index)
            tp = (name, p.partition_index)
            if info is None:
                pre[tp] = unknown
                continue
            if not 0 <= p.partition_index < info.partitions:  # as Kafka: only partitions the topic has
                pre[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
                continue
            epoch = p.committed_leader_epoch if v >= 6 else -1
            # v2-4 may carry a retention time: Kafka then stores an expire timestamp (value version 1)
            expire = now + retention if retention is not None and retention >= 0 else -1
            # committed_metadata is nullable on the wire; Kafka stores null as "" (OffsetAndMetadata.NO_METADATA)
            offsets[tp] = OffsetAndMetadata(
                p.committed_offset, -1 if epoch is None else epoch, p.committed_metadata or "", now, expire
            )
        order.append((name, parts, getattr(t, "topic_id", None)))
    top = E.NONE
    results: dict[tuple[str, int], ErrorCode] = {}
    if offsets:
        top, results = await services.group_coordinator.commit_offsets(
            req.group_id,
            req.generation_id_or_member_epoch,
            req.member_id or "",
            req.group_instance_id if v >= 7 else None,
            offsets,
            v,
        )
    elif not req.group_id:
        top = E.INVALID_GROUP_ID
    topics = []
    for name, parts, topic_id in order:
        out = []
        for pi in parts:
            tp = (name, pi)
            err = pre.get(tp) or top or results.get(tp, E.NONE)
            out.append(P(partition_index=pi, error_code=err))
        topics.append(T(name=name, topic_id=topic_id, partitions=out) if v >= 10 else T(name=name, partitions=out))
    return Resp(version=v, throttle_time_ms=0, topics=topics)


def _commit_topic(store, t, v: int):
    """(name, topic info or None, error for an unknown topic) of a request's topic entry: by name up to v9, by
    topic id from v10 (Kafka 4.2, KIP-848; an unknown id gets UNKNOWN_TOPIC_ID)."""
    if v >= 10:
        info = store.topic_by_id(t.topic_id)
        return (info.name if info is not None else f"<unknown topic id {t.topic_id}>"), info, E.UNKNOWN_TOPIC_ID
    return t.name, store.topic(t.name), E.UNKNOWN_TOPIC_OR_PARTITION


def _fetched_partition(cls, pi: int, om: OffsetAndMetadata | None, err: ErrorCode = E.NONE):
    if om is None:
        return cls(partition_index=pi, committed_offset=-1, committed_leader_epoch=-1, metadata="", error_code=err)
    return cls(
        partition_index=pi,
        committed_offset=om.offset,
        committed_leader_epoch=om.leader_epoch,
        metadata=om.metadata,
        error_code=err,
    )


async def offset_fetch(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.OFFSET_FETCH)
    v = ctx.api_version
    coord = services.group_coordinator
    if v >= 8:
        G = Resp.OffsetFetchResponseGroup
        T = G.OffsetFetchResponseTopics
        P = T.OffsetFetchResponsePartitions
        groups = []
        for g in req.groups:
            if v >= 10:
                groups.append(_fetch_group_by_topic_id(services.store, coord, G, g))
                continue
            topics = None if g.topics is None else [(t.name, list(t.partition_indexes)) for t in g.topics]
            err, data = coord.fetch_offsets(g.group_id, topics)
            tops = (
                []
                if err
                else [T(name=t, partitions=[_fetched_partition(P, pi, om) for pi, om in parts]) for t, parts in data]
            )
            groups.append(G(group_id=g.group_id, topics=tops, error_code=err))
        return Resp(version=v, throttle_time_ms=0, groups=groups)
    T = Resp.OffsetFetchResponseTopic
    P = T.OffsetFetchResponsePartition
    topics = None if req.topics is None else [(t.name, list(t.partition_indexes)) for t in req.topics]
    err, data = coord.fetch_offsets(req.group_id, topics)
    if err:
        if v < 2:  # no top-level error code before v2: report it on every requested partition
            tops = [
                T(name=t, partitions=[_fetched_partition(P, pi, None, err) for pi in parts])
                for t, parts in (topics or [])
            ]
            return Resp(version=v, throttle_time_ms=0, topics=tops)
        return Resp(version=v, throttle_time_ms=0, topics=[], error_code=err)
    tops = [T(name=t, partitions=[_fetched_partition(P, pi, om) for pi, om in parts]) for t, parts in data]
    return Resp(version=v, throttle_time_ms=0, topics=tops, error_code=E.NONE)


def _fetch_group_by_topic_id(store, coord, G, g):
    """OffsetFetch v10 (Kafka 4.2, KIP-848): topics named by id both ways. An unknown id answers UNKNOWN_TOPIC_ID
    on its partitions; fetching all offsets leaves out topics that no longer exist (they have no id to name)."""
    T = G.OffsetFetchResponseTopics
    P = T.OffsetFetchResponsePartitions
    unknown: list = []
    topics = None
    if g.topics is not None:
        topics = []
        for t in g.topics:
            info = store.topic_by_id(t.topic_id)
            if info is None:
                unknown.append(
                    T(
                        topic_id=t.topic_id,
                        partitions=[_fetched_partition(P, pi, None, E.UNKNOWN_TOPIC_ID) for pi in t.partition_indexes],
                    )
                )
            else:
                topics.append((info.name, list(t.partition_indexes)))
    err, data = coord.fetch_offsets(g.group_id, topics)
    if err:
        return G(group_id=g.group_id, topics=[], error_code=err)
    tops = []
    for name, parts in data:
        info = store.topic(name)
        if info is not None:
            tops.append(T(topic_id=info.topic_id, partitions=[_fetched_partition(P, pi, om) for pi, om in parts]))
    return G(group_id=g.group_id, topics=tops + unknown, error_code=E.NONE)


async def offset_delete(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.OFFSET_DELETE)
    T = Resp.OffsetDeleteResponseTopic
    P = T.OffsetDeleteResponsePartition
    store = services.store
    pre: dict[tuple[str, int], ErrorCode] = {}
    wanted = []
    order = []
    for t in req.topics:
        parts = [p.partition_index for p in t.partitions]
        order.append((t.name, parts))
        for pi in parts:
            if store.topic(t.name) is None:
                pre[(t.name, pi)] = E.UNKNOWN_TOPIC_OR_PARTITION
            else:
                wanted.append((t.name, pi))
    err, results = await services.group_coordinator.delete_offsets(req.group_id, wanted)
    if err:
        return Resp(version=ctx.api_version, error_code=err, throttle_time_ms=0, topics=[])
    topics = [
        T(
            name=name,
            partitions=[
                P(partition_index=pi, error_code=pre.get((name, pi)) or results.get((name, pi), E.NONE)) for pi in parts
            ],
        )
        for name, parts in order
    ]
    return Resp(version=ctx.api_version, error_code=E.NONE, throttle_time_ms=0, topics=topics)


# -- ListGroups / DescribeGroups / DeleteGroups ---------------------------------------------------------------------
async def list_groups(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.LIST_GROUPS)
    v = ctx.api_version
    states = list(req.states_filter or []) if v >= 4 else None
    types = list(req.types_filter or []) if v >= 5 else None
    err, groups = services.group_coordinator.list_groups(states, types)
    listed = [
        Resp.ListedGroup(
            group_id=g.group_id, protocol_type=g.protocol_type or "", group_state=g.state.value, group_type=GROUP_TYPE
        )
        for g in groups
    ]
    return Resp(version=v, throttle_time_ms=0, error_code=err, groups=listed)


async def describe_groups(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.DESCRIBE_GROUPS)
    v = ctx.api_version
    asked = v >= 3 and bool(req.include_authorized_operations)
    # Each group is answered once, however often it is named. Kafka's broker would repeat the whole description per
    # repeat (the fuzzer's one group named 100,000 times took the broker from 250 MiB to 7.2 GiB); its AdminClient
    # and librdkafka never send a repeat, so only a hostile request sees the difference.
    out = []
    for n, gid in enumerate(dict.fromkeys(req.groups)):
        if n % YIELD_EVERY == YIELD_EVERY - 1:
            await asyncio.sleep(0)
        ops = requested_operations(ctx, asked, ResourceType.GROUP, gid)
        out.append(_describe_group(services, Resp.DescribedGroup, gid, v, ops))
    return Resp(version=v, throttle_time_ms=0, groups=out)


def _describe_group(services: BrokerServices, D: Any, gid: str, v: int, ops: set[int] | None) -> Any:
    M = D.DescribedGroupMember
    err, g = services.group_coordinator.describe_group(gid)
    if err == E.GROUP_ID_NOT_FOUND:
        if v >= 6:
            return D(
                error_code=err,
                error_message=f"Group {gid} not found.",
                group_id=gid,
                group_state=GroupState.DEAD.value,
                protocol_type="",
                protocol_data="",
                members=[],
                authorized_operations=ops,
            )
        return D(
            error_code=E.NONE,
            group_id=gid,
            group_state=GroupState.DEAD.value,
            protocol_type="",
            protocol_data="",
            members=[],
            authorized_operations=ops,
        )
    if err or g is None:  # (g is None only with an error)
        return D(
            error_code=err,
            group_id=gid,
            group_state="",
            protocol_type="",
            protocol_data="",
            members=[],
            authorized_operations=ops,
        )
    stable = g.state == GroupState.STABLE
    members = [
        M(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            member_metadata=m.metadata(g.protocol_name) if stable else b"",
            member_assignment=m.assignment if stable else b"",
        )
        for m in g.members.values()
    ]
    return D(
        error_code=E.NONE,
        group_id=gid,
        group_state=g.state.value,
        protocol_type=g.protocol_type or "",
        protocol_data=(g.protocol_name or "") if stable else "",
        members=members,
        authorized_operations=ops,
    )


async def delete_groups(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.DELETE_GROUPS)
    results = await services.group_coordinator.delete_groups(list(req.groups_names))
    return Resp(
        version=ctx.api_version,
        throttle_time_ms=0,
        results=[Resp.DeletableGroupResult(group_id=g, error_code=results[g]) for g in req.groups_names],
    )
