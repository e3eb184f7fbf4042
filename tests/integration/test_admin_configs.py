"""Dynamic broker configs, broker loggers, group configs and the legacy AlterConfigs (API 33), through the clients
that use them: confluent-kafka's AdminClient (incremental_alter_configs, alter_configs = API 33, describe_configs),
kafka-python's alter_configs (API 33) and Strata's own admin client for the raw requests."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType

from strata.cli.admin_client import RESOURCE_BROKER, RESOURCE_TOPIC, AdminClient
from strata.protocol.errors import ErrorCode
from strata.protocol.registry import REQUEST_CLASSES, ApiKey
from tests.integration.test_configs import _raw_alter as _incremental
from tests.support import ck
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32
SET, DELETE, APPEND = 0, 1, 2


def _legacy(a: AdminClient, rtype: int, name: str, configs: dict, version: int = 2, validate_only: bool = False):
    R = REQUEST_CLASSES[ApiKey.ALTER_CONFIGS].AlterConfigsResource
    return a.request(
        ApiKey.ALTER_CONFIGS,
        version,
        resources=[
            R(
                resource_type=rtype,
                resource_name=name,
                configs=[R.AlterableConfig(name=k, value=v) for k, v in configs.items()],
            )
        ],
        validate_only=validate_only,
    ).responses[0]


def _describe(a: AdminClient, rtype: int, name: str, keys=None):
    Req = REQUEST_CLASSES[ApiKey.DESCRIBE_CONFIGS]
    (r,) = a.request(
        ApiKey.DESCRIBE_CONFIGS,
        4,
        resources=[Req.DescribeConfigsResource(resource_type=rtype, resource_name=name, configuration_keys=keys)],
        include_synonyms=True,
        include_documentation=False,
    ).results
    return r


def _entries(a: AdminClient, rtype: int, name: str, keys=None) -> dict:
    r = _describe(a, rtype, name, keys)
    assert r.error_code == 0, r
    return {c.name: c for c in r.configs}


def _produce_one(bootstrap: str, topic: str, size: int) -> KafkaError | None:
    p = ck.producer(bootstrap, **{"linger.ms": 0, "message.max.bytes": 10_000_000, "retries": 0})
    errors: list = []
    p.produce(topic, value=b"x" * size, partition=0, on_delivery=lambda e, m: errors.append(e))
    assert p.flush(30) == 0
    return errors[0]


def test_confluent_incremental_broker_config_applies_live_and_survives_restart(broker):
    ck.create_topic(broker.bootstrap, "dyn-live", 1)
    adm = ck.admin(broker.bootstrap)
    assert _produce_one(broker.bootstrap, "dyn-live", 5000) is None

    res = ConfigResource(
        ResourceType.BROKER,
        "0",
        incremental_configs=[
            ConfigEntry("message.max.bytes", "2000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("log.retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    adm.incremental_alter_configs([res])[res].result(timeout=30)

    b = adm.describe_configs([ConfigResource(ResourceType.BROKER, "0")])[ConfigResource(ResourceType.BROKER, "0")]
    entries = b.result(timeout=30)
    assert entries["message.max.bytes"].value == "2000"
    assert entries["message.max.bytes"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert not entries["message.max.bytes"].is_read_only
    t = ConfigResource(ResourceType.TOPIC, "dyn-live")
    tentries = adm.describe_configs([t])[t].result(timeout=30)
    assert (tentries["retention.ms"].value, tentries["retention.ms"].source) == (
        "3600000",
        ConfigSource.DYNAMIC_BROKER_CONFIG.value,
    )
    # applied to the existing topic's log at once: a 5000-byte batch is now too large
    err = _produce_one(broker.bootstrap, "dyn-live", 5000)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE

    broker.restart()
    with AdminClient(broker.bootstrap) as a:
        e = _entries(a, BROKER, "0", ["message.max.bytes", "log.retention.ms"])
        assert (e["message.max.bytes"].value, e["message.max.bytes"].config_source) == ("2000", 2)
        assert (e["log.retention.ms"].value, e["log.retention.ms"].config_source) == ("3600000", 2)
    err = _produce_one(broker.bootstrap, "dyn-live", 5000)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, "the dynamic value survives a restart"

    undo = ConfigResource(
        ResourceType.BROKER,
        "0",
        incremental_configs=[ConfigEntry("message.max.bytes", None, incremental_operation=AlterConfigOpType.DELETE)],
    )
    adm = ck.admin(broker.bootstrap)
    adm.incremental_alter_configs([undo])[undo].result(timeout=30)
    assert _produce_one(broker.bootstrap, "dyn-live", 5000) is None


def test_cluster_default_and_per_broker_precedence(broker_factory):
    b = broker_factory(**{"message.max.bytes": 100_000})
    with AdminClient(b.bootstrap) as a:
        assert _incremental(a, BROKER, "", [("message.max.bytes", SET, "50000")]).error_code == 0
        d = _entries(a, BROKER, "")  # the empty name lists the cluster-wide defaults only
        assert list(d) == ["message.max.bytes"]
        assert (d["message.max.bytes"].value, d["message.max.bytes"].config_source) == ("50000", 3)
        e = _entries(a, BROKER, "0", ["message.max.bytes"])["message.max.bytes"]
        assert (e.value, e.config_source) == ("50000", 3)
        assert [(s.value, s.source) for s in e.synonyms] == [("50000", 3), ("100000", 4), ("1048588", 5)]

        assert _incremental(a, BROKER, "0", [("message.max.bytes", SET, "60000")]).error_code == 0
        e = _entries(a, BROKER, "0", ["message.max.bytes"])["message.max.bytes"]
        assert (e.value, e.config_source) == ("60000", 2)
        assert [s.source for s in e.synonyms] == [2, 3, 4, 5]
        t = _entries(a, TOPIC, a.create_topic("dyn-prec", 1, 1) and "dyn-prec", ["max.message.bytes"])
        assert (t["max.message.bytes"].value, t["max.message.bytes"].config_source) == ("60000", 2)


def test_broker_alter_errors_and_validate_only(broker):
    with AdminClient(broker.bootstrap) as a:
        r = _incremental(a, BROKER, "0", [("log.dirs", SET, "/tmp/x")])
        assert (r.error_code, r.error_message) == (
            ErrorCode.INVALID_REQUEST,
            "Cannot update these configs dynamically: Set(log.dirs)",
        )
        r = _incremental(a, BROKER, "0", [("log.retention.ms", SET, "soon")])
        assert r.error_code == ErrorCode.INVALID_REQUEST and "log.retention.ms" in r.error_message
        r = _incremental(a, BROKER, "7", [("log.retention.ms", SET, "1")])
        assert r.error_code == ErrorCode.INVALID_REQUEST and "expected 0" in r.error_message
        r = _incremental(a, BROKER, "0", [("log.cleanup.policy", APPEND, "compact")], validate_only=True)
        assert r.error_code == 0
        r = _incremental(a, BROKER, "0", [("log.retention.ms", SET, None)])
        assert r.error_code == ErrorCode.INVALID_REQUEST and "Null value" in r.error_message
        e = _entries(a, BROKER, "0", ["log.cleanup.policy", "log.retention.ms"])
        assert e["log.cleanup.policy"].config_source == 5 and e["log.retention.ms"].config_source == 5, (
            "failed and validate-only alters store nothing"
        )
        assert _incremental(a, BROKER, "0", [("log.cleanup.policy", APPEND, "compact")]).error_code == 0
        assert _entries(a, BROKER, "0", ["log.cleanup.policy"])["log.cleanup.policy"].value == "delete,compact"


def test_log_cleaner_threads_reconfigured_live(broker):
    with AdminClient(broker.bootstrap) as a:
        assert _incremental(a, BROKER, "", [("log.cleaner.threads", SET, "2")]).error_code == 0
    wait_until(lambda: "log cleaner reconfigured" in broker.output() and "threads=2" in broker.output(), timeout=30)


def test_legacy_alter_configs_replaces_the_whole_set(broker):
    with AdminClient(broker.bootstrap) as a:
        a.create_topic("dyn-legacy", 1, 1, {"retention.ms": "1000", "segment.bytes": "100000"})
        for v in (0, 1, 2):
            r = _legacy(a, TOPIC, "dyn-legacy", {"retention.bytes": str(5000 + v)}, version=v)
            assert r.error_code == 0, r
        c = {x.name: x for x in a.describe_configs(RESOURCE_TOPIC, "dyn-legacy")}
        assert c["retention.bytes"].value == "5002" and c["retention.bytes"].source == 1
        assert c["retention.ms"].source == 5 and c["segment.bytes"].source == 5, "keys not sent are removed"

        assert _legacy(a, BROKER, "0", {"log.retention.ms": "1000", "log.segment.bytes": "5000000"}).error_code == 0
        assert _legacy(a, BROKER, "0", {"log.segment.bytes": "6000000"}).error_code == 0
        e = _entries(a, BROKER, "0", ["log.retention.ms", "log.segment.bytes"])
        assert e["log.retention.ms"].config_source == 5 and e["log.segment.bytes"].value == "6000000"

        r = _legacy(a, BROKER_LOGGER, "0", {"root": "INFO"})
        assert (r.error_code, r.error_message) == (ErrorCode.INVALID_REQUEST, "Unknown resource type 8")
        r = _legacy(a, TOPIC, "dyn-legacy", {"retention.ms": "forever"})
        assert r.error_code == ErrorCode.INVALID_CONFIG
        r = _legacy(a, TOPIC, "dyn-legacy", {"retention.ms": "5"}, validate_only=True)
        assert r.error_code == 0
        assert a.describe_configs(RESOURCE_TOPIC, "dyn-legacy", ["retention.ms"])[0].source == 5


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_confluent_legacy_alter_configs(broker):
    """confluent-kafka's (deprecated) alter_configs sends AlterConfigs (API 33)."""
    ck.create_topic(broker.bootstrap, "dyn-ck-legacy", 1, {"retention.ms": "1000"})
    adm = ck.admin(broker.bootstrap)
    t = ConfigResource(ResourceType.TOPIC, "dyn-ck-legacy", set_config={"segment.bytes": "200000"})
    adm.alter_configs([t])[t].result(timeout=30)
    b = ConfigResource(ResourceType.BROKER, "0", set_config={"log.retention.bytes": "123456789"})
    adm.alter_configs([b])[b].result(timeout=30)
    with AdminClient(broker.bootstrap) as a:
        c = {x.name: x for x in a.describe_configs(RESOURCE_TOPIC, "dyn-ck-legacy")}
        assert c["segment.bytes"].value == "200000" and c["retention.ms"].source == 5
        assert c["retention.bytes"].value == "123456789" and c["retention.bytes"].source == 2
        (e,) = a.describe_configs(RESOURCE_BROKER, "0", ["log.retention.bytes"])
        assert (e.value, e.source) == ("123456789", 2)


