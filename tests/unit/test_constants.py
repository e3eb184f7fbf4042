"""One source for each constant: wire sentinels in protocol.constants, defaults in config's ConfigDefs, one bool
parser, one error-code attribute."""

from __future__ import annotations

import pytest

from strata.config import BROKER_CONFIG_DEFS, BrokerConfig, ConfigError, broker_default, parse_bool
from strata.protocol import constants as C
from strata.protocol.errors import ErrorCode, KafkaApiError


def test_list_offsets_sentinels_are_kafkas():
    assert (
        C.LATEST_TIMESTAMP,
        C.EARLIEST_TIMESTAMP,
        C.MAX_TIMESTAMP,
        C.EARLIEST_LOCAL_TIMESTAMP,
        C.LATEST_TIERED_TIMESTAMP,
        C.EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    ) == (-1, -2, -3, -4, -5, -6)
    assert C.LIST_OFFSETS_SENTINEL_MIN_VERSION == {-3: 7, -4: 8, -5: 9, -6: 11}
    assert C.REMOTE_LOG_METADATA_TOPIC == "__remote_log_metadata"


def test_every_layer_uses_the_protocol_constants():
    from strata.broker.handlers import list_offsets
    from strata.cli import admin_client
    from strata.pipeline import options
    from strata.remote import rlmm_types
    from strata.storage import log

    assert (list_offsets.EARLIEST_LOCAL, admin_client.LATEST_TIERED, log.EARLIEST_LOCAL_TIMESTAMP) == (-4, -5, -4)
    assert (options.EARLIEST, options.LATEST) == (C.EARLIEST_TIMESTAMP, C.LATEST_TIMESTAMP)
    assert rlmm_types.REMOTE_LOG_METADATA_TOPIC_NAME is C.REMOTE_LOG_METADATA_TOPIC


def test_component_configs_default_to_the_config_defs():
    from strata.remote.rlm import RemoteLogManagerConfig
    from strata.remote.rlmm_types import RlmmConfig
    from strata.storage.cleaner_manager import CleanerConfig

    values = BrokerConfig.from_dict({}).values
    assert (
        RemoteLogManagerConfig() == RemoteLogManagerConfig.from_broker(values) == RemoteLogManagerConfig.from_broker({})
    )
    assert RemoteLogManagerConfig().task_interval_ms == broker_default("remote.log.manager.task.interval.ms") == 30_000
    assert CleanerConfig().backoff_ms == CleanerConfig.from_broker_config(values).backoff_ms == 15_000
    assert CleanerConfig.from_broker_config({}) == CleanerConfig()
    assert RlmmConfig().num_partitions == broker_default("remote.log.metadata.topic.num.partitions") == 50
    with pytest.raises(KeyError):
        broker_default("no.such.key")
    assert "log.cleaner.backoff.ms" in BROKER_CONFIG_DEFS


@pytest.mark.parametrize(
    "raw, value",
    [
        (True, True),
        (False, False),
        ("true", True),
        (" TRUE ", True),
        ("1", True),
        ("yes", True),
        ("false", False),
        ("0", False),
        ("No", False),
    ],
)
def test_parse_bool(raw, value):
    assert parse_bool(raw) is value


def test_parse_bool_rejects_anything_else_unless_empty_has_a_value():
    for raw in ("", "maybe", "2", None):
        with pytest.raises(ConfigError):
            parse_bool(raw)
    assert parse_bool("", empty=False) is False
    assert parse_bool("  ", empty=True) is True


def test_the_rsm_and_spark_options_share_the_parser():
    from strata.pipeline.options import OptionError, bool_option
    from strata.remote.s3_config import _bool as s3_bool

    assert s3_bool("") is False and s3_bool("Yes") is True
    with pytest.raises(ValueError):
        s3_bool("maybe")
    assert bool_option("x", None, True) is True and bool_option("x", "0", True) is False
    with pytest.raises(OptionError):
        bool_option("x", "maybe", True)


def test_errors_carry_their_code_as_error_code():
    from strata.remote.rlmm_types import RemoteStorageNotReadyError
    from strata.remote.rsm import RemoteStorageError
    from strata.storage.errors import OffsetOutOfRangeError
    from strata.storage.producer_state import OutOfOrderSequenceError

    assert KafkaApiError(ErrorCode.NOT_CONTROLLER).error_code == ErrorCode.NOT_CONTROLLER
    assert KafkaApiError(ErrorCode.INVALID_CONFIG, "x").error_code == ErrorCode.INVALID_CONFIG
    assert OffsetOutOfRangeError("x").error_code == ErrorCode.OFFSET_OUT_OF_RANGE == 1
    assert RemoteStorageError("x").error_code == ErrorCode.KAFKA_STORAGE_ERROR == 56
    assert RemoteStorageNotReadyError("x").error_code == ErrorCode.REPLICA_NOT_AVAILABLE == 9
    assert OutOfOrderSequenceError("x").error_code == 45
    assert not hasattr(RuntimeError("x"), "error_code")
