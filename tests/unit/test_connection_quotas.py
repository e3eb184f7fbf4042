"""Kafka's connection-limit settings as BrokerConfig parses and checks them (config/connection_quotas.py)."""

from __future__ import annotations

import pytest

from strata.config import BrokerConfig, ConfigError
from strata.config.connection_quotas import parse_overrides


def test_defaults_are_kafkas() -> None:
    cfg = BrokerConfig.from_dict({})
    q = cfg.connection_quotas
    assert (q.max_connections, q.max_connections_per_ip, cfg["queued.max.requests"]) == (2**31 - 1, 2**31 - 1, 500)
    assert q.max_for("10.0.0.1") == 2**31 - 1


def test_overrides_by_address_and_host_name() -> None:
    assert parse_overrides("127.0.0.1:200, [::1]:5,") == {"127.0.0.1": 200, "::1": 5}
    [(resolved, n)] = parse_overrides("localhost:100").items()
    assert resolved in ("127.0.0.1", "::1") and n == 100
    q = BrokerConfig.from_dict(
        {"max.connections.per.ip": "10", "max.connections.per.ip.overrides": "192.168.0.7:0"}
    ).connection_quotas
    assert q.max_for("192.168.0.7") == 0 and q.max_for("192.168.0.8") == 10


@pytest.mark.parametrize(
    "props, message",
    [
        ({"max.connections.per.ip": "0"}, "can be set to zero only if max.connections.per.ip.overrides"),
        ({"max.connections.per.ip.overrides": "no-such-host.invalid:3"}, "contains invalid addresses"),
        ({"max.connections.per.ip.overrides": "127.0.0.1"}, "max.connections.per.ip.overrides"),
        ({"max.connections.per.ip.overrides": "127.0.0.1:x"}, "is not a number"),
        ({"max.connections.per.ip.overrides": "127.0.0.1:-1"}, "max.connections.per.ip.overrides"),
        ({"max.connections": "-1"}, "max.connections"),
        ({"queued.max.requests": "0"}, "queued.max.requests"),
    ],
)
def test_bad_values_fail_at_load(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_dict(props)
