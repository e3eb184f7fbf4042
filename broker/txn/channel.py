"""The transaction coordinator's channel to partition leaders (Kafka's TransactionMarkerChannelManager) and the
produce path's to transaction coordinators (Kafka's AddPartitionsToTxnManager), for a cluster.

Markers for partitions this broker leads are appended in-process; the others go to their leaders as
WriteTxnMarkers v1, grouped per leader. A produce to a partition led here for a transactional id coordinated
elsewhere is verified with AddPartitionsToTxn v4 `verify_only` (KIP-890 part 1). A leader or coordinator that
cannot be reached answers a retriable error: the caller retries (markers) or the producer does (produce).
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from strata.config import BrokerConfig
from strata.protocol.errors import ErrorCode
from strata.protocol.registry import REQUEST_CLASSES, ApiKey

from ..cluster.broker_client import BrokerConnection, BrokerConnectionError, inter_broker_security
from ..endpoints import BrokerEndpoints
from ..metadata_store import MetadataStore
from .markers import MarkerWriter, TxnMarker
from .metadata import TopicPartition
from .records import TRANSACTION_STATE_TOPIC

log = structlog.get_logger("strata.txn")

E = ErrorCode
CLIENT_ID = "strata-txn"
WRITE_TXN_MARKERS_VERSION = 1
ADD_PARTITIONS_VERIFY_VERSION = 4


class TxnChannel:
    def __init__(
        self,
        config: BrokerConfig,
        broker_id: int,
        store: MetadataStore,
        endpoints: BrokerEndpoints,
        local_markers: MarkerWriter,
    ) -> None:
        self.config = config
        self.broker_id = broker_id
        self.store = store
        self.endpoints = endpoints
        self.local_markers = local_markers
        self.timeout_s = config["replica.socket.timeout.ms"] / 1000.0
        self._conns: dict[int, tuple[BrokerConnection, asyncio.Lock]] = {}

    def _connection(self, broker_id: int) -> tuple[BrokerConnection, asyncio.Lock]:
        ep = self.endpoints.inter_broker_endpoint(broker_id)
        if ep is None:
            raise BrokerConnectionError(f"broker {broker_id} is not registered with an inter-broker endpoint")
        entry = self._conns.get(broker_id)
        if entry is None or (entry[0].host, entry[0].port) != tuple(ep):
            conn = BrokerConnection(
                ep[0], ep[1], f"{CLIENT_ID}-{self.broker_id}", self.timeout_s, inter_broker_security(self.config)
            )
            entry = self._conns[broker_id] = (conn, asyncio.Lock())
        return entry

    async def _request(self, broker_id: int, api_key: int, version: int, **fields: Any) -> Any:
        conn, lock = self._connection(broker_id)
        async with lock:
            if not conn.connected:
                await conn.connect()
            return await conn.request(api_key, version, self.timeout_s, **fields)

    def coordinator_of(self, state_partition: int) -> int:
        """The broker leading a `__transaction_state` partition (-1: none)."""
        st = self.store.partition_state(TRANSACTION_STATE_TOPIC, state_partition)
        return st.leader if st is not None else -1

    async def close(self) -> None:
        for conn, _ in self._conns.values():
            await conn.close()
        self._conns.clear()

    # -- markers (the coordinator's side) ---------------------------------------------------------------------------
    async def write_markers(
        self, marker: TxnMarker, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        by_leader: dict[int, list[TopicPartition]] = {}
        out: dict[TopicPartition, ErrorCode] = {}
        for tp in partitions:
            st = self.store.partition_state(*tp)
            if st is None:
                out[tp] = E.UNKNOWN_TOPIC_OR_PARTITION if self.store.topic(tp[0]) is None else E.NOT_LEADER_OR_FOLLOWER
            elif st.leader < 0:
                out[tp] = E.LEADER_NOT_AVAILABLE
            else:
                by_leader.setdefault(st.leader, []).append(tp)
        for res in await asyncio.gather(*(self._markers_to(b, marker, tps) for b, tps in by_leader.items())):
            out.update(res)
        return out

    async def _markers_to(
        self, broker_id: int, marker: TxnMarker, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        if broker_id == self.broker_id:
            return await self.local_markers(marker, partitions)
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        M = REQUEST_CLASSES[ApiKey.WRITE_TXN_MARKERS].WritableTxnMarker
        T = M.WritableTxnMarkerTopic
        wire = M(
            producer_id=marker.producer_id,
            producer_epoch=marker.producer_epoch,
            transaction_result=marker.commit,
            topics=[T(name=t, partition_indexes=ps) for t, ps in by_topic.items()],
            coordinator_epoch=marker.coordinator_epoch,
        )
        try:
            resp = await self._request(broker_id, ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, markers=[wire])
        except (BrokerConnectionError, TimeoutError) as e:
            log.info("cannot send transaction markers", broker=broker_id, error=str(e))
            return dict.fromkeys(partitions, E.NETWORK_EXCEPTION)
        out: dict[TopicPartition, ErrorCode] = {}
        for m in resp.markers:
            for t in m.topics:
                for p in t.partitions:
                    out[(t.name, p.partition_index)] = ErrorCode(p.error_code)
        return out

    # -- verification (the partition leader's side) ----------------------------------------------------------------
    async def verify(
        self, coordinator_id: int, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> ErrorCode:
        X = REQUEST_CLASSES[ApiKey.ADD_PARTITIONS_TO_TXN].AddPartitionsToTxnTransaction
        txn = X(
            transactional_id=transactional_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            verify_only=True,
            topics=[X.AddPartitionsToTxnTopic(name=tp[0], partitions=[tp[1]])],
        )
        try:
            resp = await self._request(
                coordinator_id, ApiKey.ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_VERIFY_VERSION, transactions=[txn]
            )
        except (BrokerConnectionError, TimeoutError):
            return E.NOT_ENOUGH_REPLICAS  # retriable for the producer
        if resp.error_code:
            return E.NOT_ENOUGH_REPLICAS
        for r in resp.results_by_transaction:
            for t in r.topic_results:
                for p in t.results_by_partition:
                    return ErrorCode(p.partition_error_code)
        return E.UNKNOWN_SERVER_ERROR


__all__ = ["TxnChannel"]
