"""Config APIs: DescribeConfigs (v1-4), IncrementalAlterConfigs (v0-1) and the legacy AlterConfigs (v0-2), on the
TOPIC, BROKER, BROKER_LOGGER and GROUP config resources.

Sources and synonyms follow Kafka's ConfigHelper: an entry's source is the first of its synonym chain (topic
override -> this broker's dynamic config -> the cluster-wide dynamic default -> server.properties -> default), and
the broker part of that chain is cut before the key's primary broker synonym, so ``log.retention.hours`` set in
server.properties does not make ``retention.ms`` a STATIC_BROKER_CONFIG (Kafka reports it as DEFAULT_CONFIG too).
Dynamic broker configs (config/dynamic.py) are kept in the metadata store and applied by every broker
(broker/dynamic_config.py); BROKER_LOGGER levels live in the broker process (broker/loggers.py), as in Kafka.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from strata.config import (
    BROKER_CONFIG_DEFS,
    TOPIC_CONFIG_DEFS,
    BrokerConfig,
    ConfigError,
    ConfigType,
    LogConfig,
    format_value,
)
from strata.config.defs import ConfigDef
from strata.config.dynamic import (
    DYNAMIC_BROKER_CONFIGS,
    GROUP_CONFIG_DEFS,
    group_config_values,
    validate_broker_reconfiguration,
    validate_dynamic_broker_configs,
)
from strata.config.topic_config import TOPIC_TO_BROKER_SYNONYM, validate_topic_overrides
from strata.protocol.errors import ErrorCode, KafkaApiError
from strata.protocol.registry import ApiKey, response_class

from ..authorization import authorize
from ..authorized_ops import CLUSTER_NAME, AclOperation, ResourceType
from ..cluster.forwarding import forwarding_broker_id
from ..loggers import LEVELS, ROOT_LOGGER, VALID_LOG_LEVELS
from ..replica_manager import YIELD_EVERY, pace
from ..request_context import RequestContext
from ..services import BrokerServices
from ..topic_recovery import RECOVERY_STATE_KEY, recovery_state_text

# ConfigResource.Type ids.
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
RESOURCE_GROUP = 32

# Who may describe or alter a config resource: the ACL resource checked and the error a refusal answers (Kafka's
# ConfigHelper and ControllerApis.authorizeAlterResource; BROKER_LOGGER is the cluster's too).
_ACL_RESOURCE: dict[int, tuple[ResourceType, ErrorCode, str]] = {
    RESOURCE_TOPIC: (ResourceType.TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed."),
    RESOURCE_GROUP: (ResourceType.GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed."),
    RESOURCE_BROKER: (ResourceType.CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."),
    RESOURCE_BROKER_LOGGER: (
        ResourceType.CLUSTER,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        "Cluster authorization failed.",
    ),
}


def check_authorized(ctx: RequestContext, operation: AclOperation, resource_type: int, name: str | None) -> None:
    """Raise the resource type's authorization error unless the principal may perform `operation` (DESCRIBE_CONFIGS
    or ALTER_CONFIGS) on the resource; a resource type without ACLs is left to its own error."""
    acl = _ACL_RESOURCE.get(resource_type)
    if acl is None:
        return
    acl_type, error, message = acl
    if not authorize(ctx, operation, acl_type, CLUSTER_NAME if acl_type == ResourceType.CLUSTER else name or ""):
        raise KafkaApiError(error, message)


# DescribeConfigsResponse.ConfigSource ids.
SOURCE_TOPIC_CONFIG = 1
SOURCE_DYNAMIC_BROKER_CONFIG = 2
SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG = 3
SOURCE_STATIC_BROKER_CONFIG = 4
SOURCE_DEFAULT_CONFIG = 5
SOURCE_DYNAMIC_BROKER_LOGGER_CONFIG = 6
SOURCE_GROUP_CONFIG = 8

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


def _broker_synonyms(config, name: str, sensitive: bool, per_broker: bool = True) -> list[Synonym]:
    """Kafka's configSynonyms for a broker key: this broker's dynamic configs, the cluster-wide dynamic defaults,
    static settings, then defaults, from the key itself onwards (without the broker's own layer when describing
    the cluster default)."""
    names = _broker_synonym_names(name)
    out: list[Synonym] = []
    layers = [
        (config.dynamic_default, SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG),
        (config.originals, SOURCE_STATIC_BROKER_CONFIG),
    ]
    if per_broker:
        layers.insert(0, (config.dynamic_broker, SOURCE_DYNAMIC_BROKER_CONFIG))
    for layer, source in layers:
        for n in names:
            if n in layer:
                out.append((n, None if sensitive else layer[n], source))
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
    per_broker: bool = True,
) -> list[ConfigEntry]:
    """This broker's known keys (per_broker), or the cluster-wide dynamic defaults only (not per_broker, the empty
    resource name); read-only unless Kafka can change the key at runtime."""
    config = services.config
    wanted = set(keys) if keys else None
    entries = []
    for name, d in BROKER_CONFIG_DEFS.items():
        if wanted is not None and name not in wanted:
            continue
        if not per_broker and name not in config.dynamic_default:
            continue
        sensitive = d.type is ConfigType.PASSWORD
        raw: Any = config.get(name) if per_broker else config.dynamic_default[name]
        if name in _NULL_DEFAULT_BROKER_KEYS and per_broker and not _is_set(config, name):
            raw = None
        value = None if sensitive or raw is None else format_value(raw)
        chain = _broker_synonyms(config, name, sensitive, per_broker)
        entries.append(
            ConfigEntry(
                name=name,
                value=value,
                source=chain[0][2] if chain else SOURCE_DEFAULT_CONFIG,
                read_only=name not in DYNAMIC_BROKER_CONFIGS,
                sensitive=sensitive,
                type=d.type.value,
                doc=(d.doc or None) if include_documentation else None,
                synonyms=chain if include_synonyms else [],
            )
        )
    return entries


def _is_set(config, name: str) -> bool:
    return name in config.originals or name in config.dynamic_default or name in config.dynamic_broker


def group_config_entries(
    services: BrokerServices,
    group: str | None,
    keys: Iterable[str] | None = None,
    include_synonyms: bool = True,
    include_documentation: bool = False,
) -> list[ConfigEntry]:
    """Kafka's createGroupConfigEntry: every group config, GROUP_CONFIG where the group overrides it, else
    DEFAULT_CONFIG with the broker's group.consumer.* value."""
    if not group:
        raise KafkaApiError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
    overrides = services.store.config_overrides(RESOURCE_GROUP, group)
    values = {name: services.config[key] for name, (_, key) in GROUP_CONFIG_DEFS.items()}
    for k, v in overrides.items():  # each on its own: a stored value stays visible if the bounds moved since
        if k in GROUP_CONFIG_DEFS:
            try:
                values[k] = GROUP_CONFIG_DEFS[k][0].parse(v)
            except ConfigError:
                continue
    wanted = set(keys) if keys else None
    entries = []
    for name, (d, _) in GROUP_CONFIG_DEFS.items():
        if wanted is not None and name not in wanted:
            continue
        value = format_value(values[name])
        source = SOURCE_GROUP_CONFIG if name in overrides else SOURCE_DEFAULT_CONFIG
        doc = (d.doc or None) if include_documentation else None
        synonyms: list[Synonym] = [(name, value, source)] if include_synonyms else []
        entries.append(_alterable_entry(name, value, source, d.type, doc, synonyms))
    return entries


