"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-546): which quota applies to a request, and how long to throttle.

Quotas are set per user, per client id, or per both, each with `<default>` entities, and resolved in Kafka's order
of precedence (most specific first):

    /users/<user>/clients/<client-id>      /users/<user>/clients/<default>      /users/<user>
    /users/<default>/clients/<client-id>   /users/<default>/clients/<default>   /users/<default>
    /clients/<client-id>                   /clients/<default>

Usage is measured per *quota entity* as Kafka's default callback tags its sensors: a user+client quota per (user,
client id), a user quota per user (all its clients share it), a client quota per client id. The rate is Kafka's
sampled `Rate`: `quota.window.num` samples of `quota.window.size.seconds`, divided by the time they span. A
request that takes the rate over the quota is answered at once with Kafka's
`throttle_time_ms = (rate - quota) / quota * window span`, and the connection is then muted for that time (KIP-219).

One deliberate difference: Kafka divides by at least `num - 1` windows, so a new client may send ten seconds' worth
at once, and its bursts then recur whenever they leave the window (a client alternates between twice the quota and
almost nothing every ~11 s; Kafka's own system test allows clients 100 % deviation). Strata divides by at least one
window: the same throttle formula and long-run rate, without the bursts (a producer stays within a few % of its
quota over any 20 s), and a consumer's fetch is capped to one window's worth rather than ten.

This module is pure (no I/O, no broker imports): the broker wires it in `strata.broker.quotas`; the AlterClientQuotas
and DescribeClientQuotas rules (entity and key validation, filters) live here too, as Kafka's
ClientQuotaControlManager and ClientQuotasImage.describe define them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE)
# Kafka's QuotaConfig types: the byte rates are LONGs (integral), the others DOUBLEs
_INTEGRAL_KEYS = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE})
SUPPORTED_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)  # enforced by Strata

USER, CLIENT_ID, IP = "user", "client-id", "ip"  # ClientQuotaEntity's entity types
DEFAULT = None  # the <default> entity of a type (DescribeClientQuotas / AlterClientQuotas: a null name)
DEFAULT_NAME = "<default>"  # how Kafka's tools print (and its ZooKeeper paths stored) a default entity
LONG_MAX = 2**63 - 1

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2  # DescribeClientQuotas' match types

FLOOR_WINDOWS = 1  # the rate divides by at least this many windows (Kafka: quota.window.num - 1)
INACTIVE_SENSOR_S = 3600.0  # Kafka purges a client's quota sensors after an hour without a request
_PURGE_EVERY_S = 60.0


class QuotaRequestError(ValueError):
    """A request Kafka refuses as a whole or per entity: its error code and message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


INVALID_REQUEST = 42
UNSUPPORTED_VERSION = 35


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """A configured entity: user and client id, each absent (""), a name, or DEFAULT (None)."""

    user: str | None = ""
    client_id: str | None = ""

    def components(self) -> list[tuple[str, str | None]]:
        """(entity type, name or None for the default) of each present part, user first: the wire form."""
        out: list[tuple[str, str | None]] = []
        if self.user != "":
            out.append((USER, self.user))
        if self.client_id != "":
            out.append((CLIENT_ID, self.client_id))
        return out

    def describe(self) -> str:
        return ", ".join(f"{t}={DEFAULT_NAME if n is None else n}" for t, n in self.components())

    def kafka_str(self) -> str:
        """As Kafka's ClientQuotaEntity.toString, for its error messages."""
        return "ClientQuotaEntity(entries={" + ", ".join(f"{t}={n}" for t, n in self.components()) + "})"

    # ---- a key of the metadata store: `users/<user>[/clients/<client>]` or `clients/<client>` (Kafka's ZooKeeper
    # layout), each name percent-encoded as Kafka's Sanitizer does so that a user literally named "<default>" or
    # holding a "/" stays distinct
    def store_key(self) -> str:
        parts = []
        if self.user != "":
            parts.append("users/" + _sanitize(self.user))
        if self.client_id != "":
            parts.append("clients/" + _sanitize(self.client_id))
        return "/".join(parts)

    @classmethod
    def from_store_key(cls, key: str) -> QuotaEntity:
        items = key.split("/")
        if len(items) not in (2, 4) or any(t not in ("users", "clients") for t in items[::2]):
            raise ValueError(f"not a client quota key: {key!r}")
        found = dict(zip(items[::2], items[1::2], strict=True))
        user = _desanitize(found["users"]) if "users" in found else ""
        client = _desanitize(found["clients"]) if "clients" in found else ""
        return cls(user, client)