def test_kafka_python_legacy_alter_configs(broker):
    from kafka.admin import ConfigResource as KPResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    with AdminClient(broker.bootstrap) as a:
        a.create_topic("dyn-kp", 1, 1)
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    try:
        out = kp.alter_configs(
            [
                KPResource(ConfigResourceType.TOPIC, "dyn-kp", configs={"retention.ms": "7200000"}),
                KPResource(ConfigResourceType.BROKER, "0", configs={"log.retention.bytes": "987654321"}),
            ]
        )
    finally:
        kp.close()
    assert out == {"broker": {"0": "OK"}, "topic": {"dyn-kp": "OK"}}
    with AdminClient(broker.bootstrap) as a:
        (t,) = a.describe_configs(RESOURCE_TOPIC, "dyn-kp", ["retention.ms"])
        assert (t.value, t.source) == ("7200000", 1)
        (e,) = a.describe_configs(RESOURCE_BROKER, "0", ["log.retention.bytes"])
        assert (e.value, e.source) == ("987654321", 2)


def test_broker_loggers(broker):
    with AdminClient(broker.bootstrap) as a:
        e = _entries(a, BROKER_LOGGER, "0")
        assert e["root"].value == "INFO" and e["root"].config_source == 6
        assert "strata.server" in e, "loggers that have logged are listed"
        assert _incremental(a, BROKER_LOGGER, "0", [("strata.server", SET, "DEBUG")]).error_code == 0
        e = _entries(a, BROKER_LOGGER, "0")
        assert e["strata.server"].value == "DEBUG" and e["root"].value == "INFO"
        assert _incremental(a, BROKER_LOGGER, "0", [("strata", SET, "ERROR")]).error_code == 0
        e = _entries(a, BROKER_LOGGER, "0")
        assert e["strata.server"].value == "DEBUG", "the nearest level wins"
        assert e["strata.network"].value == "ERROR" if "strata.network" in e else True
        assert _incremental(a, BROKER_LOGGER, "0", [("strata.server", DELETE, None)]).error_code == 0
        assert _entries(a, BROKER_LOGGER, "0")["strata.server"].value == "ERROR"

        bad = [
            ([("strata.server", SET, "LOUD")], ErrorCode.INVALID_CONFIG, "not a supported log level"),
            ([("kafka.server", SET, "DEBUG")], ErrorCode.INVALID_CONFIG, "Logger kafka.server does not exist!"),
            ([("root", DELETE, None)], ErrorCode.INVALID_REQUEST, "root logger is not allowed"),
            ([("root", APPEND, "DEBUG")], ErrorCode.INVALID_REQUEST, "APPEND operation is not allowed"),
        ]
        for ops, code, message in bad:
            r = _incremental(a, BROKER_LOGGER, "0", ops)
            assert r.error_code == code and message in r.error_message, (ops, r)
        r = _incremental(a, BROKER_LOGGER, "3", [("root", SET, "DEBUG")])
        assert r.error_code == ErrorCode.INVALID_REQUEST
        assert _describe(a, BROKER_LOGGER, "").error_code == ErrorCode.INVALID_REQUEST


