"""Checkers for the transaction fault tests: what a READ_COMMITTED reader must see after producers and brokers were
killed mid-transaction.

* `check_transform`: a consume-transform-produce pipeline's output holds each input record's result exactly once,
  per partition in input order (tests/support/ctp_app.py maps input partition p to output partition p).
* `TxnHistory` / `check_transactions`: a transactional producer's log of transactions and their outcomes (committed:
  commit_transaction returned; aborted: abort_transaction returned, or the producer was fenced before committing;
  unknown: it died or failed inside commit_transaction). Every committed record is read exactly once, no aborted
  record is read, an unknown transaction is read whole or not at all, nothing is read that no one sent, and each
  partition holds the committed transactions in the order they were committed.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

COMMITTED, ABORTED, UNKNOWN, OPEN = "committed", "aborted", "unknown", "open"


@dataclass
class Verdict:
    problems: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        c = ", ".join(f"{k} {v}" for k, v in self.counts.items())
        return f"{'OK' if self.ok else f'{len(self.problems)} PROBLEMS'}: {c}"

    def report(self, limit: int = 30) -> str:
        more = len(self.problems) - limit
        return "\n".join(self.problems[:limit] + ([f"... {more} more"] if more > 0 else []))


def _dupes(values: list[bytes]) -> list[bytes]:
    return [v for v, n in Counter(values).items() if n > 1]


def check_transform(inputs: dict[int, list[bytes]], outputs: dict[int, list[bytes]], suffix: bytes) -> Verdict:
    """Output partition p must be exactly input partition p's values, each with `suffix`, in order."""
    v = Verdict()
    for p in sorted(set(inputs) | set(outputs)):
        want = [x + suffix for x in inputs.get(p, [])]
        got = outputs.get(p, [])
        if got == want:
            continue
        missing = sorted(set(want) - set(got))
        extra = sorted(set(got) - set(want))
        dupes = _dupes(got)
        if missing:
            v.problems.append(f"p{p}: {len(missing)} results missing, first {missing[:5]}")
        if extra:
            v.problems.append(f"p{p}: {len(extra)} results of no input, first {extra[:5]}")
        if dupes:
            v.problems.append(f"p{p}: {len(dupes)} results duplicated, first {dupes[:5]}")
        if not (missing or extra or dupes):
            v.problems.append(f"p{p}: results out of input order: {got[:20]}")
    v.counts = {
        "inputs": sum(map(len, inputs.values())),
        "outputs": sum(map(len, outputs.values())),
    }
    return v


@dataclass
class Txn:
    n: int
    records: list[tuple[int, bytes]] = field(default_factory=list)  # (partition, value)
    outcome: str = OPEN
    note: str = ""


class TxnHistory:
    """A transactional producer's log (thread-safe: the producer's thread writes, the test reads)."""

    def __init__(self) -> None:
        self.txns: list[Txn] = []
        self._lock = threading.Lock()
        self._commit_order: list[int] = []

    def begin(self) -> Txn:
        with self._lock:
            t = Txn(len(self.txns))
            self.txns.append(t)
            return t

    def end(self, t: Txn, outcome: str, note: str = "") -> None:
        with self._lock:
            t.outcome, t.note = outcome, note
            if outcome == COMMITTED:
                self._commit_order.append(t.n)

    def count(self, outcome: str) -> int:
        with self._lock:
            return sum(1 for t in self.txns if t.outcome == outcome)

    @property
    def commit_order(self) -> list[int]:
        with self._lock:
            return list(self._commit_order)


def check_transactions(history: TxnHistory, reads: dict[int, list[bytes]]) -> Verdict:
    """`reads`: every partition's values as a READ_COMMITTED consumer reads them from its start to the LSO."""
    v = Verdict()
    owner: dict[bytes, Txn] = {}
    for txn in history.txns:
        for _, value in txn.records:
            owner[value] = txn
    seen: Counter[bytes] = Counter(x for vals in reads.values() for x in vals)
    for value, n in seen.items():
        t: Txn | None = owner.get(value)
        if t is None:
            v.problems.append(f"{value!r} read but never sent")
        elif t.outcome == ABORTED:
            v.problems.append(f"{value!r} of aborted transaction {t.n} ({t.note}) is visible")
        elif t.outcome == OPEN:
            v.problems.append(f"{value!r} of transaction {t.n}, still open when read, is visible")
        if n > 1:
            v.problems.append(f"{value!r} read {n} times")
    unknown_read = 0
    for t in history.txns:
        values = [x for _, x in t.records]
        present = [x for x in values if seen[x]]
        if t.outcome == COMMITTED and len(present) != len(values):
            lost = [x for x in values if not seen[x]]
            v.problems.append(f"committed transaction {t.n} lost {len(lost)}/{len(values)} records: {lost[:5]}")
        if t.outcome == UNKNOWN:
            if present and len(present) != len(values):
                v.problems.append(
                    f"transaction {t.n} of unknown outcome ({t.note}) is partly visible: {len(present)}/{len(values)}"
                )
            unknown_read += bool(present)
    # order: per partition, the committed transactions appear in commit order
    rank = {n: i for i, n in enumerate(history.commit_order)}
    for p, vals in reads.items():
        ranks = [rank[owner[x].n] for x in vals if x in owner and owner[x].n in rank]
        if ranks != sorted(ranks):
            v.problems.append(f"p{p}: committed transactions out of commit order")
    v.counts = {
        "transactions": len(history.txns),
        COMMITTED: history.count(COMMITTED),
        ABORTED: history.count(ABORTED),
        UNKNOWN: history.count(UNKNOWN),
        "unknown-visible": unknown_read,
        "records read": sum(seen.values()),
    }
    return v


__all__ = [
    "ABORTED",
    "COMMITTED",
    "OPEN",
    "UNKNOWN",
    "Txn",
    "TxnHistory",
    "Verdict",
    "check_transactions",
    "check_transform",
]