def _alterable_entry(
    name: str, value: str, source: int, type_: ConfigType, doc: str | None = None, synonyms: list[Synonym] | None = None
) -> ConfigEntry:
    return ConfigEntry(name, value, source, False, False, type_.value, doc, synonyms or [])


def broker_logger_entries(services: BrokerServices, name: str | None, keys: Iterable[str] | None) -> list[ConfigEntry]:
    """Every logger with its effective level (Kafka's Log4jController.loggers)."""
    if not name:
        raise KafkaApiError(ErrorCode.INVALID_REQUEST, "Broker id must not be empty")
    if _parse_broker_id(name) != services.broker_id:
        raise KafkaApiError(
            ErrorCode.INVALID_REQUEST,
            f"Unexpected broker id, expected {services.broker_id} but received {name}",
        )
    wanted = set(keys) if keys else None
    return [
        _alterable_entry(logger, level, SOURCE_DYNAMIC_BROKER_LOGGER_CONFIG, ConfigType.STRING)
        for logger, level in LEVELS.loggers().items()
        if wanted is None or logger in wanted
    ]


def _parse_broker_id(name: str, what: str = "Broker id") -> int:
    try:
        return int(name)
    except ValueError:
        raise KafkaApiError(ErrorCode.INVALID_REQUEST, f"{what} must be an integer, but it is: {name}") from None


