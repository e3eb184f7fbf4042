"""DescribeConfigs / IncrementalAlterConfigs against a live broker: sources and synonyms after alters, persistence
across a restart, the altered config taking effect on the log, error codes, every DescribeConfigs version, and the
real clients' admin APIs (confluent-kafka for both, kafka-python for describe). Broker, broker-logger and group
resources and the legacy AlterConfigs: test_admin_configs.py."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType

from strata.cli.admin_client import RESOURCE_BROKER, RESOURCE_TOPIC, AdminClient, AdminError
from strata.protocol.errors import ErrorCode
from strata.protocol.registry import REQUEST_CLASSES, ApiKey
from tests.support import ck

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

# log.segment.bytes set in the broker's properties: topics report segment.bytes as STATIC_BROKER_CONFIG.
BROKER_PROPS = {"log.segment.bytes": 2_000_000, "num.partitions": 2}
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8


@pytest.fixture
def cfg_broker(broker_factory):
    return broker_factory(**BROKER_PROPS)


def _configs(a: AdminClient, topic: str, synonyms: bool = True) -> dict:
    return {c.name: c for c in a.describe_configs(RESOURCE_TOPIC, topic, include_synonyms=synonyms)}


def _raw_alter(
    a: AdminClient, rtype: int, name: str, ops: list[tuple[str, int, str | None]], validate_only: bool = False
):
    R = REQUEST_CLASSES[ApiKey.INCREMENTAL_ALTER_CONFIGS].AlterConfigsResource
    resp = a.request(
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        a.api_version(ApiKey.INCREMENTAL_ALTER_CONFIGS),
        resources=[
            R(
                resource_type=rtype,
                resource_name=name,
                configs=[R.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops],
            )
        ],
        validate_only=validate_only,
    )
    return resp.responses[0]


def _raw_describe(
    a: AdminClient,
    version: int,
    resources: list[tuple[int, str, list[str] | None]],
    synonyms: bool = False,
    docs: bool = False,
):
    Req = REQUEST_CLASSES[ApiKey.DESCRIBE_CONFIGS]
    return a.request(
        ApiKey.DESCRIBE_CONFIGS,
        version,
        resources=[
            Req.DescribeConfigsResource(resource_type=t, resource_name=n, configuration_keys=k) for t, n, k in resources
        ],
        include_synonyms=synonyms,
        include_documentation=docs,
    ).results


def test_sources_and_synonyms_follow_alters(cfg_broker):
    with AdminClient(cfg_broker.bootstrap) as a:
        a.create_topic("cfg-src", 1, 1)
        c = _configs(a, "cfg-src")
        assert (c["retention.ms"].value, c["retention.ms"].source) == ("604800000", 5)
        assert (c["segment.bytes"].value, c["segment.bytes"].source) == ("2000000", 4)
        assert c["segment.bytes"].synonyms == [
            ("log.segment.bytes", "2000000", 4),
            ("log.segment.bytes", "1073741824", 5),
        ]

        a.alter_configs(
            RESOURCE_TOPIC,
            "cfg-src",
            set={"retention.ms": "3600000", "segment.bytes": "1048576"},
            append={"cleanup.policy": "compact"},
        )
        c = _configs(a, "cfg-src")
        assert (c["retention.ms"].value, c["retention.ms"].source) == ("3600000", 1)
        assert c["retention.ms"].synonyms == [("retention.ms", "3600000", 1)]
        assert c["segment.bytes"].synonyms == [
            ("segment.bytes", "1048576", 1),
            ("log.segment.bytes", "2000000", 4),
            ("log.segment.bytes", "1073741824", 5),
        ]
        assert (c["cleanup.policy"].value, c["cleanup.policy"].source) == ("delete,compact", 1)

        a.alter_configs(
            RESOURCE_TOPIC, "cfg-src", delete=["retention.ms", "segment.bytes"], subtract={"cleanup.policy": "delete"}
        )
        c = _configs(a, "cfg-src")
        assert (c["retention.ms"].value, c["retention.ms"].source) == ("604800000", 5)
        assert (c["segment.bytes"].value, c["segment.bytes"].source) == ("2000000", 4)
        assert (c["cleanup.policy"].value, c["cleanup.policy"].source) == ("compact", 1)


def test_created_with_configs_reports_topic_source(cfg_broker):
    with AdminClient(cfg_broker.bootstrap) as a:
        res = a.create_topic("cfg-create", 1, 1, {"max.message.bytes": "2000"})
        created = {c.name: c for c in res.configs}  # CreateTopics v5+ returns the resulting configs
        assert (created["max.message.bytes"].value, created["max.message.bytes"].config_source) == ("2000", 1)
        assert created["segment.bytes"].config_source == 4
        assert _configs(a, "cfg-create")["max.message.bytes"].source == 1


def test_altered_configs_survive_restart(cfg_broker):
    with AdminClient(cfg_broker.bootstrap) as a:
        a.create_topic("cfg-persist", 1, 1, {"retention.bytes": "123456"})
        a.alter_configs(
            RESOURCE_TOPIC, "cfg-persist", set={"retention.ms": "7200000"}, append={"cleanup.policy": "compact"}
        )
    cfg_broker.restart()
    with AdminClient(cfg_broker.bootstrap) as a:
        c = _configs(a, "cfg-persist")
    assert (c["retention.ms"].value, c["retention.ms"].source) == ("7200000", 1)
    assert (c["retention.bytes"].value, c["retention.bytes"].source) == ("123456", 1)
    assert c["cleanup.policy"].value == "delete,compact"


def test_altered_segment_bytes_applies_to_the_log(cfg_broker):
    """The override must reach the partition's log as a number: appends then roll at the new size."""
    with AdminClient(cfg_broker.bootstrap) as a:
        a.create_topic("cfg-roll", 1, 1)
        a.alter_configs(RESOURCE_TOPIC, "cfg-roll", set={"segment.bytes": "1024"})
    p = Producer({"bootstrap.servers": cfg_broker.bootstrap, "linger.ms": 0, "batch.num.messages": 1, **ck.QUIET})
    errors: list = []
    for i in range(20):
        p.produce("cfg-roll", value=b"x" * 200, partition=0, on_delivery=lambda e, m: errors.append(e))
        assert p.flush(15) == 0, f"record {i} not acknowledged (broker log: see report)"
    assert errors == [None] * 20, f"delivery errors: {errors}"
    with AdminClient(cfg_broker.bootstrap) as a:
        (t,) = a.describe_topics(["cfg-roll"])
    assert t.partitions[0].end_offset == 20
    segments = sorted(cfg_broker.partition_dir("cfg-roll", 0).glob("*.log"))
    assert len(segments) >= 4, f"segment.bytes=1024 should have rolled 20 x 200-byte batches: {segments}"


