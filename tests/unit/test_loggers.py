"""Per-logger levels (the BROKER_LOGGER config resource): the nearest level set wins, root covers the rest, and the
structlog processor drops what is below a logger's level."""

from __future__ import annotations

import io

import pytest
import structlog

from strata.broker.loggers import LoggerLevels, NamedPrintLoggerFactory, kafka_level


def test_nearest_level_wins_and_root_covers_the_rest():
    lv = LoggerLevels("WARNING")
    assert lv.root_level == "WARN" and kafka_level("critical") == "FATAL"
    lv.saw("strata.remote.rlmm")
    lv.set_level("strata.remote", "DEBUG")
    assert lv.effective("strata.remote.rlmm") == "DEBUG" and lv.effective("strata.server") == "WARN"
    assert lv.enabled("strata.remote.rlmm", "debug") and not lv.enabled("strata.server", "info")
    lv.set_level("root", "ERROR")
    assert lv.loggers() == {"root": "ERROR", "strata.remote": "DEBUG", "strata.remote.rlmm": "DEBUG"}
    lv.unset_level("strata.remote")
    assert lv.effective("strata.remote.rlmm") == "ERROR"
    assert LoggerLevels.exists("strata.anything") and LoggerLevels.exists("root") and not LoggerLevels.exists("kafka")


def test_processor_drops_events_below_the_loggers_level(monkeypatch: pytest.MonkeyPatch):
    from strata.broker import loggers

    table = LoggerLevels("INFO")
    monkeypatch.setattr(loggers, "LEVELS", table)
    out = io.StringIO()
    factory = NamedPrintLoggerFactory(out)
    log = structlog.wrap_logger(
        factory("strata.topics"),
        processors=[loggers.filter_by_level, structlog.processors.KeyValueRenderer(key_order=["event"])],
        wrapper_class=structlog.make_filtering_bound_logger(loggers.MIN_LEVEL),
    )
    log.debug("hidden")
    log.info("shown")
    table.set_level("strata.topics", "ERROR")
    log.warning("hidden too")
    log.error("shown too")
    assert out.getvalue().splitlines() == ["event='shown'", "event='shown too'"]
    assert "strata.topics" in table.loggers()
