"""Consumer-group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
ListGroups, DescribeGroups, DeleteGroups, OffsetDelete. Wire <-> strata.broker.group.GroupCoordinator translation only.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from strata.protocol import consumer_protocol
from strata.protocol.errors import ErrorCode
from strata.protocol.registry import ApiKey, response_class

from ..authorization import authorize, filter_authorized
from ..authorized_ops import CLUSTER_NAME, AclOperation, ResourceType, allowed_quietly, requested_operations
from ..group import OFFSETS_TOPIC
from ..group.consumer.group import GROUP_TYPE as CONSUMER_GROUP_TYPE
from ..group.consumer.group import ConsumerGroup
from ..group.coordinator import JoinParams
from ..group.group import GROUP_TYPE, GroupState
from ..group.records import OffsetAndMetadata
from ..replica_manager import YIELD_EVERY, pace
from ..request_context import RequestContext
from ..services import BrokerServices
from ..txn import TRANSACTION_STATE_TOPIC

E = ErrorCode
Op = AclOperation
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
_GROUP_AUTH_FAILED = "Group authorization failed."
_TXN_AUTH_FAILED = "Transactional Id authorization failed."


def _group_allowed(ctx: RequestContext, operation: AclOperation, group_id: str | None) -> bool:
    return authorize(ctx, operation, ResourceType.GROUP, group_id or "")


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

    # Finding a coordinator needs DESCRIBE on the group (on the transactional id for a transaction coordinator), as
    # in Kafka, which creates the offsets topic only for an allowed group key
    key_type = req_key_type(req, v)
    keys = list(req.coordinator_keys or []) if v >= 4 else [req.key]
    refused: tuple[ErrorCode, str] | None = None
    allowed = set(keys)
    if key_type == KEY_TYPE_GROUP:
        allowed = filter_authorized(ctx, Op.DESCRIBE, ResourceType.GROUP, keys)
        refused = (E.GROUP_AUTHORIZATION_FAILED, _GROUP_AUTH_FAILED)
    elif key_type == KEY_TYPE_TRANSACTION:
        allowed = filter_authorized(ctx, Op.DESCRIBE, ResourceType.TRANSACTIONAL_ID, keys)
        refused = (E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, _TXN_AUTH_FAILED)
    txn = services.txn_coordinator
    if key_type == KEY_TYPE_GROUP and coord.active and allowed:
        await coord.ensure_offsets_topic()  # Kafka creates the offsets topic on the first FindCoordinator
    elif key_type == KEY_TYPE_TRANSACTION and txn.active and allowed:
        await txn.ensure_topic()  # and the transaction state topic on the first transactional one

    def answer(key: str, key_type: int) -> tuple[ErrorCode, str | None, int, str, int]:
        """The coordinator of a group (a transactional id) is the leader of its __consumer_offsets
        (__transaction_state) partition."""
        if refused is not None and key not in allowed:
            return refused[0], refused[1], -1, "", -1
        if key_type in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
            if key_type == KEY_TYPE_GROUP:
                up = coord.active and coord.offsets_topic_exists()
                topic, index = OFFSETS_TOPIC, coord.partition_for(key)
            else:
                if key == "":
                    return E.INVALID_REQUEST, "Transactional id must not be empty.", -1, "", -1
                up = txn.active and txn.topic_exists()
                topic, index = TRANSACTION_STATE_TOPIC, txn.partition_for(key)
            if not up:
                return E.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.", -1, "", -1
            state = store.partition_state(topic, index)
            leader = state.leader if state is not None else -1
            if leader == services.broker_id:
                host, port = services.endpoints.advertised_endpoint(listener)
                return E.NONE, None, leader, host, port
            info = store.brokers().get(leader) if leader >= 0 else None
            ep = info.endpoint(listener) if info is not None else None
            if ep is None:
                return E.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.", -1, "", -1
            return E.NONE, None, leader, ep[0], ep[1]
        return E.INVALID_REQUEST, f"Unsupported key type {key_type}.", -1, "", -1

    if v >= 4:
        coords = []
        for key in req.coordinator_keys or []:
            err, msg, node, host, port = answer(key, key_type)
            coords.append(
                Resp.Coordinator(key=key, node_id=node, host=host, port=port, error_code=err, error_message=msg)
            )
        return Resp(version=v, throttle_time_ms=0, coordinators=coords)
    err, msg, node, host, port = answer(req.key, key_type)
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
    if not _group_allowed(ctx, Op.READ, req.group_id):
        return Resp(
            version=v,
            throttle_time_ms=0,
            error_code=E.GROUP_AUTHORIZATION_FAILED,
            generation_id=-1,
            protocol_type=None,
            protocol_name=None if v >= 7 else "",
            leader="",
            skip_assignment=False,
            member_id="",
            members=[],
        )
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
    if not _group_allowed(ctx, Op.READ, req.group_id):
        return Resp(
            version=v,
            throttle_time_ms=0,
            error_code=E.GROUP_AUTHORIZATION_FAILED,
            protocol_type=None,
            protocol_name=None,
            assignment=b"",
        )
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
    if not _group_allowed(ctx, Op.READ, req.group_id):
        return Resp(version=v, throttle_time_ms=0, error_code=E.GROUP_AUTHORIZATION_FAILED)
    err = services.group_coordinator.heartbeat(
        req.group_id, req.member_id, req.group_instance_id if v >= 3 else None, req.generation_id
    )
    return Resp(version=v, throttle_time_ms=0, error_code=err)


async def leave_group(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.LEAVE_GROUP)
    v = ctx.api_version
    if not _group_allowed(ctx, Op.READ, req.group_id):
        return Resp(version=v, throttle_time_ms=0, error_code=E.GROUP_AUTHORIZATION_FAILED, members=[])
    members: list[tuple[str, str | None]]
    if v < 3:
        members = [(req.member_id, None)]
    else:
        members = [(m.member_id, m.group_instance_id) for m in req.members]
    coord = services.group_coordinator
    if coord.is_consumer_group(req.group_id):  # classic members of a consumer group (a rolling upgrade)
        top, results = await coord.leave_consumer_group(req.group_id, members)
    else:
        top, results = coord.leave_group(req.group_id, members)
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
    # READ on the group, else every partition answers GROUP_AUTHORIZATION_FAILED; then READ on each topic (before
    # saying whether it exists; a topic id unknown here says nothing about a name), as Kafka's handleOffsetCommitRequest
    group_denied = not _group_allowed(ctx, Op.READ, req.group_id)
    resolved = [_commit_topic(store, t, v) for t in req.topics]
    readable = (
        set()
        if group_denied
        else filter_authorized(
            ctx, Op.READ, ResourceType.TOPIC, (name for name, info, _ in resolved if info is not None or v < 10)
        )
    )
    n = 0
    for t, (name, info, unknown) in zip(req.topics, resolved):
        parts = []
        for p in t.partitions:
            n += 1
            await pace(n)  # thousands of partitions: other connections get a turn
            parts.append(p.partition_index)
            tp = (name, p.partition_index)
            if group_denied:
                pre[tp] = E.GROUP_AUTHORIZATION_FAILED
                continue
            if name not in readable and (info is not None or v < 10):
                pre[tp] = E.TOPIC_AUTHORIZATION_FAILED
                continue
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
    elif not req.group_id and not group_denied:
        top = E.INVALID_GROUP_ID
    topics = []
    n = 0
    for name, parts, topic_id in order:
        out = []
        for pi in parts:
            n += 1
            await pace(n)
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
    """Needs DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED for it) and answers only topics the principal
    may DESCRIBE: a named one it may not gets TOPIC_AUTHORIZATION_FAILED, and fetching all offsets leaves them out,
    as Kafka's handleOffsetFetchRequest."""
    Resp = response_class(ApiKey.OFFSET_FETCH)
    v = ctx.api_version
    coord = services.group_coordinator
    if v >= 8:
        G = Resp.OffsetFetchResponseGroup
        T = G.OffsetFetchResponseTopics
        P = T.OffsetFetchResponsePartitions
        groups = []
        for g in req.groups:
            fenced = coord.validate_offset_fetch(g.group_id, g.member_id, g.member_epoch) if v >= 9 else E.NONE
            if not _group_allowed(ctx, Op.DESCRIBE, g.group_id):
                groups.append(G(group_id=g.group_id, topics=[], error_code=E.GROUP_AUTHORIZATION_FAILED))
            elif fenced:  # a consumer group member fetching at a stale epoch (KIP-848)
                groups.append(G(group_id=g.group_id, topics=[], error_code=fenced))
            elif v >= 10:
                groups.append(await _fetch_group_by_topic_id(ctx, services.store, coord, G, g))
            else:
                topics = None if g.topics is None else [(t.name, list(t.partition_indexes)) for t in g.topics]
                err, tops = await _fetch_group(
                    ctx, coord, P, g.group_id, topics, lambda t, ps: T(name=t, partitions=ps)
                )
                groups.append(G(group_id=g.group_id, topics=tops, error_code=err))
        if req.require_stable:
            for g in groups:
                _mark_unstable(services, coord, g.group_id, g.topics)
        return Resp(version=v, throttle_time_ms=0, groups=groups)
    T = Resp.OffsetFetchResponseTopic
    P = T.OffsetFetchResponsePartition
    topics = None if req.topics is None else [(t.name, list(t.partition_indexes)) for t in req.topics]
    if not _group_allowed(ctx, Op.DESCRIBE, req.group_id):
        err, tops = E.GROUP_AUTHORIZATION_FAILED, []
    else:
        err, tops = await _fetch_group(ctx, coord, P, req.group_id, topics, lambda t, ps: T(name=t, partitions=ps))
    if err:
        if v < 2:  # no top-level error code before v2: report it on every requested partition
            asked = [(t, [(pi, None) for pi in parts]) for t, parts in (topics or [])]
            tops = await _fetched_topics(P, asked, lambda t, ps: T(name=t, partitions=ps), err)
            return Resp(version=v, throttle_time_ms=0, topics=tops)
        return Resp(version=v, throttle_time_ms=0, topics=[], error_code=err)
    if v >= 7 and req.require_stable:
        _mark_unstable(services, coord, req.group_id, tops)
    return Resp(version=v, throttle_time_ms=0, topics=tops, error_code=E.NONE)