def test_invalid_values_answer_invalid_config_and_change_nothing(cfg_broker):
    with AdminClient(cfg_broker.bootstrap) as a:
        a.create_topic("cfg-bad", 1, 1, {"retention.ms": "1000"})
        res = _raw_alter(a, TOPIC, "cfg-bad", [("retention.ms", 0, "2000"), ("segment.bytes", 0, "tiny")])
        assert res.error_code == ErrorCode.INVALID_CONFIG
        assert "segment.bytes" in res.error_message and "tiny" in res.error_message
        res = _raw_alter(a, TOPIC, "cfg-bad", [("no.such.config", 0, "1")])
        assert (res.error_code, res.error_message) == (
            ErrorCode.INVALID_CONFIG,
            "Unknown topic config name: no.such.config",
        )
        res = _raw_alter(a, TOPIC, "cfg-bad", [("retention.ms", 2, "5")])
        assert res.error_code == ErrorCode.INVALID_CONFIG and "not LIST" in res.error_message
        res = _raw_alter(a, TOPIC, "cfg-bad", [("retention.ms", 0, "5"), ("retention.ms", 1, None)])
        assert res.error_code == ErrorCode.INVALID_REQUEST
        res = _raw_alter(a, TOPIC, "cfg-bad", [("retention.ms", 0, "5")], validate_only=True)
        assert res.error_code == 0
        assert _configs(a, "cfg-bad")["retention.ms"].value == "1000", "failed or validate-only alters change nothing"
        with pytest.raises(AdminError, match="INVALID_CONFIG"):
            a.alter_configs(RESOURCE_TOPIC, "cfg-bad", set={"cleanup.policy": "shred"})


