"""InitProducerId (api key 22) v0-5 for idempotent, non-transactional producers.

As Kafka's TransactionCoordinator does for a null transactional id, every request gets a fresh producer id with epoch
0 -- also a KIP-360 (v3+) request carrying the producer's current id and epoch: the producer then continues under the
new id. Ids come from blocks of 1000 reserved durably in the MetadataStore (Kafka's ProducerIdManager), so an id is
never handed out twice, not even after a crash (broker/producer_ids.py).

Strata has no transaction coordinator yet. A request with a transactional id is refused with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53): it is the error a Kafka broker answers when a transactional id may not be
used on it, and every client treats it as fatal at once ("Transactional Id authorization failed"). The retriable
coordinator errors (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR) would make producers retry until their timeouts
without saying why. An empty transactional id is INVALID_REQUEST (42), as in Kafka.
"""

from __future__ import annotations

from typing import Any

import structlog

from strata.protocol.errors import ErrorCode
from strata.protocol.registry import ApiKey, response_class

from ..authorization import authorize_by_resource_type
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
        err = ErrorCode.INVALID_REQUEST if tid == "" else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        if err == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            log.warning(
                "refusing a transactional producer: transactions are not supported",
                transactional_id=tid,
                client_id=ctx.client_id,
            )
        return Resp(version=v, throttle_time_ms=0, error_code=err, producer_id=-1, producer_epoch=-1)
    try:
        pid = await services.producer_ids.generate()
    except Exception:
        log.exception("cannot reserve a producer id block")
        return Resp(
            version=v, throttle_time_ms=0, error_code=ErrorCode.UNKNOWN_SERVER_ERROR, producer_id=-1, producer_epoch=-1
        )
    return Resp(version=v, throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=pid, producer_epoch=0)


def _may_write_idempotently(ctx: RequestContext) -> bool:
    """KIP-679: IDEMPOTENT_WRITE on the cluster, or WRITE on at least one topic (Kafka's authorizeByResourceType), as
    an idempotent producer writes only where it may anyway."""
    return allowed_quietly(
        ctx, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME
    ) or authorize_by_resource_type(ctx, AclOperation.WRITE, ResourceType.TOPIC)
