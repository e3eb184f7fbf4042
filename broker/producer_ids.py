"""Kafka's ProducerIdManager: producer ids handed out from blocks of PRODUCER_ID_BLOCK_SIZE reserved durably
in the MetadataStore, so an id is never handed out twice, not even after a crash."""

from __future__ import annotations

import structlog

from .metadata_store import MetadataStore

log = structlog.get_logger("strata.producer_ids")

PRODUCER_ID_BLOCK_SIZE = 1000


class ProducerIdManager:
    """Hands out producer ids from blocks reserved in the metadata store."""

    def __init__(self, store: MetadataStore, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> None:
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


__all__ = ["PRODUCER_ID_BLOCK_SIZE", "ProducerIdManager"]