def test_resource_errors(cfg_broker):
    with AdminClient(cfg_broker.bootstrap) as a:
        assert (
            _raw_alter(a, TOPIC, "cfg-missing", [("retention.ms", 0, "1")]).error_code
            == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
        res = _raw_alter(a, BROKER, "0", [("num.partitions", 0, "3")])  # read-only: not a dynamic config
        assert res.error_code == ErrorCode.INVALID_REQUEST
        assert res.error_message == "Cannot update these configs dynamically: Set(num.partitions)"
        r = _raw_describe(
            a,
            4,
            [(TOPIC, "cfg-missing", None), (BROKER, "1", None), (BROKER, "zero", None), (BROKER_LOGGER, "1", None)],
        )
        assert [x.error_code for x in r] == [
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ErrorCode.INVALID_REQUEST,
            ErrorCode.INVALID_REQUEST,
            ErrorCode.INVALID_REQUEST,
        ]
        assert all(x.error_message for x in r[1:])


def test_broker_resource(cfg_broker):
    with AdminClient(cfg_broker.bootstrap) as a:
        c = {x.name: x for x in a.describe_configs(RESOURCE_BROKER, "0", include_synonyms=True)}
    assert (c["log.segment.bytes"].value, c["log.segment.bytes"].source) == ("2000000", 4)
    assert (c["num.partitions"].value, c["num.partitions"].source) == ("2", 4)
    assert (c["message.max.bytes"].value, c["message.max.bytes"].source) == ("1048588", 5)
    assert c["listeners"].value == f"PLAINTEXT://127.0.0.1:{cfg_broker.port}"
    assert c["listeners"].read_only and c["num.partitions"].read_only
    assert not c["message.max.bytes"].read_only  # a dynamic broker config (test_admin_configs.py)


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_describe_every_version_with_key_filter(cfg_broker, version):
    with AdminClient(cfg_broker.bootstrap) as a:
        a.create_topic("cfg-v", 1, 1, {"retention.ms": "5000"})
        (r,) = _raw_describe(
            a, version, [(TOPIC, "cfg-v", ["retention.ms", "segment.bytes"])], synonyms=True, docs=True
        )
    assert r.error_code == 0
    got = {c.name: c for c in r.configs}
    assert set(got) == {"retention.ms", "segment.bytes"}
    assert (got["retention.ms"].value, got["retention.ms"].config_source) == ("5000", 1)
    assert [(s.name, s.source) for s in got["segment.bytes"].synonyms] == [
        ("log.segment.bytes", 4),
        ("log.segment.bytes", 5),
    ]
    if version >= 3:
        assert got["retention.ms"].config_type == 5  # LONG
        assert got["retention.ms"].documentation


def test_confluent_incremental_alter_and_describe(cfg_broker):
    adm = ck.admin(cfg_broker.bootstrap)
    ck.create_topic(cfg_broker.bootstrap, "cfg-ck", 1)
    res = ConfigResource(
        ResourceType.TOPIC,
        "cfg-ck",
        incremental_configs=[
            ConfigEntry("retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ],
    )
    adm.incremental_alter_configs([res])[res].result(timeout=30)

    desc = ConfigResource(ResourceType.TOPIC, "cfg-ck")
    entries = adm.describe_configs([desc])[desc].result(timeout=30)
    assert entries["retention.ms"].value == "86400000"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["cleanup.policy"].value == "delete,compact"
    assert entries["segment.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert entries["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["max.message.bytes"].is_default

    bad = ConfigResource(
        ResourceType.TOPIC,
        "cfg-ck",
        incremental_configs=[ConfigEntry("retention.ms", "forever", incremental_operation=AlterConfigOpType.SET)],
    )
    with pytest.raises(KafkaException) as ei:
        adm.incremental_alter_configs([bad])[bad].result(timeout=30)
    assert ei.value.args[0].code() == KafkaError.INVALID_CONFIG

    broker = ConfigResource(ResourceType.BROKER, "0")
    b = adm.describe_configs([broker])[broker].result(timeout=30)
    assert b["log.segment.bytes"].value == "2000000" and not b["log.segment.bytes"].is_read_only
    assert b["num.partitions"].is_read_only


def test_kafka_python_describe_configs(cfg_broker):
    from kafka.admin import ConfigResource as KPResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    with AdminClient(cfg_broker.bootstrap) as a:
        a.create_topic("cfg-kp", 1, 1, {"retention.ms": "4000"})
    kp = KafkaAdminClient(bootstrap_servers=cfg_broker.bootstrap, request_timeout_ms=30000)
    try:
        out = kp.describe_configs([KPResource(ConfigResourceType.TOPIC, "cfg-kp")], config_filter="all")
    finally:
        kp.close()
    text = repr(out)
    assert "cfg-kp" in text and "retention.ms" in text and "'4000'" in text
