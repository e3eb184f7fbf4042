"""value_json topics through the broker's translator: nested columns, the DLQ table with the offsets of the records
that do not match, and schema evolution by IncrementalAlterConfigs (a new property becomes a column; a type change
sends the records that use it to the DLQ)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from tests.support.broker_proc import StrataBroker
from tests.support.iceberg import broker_catalog, load, wait_translated
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SCHEMA = {
    "type": "object",
    "required": ["id"],
    "properties": {
        "id": {"type": "integer"},
        "user": {"type": "object", "properties": {"name": {"type": "string"}, "tier": {"type": "integer"}}},
        "lines": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}}}},
    },
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StrataBroker]:
    b = StrataBroker(
        tmp_path_factory.mktemp("iceberg-vj"),
        {"iceberg.translator.backoff.ms": 100, "iceberg.translator.backoff.max.ms": 1000},
        name="iceberg-vj",
    ).start()
    try:
        yield b
    finally:
        b.stop()


def _produce(bs: str, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs, "acks": "all", "linger.ms": 5, "log_level": 3})
    for v in values:
        p.produce(topic, v, key=b"k", partition=0)
    assert p.flush(30) == 0


def _alter(bs: str, topic: str, schema: dict) -> None:
    from confluent_kafka.admin import AdminClient

    res = ConfigResource(
        "topic",
        topic,
        incremental_configs=[
            ConfigEntry("iceberg.value.schema", json.dumps(schema), incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.incremental_alter_configs([res]).values():
        f.result(30)


def test_value_json_dlq_and_evolution(broker: StrataBroker) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    bs, topic = broker.bootstrap, "orders"
    cfg = {
        "iceberg.enable": "true",
        "iceberg.target.lag.ms": "300",
        "iceberg.mode": "value_json",
        "iceberg.value.schema": json.dumps(SCHEMA),
        "iceberg.invalid.record.action": "dlq_table",
    }
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic(topic, 1, 1, config=cfg)]).values():
        f.result(30)
    good = {"id": 1, "user": {"name": "ann", "tier": 2}, "lines": [{"sku": "a"}]}
    _produce(
        bs,
        topic,
        [
            json.dumps(good).encode(),
            b"not json",
            json.dumps({"id": "x"}).encode(),
            json.dumps({**good, "id": 4}).encode(),
        ],
    )
    catalog = broker_catalog(broker.log_dir)
    wait_translated(catalog, topic, {0: 4})
    rows = load(catalog, topic).scan().to_arrow().to_pylist()
    assert [(r["id"], r["user"]["name"], r["lines"][0]["sku"], r["kafka"]["offset"]) for r in rows] == [
        (1, "ann", "a", 0),
        (4, "ann", "a", 3),
    ]
    dlq = load(catalog, topic + "~dlq").scan().to_arrow().to_pylist()
    assert [(r["offset"], r["value"]) for r in dlq] == [(1, b"not json"), (2, b'{"id": "x"}')]
    # evolution: a new property and an incompatible change
    evolved = json.loads(json.dumps(SCHEMA))
    evolved["properties"]["channel"] = {"type": "string"}
    evolved["properties"]["user"]["properties"]["tier"] = {"type": "string"}
    _alter(bs, topic, evolved)
    # the translator restarts with the new schema (its reconcile pass) and evolves the table before translating on
    wait_until(
        lambda: "channel" in load(catalog, topic).schema().column_names, timeout=30, message="the table did not evolve"
    )
    _produce(
        bs,
        topic,
        [json.dumps({"id": 5, "channel": "web"}).encode(), json.dumps({"id": 6, "user": {"tier": "gold"}}).encode()],
    )
    wait_translated(catalog, topic, {0: 6})
    t = load(catalog, topic)
    assert "channel" in t.schema().column_names
    rows = sorted(t.scan().to_arrow().to_pylist(), key=lambda r: r["kafka"]["offset"])
    assert [(r["id"], r["channel"]) for r in rows] == [(1, None), (4, None), (5, "web")]
    dlq = sorted(load(catalog, topic + "~dlq").scan().to_arrow().to_pylist(), key=lambda r: r["offset"])
    assert [r["offset"] for r in dlq] == [1, 2, 5]
    assert "incompatible schema change: user.tier" in dlq[-1]["reason"]


def test_maintenance_merges_small_files_and_expires_snapshots(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The broker leading partition 0 maintains the table every iceberg.maintenance.interval.ms: the small files of
    five commits become one, old snapshots go, the committed offsets stay."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from strata.remote.iceberg.offsets import committed_next_offsets

    b = StrataBroker(tmp_path_factory.mktemp("iceberg-mt"), {"iceberg.maintenance.interval.ms": 300}, name="mt").start()
    try:
        bs, topic = b.bootstrap, "small"
        admin = AdminClient({"bootstrap.servers": bs})
        cfg = {"iceberg.enable": "true", "iceberg.target.lag.ms": "100", "iceberg.partition.spec": ""}
        for f in admin.create_topics([NewTopic(topic, 1, 1, config=cfg)]).values():
            f.result(30)
        catalog = broker_catalog(b.log_dir)
        for i in range(5):  # five commits, one small file each
            _produce(bs, topic, [b'{"n": %d}' % i] * 10)
            wait_translated(catalog, topic, {0: 10 * (i + 1)})

        def merged() -> bool:
            t = load(catalog, topic)
            return len(list(t.scan().plan_files())) == 1

        wait_until(merged, timeout=60, message="the small files were not merged")
        t = load(catalog, topic)
        assert committed_next_offsets(t) == {0: 50}
        assert sorted(r["offset"] for r in t.scan().to_arrow().to_pylist()) == list(range(50))
        # snapshots: expire everything but the newest once they are older than 1 ms
        from pyiceberg.exceptions import CommitFailedException

        def set_age() -> bool:
            try:
                with load(catalog, topic).transaction() as tx:
                    tx.set_properties({"history.expire.max-snapshot-age-ms": "1"})
                return True
            except CommitFailedException:
                return False

        wait_until(set_age, timeout=30, message="could not set the table property")
        wait_until(lambda: len(load(catalog, topic).snapshots()) == 1, timeout=60, message="snapshots not expired")
        assert committed_next_offsets(load(catalog, topic)) == {0: 50}
    finally:
        b.stop()