def _mark_unstable(services: BrokerServices, coord: Any, group_id: str, topics: list[Any]) -> None:
    """`require_stable` (KIP-447): a partition whose offset a transaction of the group has written but not yet
    committed or aborted answers UNSTABLE_OFFSET_COMMIT (the consumer retries) instead of the older offset."""
    for t in topics:
        name = t.name if getattr(t, "name", None) else None
        if name is None and getattr(t, "topic_id", None) is not None:
            info = services.store.topic_by_id(t.topic_id)
            name = info.name if info is not None else None
        for p in t.partitions:
            if (
                name is not None
                and p.error_code == E.NONE
                and coord.has_pending_txn_offset(group_id, (name, p.partition_index))
            ):
                p.error_code = E.UNSTABLE_OFFSET_COMMIT
                p.committed_offset = -1
                p.committed_leader_epoch = -1
                p.metadata = ""


async def _fetch_group(
    ctx: RequestContext,
    coord: Any,
    P: Any,
    group_id: str,
    topics: list[tuple[str, list[int]]] | None,
    topic: Callable[[Any, list[Any]], Any],
) -> tuple[ErrorCode, list[Any]]:
    """(group error, topic entries) of one group's fetch by topic name, limited to topics the principal may
    DESCRIBE (the others asked for answer TOPIC_AUTHORIZATION_FAILED after the rest, as in Kafka)."""
    if topics is None:
        err, data = coord.fetch_offsets(group_id, None)
        if err:
            return err, []
        describable = filter_authorized(ctx, Op.DESCRIBE, ResourceType.TOPIC, (t for t, _ in data))
        return E.NONE, await _fetched_topics(P, [(t, ps) for t, ps in data if t in describable], topic)
    describable = filter_authorized(ctx, Op.DESCRIBE, ResourceType.TOPIC, (t for t, _ in topics))
    err, data = coord.fetch_offsets(group_id, [(t, ps) for t, ps in topics if t in describable])
    if err:
        return err, []
    denied = [(t, [(pi, None) for pi in ps]) for t, ps in topics if t not in describable]
    return E.NONE, (
        await _fetched_topics(P, data, topic) + await _fetched_topics(P, denied, topic, E.TOPIC_AUTHORIZATION_FAILED)
    )


