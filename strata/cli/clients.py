"""kafka-python's producer and consumer for the data-path commands (console producer/consumer, perf tests).

Those commands take Kafka's Java property names (``--producer-property linger.ms=5``, ``--consumer.config FILE``);
kafka-python spells the same settings with underscores and typed values. This module translates one into the other
and refuses a name kafka-python does not know with one readable line, instead of its assertion.
"""

from __future__ import annotations

from typing import Any

from .command_config import SECURITY_KEYS, CommandConfigError, client_security

# Java names whose kafka-python spelling is not the underscored name
_RENAMED = {"bootstrap.servers": "bootstrap_servers", "client.id": "client_id", "group.id": "group_id"}
# kafka-python settings that take a callable or an object: not settable from a command line
_NOT_FROM_TEXT = {
    "key_serializer",
    "value_serializer",
    "key_deserializer",
    "value_deserializer",
    "partitioner",
    "selector",
    "ssl_context",
    "kafka_client",
    "metric_reporters",
    "socket_options",
    "sasl_oauth_token_provider",
    "default_offset_commit_callback",
    "partition_assignment_strategy",
}


# a property the client cannot take; the message names it
ClientConfigError = CommandConfigError


def _typed(text: str, default: Any) -> Any:
    if isinstance(default, bool):
        return text.strip().lower() == "true"
    if isinstance(default, int):
        return int(text)
    if isinstance(default, float):
        return float(text)
    if text.lstrip("-").isdigit():  # defaults of None (e.g. transactional_id): numbers stay numbers
        return int(text)
    return text


def client_config(defaults: dict[str, Any], props: list[tuple[str, str]]) -> dict[str, Any]:
    """kafka-python keyword arguments for Java-named properties (later ones win), checked against `defaults`
    (the client class's DEFAULT_CONFIG). Kafka's security keys (security.protocol, sasl.jaas.config, ssl.*) are
    read as the other tools read them (strata.cli.command_config)."""
    out: dict[str, Any] = {}
    security = {k: v for k, v in props if k in SECURITY_KEYS}
    for key, value in props:
        if key in SECURITY_KEYS:
            continue
        name = _RENAMED.get(key, key.replace(".", "_").replace("-", "_"))
        if name not in defaults or name in _NOT_FROM_TEXT:
            raise ClientConfigError(f"unknown or unsupported client property {key!r}")
        if name == "acks":
            if value.strip() not in ("all", "-1", "0", "1"):
                raise ClientConfigError(f"property 'acks': {value!r} is not one of all, -1, 0, 1")
            out[name] = "all" if value.strip() in ("all", "-1") else int(value)
            continue
        try:
            out[name] = _typed(value, defaults[name])
        except ValueError:
            raise ClientConfigError(f"property {key!r}: {value!r} is not a number") from None
    if security:
        out.update(client_security(security).kafka_python_config())
    return out


def bootstrap_list(spec: str) -> list[str]:
    return [s.strip() for s in spec.split(",") if s.strip()]
