"""What the log cleaner may drop of transactional data (Kafka's CleanedTransactionMetadata).

The cleaner walks batches in offset order and asks, per batch:

* a data batch of an aborted transaction (its producer has an abort entry in the `.txnindex` whose first offset is at
  or before the batch) is discarded -- and it is not put in the offset map, so an aborted value never wins over a
  committed one;
* an ABORT marker is kept, with its `.txnindex` entry copied to the cleaned segment, while this pass still saw data of
  its transaction; once a pass sees none (the data went in an earlier pass), the marker may go;
* a COMMIT marker may go once no data of its transaction is left before it;
* a marker that may go first gets a delete horizon (now + delete.retention.ms, KIP-534) and is removed only by a
  cleaning after that horizon, so a consumer that read the data has time to read the marker.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from strata.protocol.records import BatchHeader

from .producer_state import read_end_marker
from .txn_index import AbortedTxn


class CleanedTransactions:
    """Tracks transactions across one walk of the cleaner (the offset map build, or one group's cleaning)."""

    def __init__(self, retained_aborts: list[AbortedTxn] | None = None) -> None:
        self._pending: list[tuple[int, int, int, AbortedTxn]] = []  # heap by first offset
        self._seen: set[AbortedTxn] = set()
        self._aborted: dict[int, tuple[AbortedTxn, list[int]]] = {}  # pid -> (entry, [last observed batch offset])
        self._committed: set[int] = set()
        # abort entries whose marker this walk keeps: they go to the cleaned segment's `.txnindex`
        self.retained_aborts = retained_aborts

    def add_aborted(self, txns: Iterable[AbortedTxn]) -> None:
        for t in txns:
            if t not in self._seen:
                self._seen.add(t)
                heapq.heappush(self._pending, (t.first_offset, t.last_offset, t.producer_id, t))

    def _consume_up_to(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[0][0] <= offset:
            t = heapq.heappop(pending)[3]
            self._aborted.setdefault(t.producer_id, (t, []))

    def on_batch(self, h: BatchHeader) -> bool:
        """A data batch: True when it belongs to an aborted transaction (drop its records)."""
        self._consume_up_to(h.last_offset)
        if not h.is_transactional:
            return False
        st = self._aborted.get(h.producer_id)
        if st is not None:
            st[1][:] = [h.last_offset]
            return True
        self._committed.add(h.producer_id)
        return False

    def on_control(self, h: BatchHeader, batch: bytes | memoryview) -> bool:
        """A control batch: True when it may be removed (once past its delete horizon)."""
        self._consume_up_to(h.last_offset)
        if h.records_count == 0:
            return True  # emptied by an earlier cleaning: nothing to keep
        marker = read_end_marker(batch, 0)
        if marker is None:
            return False  # not a transaction marker: kept
        pid = h.producer_id
        if marker[0]:  # ABORT
            st = self._aborted.pop(pid, None)
            if st is not None and st[1]:
                if self.retained_aborts is not None:
                    self.retained_aborts.append(st[0])
                return False
            return True
        if pid in self._committed:  # COMMIT
            self._committed.discard(pid)
            return False
        return True


__all__ = ["CleanedTransactions"]
