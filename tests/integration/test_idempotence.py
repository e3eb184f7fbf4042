"""Idempotent producers against Strata.

1. kafka-python with its defaults (idempotence on, acks=all) writes every record once, under one producer id, with
   the batch sequences equal to the offsets.
2. Lost acknowledgements: a proxy (tests/support/ack_drop_proxy.py) cuts the client connection right after the broker
   answered a Produce -- the batch is in the log, the client never hears it. kafka-python and confluent-kafka
   (``enable.idempotence=true``) retry the same sequences; the broker answers the original offsets and the log holds
   each record exactly once.
3. Producer state survives a broker restart (SIGTERM and kill -9): a retried batch is still a duplicate, a gap is
   still OUT_OF_ORDER_SEQUENCE_NUMBER, and producer ids are never handed out twice.
"""

from __future__ import annotations

import pytest
from kafka import KafkaProducer
from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse

from strata.protocol.records import BatchHeader, build_batch, iter_batches
from tests.support import ck
from tests.support.ack_drop_proxy import AckDropProxy
from tests.support.kafka_wire import WireClient, decode_records

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

OUT_OF_ORDER_SEQUENCE_NUMBER = 45


def read_log(bootstrap: str, topic: str, partition: int) -> tuple[list[tuple[int, bytes]], list]:
    """Every (offset, value) of a partition, and the stored batch headers, read with raw Fetches up to the HW."""
    records: list[tuple[int, bytes]] = []
    headers: list[BatchHeader] = []
    with WireClient.connect(bootstrap) as c:
        v = c.pick_version(1, 11)
        offset = 0
        while True:
            part = c.fetch(topic, partition, offset, version=v, max_wait_ms=10).responses[0].partitions[0]
            assert part.error_code == 0, f"fetch {topic}[{partition}]@{offset}: error {part.error_code}"
            data = bytes(part.records or b"")
            if offset >= part.high_watermark:
                return records, headers
            headers += [h for _, h in iter_batches(data)]
            recs = decode_records(data)
            assert recs, f"no records at {offset} below the high watermark {part.high_watermark}"
            records += [(r.offset, r.value) for r in recs if r.offset >= offset]
            offset = recs[-1].offset + 1


def assert_exactly_once(bootstrap: str, topic: str, expected: dict[int, list[bytes]]) -> dict[int, list]:
    """Each partition holds exactly the expected values, once each, in order, at consecutive offsets."""
    all_headers = {}
    for p, vals in expected.items():
        got, headers = read_log(bootstrap, topic, p)
        assert [o for o, _ in got] == list(range(len(got))), f"partition {p}: offsets not consecutive"
        assert [v for _, v in got] == vals, (
            f"partition {p}: {len(got)} records stored for {len(vals)} produced "
            f"({len(got) - len({v for _, v in got})} duplicates)"
        )
        all_headers[p] = headers
    return all_headers


def init_producer_id(c: WireClient, version: int = 4) -> tuple[int, int]:
    req = InitProducerIdRequest[version](transactional_id=None, transaction_timeout_ms=60000)
    resp = c.recv(InitProducerIdResponse, version, c.send(req))
    assert resp.error_code == 0, resp
    return resp.producer_id, resp.producer_epoch


def produce(c: WireClient, topic: str, batch: bytes) -> tuple[int, int]:
    pr = c.produce(topic, 0, batch, version=7).responses[0].partition_responses[0]
    return pr.error_code, pr.base_offset


# ---------------------------------------------------------------------------------------------------------------


def test_kafka_python_defaults_write_each_record_once(broker):
    bs = broker.bootstrap
    topic, parts, n = "kp-idempotent", 3, 3000
    ck.create_topic(bs, topic, parts)
    p = KafkaProducer(bootstrap_servers=bs, linger_ms=5, client_id="strata-it-idempotent")
    assert p.config["enable_idempotence"] and p.config["acks"] in ("all", -1)
    expected: dict[int, list[bytes]] = {i: [] for i in range(parts)}
    futures = []
    for i in range(n):
        value = f"kp-{i:05d}".encode() * 3
        futures.append((i % parts, len(expected[i % parts]), p.send(topic, value=value, partition=i % parts)))
        expected[i % parts].append(value)
    p.flush(30)
    for part, idx, f in futures:
        md = f.get(30)
        assert (md.partition, md.offset) == (part, idx)
    p.close()

    headers = assert_exactly_once(bs, topic, expected)
    pids = {h.producer_id for hs in headers.values() for h in hs}
    assert len(pids) == 1 and min(pids) >= 0, f"stored producer ids {pids}: idempotence was not used"
    for hs in headers.values():
        # one producer, no retries: every batch's first sequence is its offset
        assert [(h.producer_epoch, h.base_sequence) for h in hs] == [(0, h.base_offset) for h in hs]