async def _fetched_topics(
    P: Any,
    data: Sequence[tuple[Any, Sequence[tuple[int, OffsetAndMetadata | None]]]],
    topic: Callable[[Any, list[Any]], Any],
    err: ErrorCode = E.NONE,
) -> list[Any]:
    """OffsetFetch's answer for (topic name or id, [(partition, committed offset or None)]): `topic(key,
    partitions)` makes a topic entry. Yields every YIELD_EVERY partitions: a fetch may name 100,000 of them."""
    out = []
    n = 0
    for name, parts in data:
        partitions = []
        for pi, om in parts:
            n += 1
            await pace(n)
            partitions.append(_fetched_partition(P, pi, om, err))
        out.append(topic(name, partitions))
    return out


async def _fetch_group_by_topic_id(ctx: RequestContext, store, coord, G, g):
    """OffsetFetch v10 (Kafka 4.2, KIP-848): topics named by id both ways. An unknown id answers UNKNOWN_TOPIC_ID
    on its partitions, a known one the principal may not DESCRIBE TOPIC_AUTHORIZATION_FAILED; fetching all offsets
    leaves out topics that no longer exist (they have no id to name) and those it may not DESCRIBE."""
    T = G.OffsetFetchResponseTopics
    P = T.OffsetFetchResponsePartitions
    unknown: list = []
    denied: list = []
    topics = None
    if g.topics is not None:
        found = []
        missing = []
        for n, t in enumerate(g.topics):
            await pace(n)
            info = store.topic_by_id(t.topic_id)
            if info is None:
                missing.append((t.topic_id, [(pi, None) for pi in t.partition_indexes]))
            else:
                found.append((info.name, t.topic_id, list(t.partition_indexes)))
        describable = filter_authorized(ctx, Op.DESCRIBE, ResourceType.TOPIC, (name for name, _, _ in found))
        topics = [(name, ps) for name, _, ps in found if name in describable]
        refused = [(tid, [(pi, None) for pi in ps]) for name, tid, ps in found if name not in describable]
        unknown = await _fetched_topics(P, missing, lambda i, ps: T(topic_id=i, partitions=ps), E.UNKNOWN_TOPIC_ID)
        denied = await _fetched_topics(
            P, refused, lambda i, ps: T(topic_id=i, partitions=ps), E.TOPIC_AUTHORIZATION_FAILED
        )
    err, data = coord.fetch_offsets(g.group_id, topics)
    if err:
        return G(group_id=g.group_id, topics=[], error_code=err)
    if topics is None:
        describable = filter_authorized(ctx, Op.DESCRIBE, ResourceType.TOPIC, (name for name, _ in data))
        data = [(name, parts) for name, parts in data if name in describable]
    ids = {name: info.topic_id for name, _ in data if (info := store.topic(name)) is not None}
    known = [(name, parts) for name, parts in data if name in ids]
    tops = await _fetched_topics(P, known, lambda name, ps: T(topic_id=ids[name], partitions=ps))
    return G(group_id=g.group_id, topics=tops + unknown + denied, error_code=E.NONE)


