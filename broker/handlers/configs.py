"""Config APIs: DescribeConfigs (v1-4) and IncrementalAlterConfigs (v0-1).

Sources and synonyms follow Kafka's ConfigHelper: a topic entry's source is the first of its synonym chain
(topic override -> broker setting -> default), and the broker part of that chain is cut before the key's primary
broker synonym, so ``log.retention.hours`` set in server.properties does not make ``retention.ms`` a
STATIC_BROKER_CONFIG (Kafka reports it as DEFAULT_CONFIG too). Broker configs are static only: every broker entry is
read-only and IncrementalAlterConfigs on a BROKER resource is refused.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from strata.config import (
    BROKER_CONFIG_DEFS,
    TOPIC_CONFIG_DEFS,
    ConfigError,
    ConfigType,
    LogConfig,
    format_value,
)
from strata.config.topic_config import TOPIC_TO_BROKER_SYNONYM, validate_topic_overrides
from strata.protocol.errors import ErrorCode, KafkaApiError
from strata.protocol.registry import ApiKey, response_class

from ..request_context import RequestContext
from ..services import BrokerServices

# ConfigResource.Type ids.
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8

# DescribeConfigsResponse.ConfigSource ids.
SOURCE_TOPIC_CONFIG = 1
SOURCE_STATIC_BROKER_CONFIG = 4
SOURCE_DEFAULT_CONFIG = 5

# AlterConfigOp.OpType ids.
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {OP_SET: "SET", OP_DELETE: "DELETE", OP_APPEND: "APPEND", OP_SUBTRACT: "SUBTRACT"}

# Kafka's DynamicBrokerConfig.brokerConfigSynonyms: keys that are alternative spellings of one setting, most
# specific first.
_BROKER_SYNONYM_FAMILIES: list[list[str]] = [
    ["log.roll.ms", "log.roll.hours"],
    ["log.roll.jitter.ms", "log.roll.jitter.hours"],
    ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"],
    ["log.retention.ms", "log.retention.minutes", "log.retention.hours"],
]
# Keys whose Kafka default is null even though our table stores a sentinel (log.roll.ms = -1 means "unset").
_NULL_DEFAULT_BROKER_KEYS = {"log.roll.ms"}

Synonym = tuple[str, str | None, int]


@dataclass
class ConfigEntry:
    """One described config, independent of the wire version (CreateTopics v5+ and DescribeConfigs share it)."""

    name: str
    value: str | None
    source: int
    read_only: bool
    sensitive: bool
    type: int
    doc: str | None
    synonyms: list[Synonym] = field(default_factory=list)


def _broker_synonym_names(name: str) -> list[str]:
    for fam in _BROKER_SYNONYM_FAMILIES:
        if name in fam:
            return fam
    return [name]


def _broker_default_str(key: str) -> str | None:
    d = BROKER_CONFIG_DEFS.get(key)
    if d is None or d.default is None or key in _NULL_DEFAULT_BROKER_KEYS:
        return None
    return format_value(d.default)


def _broker_synonyms(config, name: str, sensitive: bool) -> list[Synonym]:
    """Kafka's configSynonyms for a broker key: static settings, then defaults, from the key itself onwards."""
    names = _broker_synonym_names(name)
    out: list[Synonym] = []
    for n in names:
        if n in config.originals:
            out.append((n, None if sensitive else config.originals[n], SOURCE_STATIC_BROKER_CONFIG))
    for n in names:
        dflt = _broker_default_str(n)
        if dflt is not None:
            out.append((n, None if sensitive else dflt, SOURCE_DEFAULT_CONFIG))
    while out and out[0][0] != name:
        out.pop(0)
    return out


def _parsed_overrides(overrides: dict[str, str]) -> dict[str, Any]:
    """Typed overrides, skipping entries that do not parse (callers validate before storing anything)."""
    out: dict[str, Any] = {}
    for k, v in overrides.items():
        try:
            out.update(validate_topic_overrides({k: v}))
        except ConfigError:
            continue
    return out