def test_logger_level_filters_the_broker_log(broker):
    """A level set on a logger silences its lines below that level, and deleting it brings them back."""

    def created_lines(topic: str) -> list[str]:
        return [ln for ln in broker.output().splitlines() if "created topic" in ln and f"topic={topic}" in ln]

    with AdminClient(broker.bootstrap) as a:
        assert _incremental(a, BROKER_LOGGER, "0", [("strata.topics", SET, "ERROR")]).error_code == 0
        a.create_topic("dyn-quiet", 1, 1)
        assert _incremental(a, BROKER_LOGGER, "0", [("strata.topics", DELETE, None)]).error_code == 0
        a.create_topic("dyn-loud", 1, 1)
    wait_until(lambda: created_lines("dyn-loud"), timeout=30)
    assert created_lines("dyn-quiet") == [], "INFO lines of a logger set to ERROR are dropped"


def test_group_configs(broker):
    with AdminClient(broker.bootstrap) as a:
        g = _entries(a, GROUP, "grp-a")
        assert set(g) == {"consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"}
        assert (g["consumer.session.timeout.ms"].value, g["consumer.session.timeout.ms"].config_source) == (
            "45000",
            5,
        )
        assert _incremental(a, GROUP, "grp-a", [("consumer.session.timeout.ms", SET, "50000")]).error_code == 0
        g = _entries(a, GROUP, "grp-a")
        assert (g["consumer.session.timeout.ms"].value, g["consumer.session.timeout.ms"].config_source) == (
            "50000",
            8,
        )
        assert _entries(a, GROUP, "grp-b")["consumer.session.timeout.ms"].value == "45000", "per group"
        for ops, message in [
            ([("consumer.session.timeout.ms", SET, "1000")], "must be greater than or equal to"),
            ([("consumer.heartbeat.interval.ms", SET, "60000")], "must be less than or equal to"),
            ([("share.session.timeout.ms", SET, "50000")], "Unknown group config name"),
        ]:
            r = _incremental(a, GROUP, "grp-a", ops)
            assert r.error_code == ErrorCode.INVALID_CONFIG and message in r.error_message, r
        assert _incremental(a, GROUP, "", [("consumer.session.timeout.ms", SET, "50000")]).error_code == (
            ErrorCode.INVALID_REQUEST
        )
        assert _legacy(a, GROUP, "grp-a", {"consumer.heartbeat.interval.ms": "6000"}).error_code == 0
        g = _entries(a, GROUP, "grp-a")
        assert g["consumer.session.timeout.ms"].config_source == 5, "the legacy alter replaces the whole set"
        assert (g["consumer.heartbeat.interval.ms"].value, g["consumer.heartbeat.interval.ms"].config_source) == (
            "6000",
            8,
        )
    broker.restart()
    with AdminClient(broker.bootstrap) as a:
        assert _entries(a, GROUP, "grp-a")["consumer.heartbeat.interval.ms"].value == "6000"


