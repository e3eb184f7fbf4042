"""broker/loop_metrics.py: the same exposition as prometheus-client's Counter and Histogram for the same changes
(names, `_total`, cumulative buckets with Go-style `le`, `_count`, `_sum`, `_created`), the creation times aside."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from strata.broker.loop_metrics import LoopCounter, LoopHistogram

BUCKETS = (0.0005, 0.001, 0.0025, 1.0, 30.0)


def _exposition(counter: type, histogram: type) -> str:
    r = CollectorRegistry()
    c = counter("strata_test", "a counter", ["topic"], registry=r)
    h = histogram("strata_test_seconds", "a histogram", ["api"], buckets=BUCKETS, registry=r)
    for v in (0.0001, 0.0005, 0.0006, 0.9, 1.0, 31.0, 2.5):
        h.labels("Produce").observe(v)
    h.labels("Fetch").observe(0.002)
    c.labels("a").inc()
    c.labels("a").inc(5)
    c.labels("b").inc(2.5)
    return re.sub(r"_created(\{[^}]*\})? \S+", r"_created\1 T", generate_latest(r).decode())


def test_the_exposition_is_prometheus_clients() -> None:
    got = _exposition(LoopCounter, LoopHistogram)
    assert got == _exposition(Counter, Histogram)
    assert 'strata_test_seconds_bucket{api="Produce",le="0.0005"} 2.0' in got  # a bound holds values equal to it
    assert 'strata_test_total{topic="a"} 6.0' in got
