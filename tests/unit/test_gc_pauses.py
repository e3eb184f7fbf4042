"""GcPauses: every collection of the interpreter lands in the histogram of its generation, until uninstalled."""

from __future__ import annotations

import gc

from prometheus_client import CollectorRegistry

from strata.broker.gc_pauses import BUCKETS, GcPauses


def _samples(registry: CollectorRegistry) -> dict[tuple[str, str, str], float]:
    return {
        (s.name, s.labels.get("generation", ""), s.labels.get("le", "")): s.value
        for fam in registry.collect()
        for s in fam.samples
    }


def test_collections_are_counted_per_generation_until_uninstalled() -> None:
    reg = CollectorRegistry()
    pauses = GcPauses()
    pauses.install(reg)
    try:
        gc.collect(2)
        gc.collect(2)
        s = _samples(reg)
        assert s[("strata_gc_pause_seconds_count", "2", "")] >= 2
        assert s[("strata_gc_pause_seconds_bucket", "2", "+Inf")] == s[("strata_gc_pause_seconds_count", "2", "")]
        assert s[("strata_gc_pause_seconds_sum", "2", "")] > 0
        bounds = [s[("strata_gc_pause_seconds_bucket", "2", repr(b))] for b in BUCKETS]
        assert bounds == sorted(bounds)  # cumulative
    finally:
        pauses.uninstall()
    before = _samples(reg)[("strata_gc_pause_seconds_count", "2", "")]
    gc.collect(2)
    assert _samples(reg)[("strata_gc_pause_seconds_count", "2", "")] == before
    assert pauses._callback not in gc.callbacks
