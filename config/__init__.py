"""Typed broker and topic configuration with Apache Kafka's property names and defaults."""

from .broker_config import BROKER_CONFIG_DEFS, BrokerConfig, Listener, broker_default, parse_properties
from .connection_quotas import ConnectionQuotas
from .defs import ConfigError, ConfigType, parse_bool
from .topic_config import TOPIC_CONFIG_DEFS, LogConfig, default_log_config, format_value, validate_topic_overrides

__all__ = [
    "BrokerConfig",
    "BROKER_CONFIG_DEFS",
    "ConnectionQuotas",
    "Listener",
    "broker_default",
    "parse_properties",
    "ConfigError",
    "ConfigType",
    "parse_bool",
    "TOPIC_CONFIG_DEFS",
    "LogConfig",
    "default_log_config",
    "format_value",
    "validate_topic_overrides",
]
