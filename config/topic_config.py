"""Per-topic log configuration (Kafka's LogConfig): topic key -> broker synonym -> default."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .defs import (
    LONG_MAX,
    ConfigDef,
    ConfigError,
    at_least,
    between,
    local_retention_value,
    retention_value,
)
from .defs import ConfigType as T
from .iceberg import ICEBERG_TOPIC_DEFS, check_iceberg_overrides

# (topic key, broker synonym or None, definition)
_TOPIC_DEFS: list[tuple[str, str | None, ConfigDef]] = [
    (
        "cleanup.policy",
        "log.cleanup.policy",
        ConfigDef("cleanup.policy", T.LIST, ["delete"], "delete and/or compact", choices=("delete", "compact")),
    ),
    (
        "retention.ms",
        "log.retention.ms",
        ConfigDef("retention.ms", T.LONG, 7 * 24 * 3600 * 1000, "max age of a closed segment", retention_value),
    ),
    (
        "retention.bytes",
        "log.retention.bytes",
        ConfigDef("retention.bytes", T.LONG, -1, "max partition size before old segments go", retention_value),
    ),
    (
        "segment.bytes",
        "log.segment.bytes",
        ConfigDef("segment.bytes", T.INT, 1024**3, "segment file size", at_least(14)),
    ),
    (
        "segment.ms",
        "log.roll.ms",
        ConfigDef("segment.ms", T.LONG, 7 * 24 * 3600 * 1000, "roll a segment after this age", at_least(1)),
    ),
    ("segment.jitter.ms", "log.roll.jitter.ms", ConfigDef("segment.jitter.ms", T.LONG, 0, "", at_least(0))),
    (
        "segment.index.bytes",
        "log.index.size.max.bytes",
        ConfigDef("segment.index.bytes", T.INT, 10 * 1024 * 1024, "max index size", at_least(4)),
    ),
    (
        "index.interval.bytes",
        "log.index.interval.bytes",
        ConfigDef("index.interval.bytes", T.INT, 4096, "bytes between index entries", at_least(0)),
    ),
    (
        "flush.messages",
        "log.flush.interval.messages",
        ConfigDef("flush.messages", T.LONG, LONG_MAX, "fsync after this many messages", at_least(1)),
    ),
    (
        "flush.ms",
        "log.flush.interval.ms",
        ConfigDef("flush.ms", T.LONG, LONG_MAX, "fsync after this many ms", at_least(0)),
    ),
    (
        "max.message.bytes",
        "message.max.bytes",
        ConfigDef("max.message.bytes", T.INT, 1024 * 1024 + 12, "largest record batch", at_least(0)),
    ),
    (
        "message.timestamp.type",
        "log.message.timestamp.type",
        ConfigDef("message.timestamp.type", T.STRING, "CreateTime", "", choices=("CreateTime", "LogAppendTime")),
    ),
    (
        "message.timestamp.before.max.ms",
        "log.message.timestamp.before.max.ms",
        ConfigDef("message.timestamp.before.max.ms", T.LONG, LONG_MAX, "", at_least(0)),
    ),
    (
        "message.timestamp.after.max.ms",
        "log.message.timestamp.after.max.ms",
        ConfigDef("message.timestamp.after.max.ms", T.LONG, 3600 * 1000, "", at_least(0)),
    ),
    ("min.insync.replicas", "min.insync.replicas", ConfigDef("min.insync.replicas", T.INT, 1, "", at_least(1))),
    (
        "file.delete.delay.ms",
        "log.segment.delete.delay.ms",
        ConfigDef("file.delete.delay.ms", T.LONG, 60000, "", at_least(0)),
    ),
    (
        "delete.retention.ms",
        "log.cleaner.delete.retention.ms",
        ConfigDef("delete.retention.ms", T.LONG, 24 * 3600 * 1000, "", at_least(0)),
    ),
    (
        "min.compaction.lag.ms",
        "log.cleaner.min.compaction.lag.ms",
        ConfigDef("min.compaction.lag.ms", T.LONG, 0, "", at_least(0)),
    ),
    (
        "max.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms",
        ConfigDef("max.compaction.lag.ms", T.LONG, LONG_MAX, "", at_least(1)),
    ),
    (
        "min.cleanable.dirty.ratio",
        "log.cleaner.min.cleanable.ratio",
        ConfigDef("min.cleanable.dirty.ratio", T.DOUBLE, 0.5, "", between(0, 1)),
    ),
    (
        "compression.type",
        "compression.type",
        ConfigDef(
            "compression.type",
            T.STRING,
            "producer",
            "",
            choices=("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
        ),
    ),
    (
        "unclean.leader.election.enable",
        "unclean.leader.election.enable",
        ConfigDef("unclean.leader.election.enable", T.BOOLEAN, False, ""),
    ),
    ("preallocate", "log.preallocate", ConfigDef("preallocate", T.BOOLEAN, False, "")),
    (
        "local.retention.ms",
        "log.local.retention.ms",
        ConfigDef("local.retention.ms", T.LONG, -2, "", local_retention_value),
    ),
    (
        "local.retention.bytes",
        "log.local.retention.bytes",
        ConfigDef("local.retention.bytes", T.LONG, -2, "", local_retention_value),
    ),
    (
        "remote.storage.enable",
        None,
        ConfigDef("remote.storage.enable", T.BOOLEAN, False, "tier closed segments to remote storage (KIP-405)"),
    ),
    (
        "remote.log.copy.disable",
        None,
        ConfigDef(
            "remote.log.copy.disable", T.BOOLEAN, False, "stop copying new segments; remote reads continue (KIP-950)"
        ),
    ),
    (
        "remote.log.delete.on.disable",
        None,
        ConfigDef(
            "remote.log.delete.on.disable", T.BOOLEAN, False, "allow turning remote storage off, deleting remote data"
        ),
    ),
    (
        "remote.readreplica",
        None,
        ConfigDef(
            "remote.readreplica",
            T.STRING,
            "",
            "create-time only: serve this topic read-only from another cluster's bucket (`bucket[/key prefix]`)",
        ),
    ),
]

_TOPIC_DEFS += ICEBERG_TOPIC_DEFS

TOPIC_CONFIG_DEFS: dict[str, ConfigDef] = {k: d for k, _, d in _TOPIC_DEFS}
TOPIC_TO_BROKER_SYNONYM: dict[str, str] = {k: s for k, s, _ in _TOPIC_DEFS if s}


def validate_topic_overrides(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Parse and validate topic-level overrides; unknown keys are an error, as in Kafka."""
    out: dict[str, Any] = {}
    for key, raw in overrides.items():
        d = TOPIC_CONFIG_DEFS.get(key)
        if d is None:
            raise ConfigError(f"Unknown topic config name: {key}")
        try:
            out[key] = d.parse(raw)
        except ConfigError as e:
            raise ConfigError(f"Invalid value {raw!r} for configuration {key}: {e}") from None
    check_iceberg_overrides(out)
    return out


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


