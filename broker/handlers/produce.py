"""Produce: validate acks, append each partition's batches, answer per partition (or not at all for acks=0)."""

from __future__ import annotations

import uuid
from typing import Any

from strata.protocol.errors import ErrorCode
from strata.protocol.records import RecordBatchError, check_produce_records
from strata.protocol.registry import ApiKey, response_class

from ..network import CloseConnection
from ..request_context import RequestContext
from ..services import BrokerServices
from ..tiered import REMOTE_LOG_METADATA_TOPIC, RLMM_PRODUCER_CLIENT_ID
from .leadership import leader_endpoints


async def handle(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.PRODUCE)
    TopicResp = Resp.TopicProduceResponse
    PartResp = TopicResp.PartitionProduceResponse
    v = ctx.api_version
    store = services.store

    # Resolve topic names first (v13+ addresses topics by id).
    topics: list[tuple[Any, str | None, uuid.UUID | None]] = []  # (request entry, name, topic id)
    for td in req.topic_data:
        if v >= 13:
            info = store.topic_by_id(td.topic_id)
            topics.append((td, info.name if info else None, td.topic_id))
        else:
            topics.append((td, td.name, None))

    fixed_error: ErrorCode | None = None
    if v < 3:
        fixed_error = ErrorCode.UNSUPPORTED_VERSION  # magic v0/v1 message sets are not accepted (Kafka 4)
    elif req.acks not in (0, 1, -1):
        fixed_error = ErrorCode.INVALID_REQUIRED_ACKS

    entries: list[tuple[str, int, bytes | memoryview]] = []
    # (topic idx, partition idx, pre-append error and its message)
    slots: list[tuple[int, int, int | None, str | None]] = []
    for ti, (td, name, _tid) in enumerate(topics):
        for pd in td.partition_data:
            err: int | None = fixed_error
            message = None
            if err is None:
                if name is None:
                    err = ErrorCode.UNKNOWN_TOPIC_ID
                elif pd.records is None:
                    err = ErrorCode.INVALID_RECORD
                else:
                    try:
                        check_produce_records(v, pd.records)
                        entries.append((name, pd.index, pd.records))
                    except RecordBatchError as e:
                        err, message = e.error_code, str(e)
            slots.append((ti, pd.index, err, message))

    # another broker's RLMM writing to a metadata partition led here (see RLMM_PRODUCER_CLIENT_ID)
    internal = (
        bool(entries)
        and (ctx.client_id or "").startswith(RLMM_PRODUCER_CLIENT_ID)
        and all(name == REMOTE_LOG_METADATA_TOPIC for name, _, _ in entries)
    )
    results = (
        iter(
            await services.replica_manager.append_records(
                entries, internal=internal, required_acks=req.acks, timeout_ms=req.timeout_ms
            )
        )
        if entries
        else iter(())
    )

    responses = []
    any_error = False
    by_topic: dict[int, list] = {}
    leaders: set[int] = set()
    for ti, index, err, message in slots:
        if err is not None:
            pr = PartResp(
                index=index,
                error_code=err,
                base_offset=-1,
                log_append_time_ms=-1,
                log_start_offset=-1,
                error_message=message,
            )
        else:
            r = next(results)
            err = r.error
            pr = PartResp(
                index=index,
                error_code=r.error,
                base_offset=r.base_offset,
                log_append_time_ms=r.log_append_time,
                log_start_offset=r.log_start_offset,
                error_message=r.message if r.error else None,
            )
            if v >= 10 and r.current_leader is not None:
                # KIP-951: name the new leader so the client need not ask Metadata first
                pr.current_leader = PartResp.LeaderIdAndEpoch(
                    leader_id=r.current_leader[0], leader_epoch=r.current_leader[1]
                )
                leaders.add(r.current_leader[0])
        any_error |= err != ErrorCode.NONE
        by_topic.setdefault(ti, []).append(pr)
    for ti, (_td, name, tid) in enumerate(topics):
        responses.append(
            TopicResp(name=name if v < 13 else None, topic_id=tid, partition_responses=by_topic.get(ti, []))
        )

    if req.acks == 0:
        # No response for acks=0; on error Kafka closes the connection so the producer refreshes its metadata.
        if any_error:
            raise CloseConnection
        return None
    resp = Resp(version=v, responses=responses, throttle_time_ms=0)
    if leaders:
        resp.node_endpoints = [
            Resp.NodeEndpoint(node_id=b, host=h, port=p, rack=rack)
            for b, h, p, rack in leader_endpoints(services, ctx.listener, leaders)
        ]
    return resp