def _check_broker_id(services: BrokerServices, name: str | None) -> bool:
    """True for this broker's id, False for the empty name (the cluster-wide dynamic defaults)."""
    if not name:
        return False
    if _parse_broker_id(name) != services.broker_id:
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
    work = 0  # entries made since the last turn given to other connections
    for r in req.resources:
        if work >= YIELD_EVERY:
            work = 0
            await asyncio.sleep(0)
        res = Result(
            error_code=0, error_message=None, resource_type=r.resource_type, resource_name=r.resource_name, configs=[]
        )
        keys = r.configuration_keys or None
        try:
            check_authorized(ctx, AclOperation.DESCRIBE_CONFIGS, r.resource_type, r.resource_name)
            if r.resource_type == RESOURCE_TOPIC:
                info = _existing_topic(services, r.resource_name)
                entries = topic_config_entries(services, info.configs, keys, include_synonyms, include_doc)
                if keys and RECOVERY_STATE_KEY in keys and info.recovery is not None:  # asked for by name only
                    text = recovery_state_text(info.recovery)
                    entries.append(
                        ConfigEntry(
                            RECOVERY_STATE_KEY, text, SOURCE_TOPIC_CONFIG, True, False, ConfigType.STRING.value, None
                        )
                    )
            elif r.resource_type == RESOURCE_BROKER:
                per_broker = _check_broker_id(services, r.resource_name)
                entries = broker_config_entries(services, keys, include_synonyms, include_doc, per_broker)
            elif r.resource_type == RESOURCE_BROKER_LOGGER:
                entries = broker_logger_entries(services, r.resource_name, keys)
            elif r.resource_type == RESOURCE_GROUP:
                entries = group_config_entries(services, r.resource_name, keys, include_synonyms, include_doc)
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
        work += 1 + len(res.configs)
        results.append(res)
    return Resp(version=v, throttle_time_ms=0, results=results)


def _split_list(value: str) -> list[str]:
    return [s.strip() for s in value.split(",") if s.strip()]


def _apply_ops(
    current: dict[str, str],
    ops: Iterable[tuple[str, int, str | None]],
    lookup: Callable[[str], ConfigDef | None],
    kind: str,
) -> dict[str, str]:
    """New overrides after SET/DELETE/APPEND/SUBTRACT (not validated: the caller validates the result).
    APPEND/SUBTRACT start from the override, else the key's own default, as Kafka does."""
    new = dict(current)
    for name, op, value in ops:
        if op not in _OP_NAMES:
            raise KafkaApiError(ErrorCode.INVALID_REQUEST, f"Unknown alter configs operation type {op}")
        if op == OP_DELETE:
            new.pop(name, None)
            continue
        d = lookup(name)
        if d is None:
            raise KafkaApiError(ErrorCode.INVALID_CONFIG, f"Unknown {kind} config name: {name}")
        if value is None:
            raise KafkaApiError(ErrorCode.INVALID_CONFIG, f"Null value not supported for {kind} configs: {name}")
        if op == OP_SET:
            new[name] = value
            continue
        if d.type is not ConfigType.LIST:
            raise KafkaApiError(
                ErrorCode.INVALID_CONFIG, f"Can't {_OP_NAMES[op]} to key {name} because its type is not LIST."
            )
        old = _split_list(new[name]) if name in new else list(d.default or [])
        items = _split_list(value)
        if op == OP_APPEND:  # sets: a value may list many items, and a request may carry many of them
            present = set(old)
            merged = old + [x for x in items if x not in present]
        else:
            removed = set(items)
            merged = [x for x in old if x not in removed]
        new[name] = ",".join(merged)
    return new


