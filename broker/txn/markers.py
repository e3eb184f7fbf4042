"""WriteTxnMarkers' work on this broker: append a commit/abort marker to each partition it leads (Kafka's
AppendOrigin COORDINATOR, acks=-1) and tell the group coordinator when a `__consumer_offsets` partition got one, so
the transactional offsets it holds for that producer are committed or dropped (Kafka's
handleWriteTxnMarkersRequest + GroupCoordinator.onTransactionCompleted).

The transaction coordinator of one broker calls it in-process; the WriteTxnMarkers handler calls it for a
coordinator on another broker.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from strata.protocol.errors import ErrorCode
from strata.protocol.txn_markers import build_end_txn_marker

from ..group.records import OFFSETS_TOPIC

if TYPE_CHECKING:
    from ..group import GroupCoordinator
    from ..replica_manager import ReplicaManager

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """What ends one producer's transaction on its partitions (a WritableTxnMarker without the partitions)."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int

    def batch(self) -> bytes:
        return build_end_txn_marker(
            self.producer_id, self.producer_epoch, commit=self.commit, coordinator_epoch=self.coordinator_epoch
        )


# Appends a marker to partitions: each partition's error (NONE once its leader has the marker).
MarkerWriter = Callable[[TxnMarker, list[TopicPartition]], Awaitable[dict[TopicPartition, ErrorCode]]]


async def append_markers(
    replica_manager: ReplicaManager,
    group_coordinator: GroupCoordinator,
    marker: TxnMarker,
    partitions: list[TopicPartition],
) -> dict[TopicPartition, ErrorCode]:
    """Append `marker` to the partitions this broker leads (the others answer NOT_LEADER_OR_FOLLOWER).

    A `__consumer_offsets` partition whose group coordinator is not loaded yet answers NOT_LEADER_OR_FOLLOWER
    (retried by the transaction coordinator, as Kafka's broker answers a group coordinator that is not ready): a
    marker appended behind the load's back would be missed both by the replay (it reads to the log end it saw when
    it started) and by the live state (which does not hold the transaction's offsets yet), leaving them pending."""
    out: dict[TopicPartition, ErrorCode] = {}
    ready = [tp for tp in partitions if tp[0] != OFFSETS_TOPIC or _offsets_loaded(group_coordinator, tp[1])]
    for tp in partitions:
        if tp not in ready:
            out[tp] = ErrorCode.NOT_LEADER_OR_FOLLOWER
    if not ready:
        return out
    batch = marker.batch()
    entries: list[tuple[str, int, bytes | memoryview]] = [(t, p, batch) for t, p in ready]
    results = await replica_manager.append_records(entries, internal=True, from_client=False)
    for tp, r in zip(ready, results):
        out[tp] = ErrorCode(r.error)
        if r.error == ErrorCode.NONE and tp[0] == OFFSETS_TOPIC:
            group_coordinator.complete_transaction(tp[1], marker.producer_id, marker.commit)
    return out


def _offsets_loaded(group_coordinator: GroupCoordinator, partition: int) -> bool:
    runtime = group_coordinator.runtime
    return runtime.active and partition not in runtime.loading


__all__ = ["MarkerWriter", "TxnMarker", "append_markers"]
