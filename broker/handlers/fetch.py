"""Fetch: by name (< v13) or topic id (v13+), parked in the Fetch purgatory, in KIP-227 fetch sessions (v7+,
broker/fetch_session.py): a full fetch may create a session, an incremental one reads the session's partitions and
answers only those with something new."""

from __future__ import annotations

import asyncio
from typing import Any

from strata.protocol.errors import ErrorCode
from strata.protocol.registry import ApiKey, response_class

from ..authorization import authorize, filter_authorized
from ..authorized_ops import CLUSTER_NAME, AclOperation, ResourceType
from ..fetch_session import CachedPartition, PartitionKey, TopicKey
from ..replica_manager import READ_UNCOMMITTED, YIELD_EVERY, FetchResult, FetchSpec
from ..request_context import RequestContext
from ..services import BrokerServices
from .leadership import leader_endpoints


def _wanted(req: Any, v: int) -> tuple[dict[PartitionKey, CachedPartition], list[PartitionKey]]:
    """The request's partitions, keyed as Kafka's fetch data map (a partition named twice is fetched once, with the
    last values, in its first place), and the partitions to forget (v7+)."""
    wanted: dict[PartitionKey, CachedPartition] = {}
    for ft in req.topics:
        topic: TopicKey = ft.topic_id if v >= 13 else ft.topic
        for fp in ft.partitions:
            cp = CachedPartition(
                topic,
                fp.partition,
                fp.fetch_offset,
                fp.partition_max_bytes,
                fp.current_leader_epoch if v >= 9 else -1,
                fp.last_fetched_epoch if v >= 12 else -1,
                fp.log_start_offset if v >= 5 else -1,
            )
            wanted[cp.key] = cp
    forgotten: list[PartitionKey] = []
    if v >= 7:
        for ft in req.forgotten_topics_data or ():
            topic = ft.topic_id if v >= 13 else ft.topic
            forgotten.extend((topic, p) for p in ft.partitions)
    return wanted, forgotten


async def handle(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.FETCH)
    TopicResp = Resp.FetchableTopicResponse
    PartData = TopicResp.PartitionData
    v = ctx.api_version
    store = services.store

    replica_id = (
        req.replica_state.replica_id if v >= 15 and req.replica_state is not None else getattr(req, "replica_id", -1)
    )
    isolation = req.isolation_level if v >= 4 else READ_UNCOMMITTED

    wanted, forgotten = _wanted(req, v)
    session_id, epoch = (req.session_id, req.session_epoch) if v >= 7 else (0, -1)
    fctx = services.fetch_sessions.new_context(v, session_id, epoch, replica_id >= 0, wanted, forgotten)
    if fctx.error:
        return Resp(version=v, throttle_time_ms=0, error_code=fctx.error, session_id=0, responses=[])
    partitions = fctx.partitions

    names: dict[TopicKey, str | None] = {}
    for cp in partitions:
        if cp.topic not in names:
            if v >= 13:
                info = store.topic_by_id(cp.topic)  # type: ignore[arg-type]  # v13+ keys are topic ids
                names[cp.topic] = info.name if info else None
            else:
                names[cp.topic] = cp.topic  # type: ignore[assignment]  # < v13 keys are names
    # As Kafka: a follower (replica_id >= 0) needs CLUSTER_ACTION on the cluster (else every partition is refused), a
    # consumer READ on each topic; a partition that fails the check answers TOPIC_AUTHORIZATION_FAILED whether its
    # topic exists or not.
    known = [n for n in names.values() if n is not None]
    follower_refused = replica_id >= 0 and not authorize(
        ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME
    )
    if replica_id >= 0:
        readable = set() if follower_refused else set(known)
    else:
        readable = filter_authorized(ctx, AclOperation.READ, ResourceType.TOPIC, known)

    specs: list[FetchSpec] = []
    # per partition of the fetch: its slot in specs, or the error answered instead
    slots: list[tuple[int | None, ErrorCode]] = []
    for n, cp in enumerate(partitions, 1):
        if n % YIELD_EVERY == 0:
            await asyncio.sleep(0)  # thousands of partitions: let other connections be served
        name = names[cp.topic]
        if name is None and not follower_refused:
            slots.append((None, ErrorCode.UNKNOWN_TOPIC_ID))
        elif name is None or name not in readable:
            slots.append((None, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
        else:
            slots.append((len(specs), ErrorCode.NONE))
            specs.append(
                FetchSpec(
                    name,
                    cp.partition,
                    cp.fetch_offset,
                    cp.max_bytes,
                    cp.current_leader_epoch,
                    last_fetched_epoch=cp.last_fetched_epoch,
                    log_start_offset=cp.fetcher_log_start_offset,
                )
            )

    max_bytes = req.max_bytes if v >= 3 else 0x7FFFFFFF
    fetched = await services.replica_manager.fetch(
        specs,
        max_bytes=max_bytes,
        min_bytes=req.min_bytes,
        max_wait_ms=req.max_wait_ms,
        isolation=isolation,
        replica_id=replica_id,
        zero_copy=ctx.zero_copy,
    )
    results: list[FetchResult] = []
    for slot, refused in slots:
        r = fetched[slot] if slot is not None else FetchResult(refused)
        if r.error == ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE and v < 14:
            r.error = ErrorCode.OFFSET_OUT_OF_RANGE  # error 109 exists from Fetch v14 on
        results.append(r)
    answer_id, error, selected = fctx.respond(results)
    if error:
        return Resp(version=v, throttle_time_ms=0, error_code=error, session_id=answer_id, responses=[])

    responses: list[Any] = []
    committed = isolation != READ_UNCOMMITTED
    AbortedTxnResp = PartData.AbortedTransaction
    leaders: set[int] = set()
    current: TopicKey | None = None
    parts: list[Any] = []
    for n, i in enumerate(range(len(partitions)) if selected is None else selected, 1):
        if n % YIELD_EVERY == 0:
            await asyncio.sleep(0)
        cp, r = partitions[i], results[i]
        pd = PartData(
            partition_index=cp.partition,
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
        if not responses or cp.topic != current:  # consecutive partitions of a topic share its entry, as Kafka's
            current, parts = cp.topic, []
            responses.append(
                TopicResp(topic=cp.topic if v < 13 else None, topic_id=cp.topic if v >= 13 else None, partitions=parts)
            )
        parts.append(pd)
    resp = Resp(version=v, throttle_time_ms=0, error_code=0, session_id=answer_id, responses=responses)
    if v >= 16 and leaders:
        resp.node_endpoints = [
            Resp.NodeEndpoint(node_id=b, host=h, port=p, rack=rack)
            for b, h, p, rack in leader_endpoints(services, ctx.listener, leaders)
        ]
    if fctx.session is not None:

        def throttled() -> None:  # the quota code emptied this response: the session must not count it as answered
            resp.session_id = fctx.throttled()

        ctx.on_fetch_throttled = throttled
    return resp


def _aborted(cls: Any, r: FetchResult) -> list[Any]:
    """READ_COMMITTED: the aborted transactions of the records returned (an empty list, not null, when none)."""
    txns = r.aborted_transactions
    if not txns:
        return []
    return [cls(producer_id=t.producer_id, first_offset=t.first_offset) for t in txns]