def test_confluent_group_configs(broker):
    """librdkafka maps its GROUP resource type to config resource 32."""
    adm = ck.admin(broker.bootstrap)
    r = ConfigResource(
        ResourceType.GROUP,
        "grp-ck",
        incremental_configs=[
            ConfigEntry("consumer.session.timeout.ms", "50000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    adm.incremental_alter_configs([r])[r].result(timeout=30)
    d = ConfigResource(ResourceType.GROUP, "grp-ck")
    entries = adm.describe_configs([d])[d].result(timeout=30)
    assert entries["consumer.session.timeout.ms"].value == "50000"
    assert entries["consumer.session.timeout.ms"].source == ConfigSource.GROUP_CONFIG.value
    assert entries["consumer.heartbeat.interval.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    bad = ConfigResource(
        ResourceType.GROUP,
        "grp-ck",
        incremental_configs=[
            ConfigEntry("consumer.session.timeout.ms", "100", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(KafkaException) as ei:
        adm.incremental_alter_configs([bad])[bad].result(timeout=30)
    assert ei.value.args[0].code() == KafkaError.INVALID_CONFIG


def test_kafka_python_broker_logger_and_group(broker):
    """kafka-python names BROKER_LOGGER (8) and GROUP (32), which confluent-kafka's Python API cannot express for
    loggers."""
    from kafka.admin import ConfigResource as KPResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    try:
        out = kp.describe_configs(
            [KPResource(ConfigResourceType.BROKER_LOGGER, "0"), KPResource(ConfigResourceType.GROUP, "grp-kp")],
            config_filter="all",
        )
    finally:
        kp.close()
    text = repr(out)
    assert "'root'" in text and "'INFO'" in text, text
    assert "consumer.session.timeout.ms" in text and "'45000'" in text, text


@pytest.fixture
def two_brokers(request: pytest.FixtureRequest, tmp_path):
    from tests.support.cluster_proc import StrataCluster

    c = StrataCluster(tmp_path / "cluster", size=2)
    request.node._strata_brokers = []
    try:
        c.start()
        request.node._strata_brokers.extend(c.brokers.values())
        yield c
    finally:
        c.close()


def test_cluster_dynamic_configs_reach_every_broker(two_brokers):
    """Alters sent to the broker that is not the controller are forwarded to the controller, stored in etcd and
    applied by every broker; a BROKER resource names the broker the client sent it to; BROKER_LOGGER stays on the
    broker it names."""
    with AdminClient(two_brokers.brokers[1].bootstrap) as a:
        ctl = a.request(ApiKey.DESCRIBE_CLUSTER, 0, include_cluster_authorized_operations=False).controller_id
    other = 2 if ctl == 1 else 1
    with AdminClient(two_brokers.brokers[ctl].bootstrap) as ac, AdminClient(two_brokers.brokers[other].bootstrap) as ao:
        assert _incremental(ao, BROKER, "", [("log.retention.bytes", SET, "77777777")]).error_code == 0
        for a, bid in ((ac, ctl), (ao, other)):
            wait_until(
                lambda a=a, bid=bid: (
                    _entries(a, BROKER, str(bid), ["log.retention.bytes"])["log.retention.bytes"].value == "77777777"
                ),
                timeout=30,
            )
        # forwarded, the controller checks the name against the broker the client sent the request to
        assert _incremental(ao, BROKER, str(other), [("message.max.bytes", SET, "4000")]).error_code == 0
        e = wait_until(
            lambda: (
                (x := _entries(ao, BROKER, str(other), ["message.max.bytes"])["message.max.bytes"]).config_source == 2
                and x
            ),
            timeout=30,
        )
        assert e.value == "4000"
        mine = _entries(ac, BROKER, str(ctl), ["message.max.bytes"])["message.max.bytes"]
        assert mine.config_source == 5, "a per-broker config is that broker's only"
        r = _incremental(ao, BROKER, str(ctl), [("message.max.bytes", SET, "4000")])
        assert r.error_code == ErrorCode.INVALID_REQUEST, "a broker's configs are altered through that broker"

        assert _incremental(ao, BROKER_LOGGER, str(other), [("strata.topics", SET, "WARN")]).error_code == 0
        assert _entries(ao, BROKER_LOGGER, str(other))["strata.topics"].value == "WARN"
        ctl_loggers = _entries(ac, BROKER_LOGGER, str(ctl))
        assert "strata.topics" not in ctl_loggers or ctl_loggers["strata.topics"].value == "INFO"

    # `strata configs` asks the named broker, whatever the bootstrap server
    from tests.integration.test_admin_cli import ok, strata

    out = ok(
        strata(
            "configs",
            "--bootstrap-server",
            two_brokers.brokers[ctl].bootstrap,
            "describe",
            "--entity-type",
            "brokers",
            "--entity-name",
            str(other),
        )
    )
    assert "message.max.bytes=4000 sensitive=false" in out

    two_brokers.restart(other)
    with AdminClient(two_brokers.brokers[other].bootstrap) as ao:
        e = _entries(ao, BROKER, str(other), ["message.max.bytes", "log.retention.bytes"])
        assert (e["message.max.bytes"].value, e["message.max.bytes"].config_source) == ("4000", 2)
        assert (e["log.retention.bytes"].value, e["log.retention.bytes"].config_source) == ("77777777", 3)


def test_strata_configs_cli(broker):
    """`strata configs` as kafka-configs.sh users type it, against the broker."""
    from tests.integration.test_admin_cli import fails, ok, strata

    def configs(*args: str):
        return strata("configs", "--bootstrap-server", broker.bootstrap, *args)

    with AdminClient(broker.bootstrap) as a:
        a.create_topic("cli-cfg", 1, 1)
    out = ok(
        configs(
            "alter",
            "--entity-type",
            "brokers",
            "--entity-name",
            "0",
            "--add-config",
            "log.retention.ms=3600000,log.cleanup.policy=[delete,compact]",
        )
    )
    assert out.strip() == "Completed updating config for broker 0."
    out = ok(configs("describe", "--entity-type", "brokers", "--entity-name", "0"))
    lines = out.splitlines()
    assert lines[0] == "Dynamic configs for broker 0 are:"
    assert "  log.retention.ms=3600000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.retention.ms=3600000" in out
    assert "  log.cleanup.policy=delete,compact sensitive=false" in out and len(lines) == 3
    out = ok(configs("describe", "--entity-type", "brokers", "--entity-name", "0", "--all"))
    assert out.startswith("All configs for broker 0 are:") and "num.partitions=1 sensitive=false" in out

    ok(configs("alter", "--entity-type", "brokers", "--entity-default", "--add-config", "message.max.bytes=500000"))
    out = ok(configs("describe", "--entity-type", "brokers", "--entity-default"))
    assert out.splitlines()[0] == "Default configs for brokers in the cluster are:"
    assert "message.max.bytes=500000" in out

    out = ok(
        configs("alter", "--entity-type", "topics", "--entity-name", "cli-cfg", "--add-config", "retention.ms=5000")
    )
    assert out.strip() == "Completed updating config for topic cli-cfg."
    assert "retention.ms=5000" in ok(configs("describe", "--entity-type", "topics", "--entity-name", "cli-cfg"))
    ok(configs("alter", "--entity-type", "topics", "--entity-name", "cli-cfg", "--delete-config", "retention.ms"))
    assert "retention.ms" not in ok(configs("describe", "--entity-type", "topics", "--entity-name", "cli-cfg"))

    ok(configs("alter", "--entity-type", "broker-loggers", "--entity-name", "0", "--add-config", "strata.topics=DEBUG"))
    assert "strata.topics=DEBUG" in ok(configs("describe", "--entity-type", "broker-loggers", "--entity-name", "0"))
    ok(
        configs(
            "alter",
            "--entity-type",
            "groups",
            "--entity-name",
            "g",
            "--add-config",
            "consumer.session.timeout.ms=50000",
        )
    )
    assert "consumer.session.timeout.ms=50000" in ok(
        configs("describe", "--entity-type", "groups", "--entity-name", "g")
    )

    err = fails(configs("alter", "--entity-type", "brokers", "--entity-name", "0", "--add-config", "num.partitions=1"))
    assert "Cannot update these configs dynamically: Set(num.partitions)" in err  # one line, exit 1 (fails)


def test_local_retention_beyond_total_is_refused(broker):
    with AdminClient(broker.bootstrap) as a:
        assert _incremental(a, BROKER, "", [("log.retention.ms", SET, "100000")]).error_code == 0
        r = _incremental(a, BROKER, "0", [("log.local.retention.ms", SET, "200000")])
        assert r.error_code == ErrorCode.INVALID_REQUEST and "must not be more than log.retention.ms" in r.error_message
        assert _incremental(a, BROKER, "0", [("log.local.retention.ms", SET, "50000")]).error_code == 0
