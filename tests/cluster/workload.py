"""Client workloads for the cluster tests, on confluent-kafka (librdkafka): a producer that writes continuously in a
thread and records every outcome in a ``History``, and a reader that reads whole partitions back."""

from __future__ import annotations

import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tests.support import client_security
from tests.support.ck import QUIET
from tests.support.waiting import wait_until

from .checker import History, Read, encode_value


class ContinuousProducer:
    """Sends ``<name>:<seq>`` values round-robin over the partitions at about `rate` records/s until ``stop()``.

    Idempotent with acks=all by default, with a message timeout long enough to ride out a failover: a record then
    only fails for a real reason (a fatal idempotence error, or no leader for a minute). Every send, acknowledgement
    (partition, offset) and error goes to `history`; librdkafka's client-level errors go to `client_errors`.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        name: str = "p0",
        rate: float = 300.0,
        conf: dict[str, Any] | None = None,
        history: History | None = None,
    ):
        self.topic, self.partitions, self.name, self.rate = topic, partitions, name, rate
        self.history = history if history is not None else History()
        self.conf = {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 60000,
            "retry.backoff.ms": 50,
            "retry.backoff.max.ms": 500,
            "reconnect.backoff.max.ms": 500,
            "topic.metadata.refresh.interval.ms": 1000,
            "error_cb": self._on_error,
            **QUIET,
            **client_security.librdkafka(bootstrap),
            **(conf or {}),
        }
        self.client_errors: list[str] = []
        self.acked_count = 0
        self.failed_count = 0
        self.sent_count = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._exc: BaseException | None = None
        self._flush_timeout = 30.0

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal() or err.code() not in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE):
            self.client_errors.append(f"{'FATAL ' if err.fatal() else ''}{err.str()}")

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        value = msg.value()
        if err is not None:
            self.failed_count += 1
            self.history.fail(value, f"{err.name()}: {err.str()}")
        else:
            self.acked_count += 1
            self.history.ack(value, msg.partition(), msg.offset())

    def start(self) -> ContinuousProducer:
        self._thread = threading.Thread(target=self._run, name=f"producer-{self.name}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            p = Producer(self.conf)
            seq = 0
            t0 = time.monotonic()
            while not self._stop.is_set():
                due = t0 + seq / self.rate
                now = time.monotonic()
                if now < due:  # pacing, not synchronisation: serve callbacks while waiting for the next slot
                    p.poll(min(due - now, 0.05))
                    continue
                value = encode_value(self.name, seq)
                part = seq % self.partitions
                try:
                    p.produce(self.topic, value=value, partition=part, on_delivery=self._on_delivery)
                except BufferError:
                    p.poll(0.05)
                    continue
                self.history.send(value, part)
                self.sent_count += 1
                seq += 1
                p.poll(0)
            p.flush(self._flush_timeout)
        except BaseException as e:  # noqa: BLE001 - surfaced by stop()
            self._exc = e

    def wait_acked(self, more: int, timeout: float = 60.0) -> int:
        """Wait until `more` further records are acknowledged (progress, e.g. after a fault)."""
        target = self.acked_count + more
        return wait_until(
            lambda: self._alive_check() and self.acked_count >= target and self.acked_count,
            timeout,
            interval=0.05,
            message=lambda: (
                f"{self.name}: {self.acked_count}/{target} acked, "
                f"{self.failed_count} failed, client errors {self.client_errors[-3:]}"
            ),
        )

    def _alive_check(self) -> bool:
        if self._exc is not None:
            raise AssertionError(f"producer thread died: {self._exc!r}")
        return True

    def stop(self, flush_timeout: float = 30.0) -> None:
        """Stop sending; wait (bounded) until every sent record has an outcome (records still in flight after
        `flush_timeout` stay without one: `unknown` to the checker)."""
        self._flush_timeout = flush_timeout
        self._stop.set()
        if self._thread is not None:
            self._thread.join(flush_timeout + 15)
            assert not self._thread.is_alive(), f"producer {self.name} did not stop"
        if self._exc is not None:
            raise AssertionError(f"producer thread died: {self._exc!r}") from self._exc

    def errors(self) -> list[str]:
        """Delivery errors and client-level errors, for assertions and reports."""
        return [f"{v!r}: {e}" for v, e in list(self.history.failed.items())] + self.client_errors


def end_offsets(bootstrap: str, topic: str, partitions: int, timeout: float = 10.0) -> dict[int, int]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "strata-cluster-offsets",
            **QUIET,
            **client_security.librdkafka(bootstrap),
        }
    )
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[1] for p in range(partitions)}
    finally:
        c.close()


def read_all(
    bootstrap: str, topic: str, partitions: int, history: History | None = None, timeout: float = 60.0
) -> list[Read]:
    """Every record of every partition, from the log start to the high watermark, in the order the consumer returned
    them (per partition: offset order, as received).

    With a `history`, first wait (bounded) until each partition's high watermark covers its highest acknowledged
    offset: a newly elected leader may briefly report an older high watermark until its followers fetch again. If it
    never does, the read stops short and the checker reports the missing records as lost.
    """
    want = {p: 0 for p in range(partitions)}
    for part, off in history.acked.values() if history is not None else ():
        if off is not None:
            want[part] = max(want[part], off + 1)

    def covering() -> dict[int, int] | None:
        e = end_offsets(bootstrap, topic, partitions)
        return e if all(e[p] >= want[p] for p in want) else None

    try:
        ends = wait_until(covering, timeout=min(timeout, 30.0), interval=0.2)
    except AssertionError:
        ends = end_offsets(bootstrap, topic, partitions)
    assert ends is not None  # wait_until returns only a truthy value
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "strata-cluster-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 100,
            **QUIET,
            **client_security.librdkafka(bootstrap),
        }
    )
    out: list[Read] = []
    pos = {p: 0 for p in range(partitions)}
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])  # offset 0 == the log start here
        deadline = time.monotonic() + timeout
        while any(pos[p] < ends[p] for p in pos):
            assert time.monotonic() < deadline, f"read_all: positions {pos} short of ends {ends} after {timeout}s"
            for m in c.consume(500, timeout=0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(f"read_all: {err}")
                m_part, m_off = m.partition(), m.offset()
                assert m_part is not None and m_off is not None  # set on every consumed message
                out.append(Read(m_part, m_off, m.value()))
                pos[m_part] = m_off + 1
    finally:
        c.close()
    return out
