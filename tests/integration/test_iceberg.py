"""Iceberg topics on one broker (docs/iceberg.md): a topic with iceberg.enable=true becomes a table in the broker's
embedded SQLite catalog, read here with pyiceberg from the Parquet files themselves.

- the table holds exactly the topic's records (offsets, keys, values, headers, timestamps) produced by
  confluent-kafka (100,000), kafka-python, aiokafka and kafkajs into the same topic, within the target lag;
- with a transactional producer, only committed records reach the table, and its offsets move past markers and
  aborted batches;
- the iceberg.* topic configs are validated by CreateTopics and AlterConfigs (INVALID_CONFIG with the reason), and
  turning iceberg.enable on for an existing topic translates it from its log start.

One broker for the module (its translators are what is under test).
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from tests.support import ck
from tests.support.broker_proc import StrataBroker
from tests.support.iceberg import broker_catalog, rows, table_offsets, wait_translated
from tests.support.records import Rec, norm_headers

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

JS_DIR = Path(__file__).resolve().parents[1] / "js"
LAG_MS = 300
ICEBERG = {"iceberg.enable": "true", "iceberg.target.lag.ms": str(LAG_MS)}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StrataBroker]:
    b = StrataBroker(
        tmp_path_factory.mktemp("iceberg"),
        {
            "iceberg.translator.backoff.ms": 100,
            "iceberg.translator.backoff.max.ms": 1000,
            "transaction.state.log.num.partitions": 2,
            "offsets.topic.num.partitions": 2,
        },
        name="iceberg",
    ).start()
    try:
        yield b
    finally:
        b.stop()


def _topic(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:6]}"  # dots and dashes are fine in table names


def _ends(broker: StrataBroker, topic: str, partitions: int) -> dict[int, int]:
    return {p: ck.watermarks(broker.bootstrap, topic, p)[1] for p in range(partitions)}


def _topic_records(broker: StrataBroker, topic: str, ends: dict[int, int], **conf: Any) -> list[Rec]:
    out: list[Rec] = []
    for p, end in ends.items():
        out.extend(ck.read_partition(broker.bootstrap, topic, p, 0, end, **conf))
    return out


def _bulk(n: int, partitions: int, tag: str) -> list[Rec]:
    """Small records (the 100,000 must be quick to produce): a key, a value and a header each, some keyless."""
    return [
        Rec(
            partition=i % partitions,
            key=None if i % 97 == 0 else f"{tag}-k{i}".encode(),
            value=f"{tag}-v{i}-".encode() + bytes([i % 256]) * (i % 50),
            headers=((f"h{i % 3}", str(i).encode()),) if i % 5 else (),
        )
        for i in range(n)
    ]


def _produce_kafka_python(bs: str, topic: str, records: list[Rec]) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bs, acks="all", linger_ms=5)
    try:
        for r in records:
            p.send(topic, key=r.key, value=r.value, headers=list(r.headers), partition=r.partition)
        p.flush(60)
    finally:
        p.close(10)


def _produce_aiokafka(bs: str, topic: str, records: list[Rec]) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=bs, acks="all", linger_ms=5)
        await p.start()
        try:
            futs = [
                await p.send(topic, key=r.key, value=r.value, headers=list(r.headers), partition=r.partition)
                for r in records
            ]
            await asyncio.gather(*futs)
        finally:
            await p.stop()

    asyncio.run(run())


def _produce_kafkajs(bs: str, topic: str, partitions: int, records: list[Rec], tmp: Path) -> None:
    def b64(x: bytes | None) -> str | None:
        return None if x is None else base64.b64encode(x).decode()

    spec = {
        "brokers": [bs],
        "topic": topic,
        "partitions": partitions,
        "codec": "gzip",
        "chunk": 500,
        "records": [
            {
                "p": r.partition,
                "k": b64(r.key),
                "v": b64(r.value),
                "h": [[k, b64(v)] for k, v in r.headers],
                "ts": int(time.time() * 1000),
            }
            for r in records
        ],
        "timestamps": [],
    }
    path = tmp / "kafkajs-spec.json"
    path.write_text(json.dumps(spec))
    proc = subprocess.run(
        ["node", str(JS_DIR / "produce.js"), str(path)], cwd=JS_DIR, capture_output=True, timeout=120, check=False
    )
    assert proc.returncode == 0, f"node exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-3000:]}"


def test_table_holds_exactly_the_topic_records_of_every_client(broker, tmp_path):
    bs, partitions = broker.bootstrap, 3
    topic = _topic("kv-clients")
    ck.create_topic(bs, topic, partitions, ICEBERG)
    cat = broker_catalog(broker.log_dir)

    started = time.monotonic()
    ck.produce_all(bs, topic, _bulk(100_000, partitions, "ck"), compression="lz4", **{"batch.size": 262144})
    t_ck = time.monotonic()
    _produce_kafka_python(bs, topic, _bulk(2_000, partitions, "kp"))
    _produce_aiokafka(bs, topic, _bulk(2_000, partitions, "aio"))
    _produce_kafkajs(bs, topic, partitions, [r for r in _bulk(2_000, partitions, "js") if r.key is not None], tmp_path)
    t_others = time.monotonic()

    ends = _ends(broker, topic, partitions)
    assert sum(ends.values()) == 100_000 + 2_000 + 2_000 + 2_000 - sum(1 for i in range(2_000) if i % 97 == 0)
    offsets = wait_translated(cat, topic, ends, timeout=90)
    assert offsets == ends
    t_table = time.monotonic()
    print(
        f"\nconfluent 100k {t_ck - started:.1f}s, other clients {t_others - t_ck:.1f}s; the table complete "
        f"{t_table - t_others:.1f}s after the last produce"
    )

    got = rows(cat, topic)
    t_rows = time.monotonic()
    want = _topic_records(broker, topic, ends)
    print(f"table rows {t_rows - t_table:.1f}s, topic read {time.monotonic() - t_rows:.1f}s")
    want.sort(key=lambda r: (r.partition, r.offset))
    assert len(got) == len(want) == sum(ends.values())
    for p in range(partitions):  # every offset once: no duplicate, no gap
        assert [r.offset for r in got if r.partition == p] == list(range(ends[p]))
    for g, w in zip(got, want):
        assert (g.partition, g.offset, g.key, g.value, g.headers, g.timestamp) == (
            w.partition,
            w.offset,
            w.key,
            w.value,
            norm_headers(w.headers),
            w.timestamp,
        ), f"row {g.partition}/{g.offset} differs from the topic's record"
    # the snapshot summary names the topic id beside the offsets (the contract with the Spark reader)
    summary = cat.load_table(("strata", topic)).current_snapshot().summary
    assert summary["strata.topic-id"]
    print(f"compared with the topic in {time.monotonic() - t_table:.1f}s")


def _txn_producer(bs: str) -> Producer:
    p = Producer({"bootstrap.servers": bs, "transactional.id": f"ice-{uuid.uuid4().hex[:6]}", **ck.QUIET})
    p.init_transactions(30)
    return p


def test_only_committed_transactional_records_reach_the_table(broker):
    bs = broker.bootstrap
    topic = _topic("kv-txn")
    ck.create_topic(bs, topic, 1, ICEBERG)
    cat = broker_catalog(broker.log_dir)
    p = _txn_producer(bs)
    for outcome in ("commit", "abort", "commit", "abort", "commit"):
        p.begin_transaction()
        for i in range(10):
            p.produce(topic, key=f"{outcome}-{i}".encode(), value=outcome.encode(), partition=0)
        if outcome == "commit":
            p.commit_transaction(30)
        else:
            p.flush(30)
            p.abort_transaction(30)
    ends = _ends(broker, topic, 1)
    assert ends[0] == 5 * 10 + 5  # data + one marker per transaction
    wait_translated(cat, topic, ends)
    got = rows(cat, topic)
    want = _topic_records(broker, topic, {0: 30}, **{"isolation.level": "read_committed"})
    assert [(r.offset, r.key, r.value) for r in got] == [(r.offset, r.key, r.value) for r in want]
    assert {r.value for r in got} == {b"commit"} and len(got) == 30


def test_iceberg_configs_are_validated(broker):
    bs = broker.bootstrap
    a = ck.admin(bs)
    bad = [
        ({"iceberg.mode": "avro"}, "iceberg.mode"),
        ({"iceberg.partition.spec": "month(timestamp)"}, "month(timestamp)"),
        ({"iceberg.partition.spec": "identity(nope)"}, "nope"),
        ({"iceberg.partition.spec": "hour(key)"}, "timestamp column"),
        ({"iceberg.invalid.record.action": "keep"}, "iceberg.invalid.record.action"),
        ({"iceberg.target.lag.ms": "0"}, "iceberg.target.lag.ms"),
    ]
    for config, reason in bad:
        fs = a.create_topics([NewTopic(_topic("bad"), 1, 1, config=config)], request_timeout=15)
        with pytest.raises(KafkaException) as e:
            next(iter(fs.values())).result(15)
        assert e.value.args[0].name() == "INVALID_CONFIG" and reason in e.value.args[0].str(), config
    topic = _topic("alter")
    ck.create_topic(bs, topic, 1, {"iceberg.partition.spec": "day(timestamp), bucket(4, key)"})
    res = ConfigResource("TOPIC", topic)
    res.add_incremental_config(
        ConfigEntry("iceberg.partition.spec", "bucket(0, key)", incremental_operation=AlterConfigOpType.SET)
    )
    with pytest.raises(KafkaException) as e:
        a.incremental_alter_configs([res])[res].result(15)
    assert e.value.args[0].name() == "INVALID_CONFIG" and "bucket count" in e.value.args[0].str()


def test_enabling_iceberg_on_a_topic_translates_it_from_its_log_start(broker):
    bs = broker.bootstrap
    topic = _topic("later")
    ck.create_topic(bs, topic, 2)
    ck.produce_all(bs, topic, _bulk(500, 2, "before"))
    cat = broker_catalog(broker.log_dir)
    assert table_offsets(cat, topic) == {}
    res = ConfigResource("TOPIC", topic)
    for k, v in ICEBERG.items():
        res.add_incremental_config(ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET))
    a = ck.admin(bs)  # must outlive the future
    a.incremental_alter_configs([res])[res].result(15)
    ck.produce_all(bs, topic, _bulk(500, 2, "after"))
    wait_translated(cat, topic, {0: 500, 1: 500})
    got = rows(cat, topic)
    assert len(got) == 1000 and {r.value.split(b"-")[0] for r in got} == {b"before", b"after"}


def test_status_and_describe_commands(broker, capsys):
    from strata.cli.main import main as cli_main

    def strata(*args: str) -> tuple[int, str, str]:
        code = cli_main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    bs = broker.bootstrap
    topic = _topic("cli")
    ck.create_topic(bs, topic, 2, ICEBERG)
    ck.produce_all(bs, topic, _bulk(300, 2, "cli"))
    cat = broker_catalog(broker.log_dir)
    wait_translated(cat, topic, {0: 150, 1: 150})
    conf = ["--broker-config", str(broker.props_path), "--bootstrap-server", bs]
    code, out, _ = strata("iceberg", "status", "--topic", topic, *conf)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["TOPIC", "PARTITION", "TABLE-OFFSET", "LOG-END-OFFSET", "LAG", "LAG-SECONDS"]
    assert lines[1].split() == [topic, "0", "150", "150", "0", "0.0"]
    assert lines[2].split() == [topic, "1", "150", "150", "0", "0.0"]
    assert "Records: 300" in out and "DLQ records: -" in out
    code, out, _ = strata("iceberg", "describe", "--topic", topic, *conf)
    assert code == 0
    assert "strata.partition.0.next-offset=150" in out and "hour" in out and "commit.retry.num-retries=0" in out
    code, out, err = strata("iceberg", "status", "--topic", "no-such-table", *conf)
    assert code == 1 and err.count("\n") == 1 and "cannot load table strata.no-such-table" in err

    # the metrics count what was committed; lag is 0 once the table holds the topic
    metrics = _scrape(broker)
    assert metrics[("strata_iceberg_records_written_total", (("topic", topic),))] == 300
    assert metrics[("strata_iceberg_commits_total", (("topic", topic),))] >= 2
    assert metrics[("strata_iceberg_files_written_total", (("topic", topic),))] >= 2
    assert metrics[("strata_iceberg_bytes_written_total", (("topic", topic),))] > 0
    for p in ("0", "1"):
        labels = (("partition", p), ("topic", topic))
        assert metrics[("strata_iceberg_translation_lag_records", labels)] == 0
        assert metrics[("strata_iceberg_translated_next_offset", labels)] == 150


def _scrape(broker: StrataBroker) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=5).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }
