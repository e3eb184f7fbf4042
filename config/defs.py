"""Config definitions: Kafka's property names, types and defaults, in one table.

A topic-level key (e.g. ``retention.ms``) takes its default from a broker-level synonym (``log.retention.ms``),
exactly as Kafka's LogConfig does, so one table describes both levels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


class ConfigType(Enum):
    # Values are Kafka's DescribeConfigs ConfigType codes (KIP-569).
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigError(ValueError):
    """A config key or value that Kafka would reject (InvalidConfigurationException)."""


def parse_bool(v: Any, empty: bool | None = None) -> bool:
    """The one boolean parser of Strata's configuration (broker, topic, RSM and Spark options): a bool, or
    true/false, 1/0, yes/no in any case. `empty`, when given, is the value of an empty string."""
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if empty is not None and s == "":
        return empty
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise ConfigError(f"expected a boolean, got {v!r}")


def _parse_int(v: Any) -> int:
    if isinstance(v, bool):
        raise ConfigError(f"expected a number, got {v!r}")
    try:
        return int(str(v).strip())
    except ValueError:
        raise ConfigError(f"expected a number, got {v!r}") from None


def _parse_float(v: Any) -> float:
    try:
        return float(str(v).strip())
    except ValueError:
        raise ConfigError(f"expected a decimal number, got {v!r}") from None


def _parse_list(v: Any) -> list[str]:
    if isinstance(v, (list, tuple)):
        return [str(x) for x in v]
    return [s.strip() for s in str(v).split(",") if s.strip()]


PARSERS: dict[ConfigType, Callable[[Any], Any]] = {
    ConfigType.BOOLEAN: parse_bool,
    ConfigType.STRING: lambda v: str(v).strip(),
    ConfigType.INT: _parse_int,
    ConfigType.SHORT: _parse_int,
    ConfigType.LONG: _parse_int,
    ConfigType.DOUBLE: _parse_float,
    ConfigType.LIST: _parse_list,
    ConfigType.CLASS: lambda v: str(v).strip(),
    ConfigType.PASSWORD: lambda v: str(v),
}


@dataclass(frozen=True)
class ConfigDef:
    name: str
    type: ConfigType
    default: Any
    doc: str = ""
    validator: Callable[[Any], None] | None = None
    choices: tuple[str, ...] | None = None

    def parse(self, raw: Any) -> Any:
        value = PARSERS[self.type](raw)
        if self.choices is not None:
            items = value if isinstance(value, list) else [value]
            for item in items:
                if item not in self.choices:
                    raise ConfigError(f"{self.name}: {item!r} is not one of {', '.join(self.choices)}")
        if self.validator is not None:
            self.validator(value)
        return value


def at_least(n: float) -> Callable[[Any], None]:
    def check(v: Any) -> None:
        if v < n:
            raise ConfigError(f"value {v} must be at least {n}")

    return check


def between(lo: float, hi: float) -> Callable[[Any], None]:
    def check(v: Any) -> None:
        if not lo <= v <= hi:
            raise ConfigError(f"value {v} must be between {lo} and {hi}")

    return check


def retention_value(v: Any) -> None:
    if v < -1:
        raise ConfigError(f"value {v} must be -1 (unlimited) or >= 0")


def local_retention_value(v: Any) -> None:
    if v < -2:
        raise ConfigError(f"value {v} must be -2 (same as total retention), -1 or >= 0")