async def offset_delete(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.OFFSET_DELETE)
    T = Resp.OffsetDeleteResponseTopic
    P = T.OffsetDeleteResponsePartition
    store = services.store
    # DELETE on the group, then READ on each topic (before saying whether it exists), as Kafka
    if not _group_allowed(ctx, Op.DELETE, req.group_id):
        return Resp(version=ctx.api_version, error_code=E.GROUP_AUTHORIZATION_FAILED, throttle_time_ms=0, topics=[])
    readable = filter_authorized(ctx, Op.READ, ResourceType.TOPIC, (t.name for t in req.topics))
    pre: dict[tuple[str, int], ErrorCode] = {}
    wanted = []
    order = []
    n = 0
    for t in req.topics:
        parts = [p.partition_index for p in t.partitions]
        order.append((t.name, parts))
        refused = (
            E.TOPIC_AUTHORIZATION_FAILED
            if t.name not in readable
            else (E.UNKNOWN_TOPIC_OR_PARTITION if store.topic(t.name) is None else None)
        )
        for pi in parts:
            n += 1
            await pace(n)  # thousands of partitions: other connections get a turn
            if refused is None:
                wanted.append((t.name, pi))
            else:
                pre[(t.name, pi)] = refused
    err, results = await services.group_coordinator.delete_offsets(req.group_id, wanted)
    if err:
        return Resp(version=ctx.api_version, error_code=err, throttle_time_ms=0, topics=[])
    topics = []
    n = 0
    for name, parts in order:
        out = []
        for pi in parts:
            n += 1
            await pace(n)
            out.append(P(partition_index=pi, error_code=pre.get((name, pi)) or results.get((name, pi), E.NONE)))
        topics.append(T(name=name, partitions=out))
    return Resp(version=ctx.api_version, error_code=E.NONE, throttle_time_ms=0, topics=topics)