def apply_incremental_ops(current: dict[str, str], ops: Iterable[tuple[str, int, str | None]]) -> dict[str, str]:
    """New topic overrides after the operations; raises KafkaApiError (INVALID_CONFIG/REQUEST)."""
    new = _apply_ops(current, ops, TOPIC_CONFIG_DEFS.get, "topic")
    try:
        validate_topic_overrides(new)
    except ConfigError as e:
        raise KafkaApiError(ErrorCode.INVALID_CONFIG, str(e)) from None
    return new


Op = tuple[str, int, str | None]
ConfigsChange = Callable[[dict[str, str]], dict[str, str]]


def _broker_change(
    services: BrokerServices, ops: list[Op], replacement: dict[str, str] | None, per_broker: bool
) -> ConfigsChange:
    """The stored dynamic broker configs -> the new ones: `ops` applied (incremental) or `replacement` (legacy),
    checked alone and, merged with the other layers of this broker's config, as a whole."""

    def change(current: dict[str, str]) -> dict[str, str]:
        new = (
            dict(replacement) if replacement is not None else _apply_ops(current, ops, BROKER_CONFIG_DEFS.get, "broker")
        )
        cfg = services.config
        default, mine = (cfg.dynamic_default, new) if per_broker else (new, cfg.dynamic_broker)
        try:
            validate_dynamic_broker_configs(new, per_broker)
            validate_broker_reconfiguration(BrokerConfig.from_dict({**cfg.originals, **default, **mine}))
        except ConfigError as e:  # Kafka answers INVALID_REQUEST here (KAFKA-13609)
            raise KafkaApiError(ErrorCode.INVALID_REQUEST, str(e)) from None
        return new

    return change


def _group_change(services: BrokerServices, ops: list[Op], replacement: dict[str, str] | None) -> ConfigsChange:
    """The stored group configs -> the new ones, checked against the broker's group.consumer.* bounds."""

    def change(current: dict[str, str]) -> dict[str, str]:
        new = dict(replacement) if replacement is not None else _apply_ops(current, ops, _group_def, "group")
        try:
            group_config_values(services.config.values, new)
        except ConfigError as e:
            raise KafkaApiError(ErrorCode.INVALID_CONFIG, str(e)) from None
        return new

    return change


def _check_alter_broker_name(services: BrokerServices, ctx: RequestContext, name: str | None) -> str:
    """The BROKER resource name of an alter: "" (the cluster-wide default) or the id of the broker the client
    sent it to, which is the forwarding broker's when the controller answers a forwarded request."""
    if not name:
        return ""
    target = forwarding_broker_id(ctx.client_id)
    target = services.broker_id if target is None else target
    if _parse_broker_id(name, "Node id") != target:
        raise KafkaApiError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {target}, but received {name}")
    return name


