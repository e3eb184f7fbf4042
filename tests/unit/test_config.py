"""Broker/topic configuration: properties parsing, overrides, synonyms and defaults, validation messages, and how
DescribeConfigs/IncrementalAlterConfigs derive values and sources from them (no broker process needed)."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from strata.broker.handlers import configs as C
from strata.broker.request_context import RequestContext
from strata.cli.main import main as cli_main
from strata.config import (
    BROKER_CONFIG_DEFS,
    TOPIC_CONFIG_DEFS,
    BrokerConfig,
    ConfigError,
    ConfigType,
    format_value,
    parse_properties,
    validate_topic_overrides,
)
from strata.config.defs import ConfigDef
from strata.config.dynamic import DYNAMIC_BROKER_CONFIGS
from strata.protocol.errors import ErrorCode, KafkaApiError
from strata.protocol.registry import REQUEST_CLASSES, RESPONSE_CLASSES, ApiKey

REPO = Path(__file__).resolve().parents[2]


# -- properties files ------------------------------------------------------------------------------------------------
def test_parse_properties_kafka_subset():
    text = (
        "# comment\n! also a comment\n\n  broker.id = 3 \nlisteners: PLAINTEXT://h:1\n"
        "log.dirs=/a,\\\n   /b\nempty=\nflag\n"
    )
    assert parse_properties(text) == {
        "broker.id": "3",
        "listeners": "PLAINTEXT://h:1",
        "log.dirs": "/a,/b",
        "empty": "",
        "flag": "",
    }


def test_value_may_contain_separators():
    assert parse_properties("metrics.listener=http://127.0.0.1:9464/metrics\n") == {
        "metrics.listener": "http://127.0.0.1:9464/metrics"
    }


def test_load_file_then_overrides_win(tmp_path):
    p = tmp_path / "server.properties"
    p.write_text("num.partitions=3\nlog.retention.hours=1\nlisteners=PLAINTEXT://127.0.0.1:1234\n")
    cfg = BrokerConfig.load(p, ["num.partitions=5", "log.dirs = /x,/y"])
    assert cfg["num.partitions"] == 5
    assert cfg["log.retention.hours"] == 1
    assert cfg["log.dirs"] == ["/x", "/y"]
    assert cfg.listeners[0].port == 1234
    assert cfg.originals == {
        "num.partitions": "5",
        "log.retention.hours": "1",
        "listeners": "PLAINTEXT://127.0.0.1:1234",
        "log.dirs": "/x,/y",
    }


def test_defaults_are_kafkas():
    cfg = BrokerConfig.from_dict({})
    assert cfg["num.partitions"] == 1
    assert cfg["log.segment.bytes"] == 1024**3
    assert cfg["message.max.bytes"] == 1048588
    assert cfg["log.flush.interval.messages"] == 2**63 - 1
    assert cfg.originals == {}


def test_unknown_broker_keys_are_kept_for_later_layers():
    cfg = BrokerConfig.from_dict({"rsm.config.dir": "/r", "group.initial.rebalance.delay.ms": "0"})
    assert cfg.get("rsm.config.dir") == "/r"
    assert cfg.prefixed("rsm.config.") == {"dir": "/r"}
    assert "group.initial.rebalance.delay.ms" in cfg.originals


def test_node_id_is_a_synonym_of_broker_id():
    assert BrokerConfig.from_dict({"node.id": "7"}).broker_id == 7
    assert BrokerConfig.from_dict({"node.id": "7", "broker.id": "2"}).broker_id == 2


def test_log_dirs_fall_back_to_log_dir(tmp_path):
    assert BrokerConfig.from_dict({"log.dir": str(tmp_path / "d")}).log_dirs == [tmp_path / "d"]
    assert BrokerConfig.from_dict({"log.dirs": f"{tmp_path}/a,{tmp_path}/b"}).log_dirs == [
        tmp_path / "a",
        tmp_path / "b",
    ]


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"num.partitions": "x"}, "Invalid value 'x' for configuration num.partitions: expected a number"),
        ({"num.partitions": "0"}, "Invalid value '0' for configuration num.partitions: value 0 must be at least 1"),
        ({"auto.create.topics.enable": "maybe"}, "configuration auto.create.topics.enable: expected a boolean"),
        ({"log.cleanup.policy": "delete,shred"}, "'shred' is not one of delete, compact"),
        ({"log.retention.bytes": "-5"}, "must be -1 (unlimited) or >= 0"),
    ],
)
def test_invalid_broker_values_name_the_key(raw, message):
    with pytest.raises(ConfigError) as ei:
        BrokerConfig.from_dict(raw)
    assert message in str(ei.value)


def test_load_errors_are_readable(tmp_path):
    with pytest.raises(ConfigError, match=r"cannot read .*missing.properties"):
        BrokerConfig.load(tmp_path / "missing.properties")
    with pytest.raises(ConfigError, match="is not of the form key=value"):
        BrokerConfig.load(None, ["novalue"])
    with pytest.raises(ConfigError, match="is not of the form NAME://host:port"):
        _ = BrokerConfig.from_dict({"listeners": "127.0.0.1:9092"}).listeners


# -- topic defaults from broker synonyms -----------------------------------------------------------------------------
def test_retention_precedence_ms_over_minutes_over_hours():
    assert BrokerConfig.from_dict({})["log.retention.hours"] == 168
    assert BrokerConfig.from_dict({}).topic_defaults()["retention.ms"] == 168 * 3_600_000
    assert BrokerConfig.from_dict({"log.retention.hours": "2"}).topic_defaults()["retention.ms"] == 7_200_000
    assert (
        BrokerConfig.from_dict({"log.retention.hours": "2", "log.retention.minutes": "3"}).topic_defaults()[
            "retention.ms"
        ]
        == 180_000
    )
    assert (
        BrokerConfig.from_dict({"log.retention.minutes": "3", "log.retention.ms": "-1"}).topic_defaults()[
            "retention.ms"
        ]
        == -1
    )


def test_roll_and_flush_synonyms():
    d = BrokerConfig.from_dict({"log.roll.hours": "1"}).topic_defaults()
    assert d["segment.ms"] == 3_600_000
    assert BrokerConfig.from_dict({"log.roll.hours": "1", "log.roll.ms": "500"}).topic_defaults()["segment.ms"] == 500
    assert BrokerConfig.from_dict({}).topic_defaults()["flush.ms"] == 2**63 - 1
    assert BrokerConfig.from_dict({"log.flush.scheduler.interval.ms": "9"}).topic_defaults()["flush.ms"] == 9
    assert BrokerConfig.from_dict({"log.flush.interval.ms": "4"}).topic_defaults()["flush.ms"] == 4


def test_broker_set_topic_keys_follow_synonym_families():
    cfg = BrokerConfig.from_dict({"log.retention.hours": "1", "log.segment.bytes": "1000", "num.partitions": "2"})
    assert cfg.broker_set_topic_keys() == {"retention.ms", "segment.bytes"}


def test_log_config_layers_default_broker_override():
    cfg = BrokerConfig.from_dict({"log.segment.bytes": "2000", "log.cleanup.policy": "compact"})
    lc = cfg.log_config({"segment.bytes": "3000"})
    assert lc.segment_bytes == 3000
    assert lc.cleanup_policy == ["compact"] and lc.compact and not lc.delete
    assert cfg.log_config().segment_bytes == 2000
    assert lc.max_message_bytes == 1048588


# -- topic overrides validation ----------------------------------------------------------------------------------------
def test_topic_overrides_parse_to_types():
    v = validate_topic_overrides(
        {
            "retention.ms": "1000",
            "cleanup.policy": "compact, delete",
            "preallocate": "true",
            "min.cleanable.dirty.ratio": "0.25",
        }
    )
    assert v == {
        "retention.ms": 1000,
        "cleanup.policy": ["compact", "delete"],
        "preallocate": True,
        "min.cleanable.dirty.ratio": 0.25,
    }


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"retention.msx": "1"}, "Unknown topic config name: retention.msx"),
        ({"retention.ms": "soon"}, "Invalid value 'soon' for configuration retention.ms: expected a number"),
        ({"segment.bytes": "13"}, "Invalid value '13' for configuration segment.bytes: value 13 must be at least 14"),
        ({"cleanup.policy": "archive"}, "cleanup.policy: 'archive' is not one of delete, compact"),
        ({"min.cleanable.dirty.ratio": "1.5"}, "must be between 0 and 1"),
        ({"message.timestamp.type": "BrokerTime"}, "is not one of CreateTime, LogAppendTime"),
        ({"local.retention.ms": "-3"}, "must be -2 (same as total retention), -1 or >= 0"),
    ],
)
def test_topic_override_errors_name_key_and_value(overrides, message):
    with pytest.raises(ConfigError) as ei:
        validate_topic_overrides(overrides)
    assert message in str(ei.value)


def test_format_value_like_kafka():
    assert format_value(True) == "true" and format_value(False) == "false"
    assert format_value(["compact", "delete"]) == "compact,delete"
    assert format_value(0.5) == "0.5"
    assert format_value(2**63 - 1) == "9223372036854775807"


# -- DescribeConfigs entries -------------------------------------------------------------------------------------------
def _server(**props: str) -> SimpleNamespace:
    return SimpleNamespace(config=BrokerConfig.from_dict(props), broker_id=0)


def _by_name(entries):
    return {e.name: e for e in entries}


def test_topic_entries_cover_every_topic_key_with_kafka_sources():
    server = _server(**{"log.segment.bytes": "2000000"})
    e = _by_name(C.topic_config_entries(server, {"retention.ms": "1000", "cleanup.policy": "compact,delete"}))
    assert set(e) == set(TOPIC_CONFIG_DEFS)
    assert (e["retention.ms"].value, e["retention.ms"].source) == ("1000", C.SOURCE_TOPIC_CONFIG)
    assert (e["cleanup.policy"].value, e["cleanup.policy"].type) == ("compact,delete", ConfigType.LIST.value)
    assert (e["segment.bytes"].value, e["segment.bytes"].source) == ("2000000", C.SOURCE_STATIC_BROKER_CONFIG)
    assert (e["max.message.bytes"].value, e["max.message.bytes"].source) == ("1048588", C.SOURCE_DEFAULT_CONFIG)
    assert e["preallocate"].value == "false"
    assert all(not x.read_only and not x.sensitive for x in e.values())


def test_topic_synonyms_in_kafka_order():
    server = _server(**{"log.segment.bytes": "2000000"})
    e = _by_name(C.topic_config_entries(server, {"segment.bytes": "3000"}))
    assert e["segment.bytes"].synonyms == [
        ("segment.bytes", "3000", 1),
        ("log.segment.bytes", "2000000", 4),
        ("log.segment.bytes", "1073741824", 5),
    ]
    assert e["cleanup.policy"].synonyms == [("log.cleanup.policy", "delete", 5)]
    assert e["remote.storage.enable"].synonyms == []  # no broker synonym: source DEFAULT, no chain
    assert e["remote.storage.enable"].source == C.SOURCE_DEFAULT_CONFIG
    assert all(x.synonyms == [] for x in C.topic_config_entries(server, {"segment.bytes": "1"}, include_synonyms=False))


def test_retention_chain_starts_at_the_primary_synonym_as_in_kafka():
    # log.retention.hours set: the value follows it, but Kafka reports DEFAULT_CONFIG with no synonyms.
    e = _by_name(C.topic_config_entries(_server(**{"log.retention.hours": "24"}), {}))["retention.ms"]
    assert (e.value, e.source, e.synonyms) == ("86400000", C.SOURCE_DEFAULT_CONFIG, [])
    e = _by_name(C.topic_config_entries(_server(**{"log.retention.ms": "5000", "log.retention.hours": "24"}), {}))[
        "retention.ms"
    ]
    assert (e.value, e.source) == ("5000", C.SOURCE_STATIC_BROKER_CONFIG)
    assert e.synonyms == [
        ("log.retention.ms", "5000", 4),
        ("log.retention.hours", "24", 4),
        ("log.retention.hours", "168", 5),
    ]


def test_topic_entries_filter_and_documentation():
    server = _server()
    entries = C.topic_config_entries(server, {}, keys=["retention.ms", "nope"], include_documentation=True)
    assert [x.name for x in entries] == ["retention.ms"]
    assert entries[0].doc == TOPIC_CONFIG_DEFS["retention.ms"].doc
    assert C.topic_config_entries(server, {}, keys=["retention.ms"])[0].doc is None


def test_broker_entries_static_or_default_and_read_only():
    server = _server(**{"num.partitions": "4", "log.retention.hours": "2"})
    e = _by_name(C.broker_config_entries(server))
    assert set(e) == set(BROKER_CONFIG_DEFS)
    assert (e["num.partitions"].value, e["num.partitions"].source) == ("4", C.SOURCE_STATIC_BROKER_CONFIG)
    assert e["num.partitions"].synonyms == [("num.partitions", "4", 4), ("num.partitions", "1", 5)]
    assert (e["log.segment.bytes"].value, e["log.segment.bytes"].source) == ("1073741824", C.SOURCE_DEFAULT_CONFIG)
    assert (e["log.retention.ms"].value, e["log.retention.ms"].source) == (None, C.SOURCE_DEFAULT_CONFIG)
    assert e["log.retention.hours"].source == C.SOURCE_STATIC_BROKER_CONFIG
    assert e["log.roll.ms"].value is None  # Kafka's default is null; -1 is only our "unset" sentinel
    # read-only unless Kafka's DynamicBrokerConfig lets it change at runtime
    assert all(x.read_only == (x.name not in DYNAMIC_BROKER_CONFIGS) for x in e.values())
    assert e["num.partitions"].read_only and not e["log.retention.ms"].read_only


def test_password_keys_are_never_exposed(monkeypatch):
    monkeypatch.setitem(
        BROKER_CONFIG_DEFS, "ssl.key.password", ConfigDef("ssl.key.password", ConfigType.PASSWORD, None, "secret")
    )
    server = SimpleNamespace(config=BrokerConfig.from_dict({"ssl.key.password": "hunter2"}), broker_id=0)
    (e,) = C.broker_config_entries(server, ["ssl.key.password"])
    assert e.sensitive and e.value is None and e.type == ConfigType.PASSWORD.value
    assert e.source == C.SOURCE_STATIC_BROKER_CONFIG
    assert all(v is None for _, v, _ in e.synonyms) and e.synonyms
    assert "hunter2" not in repr(e)


def _describe(server, resources, version=4, synonyms=False, docs=False):
    Req = REQUEST_CLASSES[ApiKey.DESCRIBE_CONFIGS]
    req = Req(
        version=version,
        resources=[
            Req.DescribeConfigsResource(resource_type=t, resource_name=n, configuration_keys=k) for t, n, k in resources
        ],
        include_synonyms=synonyms,
        include_documentation=docs,
    )
    ctx = RequestContext(ApiKey.DESCRIBE_CONFIGS, version, 1, "test", time.perf_counter(), "PLAINTEXT", "127.0.0.1:0")
    resp = asyncio.run(C.describe_configs(server, ctx, req))
    resp.with_header(correlation_id=1)
    raw = bytes(resp.encode(header=True, framed=True))  # must encode at every version
    return RESPONSE_CLASSES[ApiKey.DESCRIBE_CONFIGS].decode(raw[4:], version=version, header=True)


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_describe_configs_handler_resources_and_errors(version):
    server = _server(**{"num.partitions": "3"})
    server.store = SimpleNamespace(topic=lambda n: SimpleNamespace(configs={"retention.ms": "9"}) if n == "t" else None)
    resp = _describe(
        server,
        [
            (2, "t", ["retention.ms"]),
            (2, "missing", None),
            (2, "bad/name", None),
            (4, "0", ["num.partitions"]),
            (4, "", None),
            (4, "1", None),
            (4, "x", None),
            (8, "0", None),
            (99, "r", None),
        ],
        version,
        synonyms=True,
        docs=True,
    )
    r = resp.results
    assert [x.error_code for x in r] == [
        0,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.INVALID_TOPIC_EXCEPTION,
        0,
        0,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
        0,
        ErrorCode.INVALID_REQUEST,
    ]
    (topic_entry,) = r[0].configs
    assert (topic_entry.name, topic_entry.value, topic_entry.config_source) == ("retention.ms", "9", 1)
    assert [(s.name, s.value, s.source) for s in topic_entry.synonyms] == [("retention.ms", "9", 1)]
    (broker_entry,) = r[3].configs
    assert (broker_entry.value, broker_entry.config_source, broker_entry.read_only) == ("3", 4, True)
    assert r[4].configs == []  # empty name: cluster-wide dynamic defaults, of which there are none
    assert "expected 0 or empty string, but received 1" in r[5].error_message
    assert "Broker id must be an integer" in r[6].error_message
    assert ("root", 6) in [(c.name, c.config_source) for c in r[7].configs]  # DYNAMIC_BROKER_LOGGER_CONFIG
    if version >= 3:
        assert topic_entry.config_type == ConfigType.LONG.value
        assert topic_entry.documentation == TOPIC_CONFIG_DEFS["retention.ms"].doc


# -- IncrementalAlterConfigs operations --------------------------------------------------------------------------------
def test_set_delete_append_subtract():
    cur = {"retention.ms": "1000", "segment.bytes": "2000"}
    assert C.apply_incremental_ops(cur, [("retention.ms", C.OP_DELETE, None), ("segment.ms", C.OP_SET, "5")]) == {
        "segment.bytes": "2000",
        "segment.ms": "5",
    }
    assert cur == {"retention.ms": "1000", "segment.bytes": "2000"}, "the stored overrides are not mutated"
    # APPEND starts from the key's default (delete) when there is no override, and skips duplicates
    assert C.apply_incremental_ops({}, [("cleanup.policy", C.OP_APPEND, "compact,delete")]) == {
        "cleanup.policy": "delete,compact"
    }
    assert C.apply_incremental_ops(
        {"cleanup.policy": "delete,compact"}, [("cleanup.policy", C.OP_SUBTRACT, "delete")]
    ) == {"cleanup.policy": "compact"}
    assert C.apply_incremental_ops({}, [("not.a.key", C.OP_DELETE, None)]) == {}


@pytest.mark.parametrize(
    "ops, code, message",
    [
        (
            [("retention.ms", C.OP_SET, "abc")],
            ErrorCode.INVALID_CONFIG,
            "Invalid value 'abc' for configuration retention.ms",
        ),
        ([("retention.mss", C.OP_SET, "1")], ErrorCode.INVALID_CONFIG, "Unknown topic config name: retention.mss"),
        (
            [("retention.ms", C.OP_APPEND, "1")],
            ErrorCode.INVALID_CONFIG,
            "Can't APPEND to key retention.ms because its type is not LIST.",
        ),
        ([("retention.ms", C.OP_SET, None)], ErrorCode.INVALID_CONFIG, "Null value not supported"),
        ([("cleanup.policy", C.OP_APPEND, "shred")], ErrorCode.INVALID_CONFIG, "'shred' is not one of delete, compact"),
        ([("retention.ms", 7, "1")], ErrorCode.INVALID_REQUEST, "Unknown alter configs operation type 7"),
    ],
)
def test_invalid_ops(ops, code, message):
    with pytest.raises(KafkaApiError) as ei:
        C.apply_incremental_ops({}, ops)
    assert ei.value.error_code == code
    assert message in ei.value.message


# -- CLI: serve's config errors, docs in sync --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "override, message",
    [
        ("num.partitions=x", "configuration error: Invalid value 'x' for configuration num.partitions"),
        ("listeners=nonsense", "configuration error: listener 'nonsense' is not of the form NAME://host:port"),
        ("novalue", "is not of the form key=value"),
    ],
)
def test_serve_config_error_exits_2_with_one_line(capsys, override, message):
    assert cli_main(["serve", "--override", override]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1


def test_serve_missing_properties_file_exits_2(capsys, tmp_path):
    assert cli_main(["serve", str(tmp_path / "nope.properties")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_example_server_properties_loads():
    cfg = BrokerConfig.load(REPO / "config" / "server.properties")
    assert [str(listener.port) for listener in cfg.listeners] == ["9092"]
    assert cfg["log.dirs"] == ["./strata-data"]


def test_configuration_doc_lists_every_key():
    doc = (REPO / "docs" / "configuration.md").read_text()
    documented = set(re.findall(r"^\| `([a-z0-9.]+)` \|", doc, re.MULTILINE))
    assert set(BROKER_CONFIG_DEFS) | set(TOPIC_CONFIG_DEFS) <= documented