WAVES = 5  # records are sent in waves (flush between them), so the cuts hit different Produce requests


def _waves(values: list) -> list[list]:
    size = -(-len(values) // WAVES)
    return [values[i : i + size] for i in range(0, len(values), size)]


def _produce_kafka_python(address: str, topic: str, values: list[tuple[int, bytes]]) -> list[tuple[int, int]]:
    p = KafkaProducer(
        bootstrap_servers=address,
        linger_ms=20,
        retries=100,
        retry_backoff_ms=50,
        reconnect_backoff_ms=20,
        request_timeout_ms=10000,
        delivery_timeout_ms=60000,
        client_id="strata-it-ackdrop",
    )
    futures = []
    for wave in _waves(values):
        futures += [p.send(topic, value=v, partition=part) for part, v in wave]
        p.flush(60)
    out = [(md.partition, md.offset) for md in (f.get(60) for f in futures)]
    p.close()
    return out


def _produce_confluent(address: str, topic: str, values: list[tuple[int, bytes]]) -> list[tuple[int, int]]:
    prod = ck.producer(
        address,
        **{
            "enable.idempotence": True,
            "linger.ms": 20,
            "retry.backoff.ms": 50,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 100,
            "message.timeout.ms": 60000,
        },
    )
    results: list = [None] * len(values)

    def cb(idx: int):
        def _cb(err, msg) -> None:
            results[idx] = err if err is not None else (msg.partition(), msg.offset())

        return _cb

    i = 0
    for wave in _waves(values):
        for part, v in wave:
            prod.produce(topic, value=v, partition=part, on_delivery=cb(i))
            prod.poll(0)
            i += 1
        assert prod.flush(60) == 0, "undelivered messages"
    errors = [r for r in results if not isinstance(r, tuple)]
    assert not errors, f"delivery errors: {errors[:3]}"
    return results


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_lost_acknowledgements_are_retried_without_duplicates(broker_factory, client):
    proxy = AckDropProxy(cuts=3)
    broker = broker_factory(**{"advertised.listeners": f"PLAINTEXT://{proxy.address}"})
    proxy.start(broker.port)
    try:
        topic, parts = f"ackdrop-{client}", 2
        ck.create_topic(broker.bootstrap, topic, parts)
        values = [(i % parts, f"{client}-{i:05d}".encode()) for i in range(2000)]
        produce_fn = _produce_kafka_python if client == "kafka-python" else _produce_confluent
        delivered = produce_fn(proxy.address, topic, values)
    finally:
        proxy.stop()

    assert proxy.cut_requests == 3, f"the proxy cut {proxy.cut_batches} (connections {proxy.connections})"
    assert proxy.retried() == proxy.cut_batches, "every batch whose acknowledgement was lost must be sent again"
    expected: dict[int, list[bytes]] = {p: [v for part, v in values if part == p] for p in range(parts)}
    assert_exactly_once(broker.bootstrap, topic, expected)
    # the acknowledgements of the retries carry the original offsets
    where = {v: (p, i) for p, vals in expected.items() for i, v in enumerate(vals)}
    assert delivered == [where[v] for _, v in values]


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "kill9"])
def test_producer_state_survives_a_restart(broker, kill):
    topic = "idem-restart"
    ck.create_topic(broker.bootstrap, topic, 1)
    with WireClient.connect(broker.bootstrap) as c:
        pid, epoch = init_producer_id(c)
        batches = [
            build_batch(
                [f"r{seq + i}".encode() for i in range(n)], producer_id=pid, producer_epoch=epoch, base_sequence=seq
            )
            for seq, n in ((0, 3), (3, 2), (5, 4))
        ]
        assert [produce(c, topic, b) for b in batches] == [(0, 0), (0, 3), (0, 5)]

    if kill:
        broker.kill9()
        broker.start()
    else:
        assert broker.stop() == 0
        broker.start()

    with WireClient.connect(broker.bootstrap) as c:
        # the last batch is still known: its retry is answered with the original offset and not written again
        assert produce(c, topic, batches[-1]) == (0, 5)
        if kill:
            # recovery replays the log, so all of the last 5 batches are known again
            assert produce(c, topic, batches[0]) == (0, 0)
        # a gap is still detected (the producer is not "unknown"), the next sequence continues the log
        gap = build_batch([b"gap"], producer_id=pid, producer_epoch=epoch, base_sequence=10)
        assert produce(c, topic, gap)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
        nxt = build_batch([b"r9"], producer_id=pid, producer_epoch=epoch, base_sequence=9)
        assert produce(c, topic, nxt) == (0, 9)
        # producer ids are never reused across restarts
        new_pid, new_epoch = init_producer_id(c)
        assert new_pid > pid and new_epoch == 0

    got, _ = read_log(broker.bootstrap, topic, 0)
    assert got == [(i, f"r{i}".encode()) for i in range(10)]
