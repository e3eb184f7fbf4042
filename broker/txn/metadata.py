"""One transactional id's state (Kafka's TransactionMetadata and TransactionState), as the transaction coordinator
keeps it in memory and writes it to `__transaction_state`.

A change is prepared (`pending` holds the target state, so a concurrent request gets CONCURRENT_TRANSACTIONS),
written, and applied only once the write is committed (`apply`), so the in-memory state never gets ahead of the log.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from .records import TxnLogValue

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767


class TxnState(enum.IntEnum):
    """Kafka's TransactionState ids (the int8 of TransactionLogValue) and names (what DescribeTransactions and
    ListTransactions answer)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def wire_name(self) -> str:
        return _NAMES[self]

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name)


_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {v: k for k, v in _NAMES.items()}

# Kafka's TransactionState.validPreviousStates
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.ONGOING: frozenset({TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class TxnSnapshot:
    """The fields a transition writes (Kafka's TxnTransitMetadata)."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_ms: int
    last_update_ms: int

    def to_value(self) -> TxnLogValue:
        parts: dict[str, list[int]] | None = None
        if self.state != TxnState.EMPTY:
            parts = {}
            for t, p in self.partitions:
                parts.setdefault(t, []).append(p)
        return TxnLogValue(
            self.producer_id,
            self.producer_epoch,
            self.timeout_ms,
            int(self.state),
            parts,
            self.last_update_ms,
            self.start_ms,
            previous_producer_id=self.last_producer_id,
        )


@dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    pending: TxnState | None = None

    @classmethod
    def from_value(cls, tid: str, v: TxnLogValue) -> TransactionMetadata:
        state = TxnState(v.status)
        parts = set()
        if state != TxnState.EMPTY and v.partitions:
            parts = {(t, p) for t, ps in v.partitions.items() for p in ps}
        return cls(
            tid,
            v.producer_id,
            v.previous_producer_id,
            v.producer_epoch,
            NO_PRODUCER_EPOCH,
            v.timeout_ms,
            state,
            parts,
            v.start_ms,
            v.last_update_ms,
        )

    def snapshot(self) -> TxnSnapshot:
        return TxnSnapshot(
            self.producer_id,
            self.last_producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.timeout_ms,
            self.state,
            frozenset(self.partitions),
            self.start_ms,
            self.last_update_ms,
        )

    def prepare(self, state: TxnState, now: int, **changes: object) -> TxnSnapshot:
        """Mark `state` pending and return what to write; ValueError for a transition Kafka does not allow."""
        if self.pending is not None:
            raise ValueError(
                f"{self.transactional_id}: transition to {state.name} while {self.pending.name} is pending"
            )
        if self.state not in VALID_PREVIOUS[state]:
            raise ValueError(f"{self.transactional_id}: no transition from {self.state.name} to {state.name}")
        snap = replace(self.snapshot(), state=state, last_update_ms=now, **changes)  # type: ignore[arg-type]
        self.pending = state
        return snap

    def apply(self, snap: TxnSnapshot) -> None:
        """A written transition takes effect."""
        self.producer_id = snap.producer_id
        self.last_producer_id = snap.last_producer_id
        self.producer_epoch = snap.producer_epoch
        self.last_producer_epoch = snap.last_producer_epoch
        self.timeout_ms = snap.timeout_ms
        self.state = snap.state
        self.partitions = set(snap.partitions)
        self.start_ms = snap.start_ms
        self.last_update_ms = snap.last_update_ms
        self.pending = None

    def fail(self) -> None:
        """A transition whose write failed is dropped."""
        self.pending = None

    @property
    def epoch_exhausted(self) -> bool:
        """Kafka's isEpochExhausted: one more bump must stay below Short.MaxValue (the coordinator may need one
        more for a fence)."""
        return self.producer_epoch >= MAX_EPOCH - 1


__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "TopicPartition",
    "TransactionMetadata",
    "TxnSnapshot",
    "TxnState",
]
