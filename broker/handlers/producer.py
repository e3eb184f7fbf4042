"""InitProducerId (api key 22) v0-5.

Without a transactional id (idempotent producers), as Kafka's TransactionCoordinator: every request gets a fresh
producer id with epoch 0 -- also a KIP-360 (v3+) request carrying the producer's current id and epoch: the producer
then continues under the new id. Ids come from blocks of 1000 reserved durably in the MetadataStore (Kafka's
ProducerIdManager), so an id is never handed out twice, not even after a crash (broker/producer_ids.py).

With one (WRITE on the TRANSACTIONAL_ID), the transaction coordinator bumps the id's epoch, fencing older producers
(broker/txn/coordinator.py). An empty transactional id is INVALID_REQUEST (42), as in Kafka.
"""

from __future__ import annotations

from typing import Any

import structlog

from strata.protocol.errors import ErrorCode
from strata.protocol.registry import ApiKey, response_class

from ..authorization import authorize, authorize_by_resource_type
from ..authorized_ops import CLUSTER_NAME, AclOperation, ResourceType, allowed_quietly
from ..request_context import RequestContext
from ..services import BrokerServices

log = structlog.get_logger("strata.producer_ids")


async def init_producer_id(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.INIT_PRODUCER_ID)
    v = ctx.api_version
    tid = req.transactional_id
    if tid is None and not _may_write_idempotently(ctx):
        return Resp(
            version=v,
            throttle_time_ms=0,
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            producer_id=-1,
            producer_epoch=-1,
        )
    if tid is not None:
        return await _init_transactional(services, ctx, req, tid)
    try:
        pid = await services.producer_ids.generate()
    except Exception:
        log.exception("cannot reserve a producer id block")
        return Resp(
            version=v, throttle_time_ms=0, error_code=ErrorCode.UNKNOWN_SERVER_ERROR, producer_id=-1, producer_epoch=-1
        )
    return Resp(version=v, throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=pid, producer_epoch=0)


async def _init_transactional(services: BrokerServices, ctx: RequestContext, req: Any, tid: str) -> Any:
    Resp = response_class(ApiKey.INIT_PRODUCER_ID)
    v = ctx.api_version

    def answer(err: ErrorCode, pid: int = -1, epoch: int = -1) -> Any:
        if v < 4 and err == ErrorCode.PRODUCER_FENCED:
            err = ErrorCode.INVALID_PRODUCER_EPOCH  # KIP-588: older clients know only this one
        return Resp(version=v, throttle_time_ms=0, error_code=err, producer_id=pid, producer_epoch=epoch)

    if tid == "":
        return answer(ErrorCode.INVALID_REQUEST)
    if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return answer(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    expected = None
    if v >= 3 and (req.producer_id != -1 or req.producer_epoch != -1):
        if req.producer_id == -1 or req.producer_epoch == -1:
            return answer(ErrorCode.INVALID_REQUEST)
        expected = (req.producer_id, req.producer_epoch)
    try:
        err, pid, epoch = await services.txn_coordinator.init_producer_id(tid, req.transaction_timeout_ms, expected)
    except Exception:
        log.exception("cannot initialize a transactional producer", transactional_id=tid)
        return answer(ErrorCode.UNKNOWN_SERVER_ERROR)
    return answer(err, pid, epoch)


def _may_write_idempotently(ctx: RequestContext) -> bool:
    """KIP-679: IDEMPOTENT_WRITE on the cluster, or WRITE on at least one topic (Kafka's authorizeByResourceType), as
    an idempotent producer writes only where it may anyway."""
    return allowed_quietly(
        ctx, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME
    ) or authorize_by_resource_type(ctx, AclOperation.WRITE, ResourceType.TOPIC)