def topic_config_entries(
    services: BrokerServices,
    overrides: dict[str, str],
    keys: Iterable[str] | None = None,
    include_synonyms: bool = True,
    include_documentation: bool = False,
) -> list[ConfigEntry]:
    """Every topic config with its effective value and source, as Kafka describes a topic."""
    config = services.config
    parsed = _parsed_overrides(overrides)
    effective = LogConfig.from_defaults(config.topic_defaults(), parsed).values
    wanted = set(keys) if keys else None
    entries = []
    for name, d in TOPIC_CONFIG_DEFS.items():
        if wanted is not None and name not in wanted:
            continue
        sensitive = d.type is ConfigType.PASSWORD
        raw = effective.get(name)
        value = None if sensitive or raw is None else format_value(raw)
        chain: list[Synonym] = []
        if name in parsed:
            chain.append((name, value, SOURCE_TOPIC_CONFIG))
        broker_key = TOPIC_TO_BROKER_SYNONYM.get(name)
        if broker_key is not None:
            chain.extend(_broker_synonyms(config, broker_key, sensitive))
        entries.append(
            ConfigEntry(
                name=name,
                value=value,
                source=chain[0][2] if chain else SOURCE_DEFAULT_CONFIG,
                read_only=False,
                sensitive=sensitive,
                type=d.type.value,
                doc=(d.doc or None) if include_documentation else None,
                synonyms=chain if include_synonyms else [],
            )
        )
    return entries


def broker_config_entries(
    services: BrokerServices,
    keys: Iterable[str] | None = None,
    include_synonyms: bool = True,
    include_documentation: bool = False,
) -> list[ConfigEntry]:
    """This broker's known keys; all read-only because Strata has no dynamic broker configs."""
    config = services.config
    wanted = set(keys) if keys else None
    entries = []
    for name, d in BROKER_CONFIG_DEFS.items():
        if wanted is not None and name not in wanted:
            continue
        sensitive = d.type is ConfigType.PASSWORD
        raw = config.get(name)
        if name in _NULL_DEFAULT_BROKER_KEYS and name not in config.originals:
            raw = None
        value = None if sensitive or raw is None else format_value(raw)
        chain = _broker_synonyms(config, name, sensitive)
        entries.append(
            ConfigEntry(
                name=name,
                value=value,
                source=chain[0][2] if chain else SOURCE_DEFAULT_CONFIG,
                read_only=True,
                sensitive=sensitive,
                type=d.type.value,
                doc=(d.doc or None) if include_documentation else None,
                synonyms=chain if include_synonyms else [],
            )
        )
    return entries


def _check_broker_id(services: BrokerServices, name: str | None) -> bool:
    """True for this broker's id, False for the empty name (cluster-wide dynamic defaults: none here)."""
    if not name:
        return False
    try:
        bid = int(name)
    except ValueError:
        raise KafkaApiError(ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}") from None
    if bid != services.broker_id:
        raise KafkaApiError(
            ErrorCode.INVALID_REQUEST,
            f"Unexpected broker id, expected {services.broker_id} or empty string, but received {name}",
        )
    return True


def _existing_topic(services: BrokerServices, name: str | None):
    from strata.broker.metadata_store import validate_topic_name

    validate_topic_name(name)
    assert name is not None  # validate_topic_name refuses None
    info = services.store.topic(name)
    if info is None:
        raise KafkaApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
    return info


async def describe_configs(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.DESCRIBE_CONFIGS)
    Result = Resp.DescribeConfigsResult
    Entry = Result.DescribeConfigsResourceResult
    Syn = Entry.DescribeConfigsSynonym
    v = ctx.api_version
    include_synonyms = bool(getattr(req, "include_synonyms", False))
    include_doc = v >= 3 and bool(getattr(req, "include_documentation", False))
    results = []
    for r in req.resources:
        res = Result(
            error_code=0, error_message=None, resource_type=r.resource_type, resource_name=r.resource_name, configs=[]
        )
        keys = r.configuration_keys or None
        try:
            if r.resource_type == RESOURCE_TOPIC:
                info = _existing_topic(services, r.resource_name)
                entries = topic_config_entries(services, info.configs, keys, include_synonyms, include_doc)
            elif r.resource_type == RESOURCE_BROKER:
                entries = (
                    broker_config_entries(services, keys, include_synonyms, include_doc)
                    if _check_broker_id(services, r.resource_name)
                    else []
                )
            elif r.resource_type == RESOURCE_BROKER_LOGGER:
                raise KafkaApiError(
                    ErrorCode.INVALID_REQUEST,
                    "BROKER_LOGGER resources are not supported: Strata's log level is the log.level property",
                )
            else:
                raise KafkaApiError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {r.resource_type}")
            res.configs = [
                Entry(
                    name=e.name,
                    value=e.value,
                    read_only=e.read_only,
                    config_source=e.source,
                    is_sensitive=e.sensitive,
                    synonyms=[Syn(name=n, value=sv, source=s) for n, sv, s in e.synonyms],
                    config_type=e.type,
                    documentation=e.doc,
                )
                for e in entries
            ]
        except KafkaApiError as e:
            res.error_code, res.error_message = int(e.error_code), e.message
        results.append(res)
    return Resp(version=v, throttle_time_ms=0, results=results)


