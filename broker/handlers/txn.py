"""Transaction APIs: AddPartitionsToTxn (24, v0-3), AddOffsetsToTxn (25), EndTxn (26), WriteTxnMarkers (27),
TxnOffsetCommit (28), DescribeProducers (61), DescribeTransactions (65), ListTransactions (66). Wire <->
strata.broker.txn.TransactionCoordinator (and the group coordinator for TxnOffsetCommit) translation, with Kafka's
authorization: WRITE on the TRANSACTIONAL_ID to use it, DESCRIBE to see it, CLUSTER_ACTION for WriteTxnMarkers.
"""

from __future__ import annotations

import re
import time
from typing import Any

from strata.protocol.errors import ErrorCode
from strata.protocol.registry import ApiKey, response_class

from ..authorization import authorize, filter_authorized
from ..authorized_ops import CLUSTER_NAME, AclOperation, ResourceType
from ..group.records import OFFSETS_TOPIC, OffsetAndMetadata
from ..replica_manager import pace
from ..request_context import RequestContext
from ..services import BrokerServices
from ..txn.markers import TxnMarker, append_markers
from ..txn.metadata import TxnState

E = ErrorCode
Op = AclOperation


def _txn_write_allowed(ctx: RequestContext, tid: str) -> bool:
    return authorize(ctx, Op.WRITE, ResourceType.TRANSACTIONAL_ID, tid)


