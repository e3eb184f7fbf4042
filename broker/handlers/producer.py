"""InitProducerId (api key 22) v0-5 for idempotent, non-transactional producers.

As Kafka's TransactionCoordinator does for a null transactional id, every request gets a fresh producer id with epoch
0 -- also a KIP-360 (v3+) request carrying the producer's current id and epoch: the producer then continues under the
new id. Ids come from blocks of 1000 reserved durably in the MetadataStore (Kafka's ProducerIdManager), so an id is
never handed out twice, not even after a crash.

Strata has no transaction coordinator yet. A request with a transactional id is refused with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53): it is the error a Kafka broker answers when a transactional id may not be
used on it, and every client treats it as fatal at once ("Transactional Id authorization failed"). The retriable
coordinator errors (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR) would make producers retry until their timeouts
without saying why. An empty transactional id is INVALID_REQUEST (42), as in Kafka.
"""
from __future__ import annotations

import structlog

from strata.protocol.errors import ErrorCode
from strata.protocol.registry import ApiKey, response_class

log = structlog.get_logger("strata.producer_ids")

PRODUCER_ID_BLOCK_SIZE = 1000


class ProducerIdManager:
    """Hands out producer ids from blocks reserved in the metadata store."""

    def __init__(self, store, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> None:
        self.store = store
        self.block_size = block_size
        self._next = 0
        self._end = 0  # exclusive end of the current block; empty until the first request

    async def generate(self) -> int:
        if self._next >= self._end:
            start = await self.store.allocate_producer_id_block(self.block_size)
            self._next, self._end = start, start + self.block_size
            log.info("reserved producer id block", first=start, last=self._end - 1)
        pid = self._next
        self._next += 1
        return pid


def producer_id_manager(server) -> ProducerIdManager:
    mgr = getattr(server, "producer_id_manager", None)
    if mgr is None:
        mgr = server.producer_id_manager = ProducerIdManager(server.store)
    return mgr


async def init_producer_id(server, ctx, req):
    Resp = response_class(ApiKey.INIT_PRODUCER_ID)
    v = ctx.api_version
    tid = req.transactional_id
    if tid is not None:
        err = ErrorCode.INVALID_REQUEST if tid == "" else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        if err == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            log.warning("refusing a transactional producer: transactions are not supported",
                        transactional_id=tid, client_id=ctx.client_id)
        return Resp(version=v, throttle_time_ms=0, error_code=err, producer_id=-1, producer_epoch=-1)
    try:
        pid = await producer_id_manager(server).generate()
    except Exception:
        log.exception("cannot reserve a producer id block")
        return Resp(version=v, throttle_time_ms=0, error_code=ErrorCode.UNKNOWN_SERVER_ERROR, producer_id=-1,
                    producer_epoch=-1)
    return Resp(version=v, throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=pid, producer_epoch=0)