def _split_list(value: str) -> list[str]:
    return [s.strip() for s in value.split(",") if s.strip()]


def apply_incremental_ops(current: dict[str, str], ops: Iterable[tuple[str, int, str | None]]) -> dict[str, str]:
    """New topic overrides after SET/DELETE/APPEND/SUBTRACT; raises KafkaApiError (INVALID_CONFIG/REQUEST).

    APPEND/SUBTRACT start from the override, else the topic key's own default, as Kafka does.
    """
    new = dict(current)
    for name, op, value in ops:
        if op not in _OP_NAMES:
            raise KafkaApiError(ErrorCode.INVALID_REQUEST, f"Unknown alter configs operation type {op}")
        if op == OP_DELETE:
            new.pop(name, None)
            continue
        d = TOPIC_CONFIG_DEFS.get(name)
        if d is None:
            raise KafkaApiError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
        if value is None:
            raise KafkaApiError(ErrorCode.INVALID_CONFIG, f"Null value not supported for topic configs: {name}")
        if op == OP_SET:
            new[name] = value
            continue
        if d.type is not ConfigType.LIST:
            raise KafkaApiError(
                ErrorCode.INVALID_CONFIG, f"Can't {_OP_NAMES[op]} to key {name} because its type is not LIST."
            )
        old = _split_list(new[name]) if name in new else list(d.default)
        items = _split_list(value)
        if op == OP_APPEND:  # sets: a value may list many items, and a request may carry many of them
            present = set(old)
            merged = old + [x for x in items if x not in present]
        else:
            removed = set(items)
            merged = [x for x in old if x not in removed]
        new[name] = ",".join(merged)
    try:
        validate_topic_overrides(new)
    except ConfigError as e:
        raise KafkaApiError(ErrorCode.INVALID_CONFIG, str(e)) from None
    return new


async def incremental_alter_configs(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.INCREMENTAL_ALTER_CONFIGS)
    Result = Resp.AlterConfigsResourceResponse
    validate_only = bool(req.validate_only)
    counts: dict[tuple[int, str], int] = {}
    for r in req.resources:
        counts[(r.resource_type, r.resource_name)] = counts.get((r.resource_type, r.resource_name), 0) + 1
    results = []
    for r in req.resources:
        res = Result(error_code=0, error_message=None, resource_type=r.resource_type, resource_name=r.resource_name)
        try:
            if counts[(r.resource_type, r.resource_name)] > 1:
                raise KafkaApiError(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
            dups = sorted(n for n, k in Counter(c.name for c in r.configs).items() if k > 1)
            if dups:
                raise KafkaApiError(ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys: {dups}")
            if r.resource_type == RESOURCE_TOPIC:
                info = _existing_topic(services, r.resource_name)
                new = apply_incremental_ops(info.configs, [(c.name, c.config_operation, c.value) for c in r.configs])
                await services.topic_manager.set_topic_configs(r.resource_name, new, validate_only)
            elif r.resource_type in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER):
                raise KafkaApiError(
                    ErrorCode.INVALID_REQUEST, "dynamic broker configs are not supported; set them in server.properties"
                )
            else:
                raise KafkaApiError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {r.resource_type}")
        except KafkaApiError as e:
            res.error_code, res.error_message = int(e.error_code), e.message
        results.append(res)
    return Resp(version=ctx.api_version, throttle_time_ms=0, responses=results)
