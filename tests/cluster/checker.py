"""A queue checker in the spirit of Jepsen's: what producers were told was written must be what a consumer reads.

A history records, for every record a producer sent, its value and outcome: acknowledged at (partition, offset), failed
with an error, or unknown (no answer). Values are ``<producer>:<seq>`` with ``seq`` increasing per producer in send
order. After the run a consumer reads every partition from its start to its end and the checker compares:

* **lost**: acknowledged values that no read returned (acknowledged must be a subset of read);
* **misplaced**: acknowledged values read at another (partition, offset) than the acknowledgement said;
* **acked without offset**: acknowledgements that carried no offset. An idempotent librdkafka producer whose response
  to a batch was lost (the leader closed the connection as it shut down) reports that batch delivered, offset unknown,
  as soon as a later batch of the same partition is acknowledged (its "implicit ack": sequence numbers prove the
  earlier batch was written). Counted, and each must be read in its partition;
* **duplicated**: values read more than once (an idempotent producer allows none; a non-idempotent one may
  duplicate what it retried, which is reported but allowed);
* **reordered**: within a partition, offsets not strictly increasing, or one producer's values not in send order;
* **unexpected**: values read that no producer ever sent (corruption or a foreign writer).

Failed or unanswered sends that were read anyway are indeterminate ("recovered" in Jepsen's terms): allowed, counted.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field


def encode_value(producer: str, seq: int, pad: int = 0) -> bytes:
    return f"{producer}:{seq:09d}".encode() + b"." * pad


def decode_value(value: bytes | None) -> tuple[str, int] | None:
    if not value:
        return None
    head = value.split(b".", 1)[0]
    try:
        producer, seq = head.decode().rsplit(":", 1)
        return producer, int(seq)
    except (UnicodeDecodeError, ValueError):
        return None


@dataclass
class History:
    """What producers sent and what they were told. Thread-safe (delivery callbacks may run on other threads)."""

    sent: dict[bytes, int] = field(default_factory=dict)  # value -> partition it was sent to
    acked: dict[bytes, tuple[int, int | None]] = field(default_factory=dict)  # value -> (partition, offset)
    failed: dict[bytes, str] = field(default_factory=dict)  # value -> error
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def send(self, value: bytes, partition: int) -> None:
        with self._lock:
            self.sent[value] = partition

    def ack(self, value: bytes, partition: int, offset: int | None) -> None:
        with self._lock:
            self.acked[value] = (partition, offset)

    def fail(self, value: bytes, error: str) -> None:
        with self._lock:
            self.failed[value] = error

    def merge(self, other: History) -> None:
        with self._lock:
            self.sent.update(other.sent)
            self.acked.update(other.acked)
            self.failed.update(other.failed)


@dataclass(frozen=True)
class Read:
    partition: int
    offset: int
    value: bytes | None


@dataclass
class Verdict:
    sent: int
    acked: int
    failed: int
    unknown: int
    read: int
    recovered: int  # failed/unknown sends that were read anyway (allowed)
    lost: list[bytes]
    misplaced: list[tuple[bytes, tuple[int, int | None], tuple[int, int]]]  # value, acked at, read at
    duplicated: dict[bytes, int]  # value -> times read
    reordered: list[str]
    unexpected: list[Read]
    duplicates_allowed: bool
    acked_without_offset: list[bytes]  # acknowledged with no offset: placed by partition only

    @property
    def ok(self) -> bool:
        return (
            not self.lost
            and not self.misplaced
            and not self.reordered
            and not self.unexpected
            and (self.duplicates_allowed or not self.duplicated)
        )

    def counts(self) -> dict[str, int]:
        return {
            "sent": self.sent,
            "acked": self.acked,
            "failed": self.failed,
            "unknown": self.unknown,
            "read": self.read,
            "recovered": self.recovered,
            "lost": len(self.lost),
            "misplaced": len(self.misplaced),
            "duplicated": len(self.duplicated),
            "reordered": len(self.reordered),
            "unexpected": len(self.unexpected),
            "acked_without_offset": len(self.acked_without_offset),
        }

    def summary(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.counts().items())

    def report(self, limit: int = 10) -> str:
        lines = [self.summary()]
        if self.lost:
            lines.append(f"lost (first {limit}): {sorted(self.lost)[:limit]}")
        if self.misplaced:
            lines.append(f"misplaced (value, acked at, read at): {self.misplaced[:limit]}")
        if self.duplicated:
            lines.append(f"duplicated: {sorted(self.duplicated.items())[:limit]}")
        if self.reordered:
            lines.append(f"reordered: {self.reordered[:limit]}")
        if self.unexpected:
            lines.append(f"unexpected: {self.unexpected[:limit]}")
        if self.acked_without_offset:
            lines.append(f"acked without offset: {sorted(self.acked_without_offset)[:limit]}")
        return "\n".join(lines)


def check(history: History, reads: list[Read], *, idempotent: bool = True) -> Verdict:
    """Compare a history with everything read back (all partitions, each from its first offset to its end)."""
    read_at: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    unexpected: list[Read] = []
    for r in reads:
        if r.value is None or r.value not in history.sent:
            unexpected.append(r)
            continue
        read_at[r.value].append((r.partition, r.offset))

    lost = [v for v in history.acked if v not in read_at]
    misplaced = [
        (v, at, read_at[v][0])
        for v, at in history.acked.items()
        if v in read_at and (at not in read_at[v] if at[1] is not None else at[0] not in {p for p, _ in read_at[v]})
    ]
    duplicated = {v: len(where) for v, where in read_at.items() if len(where) > 1}

    reordered: list[str] = []
    by_partition: dict[int, list[Read]] = defaultdict(list)
    for r in reads:
        by_partition[r.partition].append(r)
    for p, rs in sorted(by_partition.items()):
        last_offset = -1
        last_seq: dict[str, tuple[int, int]] = {}  # producer -> (seq, offset) of its latest value in this partition
        for r in rs:  # in the order the consumer returned them
            if r.offset <= last_offset:
                reordered.append(f"partition {p}: offset {r.offset} read after {last_offset}")
            last_offset = max(last_offset, r.offset)
            pv = decode_value(r.value)
            if pv is None:
                continue
            producer, seq = pv
            prev = last_seq.get(producer)
            if prev is not None and seq <= prev[0] and not (not idempotent and r.value in duplicated):
                reordered.append(
                    f"partition {p}: {producer} seq {seq} at offset {r.offset} after seq {prev[0]} at offset {prev[1]}"
                )
            if prev is None or seq > prev[0]:
                last_seq[producer] = (seq, r.offset)

    answered = set(history.acked) | set(history.failed)
    recovered = sum(1 for v in read_at if v not in history.acked)
    return Verdict(
        sent=len(history.sent),
        acked=len(history.acked),
        failed=len(history.failed),
        unknown=sum(1 for v in history.sent if v not in answered),
        read=len(reads),
        recovered=recovered,
        lost=lost,
        misplaced=misplaced,
        duplicated=duplicated,
        reordered=reordered,
        unexpected=unexpected,
        duplicates_allowed=not idempotent,
        acked_without_offset=[v for v, (_, off) in history.acked.items() if off is None],
    )
