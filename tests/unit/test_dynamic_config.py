"""Dynamic broker configs and group configs: Kafka's precedence of the layers, the sources and synonyms DescribeConfigs
reports for them, and the validation of alters (read-only keys, types, group bounds)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from strata.broker.handlers import configs as C
from strata.config import BrokerConfig, ConfigError
from strata.config.dynamic import group_config_values, validate_dynamic_broker_configs


def _by_name(entries):
    return {e.name: e for e in entries}


def test_layers_precedence_broker_over_default_over_static():
    cfg = BrokerConfig.from_dict({"log.retention.hours": "24", "message.max.bytes": "1000"})
    changed = cfg.apply_dynamic(
        {"log.retention.ms": "5000", "message.max.bytes": "2000"}, {"message.max.bytes": "3000"}
    )
    assert {"log.retention.ms", "message.max.bytes"} <= changed
    assert cfg["message.max.bytes"] == 3000
    assert cfg.log_config().retention_ms == 5000, "a dynamic log.retention.ms beats a static log.retention.hours"
    assert cfg.log_config().max_message_bytes == 3000, "topic defaults follow the dynamic broker value"
    assert cfg.apply_dynamic({}, {}) == {"log.retention.ms", "message.max.bytes"}
    assert cfg["message.max.bytes"] == 1000 and cfg.log_config().retention_ms == 24 * 3_600_000


def test_describe_sources_and_synonyms_of_dynamic_values():
    cfg = BrokerConfig.from_dict({"message.max.bytes": "1000"})
    cfg.apply_dynamic({"message.max.bytes": "2000"}, {"message.max.bytes": "3000"})
    services = SimpleNamespace(config=cfg, broker_id=0)
    e = _by_name(C.broker_config_entries(services, ["message.max.bytes"]))["message.max.bytes"]
    assert (e.value, e.source, e.read_only) == ("3000", C.SOURCE_DYNAMIC_BROKER_CONFIG, False)
    assert e.synonyms == [
        ("message.max.bytes", "3000", C.SOURCE_DYNAMIC_BROKER_CONFIG),
        ("message.max.bytes", "2000", C.SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("message.max.bytes", "1000", C.SOURCE_STATIC_BROKER_CONFIG),
        ("message.max.bytes", "1048588", C.SOURCE_DEFAULT_CONFIG),
    ]
    # the empty name: only the cluster-wide defaults, without the broker's own layer
    (d,) = C.broker_config_entries(services, None, per_broker=False)
    assert (d.name, d.value, d.source) == ("message.max.bytes", "2000", C.SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert [s[2] for s in d.synonyms] == [3, 4, 5]
    # a topic without an override: its max.message.bytes comes from the broker's dynamic config
    t = _by_name(C.topic_config_entries(services, {}, ["max.message.bytes"]))["max.message.bytes"]
    assert (t.value, t.source) == ("3000", C.SOURCE_DYNAMIC_BROKER_CONFIG)


@pytest.mark.parametrize(
    "configs, per_broker, message",
    [
        ({"num.partitions": "3"}, True, "Cannot update these configs dynamically: Set(num.partitions)"),
        (
            {"log.dirs": "/x", "listeners": "a"},
            False,
            "Cannot update these configs dynamically: Set(listeners, log.dirs)",
        ),
        ({"log.retention.hours": "1"}, True, "Cannot update these configs dynamically"),  # only log.retention.ms is
        ({"message.max.bytes": "big"}, True, "Invalid value big for configuration message.max.bytes"),
        ({"remote.log.manager.copy.max.bytes.per.second": "0"}, False, "must be at least 1"),
    ],
)
def test_dynamic_validation(configs, per_broker, message):
    with pytest.raises(ConfigError) as ei:
        validate_dynamic_broker_configs(configs, per_broker)
    assert message in str(ei.value)


def test_dynamic_validation_accepts_kafkas_dynamic_keys():
    assert validate_dynamic_broker_configs(
        {"log.retention.ms": "1", "log.cleaner.threads": "2", "remote.fetch.max.wait.ms": "100"}, False
    ) == {"log.retention.ms": 1, "log.cleaner.threads": 2, "remote.fetch.max.wait.ms": 100}


def test_group_configs_within_broker_bounds():
    broker = BrokerConfig.from_dict({}).values
    v = group_config_values(broker, {"consumer.session.timeout.ms": "50000"})
    assert v == {"consumer.session.timeout.ms": 50000, "consumer.heartbeat.interval.ms": 5000}
    for overrides, message in [
        ({"consumer.session.timeout.ms": "1000"}, "must be greater than or equal to group.consumer.min.session"),
        ({"consumer.session.timeout.ms": "70000"}, "must be less than or equal to group.consumer.max.session"),
        ({"consumer.heartbeat.interval.ms": "20000"}, "must be less than or equal to group.consumer.max.heartbeat"),
        ({"consumer.heartbeat.interval.ms": "x"}, "Invalid value x"),
        ({"share.session.timeout.ms": "1"}, "Unknown group config name: share.session.timeout.ms"),
    ]:
        with pytest.raises(ConfigError, match=message):
            group_config_values(broker, overrides)


def test_cluster_image_keeps_config_resources():
    from strata.broker.cluster.image import MetadataImage

    img = MetadataImage()
    assert img.apply("configs/4/", b'{"log.retention.ms": "5"}', 3) == [("config", (4, ""))]
    assert img.apply("configs/32/team/a", b'{"consumer.session.timeout.ms": "50000"}', 4) == [
        ("config", (32, "team/a"))
    ]
    assert img.configs == {(4, ""): {"log.retention.ms": "5"}, (32, "team/a"): {"consumer.session.timeout.ms": "50000"}}
    assert img.mod_revision("configs/4/") == 3
    assert img.apply("configs/4/", b'{"log.retention.ms": "6"}', 2) == [], "an older change is ignored"
    old = MetadataImage.from_kvs([(k, v, r) for k, v, r in [("configs/4/", b'{"log.retention.ms": "5"}', 3)]], 3)
    new = MetadataImage.from_kvs([("configs/4/", b'{"log.retention.ms": "7"}', 5)], 5)
    assert new.diff(old) == [("config", (4, ""))]
    assert img.apply("configs/4/", None, 6) == [("config", (4, ""))] and (4, "") not in img.configs


def test_local_retention_checked_against_total_as_kafka_does():
    from strata.config.dynamic import validate_broker_reconfiguration

    ok = BrokerConfig.from_dict({"log.retention.ms": "1000", "log.local.retention.ms": "500"})
    validate_broker_reconfiguration(ok)
    validate_broker_reconfiguration(BrokerConfig.from_dict({"log.retention.ms": "-1", "log.local.retention.ms": "-1"}))
    for props, message in [
        ({"log.retention.ms": "1000", "log.local.retention.ms": "2000"}, "must not be more than log.retention.ms"),
        ({"log.retention.ms": "1000", "log.local.retention.ms": "-1"}, "must not be -1 as log.retention.ms"),
        ({"log.retention.bytes": "10", "log.local.retention.bytes": "20"}, "more than log.retention.bytes"),
    ]:
        with pytest.raises(ConfigError, match=message):
            validate_broker_reconfiguration(BrokerConfig.from_dict(props))


def test_log_cleaner_reconfigure_restarts_threads_with_new_settings(tmp_path):
    """Kafka's LogCleaner.reconfigure: a throttled cleaning in progress is aborted, the threads start again with the
    new settings (here two threads, no throttle) and the log gets cleaned."""
    import asyncio
    import time

    from strata.storage.cleaner_manager import CleanerConfig
    from tests.unit.test_cleaner_manager import cleaner_for, fill, open_log

    lg = open_log(tmp_path)
    fill(lg, 600, keys=5)
    c = cleaner_for(tmp_path, [lg], backoff_ms=10, max_io_bytes_per_second=2000.0)  # would take ~30 s

    async def main() -> None:
        await c.start()
        deadline = time.monotonic() + 10
        while not c.manager.in_progress:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        await c.reconfigure(CleanerConfig(num_threads=2, backoff_ms=10))
        assert len(c.cleaners) == 2
        deadline = time.monotonic() + 30
        while c.cleanings < 1:
            assert time.monotonic() < deadline, "the reconfigured cleaner did not clean"
            await asyncio.sleep(0.01)
        await c.shutdown()

    asyncio.run(main())
    assert c.manager.checkpointed_offset(lg) is not None
