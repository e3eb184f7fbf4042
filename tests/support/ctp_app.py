"""A consume-transform-produce application (confluent-kafka, transactional), run as its own process by the fault
tests (tests/integration/test_txn_ctp_faults.py) so that it can die with SIGKILL at any point.

It reads the input topic READ_COMMITTED from its group's committed offsets (assigned partitions, no rebalance to
wait for after a restart), and for each batch: begins a transaction, produces ``<value>>out`` to the same partition
of the output topic, sends the consumed positions with ``send_offsets_to_transaction`` and commits. It exits 0 once
its position has reached the end of every input partition. Errors are handled as Kafka's EOS applications do: a
retriable error retries the step, an abortable one aborts and rewinds to the committed offsets, a fatal one exits 3
(the test starts a new process with the same transactional id, which fences and aborts what the old one left open).

Fault points: ``--die PHASE:TXN[:DELAY_MS]`` makes the process SIGKILL itself in transaction TXN (0-based, counted
from this process's start) at PHASE: ``begun``, ``produced`` (records handed to librdkafka, maybe not sent),
``flushed``, ``offsets`` (after send_offsets_to_transaction), ``commit`` (commit_transaction running in another
thread for DELAY_MS) or ``committed``. ``--kill-broker PID:PHASE:TXN[:DELAY_MS]`` SIGKILLs the broker process PID at
such a point instead (at ``commit``: DELAY_MS into commit_transaction) and carries on; the test restarts the broker.
Progress goes as JSON lines to ``--events`` (appended, flushed).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

PHASES = ("begun", "produced", "flushed", "offsets", "commit", "committed")
EXIT_FATAL = 3
T = TypeVar("T")


@dataclass(frozen=True)
class FaultPoint:
    phase: str
    txn: int
    delay_ms: int = 0

    @classmethod
    def parse(cls, text: str) -> FaultPoint | None:
        if not text:
            return None
        phase, txn, *delay = text.split(":")
        if phase not in PHASES:
            raise ValueError(f"fault phase must be one of {PHASES}, not {phase!r}")
        return cls(phase, int(txn), int(delay[0]) if delay else 0)

    def at(self, phase: str, txn: int) -> bool:
        return phase == self.phase and txn == self.txn


class App:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.events = open(args.events, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the process
        self.die = FaultPoint.parse(args.die)
        broker_pid, _, broker_point = (args.kill_broker or "").partition(":")
        self.broker_pid = int(broker_pid) if broker_pid else 0
        self.kill_broker = FaultPoint.parse(broker_point)
        self.tps = [TopicPartition(args.input, p) for p in range(args.partitions)]
        # No KIP-1102 re-bootstrap when the one broker restarts: librdkafka 2.16 then decommissions the broker it
        # cached as group coordinator and send_offsets_to_transaction hangs past its timeout (librdkafka #5511,
        # #5456); a client reconnecting to the restarted broker is what we want to test here.
        common: dict[str, Any] = {
            "bootstrap.servers": args.bootstrap,
            "log_level": 3,
            "metadata.recovery.strategy": "none",
        }
        if os.environ.get("STRATA_CTP_DEBUG"):  # librdkafka's debug contexts, e.g. "eos,msg,protocol", to stderr
            common.update(debug=os.environ["STRATA_CTP_DEBUG"], log_level=7)
        self.producer = Producer(
            {
                **common,
                "transactional.id": args.tid,
                "transaction.timeout.ms": args.txn_timeout_ms,
                "linger.ms": 5,
                "retry.backoff.ms": 50,
                "retry.backoff.max.ms": 500,
                "reconnect.backoff.max.ms": 500,
            }
        )
        self.consumer = Consumer(
            {
                **common,
                "group.id": args.group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 50,
                "reconnect.backoff.max.ms": 500,
            }
        )
        self.txn = 0
        self.positions: dict[int, int] = {}  # partition -> next offset to transform

    def event(self, what: str, **fields: Any) -> None:
        self.events.write(
            json.dumps({"pid": os.getpid(), "t": round(time.time(), 3), "event": what, "txn": self.txn, **fields})
            + "\n"
        )
        self.events.flush()

    def fault_point(self, phase: str) -> None:
        if self.kill_broker is not None and self.kill_broker.at(phase, self.txn) and phase != "commit":
            self.broker_kill()
        if self.die is not None and self.die.at(phase, self.txn):
            self.event("die", phase=phase)
            os.kill(os.getpid(), signal.SIGKILL)

    def broker_kill(self) -> None:
        os.kill(self.broker_pid, signal.SIGKILL)
        self.event("broker-killed")

    # -- the loop ------------------------------------------------------------------------------------------------
    def run(self) -> int:
        self.retrying(lambda: self.producer.init_transactions(10), "init")
        self.event("initialized")
        self.rewind()
        while True:
            msgs = [m for m in self.consumer.consume(self.args.batch, 0.5) if m.error() is None]
            for m in msgs:
                q, o = _where(m)
                self.positions[q] = o + 1
            if not msgs:
                if self.at_end():
                    self.event("done")
                    return 0
                continue
            try:
                self.transform(msgs)
            except KafkaException as e:
                err: KafkaError = e.args[0]
                self.event("txn-error", error=err.name(), fatal=err.fatal(), abortable=err.txn_requires_abort())
                if err.fatal():
                    return EXIT_FATAL
                self.retrying(lambda: self.producer.abort_transaction(10), "abort")
                self.event("aborted")
                self.rewind()
            self.txn += 1

    def transform(self, msgs: list[Any]) -> None:
        p = self.producer
        p.begin_transaction()
        self.fault_point("begun")
        for m in msgs:
            while True:
                try:
                    p.produce(self.args.output, m.value() + b">out", key=m.key(), partition=m.partition())
                    break
                except BufferError:
                    p.poll(0.05)
        self.fault_point("produced")
        p.flush(30)
        self.fault_point("flushed")
        positions = {}
        for m in msgs:
            q, o = _where(m)
            positions[q] = o + 1
        offsets = [TopicPartition(self.args.input, q, o) for q, o in sorted(positions.items())]
        self.retrying(
            lambda: p.send_offsets_to_transaction(offsets, self.consumer.consumer_group_metadata(), 10), "offsets"
        )
        self.fault_point("offsets")
        self.event("committing", offsets=dict(sorted(positions.items())))
        if self.kill_broker is not None and self.kill_broker.at("commit", self.txn):
            threading.Timer(self.kill_broker.delay_ms / 1000.0, self.broker_kill).start()
        if self.die is not None and self.die.at("commit", self.txn):
            threading.Thread(target=lambda: p.commit_transaction(30), daemon=True).start()
            time.sleep(self.die.delay_ms / 1000.0)
            self.fault_point("commit")
        self.retrying(lambda: p.commit_transaction(10), "commit")
        self.event("committed", offsets=dict(sorted(positions.items())))
        self.fault_point("committed")

    def retrying(self, op: Callable[[], T], what: str, attempts: int = 30) -> T:
        """Kafka's contract for the transactional calls: a retriable error (a timeout) retries the same call."""
        for attempt in range(attempts):
            try:
                return op()
            except KafkaException as e:
                err: KafkaError = e.args[0]
                if not err.retriable() or attempt == attempts - 1:
                    raise
                self.event("retry", op=what, error=err.name())
        raise AssertionError("unreachable")

    def rewind(self) -> None:
        """Continue from the group's committed offsets (READ_COMMITTED consumers fetch them as stable, KIP-447)."""
        committed = self.retrying_committed()
        self.positions = {tp.partition: max(tp.offset, 0) for tp in committed}
        self.consumer.assign(
            [
                TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
                for tp in committed
            ]
        )
        self.event("assigned", offsets={tp.partition: tp.offset for tp in committed})

    def retrying_committed(self) -> list[TopicPartition]:
        deadline = time.monotonic() + 60
        while True:
            try:
                return list(self.consumer.committed(self.tps, timeout=10))
            except KafkaException as e:
                if time.monotonic() > deadline:
                    raise
                self.event("retry", op="committed", error=e.args[0].name())

    def at_end(self) -> bool:
        for tp in self.tps:
            try:
                high = self.consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1]
            except KafkaException:
                return False  # the broker is away: ask again
            if self.positions[tp.partition] < high:
                return False
        return True


def _where(m: Any) -> tuple[int, int]:
    """A consumed record's (partition, offset): never None for a record without an error."""
    q, o = m.partition(), m.offset()
    assert q is not None and o is not None
    return q, o


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--tid", required=True)
    ap.add_argument("--events", required=True)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--txn-timeout-ms", type=int, default=30000)
    ap.add_argument("--die", default="", help="PHASE:TXN[:DELAY_MS]")
    ap.add_argument("--kill-broker", default="", help="PID:PHASE:TXN[:DELAY_MS]")
    args = ap.parse_args(argv)
    return App(args).run()


if __name__ == "__main__":
    sys.exit(main())