def _sanitize(name: str | None) -> str:
    return DEFAULT_NAME if name is None else quote(name, safe="")


def _desanitize(part: str) -> str | None:
    return None if part == DEFAULT_NAME else unquote(part)


QuotaConfigs = Mapping[QuotaEntity, Mapping[str, float]]
QuotaChanges = Mapping[QuotaEntity, Mapping[str, float | None]]  # per entity: key -> new value, None removes it


def altered(current: Mapping[str, float], ops: Mapping[str, float | None]) -> dict[str, float]:
    """An entity's values after AlterClientQuotas' ops ({} once its last value is removed)."""
    new = dict(current)
    for key, value in ops.items():
        if value is None:
            new.pop(key, None)
        else:
            new[key] = float(value)
    return new


# ---- AlterClientQuotas / DescribeClientQuotas rules (Kafka's ClientQuotaControlManager, ClientQuotasImage) --------


def entity_from_wire(components: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """The entity an AlterClientQuotas entry names; QuotaRequestError as Kafka validates it. As Kafka reads the list
    into a map, a type named twice keeps its last name."""
    named: dict[str, str | None] = {}
    for etype, name in components:
        named[etype] = name
    if not named:
        raise QuotaRequestError(INVALID_REQUEST, "Invalid empty client quota entity")
    for etype, name in named.items():
        if etype not in (USER, CLIENT_ID, IP):
            raise QuotaRequestError(INVALID_REQUEST, f"Unhandled client quota entity type: {etype}")
        if name is not None and name == "":
            raise QuotaRequestError(INVALID_REQUEST, f"Empty {etype} not supported")
    if IP in named:
        if len(named) > 1:
            # Kafka's message, missing space included
            raise QuotaRequestError(
                INVALID_REQUEST,
                "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId",
            )
        raise QuotaRequestError(INVALID_REQUEST, "IP quotas (connection_creation_rate) are not supported by Strata")
    return QuotaEntity(named.get(USER, ""), named.get(CLIENT_ID, ""))


def check_quota_value(key: str, value: float) -> None:
    """Kafka's validateQuotaKeyValue for a user/client-id entity (QuotaRequestError)."""
    if key not in QUOTA_KEYS:
        raise QuotaRequestError(INVALID_REQUEST, f"Invalid configuration key {key}")
    if key not in SUPPORTED_KEYS:
        raise QuotaRequestError(INVALID_REQUEST, f"{key} is not supported by Strata (no controller mutation quota)")
    if not value > 0.0:  # NaN too
        raise QuotaRequestError(INVALID_REQUEST, f"Quota {key} must be greater than 0")
    if key in _INTEGRAL_KEYS:
        if value > LONG_MAX:
            raise QuotaRequestError(INVALID_REQUEST, f"Proposed value for {key} is too large for a LONG.")
        if abs(math.fmod(value, 1.0)) > 1e-6:
            raise QuotaRequestError(INVALID_REQUEST, f"{key} cannot be a fractional value.")
    elif math.isinf(value):
        raise QuotaRequestError(INVALID_REQUEST, f"Quota {key} must be finite")


@dataclass(frozen=True, slots=True)
class QuotaFilter:
    """A DescribeClientQuotas filter: exact names (None: the default) and types that must be present."""

    exact: Mapping[str, str | None]
    specified: frozenset[str]
    strict: bool

    def matches(self, entity: QuotaEntity) -> bool:
        parts = dict(entity.components())
        if self.strict and len(parts) != len(self.exact) + len(self.specified):
            return False
        for etype, name in self.exact.items():
            if etype not in parts or parts[etype] != name:
                return False
        return all(etype in parts for etype in self.specified)


def parse_filter(components: Iterable[tuple[str, int, str | None]], strict: bool) -> QuotaFilter:
    """Kafka's ClientQuotasImage.describe checks, in its order (QuotaRequestError)."""
    exact: dict[str, str | None] = {}
    specified: set[str] = set()
    for etype, match_type, match in components:
        if not etype:
            raise QuotaRequestError(INVALID_REQUEST, "Invalid empty entity type.")
        if etype in exact or etype in specified:
            raise QuotaRequestError(INVALID_REQUEST, f"Entity type {etype} cannot appear more than once in the filter.")
        if etype not in (IP, USER, CLIENT_ID):
            raise QuotaRequestError(UNSUPPORTED_VERSION, f"Unsupported entity type {etype}")
        if match_type == MATCH_EXACT:
            if match is None:
                raise QuotaRequestError(
                    INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but set match string to null."
                )
            exact[etype] = match
        elif match_type == MATCH_DEFAULT:
            if match is not None:
                raise QuotaRequestError(
                    INVALID_REQUEST, "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                )
            exact[etype] = None
        elif match_type == MATCH_SPECIFIED:
            if match is not None:
                raise QuotaRequestError(
                    INVALID_REQUEST, "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                )
            specified.add(etype)
        else:
            raise QuotaRequestError(INVALID_REQUEST, f"Unknown match type {match_type}")
    if (IP in exact or IP in specified) and ({USER, CLIENT_ID} & (set(exact) | specified)):
        raise QuotaRequestError(
            INVALID_REQUEST,
            "Invalid entity filter component combination. IP filter component should not be used with user or "
            "clientId filter component.",
        )
    return QuotaFilter(exact, frozenset(specified), strict)


# ---- measurement and throttling ----------------------------------------------------------------------------------


class SampledRate:
    """Kafka's `Rate` over a `WindowedSum`: `samples` windows of `window_s` (plus one overlapping placeholder);
    a window is dropped once nothing was recorded in it for `samples` windows; the span divides by at least
    `floor_windows` whole windows (Kafka: `samples - 1`; Strata's quotas: 1, see the module's docstring)."""

    __slots__ = ("_cur", "_s", "floor_windows", "samples", "window_s")

    def __init__(self, samples: int, window_s: float, floor_windows: int | None = None) -> None:
        self.samples, self.window_s = samples, window_s
        self.floor_windows = samples - 1 if floor_windows is None else floor_windows
        self._s: list[list[float]] = []  # [start, last event, sum]
        self._cur = 0

    def record(self, value: float, now: float) -> None:
        if not self._s:
            self._s.append([now, now, 0.0])
        s = self._s[self._cur]
        if now - s[0] >= self.window_s:
            self._cur = (self._cur + 1) % (self.samples + 1)
            if self._cur >= len(self._s):
                s = [now, now, 0.0]
                self._s.append(s)
            else:
                s = self._s[self._cur]
                s[0], s[2] = now, 0.0
        s[2] += value
        s[1] = now

    def _purge(self, now: float) -> None:
        expire = self.samples * self.window_s
        for s in self._s:
            if now - s[1] >= expire:
                s[0], s[1], s[2] = now, now, 0.0

    def window_span(self, now: float) -> float:
        """Seconds the rate divides by (Kafka's Rate.windowSize)."""
        self._purge(now)
        oldest = min((s[0] for s in self._s), default=now)
        elapsed = now - oldest
        full = int(elapsed // self.window_s)
        if full < self.floor_windows:
            elapsed += (self.floor_windows - full) * self.window_s
        return max(elapsed, 0.001)

    def measure(self, now: float) -> float:
        span = self.window_span(now)
        return sum(s[2] for s in self._s) / span


class ClientQuotaManager:
    """One quota type (e.g. producer_byte_rate) for every client: Kafka's ClientQuotaManager with its default
    callback. `max_throttle_ms` bounds the throttle time (Kafka bounds the request quota's to one window)."""

    def __init__(
        self,
        quota_key: str,
        window_num: int = 11,
        window_size_s: float = 1.0,
        max_throttle_ms: int | None = None,
    ) -> None:
        self.quota_key = quota_key
        self.window_num, self.window_size_s = window_num, window_size_s
        self.max_throttle_ms = max_throttle_ms
        self._configs: dict[QuotaEntity, float] = {}
        self._sensors: dict[tuple[str, str], tuple[SampledRate, list[float]]] = {}  # key -> (rate, [last used])
        self._next_purge = 0.0

    @property
    def enabled(self) -> bool:
        """Whether any entity has a quota of this type (nothing is measured otherwise)."""
        return bool(self._configs)

    def update_configs(self, configs: QuotaConfigs) -> None:
        """Install every entity's value of this manager's quota type (from the metadata store). Clients keep their
        measured usage: a changed limit applies to the rate measured so far, as Kafka updates the metric's bound."""
        self._configs = {e: float(v[self.quota_key]) for e, v in configs.items() if self.quota_key in v}

    def quota(self, user: str, client_id: str) -> tuple[float, tuple[str, str]] | None:
        """(limit, sensor key) of the entity that applies, or None (unlimited)."""
        if not self._configs:
            return None
        get = self._configs.get
        both = (user, client_id)
        for entity, key in (
            (QuotaEntity(user, client_id), both),
            (QuotaEntity(user, DEFAULT), both),
            (QuotaEntity(user, ""), (user, "")),
            (QuotaEntity(DEFAULT, client_id), both),
            (QuotaEntity(DEFAULT, DEFAULT), both),
            (QuotaEntity(DEFAULT, ""), (user, "")),
            (QuotaEntity("", client_id), ("", client_id)),
            (QuotaEntity("", DEFAULT), ("", client_id)),
        ):
            limit = get(entity)
            if limit is not None:
                return limit, key
        return None

    def _sensor(self, key: tuple[str, str], now: float) -> SampledRate:
        if now >= self._next_purge:
            self._next_purge = now + _PURGE_EVERY_S
            idle = [k for k, (_, used) in self._sensors.items() if now - used[0] > INACTIVE_SENSOR_S]
            for k in idle:
                del self._sensors[k]
        entry = self._sensors.get(key)
        if entry is None:
            entry = self._sensors[key] = (SampledRate(self.window_num, self.window_size_s, FLOOR_WINDOWS), [now])
        else:
            entry[1][0] = now
        return entry[0]

    def record_and_throttle_ms(self, user: str, client_id: str, value: float, now: float | None = None) -> int:
        """Record `value` (bytes, or request time in %-seconds) against the applicable quota; the throttle time in
        ms (0 within quota or without one)."""
        found = self.quota(user, client_id)
        if found is None:
            return 0
        limit, key = found
        now = time.monotonic() if now is None else now
        rate = self._sensor(key, now)
        rate.record(value, now)
        return self._throttle_ms(limit, rate, now)

    def throttle_ms(self, user: str, client_id: str, now: float | None = None) -> int:
        """The throttle time the client is under now, recording nothing."""
        found = self.quota(user, client_id)
        entry = self._sensors.get(found[1]) if found is not None else None
        if found is None or entry is None:
            return 0
        return self._throttle_ms(found[0], entry[0], time.monotonic() if now is None else now)

    def _throttle_ms(self, limit: float, rate: SampledRate, now: float) -> int:
        measured = rate.measure(now)
        if measured <= limit:
            return 0
        ms = round((measured - limit) / limit * rate.window_span(now) * 1000)
        return ms if self.max_throttle_ms is None else min(ms, self.max_throttle_ms)

    def unrecord(self, user: str, client_id: str, value: float, now: float | None = None) -> None:
        """Take back a recorded value (a throttled Fetch answers no records, so its bytes do not count)."""
        found = self.quota(user, client_id)
        if found is not None:
            now = time.monotonic() if now is None else now
            self._sensor(found[1], now).record(-value, now)

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """What an idle client can record at once without being throttled (Kafka caps a consumer's fetch size to
        it): the quota over the shortest span the rate divides by."""
        found = self.quota(user, client_id)
        return None if found is None else found[0] * FLOOR_WINDOWS * self.window_size_s


__all__ = [
    "CLIENT_ID",
    "CONSUMER_BYTE_RATE",
    "CONTROLLER_MUTATION_RATE",
    "DEFAULT",
    "DEFAULT_NAME",
    "IP",
    "MATCH_DEFAULT",
    "MATCH_EXACT",
    "MATCH_SPECIFIED",
    "PRODUCER_BYTE_RATE",
    "QUOTA_KEYS",
    "REQUEST_PERCENTAGE",
    "SUPPORTED_KEYS",
    "USER",
    "ClientQuotaManager",
    "QuotaChanges",
    "QuotaConfigs",
    "QuotaEntity",
    "QuotaFilter",
    "QuotaRequestError",
    "SampledRate",
    "altered",
    "check_quota_value",
    "entity_from_wire",
    "parse_filter",
]