def _check_group_name(name: str | None) -> str:
    if not name:
        raise KafkaApiError(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
    return name


def _alter_broker_loggers(services: BrokerServices, name: str | None, ops: list[Any], validate_only: bool) -> None:
    """Kafka's RuntimeLoggerManager: validate every operation, then apply them (only SET and DELETE)."""
    _parse_broker_id(name or "", "Node id")
    if int(name or 0) != services.broker_id:
        raise KafkaApiError(
            ErrorCode.INVALID_REQUEST, f"Unexpected node id. Expected {services.broker_id}, but received {name}"
        )
    for c in ops:
        op = c.config_operation
        if op in (OP_APPEND, OP_SUBTRACT):
            raise KafkaApiError(
                ErrorCode.INVALID_REQUEST, f"{_OP_NAMES[op]} operation is not allowed for the BROKER_LOGGER resource"
            )
        if op not in (OP_SET, OP_DELETE):
            raise KafkaApiError(
                ErrorCode.INVALID_REQUEST,
                f"Unknown operation type {op} is not allowed for the BROKER_LOGGER resource",
            )
        if not LEVELS.exists(c.name):
            raise KafkaApiError(ErrorCode.INVALID_CONFIG, f"Logger {c.name} does not exist!")
        if op == OP_SET and c.value not in VALID_LOG_LEVELS:
            raise KafkaApiError(
                ErrorCode.INVALID_CONFIG,
                f"Cannot set the log level of {c.name} to {c.value} as it is not a supported log level. "
                f"Valid log levels are {', '.join(VALID_LOG_LEVELS)}",
            )
        if op == OP_DELETE and c.name == ROOT_LOGGER:
            raise KafkaApiError(
                ErrorCode.INVALID_REQUEST, f"Removing the log level of the {ROOT_LOGGER} logger is not allowed"
            )
    if validate_only:
        return
    for c in ops:
        if c.config_operation == OP_SET:
            LEVELS.set_level(c.name, c.value)
        else:
            LEVELS.unset_level(c.name)


async def _check_request(resources: list[Any], null_values: Callable[[Any], list[str]]) -> dict[tuple[int, str], str]:
    """Kafka's preprocess checks: per resource, an error message if it appears twice, repeats a key or sets null.
    Linear in the configs and yielding every YIELD_EVERY of them (100,000 configs in one resource were seen)."""
    counts: dict[tuple[int, str], int] = {}
    for r in resources:
        counts[(r.resource_type, r.resource_name)] = counts.get((r.resource_type, r.resource_name), 0) + 1
    errors: dict[tuple[int, str], str] = {}
    seen = 0
    for r in resources:
        key = (r.resource_type, r.resource_name)
        # linear, and yielding: the fuzzer's 100,000 copies of one key made a count per name take hours
        names: Counter[str] = Counter()
        for c in r.configs:
            seen += 1
            await pace(seen)
            names[c.name] += 1
        dups = sorted(n for n, k in names.items() if k > 1)
        nulls = null_values(r)
        if counts[key] > 1:
            errors[key] = "Each resource must appear at most once."
        elif dups:
            errors[key] = f"Error due to duplicate config keys: {dups}"
        elif nulls:
            errors[key] = f"Null value not supported for : {', '.join(nulls)}"
    return errors


async def incremental_alter_configs(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.INCREMENTAL_ALTER_CONFIGS)
    Result = Resp.AlterConfigsResourceResponse
    validate_only = bool(req.validate_only)
    errors = await _check_request(
        req.resources, lambda r: [c.name for c in r.configs if c.config_operation != OP_DELETE and c.value is None]
    )
    results = []
    for n, r in enumerate(req.resources):
        await pace(n)
        res = Result(error_code=0, error_message=None, resource_type=r.resource_type, resource_name=r.resource_name)
        ops = [(c.name, c.config_operation, c.value) for c in r.configs]
        try:
            if (r.resource_type, r.resource_name) in errors:
                raise KafkaApiError(ErrorCode.INVALID_REQUEST, errors[(r.resource_type, r.resource_name)])
            check_authorized(ctx, AclOperation.ALTER_CONFIGS, r.resource_type, r.resource_name)
            if r.resource_type == RESOURCE_TOPIC:
                info = _existing_topic(services, r.resource_name)
                new = apply_incremental_ops(info.configs, ops)
                await services.topic_manager.set_topic_configs(r.resource_name, new, validate_only)
            elif r.resource_type in (RESOURCE_BROKER, RESOURCE_GROUP):
                await _alter_stored_resource(services, ctx, r, ops, None, validate_only)
            elif r.resource_type == RESOURCE_BROKER_LOGGER:
                _alter_broker_loggers(services, r.resource_name, list(r.configs), validate_only)
            else:
                raise KafkaApiError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {r.resource_type}")
        except KafkaApiError as e:
            res.error_code, res.error_message = int(e.error_code), e.message
        results.append(res)
    return Resp(version=ctx.api_version, throttle_time_ms=0, responses=results)


async def alter_configs(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    """The legacy AlterConfigs (key 33): each resource's given configs replace its whole set of dynamic configs
    (topic overrides, the broker's or the default's dynamic configs, a group's configs)."""
    Resp = response_class(ApiKey.ALTER_CONFIGS)
    Result = Resp.AlterConfigsResourceResponse
    validate_only = bool(req.validate_only)
    errors = await _check_request(req.resources, lambda r: [c.name for c in r.configs if c.value is None])
    results = []
    for n, r in enumerate(req.resources):
        await pace(n)
        res = Result(error_code=0, error_message=None, resource_type=r.resource_type, resource_name=r.resource_name)
        configs = {c.name: c.value or "" for c in r.configs}  # (nulls are refused first)
        try:
            if (r.resource_type, r.resource_name) in errors:
                raise KafkaApiError(ErrorCode.INVALID_REQUEST, errors[(r.resource_type, r.resource_name)])
            if r.resource_type != RESOURCE_BROKER_LOGGER:  # which the legacy API refuses whoever asks
                check_authorized(ctx, AclOperation.ALTER_CONFIGS, r.resource_type, r.resource_name)
            if r.resource_type == RESOURCE_TOPIC:
                _existing_topic(services, r.resource_name)
                try:
                    validate_topic_overrides(configs)
                except ConfigError as e:
                    raise KafkaApiError(ErrorCode.INVALID_CONFIG, str(e)) from None
                await services.topic_manager.set_topic_configs(r.resource_name, configs, validate_only)
            elif r.resource_type in (RESOURCE_BROKER, RESOURCE_GROUP):
                await _alter_stored_resource(services, ctx, r, [], configs, validate_only)
            else:  # BROKER_LOGGER included: the legacy API never supported it
                raise KafkaApiError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {r.resource_type}")
        except KafkaApiError as e:
            res.error_code, res.error_message = int(e.error_code), e.message
        results.append(res)
    return Resp(version=ctx.api_version, throttle_time_ms=0, responses=results)


def _group_def(name: str) -> ConfigDef | None:
    entry = GROUP_CONFIG_DEFS.get(name)
    return entry[0] if entry is not None else None


async def _alter_stored_resource(
    services: BrokerServices,
    ctx: RequestContext,
    r: Any,
    ops: list[Op],
    replacement: dict[str, str] | None,
    validate_only: bool,
) -> None:
    """A BROKER or GROUP resource, whose configs live in the metadata store: `ops` (incremental) or `replacement`
    (legacy) applied to what is stored."""
    change: ConfigsChange
    if r.resource_type == RESOURCE_BROKER:
        name = _check_alter_broker_name(services, ctx, r.resource_name)
        change = _broker_change(services, ops, replacement, per_broker=bool(name))
    else:
        name = _check_group_name(r.resource_name)
        change = _group_change(services, ops, replacement)
    await _store_configs(services, r.resource_type, name, change, validate_only)


async def _store_configs(
    services: BrokerServices,
    resource_type: int,
    name: str,
    change: Callable[[dict[str, str]], dict[str, str]],
    validate_only: bool,
) -> None:
    """Validate `change` against the stored configs and, unless validate_only, write its result atomically."""
    if validate_only:
        change(services.store.config_overrides(resource_type, name))
        return
    await services.store.update_config_overrides(resource_type, name, change)
