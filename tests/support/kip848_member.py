"""One consumer group member as its own OS process, for the KIP-848 tests (so that killing it is a real SIGKILL):

    python -m tests.support.kip848_member <client> <bootstrap> <topic> <group> <client id>

<client> is `consumer` (confluent-kafka with group.protocol=consumer), `classic` (confluent-kafka, classic protocol),
`kafka-python` or `aiokafka` (classic). It consumes from the earliest offset, commits synchronously after each batch
and prints, with the wall clock in ms (the test compares processes):

    R <partition> <offset> <ms>        a record consumed
    C <partition> <next offset> <ms>   a commit acknowledged by the coordinator
    A <ms> <p,p,...>                   its assignment changed

SIGTERM closes the consumer (it leaves the group) and exits.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

HEARTBEAT_MS = 500
SESSION_MS = 6000  # classic members (the consumer protocol's session is the broker's)


def _ms() -> int:
    return int(time.time() * 1000)


def _out(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _emit(batches: dict[Any, list[Any]]) -> dict[Any, int]:
    """Print a poll's records; the next offset of each partition polled (what to commit)."""
    positions = {}
    for tp, recs in batches.items():
        for r in recs:
            _out(f"R {tp.partition} {r.offset} {_ms()}")
        if recs:
            positions[tp] = recs[-1].offset + 1
    return positions


def _committed(positions: dict[Any, int]) -> None:
    for tp, nxt in positions.items():
        _out(f"C {tp.partition} {nxt} {_ms()}")


class _Assignment:
    def __init__(self) -> None:
        self.last: list[int] | None = None

    def report(self, partitions: Iterable[int]) -> None:
        now = sorted(partitions)
        if now != self.last:
            self.last = now
            _out(f"A {_ms()} {','.join(map(str, now))}")


def _confluent(bs: str, topic: str, group: str, client_id: str, stop: threading.Event, consumer: bool) -> None:
    from confluent_kafka import Consumer, KafkaException

    conf: dict[str, object] = {
        "bootstrap.servers": bs,
        "group.id": group,
        "client.id": client_id,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "reconnect.backoff.max.ms": 1000,
        "log_level": 3,
    }
    if consumer:
        conf["group.protocol"] = "consumer"
    else:
        conf.update({"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS})
    c = Consumer(conf)
    c.subscribe([topic])
    seen = _Assignment()
    while not stop.is_set():
        msgs = [m for m in c.consume(500, 0.1) if m.error() is None]
        for m in msgs:
            _out(f"R {m.partition()} {m.offset()} {_ms()}")
        if msgs:
            try:
                for tp in c.commit(asynchronous=False) or []:
                    if tp.error is None and tp.offset >= 0:
                        _out(f"C {tp.partition} {tp.offset} {_ms()}")
            except KafkaException:
                pass  # fenced or rebalancing: the records go to their next owner
        seen.report(tp.partition for tp in c.assignment())
    c.close()


def _kafka_python(bs: str, topic: str, group: str, client_id: str, stop: threading.Event) -> None:
    from kafka.errors import KafkaError

    from tests.support.kafka_python_group import subscribed_consumer

    c = subscribed_consumer(
        topic,
        bootstrap_servers=bs,
        group_id=group,
        client_id=client_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        reconnect_backoff_max_ms=1000,
    )
    seen = _Assignment()
    while not stop.is_set():
        positions = _emit(c.poll(timeout_ms=200))
        if positions:
            try:
                c.commit()
                _committed(positions)
            except KafkaError:
                pass
        seen.report(tp.partition for tp in c.assignment())
    c.close()


def _aiokafka(bs: str, topic: str, group: str, client_id: str, stop: threading.Event) -> None:
    async def run() -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.errors import KafkaError

        c = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bs,
            group_id=group,
            client_id=client_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
        )
        await c.start()
        seen = _Assignment()
        try:
            while not stop.is_set():
                positions = _emit(await c.getmany(timeout_ms=200))
                if positions:
                    try:
                        await c.commit(positions)
                        _committed(positions)
                    except KafkaError:
                        pass
                seen.report(tp.partition for tp in c.assignment())
        finally:
            await c.stop()

    asyncio.run(run())


def main(argv: list[str]) -> int:
    client, bs, topic, group, client_id = argv[1:6]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    runners: dict[str, Callable[[], None]] = {
        "consumer": lambda: _confluent(bs, topic, group, client_id, stop, True),
        "classic": lambda: _confluent(bs, topic, group, client_id, stop, False),
        "kafka-python": lambda: _kafka_python(bs, topic, group, client_id, stop),
        "aiokafka": lambda: _aiokafka(bs, topic, group, client_id, stop),
    }
    runners[client]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