@dataclass(frozen=True)
class LogConfig:
    """Effective configuration of one partition's log, with Kafka's names translated to attributes."""

    values: Mapping[str, Any]
    overrides: Mapping[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    @property
    def segment_bytes(self) -> int:
        return self.values["segment.bytes"]

    @property
    def segment_ms(self) -> int:
        return self.values["segment.ms"]

    @property
    def retention_ms(self) -> int:
        return self.values["retention.ms"]

    @property
    def retention_bytes(self) -> int:
        return self.values["retention.bytes"]

    @property
    def index_interval_bytes(self) -> int:
        return self.values["index.interval.bytes"]

    @property
    def segment_index_bytes(self) -> int:
        return self.values["segment.index.bytes"]

    @property
    def flush_messages(self) -> int:
        return self.values["flush.messages"]

    @property
    def flush_ms(self) -> int:
        return self.values["flush.ms"]

    @property
    def max_message_bytes(self) -> int:
        return self.values["max.message.bytes"]

    @property
    def message_timestamp_type(self) -> str:
        return self.values["message.timestamp.type"]

    @property
    def cleanup_policy(self) -> list[str]:
        return self.values["cleanup.policy"]

    @property
    def compact(self) -> bool:
        return "compact" in self.values["cleanup.policy"]

    @property
    def delete(self) -> bool:
        return "delete" in self.values["cleanup.policy"]

    @property
    def file_delete_delay_ms(self) -> int:
        return self.values["file.delete.delay.ms"]

    @property
    def min_insync_replicas(self) -> int:
        return self.values["min.insync.replicas"]

    @classmethod
    def from_defaults(cls, broker_defaults: Mapping[str, Any], overrides: Mapping[str, Any] | None = None) -> LogConfig:
        """broker_defaults maps topic keys to the broker-level values (see BrokerConfig.topic_defaults)."""
        overrides = validate_topic_overrides(overrides or {})
        values = {k: d.default for k, d in TOPIC_CONFIG_DEFS.items()}
        values.update(broker_defaults)
        values.update(overrides)
        return cls(values=values, overrides=overrides)


def default_log_config(**overrides: Any) -> LogConfig:
    """A LogConfig with Kafka's defaults; keyword names use underscores for dots (tests, tools)."""
    return LogConfig.from_defaults({}, validate_topic_overrides({k.replace("_", "."): v for k, v in overrides.items()}))


__all__ = [
    "LogConfig",
    "TOPIC_CONFIG_DEFS",
    "TOPIC_TO_BROKER_SYNONYM",
    "validate_topic_overrides",
    "format_value",
    "default_log_config",
    "ConfigError",
]
