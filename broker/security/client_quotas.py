"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-546): which quota applies to a request, and how long to throttle.

Quotas are set per user, per client id, or per both, each with `<default>` entities, and resolved in Kafka's order
of precedence (most specific first):

    /users/<user>/clients/<client-id>      /users/<user>/clients/<default>      /users/<user>
    /users/<default>/clients/<client-id>   /users/<default>/clients/<default>   /users/<default>
    /clients/<client-id>                   /clients/<default>

Usage is measured per *quota entity* as Kafka's default callback tags its sensors: a user+client quota per (user,
client id), a user quota per user (all its clients share it), a client quota per client id. The rate is measured
over `quota.window.num` windows of `quota.window.size.seconds`; a request over quota is answered at once with
`throttle_time_ms = (rate - quota) / quota * window`, and the connection is then muted for that time (KIP-219).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from strata.remote.quota import RateQuota

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE)

DEFAULT = None  # the <default> entity of a type (DescribeClientQuotas / AlterClientQuotas: a null name)


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """A configured entity: user and client id, each absent (""), a name, or DEFAULT (None)."""

    user: str | None = ""
    client_id: str | None = ""

    def describe(self) -> str:
        parts = []
        if self.user != "":
            parts.append(f"user={'<default>' if self.user is None else self.user}")
        if self.client_id != "":
            parts.append(f"client-id={'<default>' if self.client_id is None else self.client_id}")
        return ", ".join(parts)


def _candidates(user: str, client_id: str) -> list[tuple[QuotaEntity, tuple[str, str]]]:
    """Configured entities in precedence order, each with the sensor key (user tag, client-id tag) it implies."""
    both = (user, client_id)
    return [
        (QuotaEntity(user, client_id), both),
        (QuotaEntity(user, DEFAULT), both),
        (QuotaEntity(user, ""), (user, "")),
        (QuotaEntity(DEFAULT, client_id), both),
        (QuotaEntity(DEFAULT, DEFAULT), both),
        (QuotaEntity(DEFAULT, ""), (user, "")),
        (QuotaEntity("", client_id), ("", client_id)),
        (QuotaEntity("", DEFAULT), ("", client_id)),
    ]


class ClientQuotaManager:
    """One quota type (e.g. producer_byte_rate) for every client."""

    def __init__(self, quota_key: str, window_num: int = 11, window_size_s: float = 1.0) -> None:
        self.quota_key = quota_key
        self.window_num, self.window_size_s = window_num, window_size_s
        self._configs: dict[QuotaEntity, float] = {}
        self._sensors: dict[tuple[str, str], tuple[float, RateQuota]] = {}

    def update_configs(self, configs: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        """Install every entity's values of this manager's quota type (from the metadata store's watch)."""
        self._configs = {e: float(v[self.quota_key]) for e, v in configs.items() if self.quota_key in v}
        self._sensors.clear()  # limits changed: start measuring afresh under the new entities

    def quota(self, user: str, client_id: str) -> tuple[float, tuple[str, str]] | None:
        """(limit, sensor key) of the entity that applies, or None (unlimited)."""
        for entity, key in _candidates(user, client_id):
            limit = self._configs.get(entity)
            if limit is not None:
                return limit, key
        return None

    def record_and_throttle_ms(self, user: str, client_id: str, value: float) -> int:
        """Record `value` (bytes, or request time %) against the applicable quota; the throttle time in ms."""
        found = self.quota(user, client_id)
        if found is None:
            return 0
        limit, key = found
        entry = self._sensors.get(key)
        if entry is None or entry[0] != limit:
            entry = (limit, RateQuota(max(int(limit), 1), self.window_num, self.window_size_s))
            self._sensors[key] = entry
        rate = entry[1]
        rate.record(int(value))
        return int(rate.throttle_delay_s() * 1000)


__all__ = [
    "CONSUMER_BYTE_RATE",
    "CONTROLLER_MUTATION_RATE",
    "DEFAULT",
    "PRODUCER_BYTE_RATE",
    "QUOTA_KEYS",
    "REQUEST_PERCENTAGE",
    "ClientQuotaManager",
    "QuotaEntity",
]