# -- AddPartitionsToTxn ---------------------------------------------------------------------------------------------
async def add_partitions_to_txn(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    """v0-3 (the client's request). Partitions of topics it may not WRITE answer TOPIC_AUTHORIZATION_FAILED,
    unknown ones UNKNOWN_TOPIC_OR_PARTITION, and then the rest OPERATION_NOT_ATTEMPTED, as Kafka."""
    Resp = response_class(ApiKey.ADD_PARTITIONS_TO_TXN)
    TR = Resp.AddPartitionsToTxnTopicResult
    PR = TR.AddPartitionsToTxnPartitionResult
    v = ctx.api_version
    if v >= 4:
        return await _add_partitions_batched(services, ctx, req, Resp)
    tid = req.v3_and_below_transactional_id
    wanted = [(t.name, list(t.partitions)) for t in req.v3_and_below_topics]
    errors: dict[tuple[str, int], ErrorCode] = {}
    if not _txn_write_allowed(ctx, tid):
        errors = {(t, p): E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for t, ps in wanted for p in ps}
    else:
        writable = filter_authorized(ctx, Op.WRITE, ResourceType.TOPIC, (t for t, _ in wanted))
        for t, ps in wanted:
            info = services.store.topic(t)
            for p in ps:
                if t not in writable:
                    errors[(t, p)] = E.TOPIC_AUTHORIZATION_FAILED
                elif info is None or not 0 <= p < info.partitions or info.internal:
                    errors[(t, p)] = E.UNKNOWN_TOPIC_OR_PARTITION
        if errors:
            for t, ps in wanted:
                for p in ps:
                    errors.setdefault((t, p), E.OPERATION_NOT_ATTEMPTED)
        else:
            err = await services.txn_coordinator.add_partitions(
                tid,
                req.v3_and_below_producer_id,
                req.v3_and_below_producer_epoch,
                [(t, p) for t, ps in wanted for p in ps],
            )
            if v < 2 and err == E.PRODUCER_FENCED:
                err = E.INVALID_PRODUCER_EPOCH  # clients before KIP-588 do not know PRODUCER_FENCED
            errors = {(t, p): err for t, ps in wanted for p in ps}
    results = [
        TR(name=t, results_by_partition=[PR(partition_index=p, partition_error_code=errors[(t, p)]) for p in ps])
        for t, ps in wanted
    ]
    return Resp(version=v, throttle_time_ms=0, results_by_topic_v3_and_below=results)


async def _add_partitions_batched(services: BrokerServices, ctx: RequestContext, req: Any, Resp: Any) -> Any:
    """v4+ (brokers only, CLUSTER_ACTION): several transactions at once; `verify_only` asks whether the partitions
    are in the ongoing transaction (KIP-890 part 1, a partition leader verifying a produce)."""
    v = ctx.api_version
    if not authorize(ctx, Op.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        return Resp(version=v, throttle_time_ms=0, error_code=E.CLUSTER_AUTHORIZATION_FAILED, results_by_transaction=[])
    R = Resp.AddPartitionsToTxnResult
    TR = R.AddPartitionsToTxnTopicResult
    PR = TR.AddPartitionsToTxnPartitionResult
    coord = services.txn_coordinator
    out = []
    for x in req.transactions:
        wanted = [(t.name, p) for t in x.topics for p in t.partitions]
        if x.verify_only:
            errors = {tp: coord.verify(x.transactional_id, x.producer_id, x.producer_epoch, tp) for tp in wanted}
        else:
            err = await coord.add_partitions(x.transactional_id, x.producer_id, x.producer_epoch, wanted)
            errors = dict.fromkeys(wanted, err)
        out.append(
            R(
                transactional_id=x.transactional_id,
                topic_results=[
                    TR(
                        name=t.name,
                        results_by_partition=[
                            PR(partition_index=p, partition_error_code=errors[(t.name, p)]) for p in t.partitions
                        ],
                    )
                    for t in x.topics
                ],
            )
        )
    return Resp(version=v, throttle_time_ms=0, error_code=E.NONE, results_by_transaction=out)


# -- AddOffsetsToTxn ------------------------------------------------------------------------------------------------
async def add_offsets_to_txn(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.ADD_OFFSETS_TO_TXN)
    v = ctx.api_version
    if not _txn_write_allowed(ctx, req.transactional_id):
        err = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not authorize(ctx, Op.READ, ResourceType.GROUP, req.group_id):
        err = E.GROUP_AUTHORIZATION_FAILED
    else:
        gc = services.group_coordinator
        await gc.ensure_offsets_topic()
        err = await services.txn_coordinator.add_partitions(
            req.transactional_id,
            req.producer_id,
            req.producer_epoch,
            [(OFFSETS_TOPIC, gc.partition_for(req.group_id))],
        )
        if v < 2 and err == E.PRODUCER_FENCED:
            err = E.INVALID_PRODUCER_EPOCH
    return Resp(version=v, throttle_time_ms=0, error_code=err)


# -- EndTxn ---------------------------------------------------------------------------------------------------------
async def end_txn(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.END_TXN)
    v = ctx.api_version
    if not _txn_write_allowed(ctx, req.transactional_id):
        err = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    else:
        err = await services.txn_coordinator.end_txn(
            req.transactional_id, req.producer_id, req.producer_epoch, req.committed
        )
        if v < 2 and err == E.PRODUCER_FENCED:
            err = E.INVALID_PRODUCER_EPOCH
    return Resp(version=v, throttle_time_ms=0, error_code=err)


# -- TxnOffsetCommit ------------------------------------------------------------------------------------------------
async def txn_offset_commit(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    """WRITE on the transactional id, READ on the group, READ on each topic (Kafka's handleTxnOffsetCommitRequest)."""
    Resp = response_class(ApiKey.TXN_OFFSET_COMMIT)
    T = Resp.TxnOffsetCommitResponseTopic
    P = T.TxnOffsetCommitResponsePartition
    v = ctx.api_version
    now = int(time.time() * 1000)
    asked = [(t.name, list(t.partitions)) for t in req.topics]
    pre: dict[tuple[str, int], ErrorCode] = {}
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    if not _txn_write_allowed(ctx, req.transactional_id):
        pre = {(t, p.partition_index): E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for t, ps in asked for p in ps}
    elif not authorize(ctx, Op.READ, ResourceType.GROUP, req.group_id):
        pre = {(t, p.partition_index): E.GROUP_AUTHORIZATION_FAILED for t, ps in asked for p in ps}
    else:
        readable = filter_authorized(ctx, Op.READ, ResourceType.TOPIC, (t for t, _ in asked))
        for n, (t, ps) in enumerate(asked):
            await pace(n)
            info = services.store.topic(t)
            for p in ps:
                tp = (t, p.partition_index)
                if t not in readable:
                    pre[tp] = E.TOPIC_AUTHORIZATION_FAILED
                elif info is None or not 0 <= p.partition_index < info.partitions:
                    pre[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    epoch = p.committed_leader_epoch if v >= 2 else -1
                    offsets[tp] = OffsetAndMetadata(
                        p.committed_offset, -1 if epoch is None else epoch, p.committed_metadata or "", now, -1
                    )
    top = E.NONE
    results: dict[tuple[str, int], ErrorCode] = {}
    if offsets and services.group_coordinator.check_group(req.group_id) == E.NONE:
        # KIP-890 part 1: the group's offsets partition must be in the producer's ongoing transaction
        # (AddOffsetsToTxn), else the offsets would wait for a marker that never comes
        gp = (OFFSETS_TOPIC, services.group_coordinator.partition_for(req.group_id))
        top = await services.txn_coordinator.verify_produce(
            req.transactional_id, req.producer_id, req.producer_epoch, gp
        )
        if top == E.NOT_ENOUGH_REPLICAS:  # the transaction coordinator is not reachable now: retriable
            top = E.COORDINATOR_NOT_AVAILABLE
    if offsets and not top:
        top, results = await services.group_coordinator.commit_transactional_offsets(
            req.group_id,
            (req.producer_id, req.producer_epoch),
            req.generation_id if v >= 3 else -1,
            (req.member_id or "") if v >= 3 else "",
            req.group_instance_id if v >= 3 else None,
            offsets,
        )
    topics = [
        T(
            name=t,
            partitions=[
                P(
                    partition_index=p.partition_index,
                    error_code=pre.get((t, p.partition_index)) or top or results.get((t, p.partition_index), E.NONE),
                )
                for p in ps
            ],
        )
        for t, ps in asked
    ]
    return Resp(version=v, throttle_time_ms=0, topics=topics)


# -- WriteTxnMarkers ------------------------------------------------------------------------------------------------
async def write_txn_markers(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    """A transaction coordinator (another broker's) has this broker's partitions append markers."""
    Resp = response_class(ApiKey.WRITE_TXN_MARKERS)
    MR = Resp.WritableTxnMarkerResult
    TR = MR.WritableTxnMarkerTopicResult
    PR = TR.WritableTxnMarkerPartitionResult
    allowed = authorize(ctx, Op.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
    out = []
    for m in req.markers:
        parts = [(t.name, p) for t in m.topics for p in t.partition_indexes]
        if not allowed:
            errors = {tp: E.CLUSTER_AUTHORIZATION_FAILED for tp in parts}
        else:
            marker = TxnMarker(m.producer_id, m.producer_epoch, m.transaction_result, m.coordinator_epoch)
            errors = await append_markers(services.replica_manager, services.group_coordinator, marker, parts)
        out.append(
            MR(
                producer_id=m.producer_id,
                topics=[
                    TR(
                        name=t.name,
                        partitions=[PR(partition_index=p, error_code=errors[(t.name, p)]) for p in t.partition_indexes],
                    )
                    for t in m.topics
                ],
            )
        )
    return Resp(version=ctx.api_version, markers=out)


# -- DescribeTransactions / ListTransactions ------------------------------------------------------------------------
async def describe_transactions(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.DESCRIBE_TRANSACTIONS)
    TS = Resp.TransactionState
    TD = TS.TopicData
    out = []
    for tid in req.transactional_ids:
        blank = {"transaction_state": "", "transaction_timeout_ms": 0, "transaction_start_time_ms": -1}
        blank |= {"producer_id": -1, "producer_epoch": -1, "topics": []}
        if not authorize(ctx, Op.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
            out.append(TS(error_code=E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, transactional_id=tid, **blank))
            continue
        err, md = services.txn_coordinator.describe(tid)
        if md is None:
            out.append(TS(error_code=err, transactional_id=tid, **blank))
            continue
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(md.partitions):
            by_topic.setdefault(t, []).append(p)
        visible = filter_authorized(ctx, Op.DESCRIBE, ResourceType.TOPIC, by_topic)
        out.append(
            TS(
                error_code=E.NONE,
                transactional_id=tid,
                transaction_state=md.state.wire_name,
                transaction_timeout_ms=md.timeout_ms,
                transaction_start_time_ms=md.start_ms,
                producer_id=md.producer_id,
                producer_epoch=md.producer_epoch,
                topics=[TD(topic=t, partitions=ps) for t, ps in by_topic.items() if t in visible],
            )
        )
    return Resp(version=ctx.api_version, throttle_time_ms=0, transaction_states=out)


async def list_transactions(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    """Filters: states (unknown names are echoed back), producer ids, v1 running longer than DurationFilter ms,
    v2 a regular expression on the id; only ids the principal may DESCRIBE."""
    Resp = response_class(ApiKey.LIST_TRANSACTIONS)
    TS = Resp.TransactionState
    v = ctx.api_version
    states = set()
    unknown = []
    for name in req.state_filters or []:
        st = TxnState.from_name(name)
        if st is None:
            unknown.append(name)
        else:
            states.add(st)
    pids = set(req.producer_id_filters or [])
    duration = req.duration_filter if v >= 1 else -1
    pattern = None
    if v >= 2 and req.transactional_id_pattern:
        try:
            pattern = re.compile(req.transactional_id_pattern)
        except re.error:
            return Resp(
                version=v,
                throttle_time_ms=0,
                error_code=E.INVALID_REQUEST,
                unknown_state_filters=[],
                transaction_states=[],
            )
    err, txns = services.txn_coordinator.list()
    now = int(time.time() * 1000)
    picked = [
        md
        for md in txns
        if (not states or md.state in states)
        and (not pids or md.producer_id in pids)
        and (duration is None or duration < 0 or now - md.start_ms > duration)  # as Kafka, Empty ones too
        and (pattern is None or pattern.fullmatch(md.transactional_id) is not None)
    ]
    visible = filter_authorized(ctx, Op.DESCRIBE, ResourceType.TRANSACTIONAL_ID, (md.transactional_id for md in picked))
    return Resp(
        version=v,
        throttle_time_ms=0,
        error_code=err,
        unknown_state_filters=unknown,
        transaction_states=[
            TS(transactional_id=md.transactional_id, producer_id=md.producer_id, transaction_state=md.state.wire_name)
            for md in picked
            if md.transactional_id in visible
        ],
    )


# -- DescribeProducers ----------------------------------------------------------------------------------------------
async def describe_producers(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    """The active producers of partitions this broker leads (READ on the topic), from their producer state."""
    Resp = response_class(ApiKey.DESCRIBE_PRODUCERS)
    TR = Resp.TopicResponse
    PR = TR.PartitionResponse
    PS = PR.ProducerState
    rm = services.replica_manager
    readable = filter_authorized(ctx, Op.READ, ResourceType.TOPIC, (t.name for t in req.topics))
    topics = []
    for t in req.topics:
        parts = []
        for i in t.partition_indexes:
            if t.name not in readable:
                parts.append(PR(partition_index=i, error_code=E.TOPIC_AUTHORIZATION_FAILED, active_producers=[]))
                continue
            p = rm.get_partition(t.name, i)
            if p is None or not p.is_leader:
                err = rm.not_hosted_error(t.name, i) if p is None else E.NOT_LEADER_OR_FOLLOWER
                parts.append(PR(partition_index=i, error_code=err, active_producers=[]))
                continue
            producers = [
                PS(
                    producer_id=e.producer_id,
                    producer_epoch=e.producer_epoch,
                    last_sequence=e.last_seq if not e.is_empty else -1,
                    last_timestamp=e.last_timestamp,
                    coordinator_epoch=e.coordinator_epoch,
                    current_txn_start_offset=e.current_txn_first_offset,
                )
                for e in p.log.producer_state.producers.values()
            ]
            parts.append(PR(partition_index=i, error_code=E.NONE, active_producers=producers))
        topics.append(TR(name=t.name, partitions=parts))
    return Resp(version=ctx.api_version, throttle_time_ms=0, topics=topics)
