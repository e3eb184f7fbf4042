"""Pauses of the interpreter's garbage collector, as a Prometheus histogram (`strata_gc_pause_seconds{generation}`).

A collection runs in whichever thread allocated last and holds the GIL throughout, so a full (generation 2) one stops
the event loop and every request with it: the broker's counterpart of the JVM's GarbageCollector CollectionTime. The
callback only bumps plain counters (no locks: it may run inside any code, including the metrics thread's own), and
the collector turns them into a histogram at scrape time.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
GENERATIONS = 3


class GcPauses:
    def __init__(self) -> None:
        self._counts = [[0] * (len(BUCKETS) + 1) for _ in range(GENERATIONS)]
        self._sums = [0.0] * GENERATIONS
        self._started = 0.0
        self._installed = False

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        pause = time.perf_counter() - self._started
        gen = info.get("generation", 0)
        self._counts[gen][bisect.bisect_left(BUCKETS, pause)] += 1
        self._sums[gen] += pause

    def install(self, registry: CollectorRegistry) -> None:
        if not self._installed:
            gc.callbacks.append(self._callback)
            registry.register(self)
            self._installed = True

    def uninstall(self) -> None:
        if self._installed:
            gc.callbacks.remove(self._callback)
            self._installed = False

    def collect(self) -> Iterator[HistogramMetricFamily]:
        fam = HistogramMetricFamily(
            "strata_gc_pause_seconds", "Garbage collector pauses (the event loop stops)", labels=["generation"]
        )
        for gen in range(GENERATIONS):
            counts = list(self._counts[gen])
            cumulative, buckets = 0, []
            for bound, n in zip((*BUCKETS, float("inf")), counts):
                cumulative += n
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
            fam.add_metric([str(gen)], buckets, self._sums[gen])
        yield fam


def freeze_startup_objects() -> None:
    """Move everything alive after start-up (modules, configs, botocore's models, the loaded logs' objects) to the
    permanent generation, so full collections stop scanning it: they get shorter, and happen as often. The price:
    a reference cycle among those objects that later becomes garbage is never collected (reference counting still
    frees the rest), which bounds what can leak by what start-up built."""
    gc.collect()
    gc.freeze()


def freeze_new_objects() -> None:
    """After a bulk creation (thousands of partitions): move the objects alive now to the permanent generation
    without a full collection first (that collection is the pause being avoided). Full collections otherwise scan
    every partition's objects again and again: 2-8 s event loop stalls with 20,000 partitions. What is garbage in a
    reference cycle at this moment is kept (reference counting frees everything else)."""
    gc.freeze()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Bulk loading (the logs at startup): what exists now goes to the permanent generation and the cyclic collector
    is off until the block ends (loading makes objects, not cyclic garbage); `freeze_startup_objects` follows."""
    gc.freeze()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