# -- ListGroups / DescribeGroups / DeleteGroups ---------------------------------------------------------------------
async def list_groups(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.LIST_GROUPS)
    v = ctx.api_version
    states = list(req.states_filter or []) if v >= 4 else None
    types = list(req.types_filter or []) if v >= 5 else None
    err, groups = services.group_coordinator.list_groups(states, types)
    # DESCRIBE on the cluster lists every group; without it, only the groups the principal may DESCRIBE (as Kafka)
    if not allowed_quietly(ctx, Op.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        groups = [g for g in groups if allowed_quietly(ctx, Op.DESCRIBE, ResourceType.GROUP, g.group_id)]
    listed = [
        Resp.ListedGroup(
            group_id=g.group_id,
            protocol_type=g.protocol_type or "",
            group_state=g.state.value,
            group_type=CONSUMER_GROUP_TYPE if isinstance(g, ConsumerGroup) else GROUP_TYPE,
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
        if not _group_allowed(ctx, Op.DESCRIBE, gid):
            out.append(_group_error(Resp.DescribedGroup, gid, E.GROUP_AUTHORIZATION_FAILED))
            continue
        ops = requested_operations(ctx, asked, ResourceType.GROUP, gid)
        out.append(_describe_group(services, Resp.DescribedGroup, gid, v, ops))
    return Resp(version=v, throttle_time_ms=0, groups=out)


def _group_error(D: Any, gid: str, err: ErrorCode, ops: set[int] | None = None) -> Any:
    """Kafka's DescribeGroupsResponse.groupError: the error, empty state and protocol (no operations when refused)."""
    return D(
        error_code=err,
        group_id=gid,
        group_state="",
        protocol_type="",
        protocol_data="",
        members=[],
        authorized_operations=ops,
    )


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
        return _group_error(D, gid, err, ops)
    if isinstance(g, ConsumerGroup):
        return _describe_consumer_group(services, D, g, ops)
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


def _describe_consumer_group(services: BrokerServices, D: Any, g: ConsumerGroup, ops: set[int] | None) -> Any:
    """A consumer group as a classic client sees it (Kafka's ConsumerGroup.asDescribedGroup): protocol type
    "consumer", the default assignor as the protocol, each member's subscription and assignment as consumer
    protocol blobs (topic names, version 0)."""
    M = D.DescribedGroupMember
    store = services.store
    members = []
    for m in g.members.values():
        assigned = []
        for tid, parts in sorted(m.assigned.items(), key=str):
            info = store.topic_by_id(tid)
            if info is not None:
                assigned.append((info.name, sorted(parts)))
        members.append(
            M(
                member_id=m.member_id,
                group_instance_id=m.instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=consumer_protocol.encode_subscription(list(m.subscribed_topic_names)),
                member_assignment=consumer_protocol.encode_assignment(assigned),
            )
        )
    return D(
        error_code=E.NONE,
        group_id=g.group_id,
        group_state=g.state.value,
        protocol_type=g.protocol_type,
        protocol_data=services.group_coordinator.consumer.default_assignor,
        members=members,
        authorized_operations=ops,
    )


async def delete_groups(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.DELETE_GROUPS)
    names = list(dict.fromkeys(req.groups_names))
    deletable = filter_authorized(ctx, Op.DELETE, ResourceType.GROUP, names)
    results = await services.group_coordinator.delete_groups([g for g in names if g in deletable])
    results.update((g, E.GROUP_AUTHORIZATION_FAILED) for g in names if g not in deletable)
    return Resp(
        version=ctx.api_version,
        throttle_time_ms=0,
        results=[Resp.DeletableGroupResult(group_id=g, error_code=results[g]) for g in req.groups_names],
    )
