"""Configs that change at runtime: dynamic broker configs and group configs, with Kafka's names and rules.

Kafka's DynamicBrokerConfig lists the broker keys that may be altered without a restart (AllDynamicConfigs); every
other broker key is read-only and an alter of it is refused with "Cannot update these configs dynamically". Strata
allows the keys of that list that it implements. A dynamic value is set either for one broker (resource name = its
id) or as the cluster-wide default (empty name); the effective value is, first found: the broker's dynamic value,
the cluster default, server.properties, the built-in default (DescribeConfigs reports which as the source).

Group configs (Kafka 4.x's GroupConfig, ConfigResource type GROUP) override the broker's ``group.consumer.*``
defaults for one group and must stay within the broker's bounds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .broker_config import BROKER_CONFIG_DEFS, BrokerConfig
from .defs import ConfigDef, ConfigError, at_least
from .defs import ConfigType as T
from .topic_config import TOPIC_TO_BROKER_SYNONYM

# DynamicLogConfig: the broker synonyms of topic configs (the defaults of every topic that does not override them)
_LOG_CONFIGS = frozenset(TOPIC_TO_BROKER_SYNONYM.values())
# LogCleaner.ReconfigurableConfigs (message.max.bytes is one of the log configs too)
_CLEANER_CONFIGS = frozenset(
    {
        "log.cleaner.threads",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.io.buffer.load.factor",
        "log.cleaner.io.buffer.size",
        "log.cleaner.io.max.bytes.per.second",
        "log.cleaner.backoff.ms",
        "message.max.bytes",
    }
)
# DynamicRemoteLogConfig.ReconfigurableConfigs
_REMOTE_CONFIGS = frozenset(
    {
        "remote.log.index.file.cache.total.size.bytes",
        "remote.fetch.max.wait.ms",
        "remote.log.manager.copy.max.bytes.per.second",
        "remote.log.manager.fetch.max.bytes.per.second",
        "remote.list.offsets.request.timeout.ms",
    }
)
# DynamicProducerStateManagerConfig (transaction.partition.verification.enable: no transactions yet)
_PRODUCER_STATE_CONFIGS = frozenset({"producer.id.expiration.ms"})

DYNAMIC_BROKER_CONFIGS: frozenset[str] = _LOG_CONFIGS | _CLEANER_CONFIGS | _REMOTE_CONFIGS | _PRODUCER_STATE_CONFIGS
# Kafka's PerBrokerConfigs (listener and SSL keys): none of them is dynamic in Strata, so every dynamic key may
# also be set as the cluster-wide default.
PER_BROKER_CONFIGS: frozenset[str] = frozenset()


def validate_dynamic_broker_configs(configs: Mapping[str, str], per_broker: bool) -> dict[str, Any]:
    """Parse a resource's whole set of dynamic broker configs (ConfigError with Kafka's message on the first
    problem): only dynamic keys, values of the key's type and range (the remote quotas and index cache size at
    least 1, as DynamicRemoteLogConfig checks), per-broker-only keys only with a broker id."""
    static = sorted(k for k in configs if k not in DYNAMIC_BROKER_CONFIGS)
    if static:
        raise ConfigError(f"Cannot update these configs dynamically: Set({', '.join(static)})")
    if not per_broker:
        only_per_broker = sorted(k for k in configs if k in PER_BROKER_CONFIGS)
        if only_per_broker:
            raise ConfigError(
                "Cannot update these configs at default cluster level, broker id must be specified: "
                f"Set({', '.join(only_per_broker)})"
            )
    out: dict[str, Any] = {}
    for key, raw in configs.items():
        try:
            out[key] = BROKER_CONFIG_DEFS[key].parse(raw)
        except ConfigError as e:
            raise ConfigError(f"Invalid value {raw} for configuration {key}: {e}") from None
    return out


def validate_broker_reconfiguration(config: BrokerConfig) -> None:
    """Kafka's DynamicLogConfig.validateReconfiguration on the effective config the dynamic layers give: the local
    retention of tiered topics may not exceed, nor be unlimited under, a limited total retention."""
    d = config.topic_defaults()
    for local_key, total_key, local_broker_key, total_broker_key in (
        ("local.retention.ms", "retention.ms", "log.local.retention.ms", "log.retention.ms"),
        ("local.retention.bytes", "retention.bytes", "log.local.retention.bytes", "log.retention.bytes"),
    ):
        local, total = d[local_key], d[total_key]
        if total == -1 or local == -2:
            continue
        if local == -1:
            raise ConfigError(
                f"Invalid value -1 for configuration {local_broker_key}: Value must not be -1 as {total_broker_key} "
                f"value is set as {total}."
            )
        if local > total:
            raise ConfigError(
                f"Invalid value {local} for configuration {local_broker_key}: Value must not be more than "
                f"{total_broker_key} property value: {total}"
            )


# Group configs: name -> (definition, the broker key that gives its default)
GROUP_CONFIG_DEFS: dict[str, tuple[ConfigDef, str]] = {
    "consumer.session.timeout.ms": (
        ConfigDef(
            "consumer.session.timeout.ms",
            T.INT,
            45000,
            "session timeout of the group's consumers (consumer protocol)",
            at_least(1),
        ),
        "group.consumer.session.timeout.ms",
    ),
    "consumer.heartbeat.interval.ms": (
        ConfigDef(
            "consumer.heartbeat.interval.ms",
            T.INT,
            5000,
            "heartbeat interval of the group's consumers (consumer protocol)",
            at_least(1),
        ),
        "group.consumer.heartbeat.interval.ms",
    ),
}


def group_config_values(broker: Mapping[str, Any], overrides: Mapping[str, str]) -> dict[str, Any]:
    """A group's effective configs: its overrides over the broker's group.consumer.* values (ConfigError if an
    override does not parse or leaves the broker's bounds, with Kafka's messages)."""
    unknown = sorted(k for k in overrides if k not in GROUP_CONFIG_DEFS)
    if unknown:
        raise ConfigError(f"Unknown group config name: {unknown[0]}")
    values: dict[str, Any] = {name: broker[key] for name, (_, key) in GROUP_CONFIG_DEFS.items()}
    for key, raw in overrides.items():
        try:
            values[key] = GROUP_CONFIG_DEFS[key][0].parse(raw)
        except ConfigError as e:
            raise ConfigError(f"Invalid value {raw} for configuration {key}: {e}") from None
    hb, session = values["consumer.heartbeat.interval.ms"], values["consumer.session.timeout.ms"]
    bounds = [
        (hb, "consumer.heartbeat.interval.ms", "group.consumer.min.heartbeat.interval.ms", 1),
        (hb, "consumer.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms", -1),
        (session, "consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms", 1),
        (session, "consumer.session.timeout.ms", "group.consumer.max.session.timeout.ms", -1),
    ]
    for value, name, bound_key, sign in bounds:
        if sign > 0 and value < broker[bound_key]:
            raise ConfigError(f"{name} must be greater than or equal to {bound_key}")
        if sign < 0 and value > broker[bound_key]:
            raise ConfigError(f"{name} must be less than or equal to {bound_key}")
    if session <= hb:
        raise ConfigError("consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms")
    return values


__all__ = [
    "DYNAMIC_BROKER_CONFIGS",
    "GROUP_CONFIG_DEFS",
    "PER_BROKER_CONFIGS",
    "group_config_values",
    "validate_broker_reconfiguration",
    "validate_dynamic_broker_configs",
]
