"""Fetch: sessionless (answers session id 0), by name (< v13) or topic id (v13+), parked in the Fetch purgatory."""

from __future__ import annotations

import asyncio
from typing import Any

from strata.protocol.errors import ErrorCode
from strata.protocol.registry import ApiKey, response_class

from ..authorization import authorize, filter_authorized
from ..authorized_ops import CLUSTER_NAME, AclOperation, ResourceType
from ..replica_manager import READ_UNCOMMITTED, YIELD_EVERY, FetchResult, FetchSpec
from ..request_context import RequestContext
from ..services import BrokerServices
from .leadership import leader_endpoints


async def handle(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.FETCH)
    TopicResp = Resp.FetchableTopicResponse
    PartData = TopicResp.PartitionData
    v = ctx.api_version
    store = services.store

    if v >= 7 and req.session_id != 0:
        # We never create sessions, so a client that names one is out of sync: make it start over.
        return Resp(
            version=v, throttle_time_ms=0, error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id=0, responses=[]
        )

    replica_id = (
        req.replica_state.replica_id if v >= 15 and req.replica_state is not None else getattr(req, "replica_id", -1)
    )
    isolation = req.isolation_level if v >= 4 else READ_UNCOMMITTED

    names: list[str | None] = []
    for ft in req.topics:
        if v >= 13:
            info = store.topic_by_id(ft.topic_id)
            names.append(info.name if info else None)
        else:
            names.append(ft.topic)
    # As Kafka: a follower (replica_id >= 0) needs CLUSTER_ACTION on the cluster (else every partition is refused), a
    # consumer READ on each topic; a partition that fails the check answers TOPIC_AUTHORIZATION_FAILED whether its
    # topic exists or not.
    known = [n for n in names if n is not None]
    follower_refused = replica_id >= 0 and not authorize(
        ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME
    )
    if replica_id >= 0:
        readable = set() if follower_refused else set(known)
    else:
        readable = filter_authorized(ctx, AclOperation.READ, ResourceType.TOPIC, known)

    specs: list[FetchSpec] = []
    # (topic, name, [(partition, slot in specs, or the error answered instead)])
    layout: list[tuple[Any, str | None, list[tuple[int, int | None, ErrorCode]]]] = []
    n = 0
    for ft, name in zip(req.topics, names):
        plist: list[tuple[int, int | None, ErrorCode]] = []
        for fp in ft.partitions:
            n += 1
            if n % YIELD_EVERY == 0:
                await asyncio.sleep(0)  # thousands of partitions: let other connections be served
            if name is None and not follower_refused:
                plist.append((fp.partition, None, ErrorCode.UNKNOWN_TOPIC_ID))
                continue
            if name is None or name not in readable:
                plist.append((fp.partition, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            plist.append((fp.partition, len(specs), ErrorCode.NONE))
            epoch = fp.current_leader_epoch if v >= 9 else -1
            specs.append(
                FetchSpec(
                    name,
                    fp.partition,
                    fp.fetch_offset,
                    fp.partition_max_bytes,
                    epoch,
                    last_fetched_epoch=fp.last_fetched_epoch if v >= 12 else -1,
                    log_start_offset=fp.log_start_offset if v >= 5 else -1,
                )
            )
        layout.append((ft, name, plist))

    max_bytes = req.max_bytes if v >= 3 else 0x7FFFFFFF
    results = await services.replica_manager.fetch(
        specs,
        max_bytes=max_bytes,
        min_bytes=req.min_bytes,
        max_wait_ms=req.max_wait_ms,
        isolation=isolation,
        replica_id=replica_id,
        zero_copy=ctx.zero_copy,
    )

    responses = []
    committed = isolation != READ_UNCOMMITTED
    AbortedTxnResp = PartData.AbortedTransaction
    leaders: set[int] = set()
    for ft, name, plist in layout:
        parts = []
        for index, slot, refused in plist:
            n += 1
            if n % YIELD_EVERY == 0:
                await asyncio.sleep(0)
            r = results[slot] if slot is not None else FetchResult(refused)
            if r.error == ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE and v < 14:
                r.error = ErrorCode.OFFSET_OUT_OF_RANGE  # error 109 exists from Fetch v14 on
            pd = PartData(
                partition_index=index,
                error_code=r.error,
                high_watermark=r.high_watermark,
                last_stable_offset=r.last_stable_offset,
                log_start_offset=r.log_start_offset,
                aborted_transactions=_aborted(AbortedTxnResp, r) if committed else None,
                preferred_read_replica=-1,
                records=r.records,
            )
            if v >= 12:
                if r.diverging_epoch is not None:  # KIP-320: the fetcher's log diverged from ours
                    pd.diverging_epoch = PartData.EpochEndOffset(
                        epoch=r.diverging_epoch[0], end_offset=r.diverging_epoch[1]
                    )
                if r.current_leader is not None:  # KIP-951
                    pd.current_leader = PartData.LeaderIdAndEpoch(
                        leader_id=r.current_leader[0], leader_epoch=r.current_leader[1]
                    )
                    leaders.add(r.current_leader[0])
            parts.append(pd)
        responses.append(
            TopicResp(topic=name if v < 13 else None, topic_id=ft.topic_id if v >= 13 else None, partitions=parts)
        )
    resp = Resp(version=v, throttle_time_ms=0, error_code=0, session_id=0, responses=responses)
    if v >= 16 and leaders:
        resp.node_endpoints = [
            Resp.NodeEndpoint(node_id=b, host=h, port=p, rack=rack)
            for b, h, p, rack in leader_endpoints(services, ctx.listener, leaders)
        ]
    return resp


def _aborted(cls: Any, r: FetchResult) -> list[Any]:
    """READ_COMMITTED: the aborted transactions of the records returned (an empty list, not null, when none)."""
    txns = r.aborted_transactions
    if not txns:
        return []
    return [cls(producer_id=t.producer_id, first_offset=t.first_offset) for t in txns]
