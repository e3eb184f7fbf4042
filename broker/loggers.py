"""Log levels of named loggers at runtime: Kafka's BROKER_LOGGER config resource (``kafka-configs
--entity-type broker-loggers``, Log4jController).

Every structlog logger of the broker is named (``structlog.get_logger("strata.remote")``); a level set for a name
applies to it and to the names below it (``strata.remote`` covers ``strata.remote.rlmm``), the nearest one wins,
and ``root`` (``log.level`` at start) covers the rest. As in Kafka, the levels live in this process only: a restart
goes back to ``log.level``.
"""

from __future__ import annotations

import logging
from typing import Any, TextIO

import structlog

ROOT_LOGGER = "root"
# Kafka's LogLevelConfig.VALID_LOG_LEVELS, most severe first, and the stdlib level each one filters at
VALID_LOG_LEVELS = ("FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE")
_NUMERIC = {"FATAL": 50, "ERROR": 40, "WARN": 30, "INFO": 20, "DEBUG": 10, "TRACE": 5}
_FROM_PYTHON = {"CRITICAL": "FATAL", "WARNING": "WARN"}
_METHOD_LEVEL = {
    "critical": 50,
    "exception": 40,
    "error": 40,
    "warning": 30,
    "warn": 30,
    "info": 20,
    "debug": 10,
}
_OWN_PREFIX = "strata"  # every logger of the broker is named strata.*; Log4j creates loggers on first use too


def kafka_level(level: str) -> str:
    """A log.level value (Python's names) in Kafka's spelling."""
    name = level.upper()
    return _FROM_PYTHON.get(name, name)


class LoggerLevels:
    """The level table: explicit levels by logger name, the root level, and the loggers seen so far."""

    def __init__(self, root_level: str = "INFO") -> None:
        self.root_level = kafka_level(root_level)
        self._levels: dict[str, str] = {}
        self._seen: set[str] = set()

    def reset(self, root_level: str) -> None:
        self.root_level = kafka_level(root_level)
        self._levels.clear()

    def saw(self, name: str) -> None:
        self._seen.add(name)

    @staticmethod
    def exists(name: str) -> bool:
        return name in (ROOT_LOGGER, _OWN_PREFIX) or name.startswith(_OWN_PREFIX + ".")

    def effective(self, name: str) -> str:
        n = name
        while n:
            level = self._levels.get(n)
            if level is not None:
                return level
            n = n.rpartition(".")[0]
        return self.root_level

    def loggers(self) -> dict[str, str]:
        """Every known logger with its effective level, root first (what DescribeConfigs lists)."""
        names = sorted(self._seen | set(self._levels))
        return {ROOT_LOGGER: self.root_level, **{n: self.effective(n) for n in names}}

    def set_level(self, name: str, level: str) -> None:
        if name == ROOT_LOGGER:
            self.root_level = level
        else:
            self._levels[name] = level

    def unset_level(self, name: str) -> None:
        self._levels.pop(name, None)

    def enabled(self, name: str, method: str) -> bool:
        return _METHOD_LEVEL.get(method, 20) >= _NUMERIC.get(self.effective(name), 20)


LEVELS = LoggerLevels()  # the process's table (one broker per process)


def filter_by_level(logger: Any, method_name: str, event_dict: Any) -> Any:
    """structlog processor: drop an event below its logger's effective level."""
    if not LEVELS.enabled(getattr(logger, "name", ""), method_name):
        raise structlog.DropEvent
    return event_dict


class _NamedPrintLogger(structlog.PrintLogger):
    def __init__(self, file: TextIO, name: str) -> None:
        super().__init__(file)
        self.name = name


class NamedPrintLoggerFactory:
    """structlog's PrintLoggerFactory, keeping the name given to get_logger for filter_by_level."""

    def __init__(self, file: TextIO) -> None:
        self.file = file

    def __call__(self, *args: Any) -> _NamedPrintLogger:
        name = str(args[0]) if args else ""
        if name:
            LEVELS.saw(name)
        return _NamedPrintLogger(self.file, name)


MIN_LEVEL = logging.DEBUG  # the wrapper's own filter: filter_by_level does the rest


__all__ = [
    "LEVELS",
    "MIN_LEVEL",
    "ROOT_LOGGER",
    "VALID_LOG_LEVELS",
    "LoggerLevels",
    "NamedPrintLoggerFactory",
    "filter_by_level",
    "kafka_level",
]
