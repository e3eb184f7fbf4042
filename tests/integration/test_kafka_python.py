"""kafka-python 3.0.12 against Strata: admin create, produce, group-less read back.

The producer runs with kafka-python's default, the idempotent producer (InitProducerId, sequence numbers). For each
codec kafka-python supports with the installed Python codecs (none, gzip, snappy, lz4, zstd): KafkaAdminClient
creates a 3-partition topic, KafkaProducer sends 10,000 records with binary keys, values, headers and explicit
timestamps to explicit partitions, and a KafkaConsumer with ``group_id=None`` reads each partition back with
``assign``/``seek`` from offset 0 and from ``offsets_for_times``.
"""

from __future__ import annotations

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from strata.protocol.records import iter_batches
from tests.support.kafka_wire import WireClient, assert_stored_codec
from tests.support.records import Rec, by_partition, check_roundtrip, gen_records, norm_headers, past_ts_base

N = 10_000
PARTITIONS = 3
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]


@pytest.fixture(scope="module")
def admin(module_broker):
    a = KafkaAdminClient(
        bootstrap_servers=module_broker.bootstrap, client_id="strata-it-kp-admin", request_timeout_ms=20000
    )
    yield a
    a.close()


@pytest.fixture(scope="module")
def consumer(module_broker):
    c = KafkaConsumer(
        bootstrap_servers=module_broker.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        client_id="strata-it-kp-consumer",
        auto_offset_reset="earliest",
        request_timeout_ms=30000,
        fetch_max_wait_ms=100,
    )
    yield c
    c.close()


def read_partition(c: KafkaConsumer, topic: str, p: int, start: int, count: int, timeout: float = 60) -> list[Rec]:
    tp = TopicPartition(topic, p)
    c.assign([tp])
    c.seek(tp, start)
    out: list[Rec] = []
    deadline = time.monotonic() + timeout
    while len(out) < count:
        assert time.monotonic() < deadline, f"{tp}: read {len(out)}/{count} from {start} within {timeout}s"
        for recs in c.poll(timeout_ms=500, max_records=5000).values():
            for m in recs:
                out.append(
                    Rec(
                        partition=m.partition,
                        key=m.key,
                        value=m.value,
                        headers=norm_headers(m.headers),
                        timestamp=m.timestamp,
                        offset=m.offset,
                    )
                )
    return out


def offsets_for_times(c: KafkaConsumer, topic: str, targets: dict[int, int]) -> dict[int, int]:
    res = c.offsets_for_times({TopicPartition(topic, p): ts for p, ts in targets.items()})
    return {tp.partition: (-1 if v is None else v.offset) for tp, v in res.items()}


@pytest.mark.parametrize("codec", CODECS)
def test_produce_and_read_back(module_broker, admin, consumer, codec):
    bs = module_broker.bootstrap
    topic = f"kp-{codec}"
    admin.create_topics({topic: {"num_partitions": PARTITIONS, "replication_factor": 1}})
    described = admin.describe_topics([topic])
    assert len(described) == 1 and len(described[0]["partitions"]) == PARTITIONS, described

    records = gen_records(N, PARTITIONS, seed=200 + CODECS.index(codec), ts_base=past_ts_base(N), tag=codec)
    producer = KafkaProducer(
        bootstrap_servers=bs,
        acks="all",
        linger_ms=5,  # idempotent: the client's default
        compression_type=None if codec == "none" else codec,
        client_id="strata-it-kp",
    )
    try:
        futures = [
            producer.send(
                topic,
                key=r.key,
                value=r.value,
                headers=list(r.headers),
                partition=r.partition,
                timestamp_ms=r.timestamp,
            )
            for r in records
        ]
        producer.flush(timeout=60)
        metas = [f.get(timeout=10) for f in futures]
    finally:
        producer.close(timeout=10)
    with WireClient.connect(bs) as w:  # the batches carry the producer id InitProducerId gave
        data = w.fetch(topic, 0, 0, version=11).responses[0].partitions[0].records
    assert {h.producer_id >= 0 for _, h in iter_batches(data)} == {True}
    next_off = {p: 0 for p in range(PARTITIONS)}
    for r, md in zip(records, metas):
        assert (md.partition, md.offset) == (r.partition, next_off[r.partition])
        next_off[r.partition] += 1

    check_roundtrip(
        records,
        read=lambda p, start, count: read_partition(consumer, topic, p, start, count),
        lookup_time=lambda targets: offsets_for_times(consumer, topic, targets),
    )

    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    assert consumer.beginning_offsets(tps) == {tp: 0 for tp in tps}
    assert consumer.end_offsets(tps) == {TopicPartition(topic, p): len(v) for p, v in by_partition(records).items()}
    assert_stored_codec(bs, topic, PARTITIONS, codec)
