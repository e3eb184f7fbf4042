"""Batch reads of tiered topics: the DataFrame equals what a stock consumer reads, in both read modes.

The module's topics hold history in S3 (moto) that is no longer on the broker's disk, plus a local tail; batches are
gzip-, zstd-, lz4- and un-compressed, records carry keys (some null), headers and explicit timestamps, and one topic
uses LogAppendTime."""

from __future__ import annotations

import time

import pytest

from strata.pipeline.options import parse_source_options
from strata.pipeline.planning import plan_batch
from tests.pipeline.support import (
    consume_all,
    create_topic,
    df_records,
    local_log_start,
    produce,
    remote_fetch_bytes,
    wait_offloaded,
)

TOPIC = "history"
APPEND = "appendtime"
PARTS = 2
PER_PHASE = 400
T0 = (int(time.time()) - 3600) * 1000  # recent: time retention must not delete it


def _records(phase: int, n: int) -> list[dict]:
    out = []
    for i in range(n):
        k = phase * n + i
        out.append(
            {
                "key": None if k % 7 == 0 else f"key-{k % 13}".encode(),
                "value": (f"value-{k}-" + "x" * (40 + k % 50)).encode(),
                "partition": k % PARTS,
                "headers": [("h", f"{k}".encode()), ("empty", None)] if k % 3 == 0 else None,
                "timestamp": T0 + k * 10,
            }
        )
    return out


@pytest.fixture(scope="module")
def topics(tiered):
    bs = tiered.bootstrap
    create_topic(
        bs, TOPIC, PARTS, remote_storage_enable="true", segment_bytes=8192, local_retention_bytes=1, retention_ms=-1
    )
    create_topic(
        bs,
        APPEND,
        1,
        remote_storage_enable="true",
        segment_bytes=8192,
        local_retention_bytes=1,
        retention_ms=-1,
        message_timestamp_type="LogAppendTime",
    )
    for phase, codec in enumerate(("gzip", "zstd", "lz4", "none")):
        produce(bs, TOPIC, _records(phase, PER_PHASE), compression=codec, batch_size=4096)
    produce(
        bs,
        APPEND,
        [{"value": f"a{i}".encode() * 20, "key": b"k"} for i in range(600)],
        compression="snappy",
        batch_size=4096,
    )
    for p in range(PARTS):
        wait_offloaded(bs, TOPIC, p, at_least=300)
    wait_offloaded(bs, APPEND, 0, at_least=300)
    # the local tail: produced after the offload, still on the broker's disk
    produce(bs, TOPIC, _records(4, 60))
    produce(bs, APPEND, [{"value": b"tail"} for _ in range(10)])
    return bs


def _read(spark, bs: str, **extra: str):
    r = (
        spark.read.format("strata")
        .option("kafka.bootstrap.servers", bs)
        .option("subscribe", f"{TOPIC},{APPEND}")
        .option("includeHeaders", "true")
    )
    for k, v in extra.items():
        r = r.option(k, v)
    return r.load()


def _expected(bs: str) -> list[tuple]:
    return sorted(
        [(TOPIC, *r) for r in consume_all(bs, TOPIC)] + [(APPEND, *r) for r in consume_all(bs, APPEND)],
        key=lambda t: (t[0], t[1], t[2]),
    )


def _got(df) -> list[tuple]:
    return sorted(df_records(df, with_topic=True), key=lambda t: (t[0], t[1], t[2]))


def test_history_is_partly_remote_only(topics):
    # the premise of the module: old offsets are gone from the broker's disk, so every read of them is remote
    assert all(local_log_start(topics, TOPIC, p) >= 300 for p in range(PARTS))
    assert local_log_start(topics, APPEND, 0) >= 300


def test_broker_mode_equals_consumer(spark, topics, tiered):
    broker = tiered.broker
    expected = _expected(topics)
    assert len(expected) == 4 * PER_PHASE + 60 + 610
    before = remote_fetch_bytes(broker, TOPIC)
    got = _got(_read(spark, topics))
    assert got == expected
    assert remote_fetch_bytes(broker, TOPIC) > before  # the broker served the tiered part from S3
    # spot checks of the columns' meaning
    first = next(r for r in got if r[0] == TOPIC and r[1] == 0)
    assert first[2] == 0 and first[4] == b"value-0-" + b"x" * 40 and first[5] == T0 and first[6] == 0
    assert first[7] == [("h", b"0"), ("empty", None)]
    assert all(r[6] == 1 for r in got if r[0] == APPEND)  # LogAppendTime


def test_direct_mode_equals_consumer(spark, topics, tiered):
    broker = tiered.broker
    opts = tiered.direct_options()
    plan = plan_batch(
        parse_source_options(
            {"kafka.bootstrap.servers": topics, "subscribe": f"{TOPIC},{APPEND}", **opts}, streaming=False
        )
    )
    remote = sum(p.end - p.start for r in plan for p in r.pieces if p.segment is not None)
    local = sum(p.end - p.start for r in plan for p in r.pieces if p.segment is None)
    assert remote >= 2 * 300 + 300 and local >= 70  # most history from S3, the tail through the broker
    expected = _expected(topics)
    before = remote_fetch_bytes(broker, TOPIC)
    got = _got(_read(spark, topics, **opts))
    assert got == expected
    assert remote_fetch_bytes(broker, TOPIC) == before  # the broker did not read remote storage for us


def test_direct_and_broker_agree_on_a_window(spark, topics, tiered):
    """Explicit offsets inside segments (mid-batch starts and ends), split into several Spark partitions."""
    window = {
        "startingOffsets": f'{{"{TOPIC}":{{"0":37,"1":101}},"{APPEND}":{{"0":5}}}}',
        "endingOffsets": f'{{"{TOPIC}":{{"0":611,"1":-1}},"{APPEND}":{{"0":333}}}}',
        "minPartitions": "7",
    }
    a = _got(_read(spark, topics, **window))
    b = _got(_read(spark, topics, **window, **tiered.direct_options()))
    assert a == b
    assert [r[2] for r in a if r[0] == TOPIC and r[1] == 0] == list(range(37, 611))
    assert [r[2] for r in a if r[0] == APPEND] == list(range(5, 333))
