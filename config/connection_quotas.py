"""Kafka's connection limits (SocketServerConfigs): `max.connections`, `max.connections.per.ip` and
`max.connections.per.ip.overrides`, parsed and checked once at startup.

As in Kafka's KafkaConfig, `max.connections.per.ip` may be 0 only when overrides are set, and an override naming an
address that does not resolve is a configuration error. Host names are resolved here, once, as Kafka resolves them
(InetAddress.getByName) when the setting is applied.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .defs import ConfigError

MAX_CONNECTIONS = "max.connections"
MAX_CONNECTIONS_PER_IP = "max.connections.per.ip"
MAX_CONNECTIONS_PER_IP_OVERRIDES = "max.connections.per.ip.overrides"


def _resolve(host: str) -> str:
    """The address `host` names, in the form a peer address has (`socket.getpeername()[0]`)."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        return str(socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0])
    except (OSError, UnicodeError):
        raise ConfigError(f"{MAX_CONNECTIONS_PER_IP_OVERRIDES} contains invalid addresses : {host}") from None


def parse_overrides(raw: str) -> dict[str, int]:
    """`host:count,host:count` (Kafka's map syntax; the count follows the last colon, so IPv6 addresses work)
    -> {address: count}."""
    out: dict[str, int] = {}
    for item in (s.strip() for s in raw.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host:
            raise ConfigError(f"Invalid value {raw!r} for configuration {MAX_CONNECTIONS_PER_IP_OVERRIDES}")
        try:
            n = int(count)
        except ValueError:
            raise ConfigError(
                f"Invalid value {raw!r} for configuration {MAX_CONNECTIONS_PER_IP_OVERRIDES}: {count!r} is not a number"
            ) from None
        if n < 0:
            raise ConfigError(f"Invalid value {raw!r} for configuration {MAX_CONNECTIONS_PER_IP_OVERRIDES}")
        out[_resolve(host.strip("[]"))] = n
    return out


@dataclass(frozen=True, slots=True)
class ConnectionQuotas:
    """What the acceptor enforces; the defaults are Kafka's."""

    max_connections: int = 2**31 - 1
    max_connections_per_ip: int = 2**31 - 1
    per_ip_overrides: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> ConnectionQuotas:
        overrides = parse_overrides(values.get(MAX_CONNECTIONS_PER_IP_OVERRIDES) or "")
        per_ip = values[MAX_CONNECTIONS_PER_IP]
        if per_ip == 0 and not overrides:
            raise ConfigError(
                f"{MAX_CONNECTIONS_PER_IP} can be set to zero only if"
                f" {MAX_CONNECTIONS_PER_IP_OVERRIDES} property is set."
            )
        return cls(values[MAX_CONNECTIONS], per_ip, overrides)

    def max_for(self, address: str) -> int:
        """The connection limit of one client address."""
        return self.per_ip_overrides.get(address, self.max_connections_per_ip)


__all__ = ["ConnectionQuotas", "parse_overrides"]
