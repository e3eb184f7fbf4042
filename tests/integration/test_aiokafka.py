"""aiokafka 0.14.0 against Strata: admin create, produce, group-less read back.

aiokafka always opens with ApiVersions v0 and uses older, non-flexible API versions (Produce 7, Fetch 11,
ListOffsets 3, Metadata 5). For each codec it supports (none, gzip, snappy, lz4, zstd; cramjam provides the
codecs): AIOKafkaAdminClient creates a 3-partition topic, AIOKafkaProducer (acks=all, no idempotence) sends
10,000 records with binary keys, values, headers and explicit timestamps to explicit partitions, and an
AIOKafkaConsumer with ``group_id=None`` reads each partition back with ``assign``/``seek`` from offset 0 and from
``offsets_for_times``.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.support.kafka_wire import assert_stored_codec
from tests.support.records import Rec, by_partition, check_roundtrip, gen_records, norm_headers, past_ts_base

N = 10_000
PARTITIONS = 3
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]


async def create_topic(bs: str, topic: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bs, client_id="strata-it-aio-admin", request_timeout_ms=20000)
    await admin.start()
    try:
        resp = await admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
        assert [(t[0], t[1]) for t in resp.topic_errors] == [(topic, 0)], resp
        md = await admin.describe_topics([topic])
        assert len(md) == 1 and len(md[0]["partitions"]) == partitions, md
    finally:
        await admin.close()


async def produce(bs: str, topic: str, records: list[Rec], codec: str) -> list[tuple[int, int]]:
    producer = AIOKafkaProducer(
        bootstrap_servers=bs,
        acks="all",
        linger_ms=5,
        client_id="strata-it-aio",
        compression_type=None if codec == "none" else codec,
        enable_idempotence=False,
    )
    await producer.start()
    try:
        futs = []
        for r in records:
            futs.append(
                await producer.send(
                    topic,
                    key=r.key,
                    value=r.value,
                    partition=r.partition,
                    timestamp_ms=r.timestamp,
                    headers=list(r.headers),
                )
            )
        metas = await asyncio.wait_for(asyncio.gather(*futs), timeout=60)
    finally:
        await producer.stop()
    return [(m.partition, m.offset) for m in metas]


async def read_partition(
    c: AIOKafkaConsumer, topic: str, p: int, start: int, count: int, timeout: float = 60
) -> list[Rec]:
    tp = TopicPartition(topic, p)
    c.assign([tp])
    c.seek(tp, start)
    out: list[Rec] = []
    deadline = time.monotonic() + timeout
    while len(out) < count:
        assert time.monotonic() < deadline, f"{tp}: read {len(out)}/{count} from {start} within {timeout}s"
        batch = await c.getmany(tp, timeout_ms=500, max_records=5000)
        for m in batch.get(tp, []):
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


async def scenario(bs: str, codec: str) -> None:
    topic = f"aio-{codec}"
    await create_topic(bs, topic, PARTITIONS)
    records = gen_records(N, PARTITIONS, seed=300 + CODECS.index(codec), ts_base=past_ts_base(N), tag=codec)
    delivered = await produce(bs, topic, records, codec)
    next_off = {p: 0 for p in range(PARTITIONS)}
    for r, (p, off) in zip(records, delivered):
        assert (p, off) == (r.partition, next_off[r.partition])
        next_off[p] += 1

    c = AIOKafkaConsumer(
        bootstrap_servers=bs,
        group_id=None,
        enable_auto_commit=False,
        client_id="strata-it-aio-c",
        auto_offset_reset="none",
        fetch_max_wait_ms=100,
    )
    await c.start()
    try:
        got: dict[int, list[Rec]] = {}
        exp = by_partition(records)
        # check_roundtrip is synchronous; read everything it may ask for up front, then serve it from memory
        for p, recs in exp.items():
            got[p] = await read_partition(c, topic, p, 0, len(recs))

        def read(p: int, start: int, count: int) -> list[Rec]:
            return [r for r in got[p] if r.offset >= start][:count]

        times: dict[tuple, dict[int, int]] = {}

        async def lookup(targets: dict[int, int]) -> dict[int, int]:
            res = await c.offsets_for_times({TopicPartition(topic, p): ts for p, ts in targets.items()})
            return {tp.partition: (-1 if v is None else v.offset) for tp, v in res.items()}

        # the two lookups check_roundtrip performs: 60% into each partition, and past the newest record
        def stamp(r: Rec) -> int:
            assert r.timestamp is not None  # read back: every record has its timestamp
            return r.timestamp

        mid = {p: stamp(got[p][len(got[p]) * 3 // 5]) for p in got}
        after = {p: max(stamp(r) for r in got[p]) + 1 for p in got}
        times[tuple(sorted(mid.items()))] = await lookup(mid)
        times[tuple(sorted(after.items()))] = await lookup(after)
        # and read from the looked-up offsets with the client itself
        for p, off in times[tuple(sorted(mid.items()))].items():
            tail = await read_partition(c, topic, p, off, len(exp[p]) - off)
            assert [r.offset for r in tail] == list(range(off, len(exp[p])))
            assert tail == got[p][off:]

        check_roundtrip(records, read=read, lookup_time=lambda t: times[tuple(sorted(t.items()))])

        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        assert await c.beginning_offsets(tps) == {tp: 0 for tp in tps}
        assert await c.end_offsets(tps) == {TopicPartition(topic, p): len(v) for p, v in exp.items()}
    finally:
        await c.stop()
    assert_stored_codec(bs, topic, PARTITIONS, codec)


@pytest.mark.parametrize("codec", CODECS)
def test_produce_and_read_back(module_broker, codec):
    asyncio.run(scenario(module_broker.bootstrap, codec))
