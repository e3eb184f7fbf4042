"""A transactional producer loop for the cluster fault tests (confluent-kafka in a thread): each transaction writes
``<name>:<txn>:<i>`` to every partition and is committed or aborted (seeded), and every outcome goes to a
`TxnHistory` (tests/support/txn_checker.py) for the checker.

Errors are handled as Kafka documents for transactional producers: a retriable error retries the call, an abortable
one aborts (the transaction is then aborted), and a fatal one (fenced, or an epoch bumped under it) leaves the
transaction's outcome unknown and starts a new producer with the same transactional id, whose init_transactions
fences the old epoch and completes or aborts what it left.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException, Producer

from tests.support.ck import QUIET
from tests.support.txn_checker import ABORTED, COMMITTED, UNKNOWN, Txn, TxnHistory

T = TypeVar("T")


class TxnLoop:
    def __init__(
        self, bootstrap: str, topic: str, partitions: int, tid: str, seed: int, per_partition: int = 3
    ) -> None:
        self.bootstrap, self.topic, self.partitions, self.tid = bootstrap, topic, partitions, tid
        self.rnd = random.Random(seed)
        self.per_partition = per_partition
        self.history = TxnHistory()
        self.errors: list[str] = []
        self.restarts = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._exc: BaseException | None = None

    def _producer(self) -> Producer:
        p = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": self.tid,
                "transaction.timeout.ms": 60000,
                "acks": "all",
                "linger.ms": 2,
                "retry.backoff.ms": 50,
                "retry.backoff.max.ms": 500,
                "reconnect.backoff.max.ms": 500,
                "topic.metadata.refresh.interval.ms": 1000,
                # no KIP-1102 re-bootstrap: it leaves send/commit calls hanging on a decommissioned coordinator
                # (librdkafka #5511)
                "metadata.recovery.strategy": "none",
                **QUIET,
            }
        )
        self._retrying(lambda: p.init_transactions(15))
        return p

    def start(self) -> TxnLoop:
        self._thread = threading.Thread(target=self._run, name=f"txn-{self.tid}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 120.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            assert not self._thread.is_alive(), "the transactional producer did not stop"
        if self._exc is not None:
            raise AssertionError(f"transactional producer crashed: {self._exc!r}") from self._exc

    def wait_ended(self, n: int, timeout: float = 90.0) -> None:
        """Until `n` more transactions have ended (committed or aborted)."""
        target = self.ended() + n
        deadline = time.monotonic() + timeout
        while self.ended() < target:
            if self._exc is not None:
                raise AssertionError(f"transactional producer crashed: {self._exc!r}") from self._exc
            assert time.monotonic() < deadline, f"{self.ended()}/{target} transactions ended in {timeout}s"
            time.sleep(0.05)

    def ended(self) -> int:
        return self.history.count(COMMITTED) + self.history.count(ABORTED)

    def _retrying(self, op: Callable[[], T], attempts: int = 20) -> T:
        for attempt in range(attempts):
            try:
                return op()
            except KafkaException as e:
                err: KafkaError = e.args[0]
                if not err.retriable() or attempt == attempts - 1:
                    raise
                self.errors.append(f"retriable {err.name()}")
        raise AssertionError("unreachable")

    def _run(self) -> None:
        try:
            p = self._producer()
            while not self._stop.is_set():
                t = self.history.begin()
                try:
                    self._one(p, t)
                except KafkaException as e:
                    err: KafkaError = e.args[0]
                    self.errors.append(f"{'fatal ' if err.fatal() else ''}{err.name()}: {err.str()}")
                    if err.fatal() or not err.txn_requires_abort():
                        self.history.end(t, UNKNOWN, err.name())
                        self.restarts += 1
                        p = self._producer()
                        continue
                    try:
                        self._abort(p)
                        self.history.end(t, ABORTED, f"after {err.name()}")
                    except KafkaException as e2:
                        self.history.end(t, UNKNOWN, f"abort failed: {e2.args[0].name()}")
                        self.restarts += 1
                        p = self._producer()
        except BaseException as e:  # noqa: BLE001 - reported by stop()
            self._exc = e

    def _one(self, p: Producer, t: Txn) -> None:
        commit = self.rnd.random() < 0.7
        p.begin_transaction()
        for part in range(self.partitions):
            for i in range(self.per_partition):
                value = f"{self.tid}:{t.n}:{part}:{i}".encode()
                t.records.append((part, value))
                p.produce(self.topic, value, partition=part)
        if commit:
            self._retrying(lambda: p.commit_transaction(30))
            self.history.end(t, COMMITTED)
        else:
            p.flush(30)
            self._abort(p)
            self.history.end(t, ABORTED)

    def _abort(self, p: Producer) -> None:
        self._retrying(lambda: p.abort_transaction(30))


def read_committed(bootstrap: str, topic: str, partitions: int, timeout: float = 60.0) -> dict[int, list[bytes]]:
    """Every partition read READ_COMMITTED from offset 0 up to its HW, once the LSO has reached the HW (no
    transaction left open)."""
    from confluent_kafka import Consumer, TopicPartition

    from tests.support.waiting import wait_until

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "txn-checker",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
            **QUIET,
        }
    )
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-probe", **QUIET})
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]

        def ends() -> list[int]:
            lso = [c.get_watermark_offsets(tp, timeout=10, cached=False)[1] for tp in tps]
            hw = [probe.get_watermark_offsets(tp, timeout=10, cached=False)[1] for tp in tps]
            return lso if lso == hw else []

        end = wait_until(ends, timeout, message="the LSO of some partition stays below its HW")
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values: dict[int, list[bytes]] = {p: [] for p in range(partitions)}

        def caught_up() -> bool:
            for m in c.consume(500, 0.1):
                if m.error() is None:
                    values[m.partition() or 0].append(m.value() or b"")
            return all(pos.offset >= e for pos, e in zip(c.position(tps), end))

        wait_until(caught_up, timeout, message=lambda: f"positions {c.position(tps)} below {end}")
        return values
    finally:
        c.close()
        probe.close()


__all__ = ["TxnLoop", "read_committed"]
