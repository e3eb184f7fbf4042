"""Byte-rate quotas for remote copy and remote fetch (KIP-956).

Kafka measures the rate over `*.quota.window.num` windows of `*.quota.window.size.seconds` and makes the copier or
reader wait while the measured rate is above the limit. A sliding-window measurement with a wait computed from the
excess gives the same behaviour without a thread per quota.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

UNLIMITED = 2**63 - 1


class RateQuota:
    def __init__(self, bytes_per_second: int, window_num: int = 11, window_size_s: float = 1.0) -> None:
        self.limit = bytes_per_second
        self.window_s = window_num * window_size_s
        self._samples: deque[tuple[float, int]] = deque()
        self._total = 0
        self.throttle_time_ms_total = 0.0
        self.throttle_count = 0
        self.throttle_time_ms_max = 0.0

    @property
    def enabled(self) -> bool:
        return 0 < self.limit < UNLIMITED

    def _trim(self, now: float) -> None:
        while self._samples and now - self._samples[0][0] > self.window_s:
            self._total -= self._samples.popleft()[1]

    def record(self, nbytes: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        self._samples.append((now, nbytes))
        self._total += nbytes
        self._trim(now)

    def throttle_delay_s(self) -> float:
        """How long to wait until the measured rate is back at the limit (0 when within quota)."""
        if not self.enabled:
            return 0.0
        now = time.monotonic()
        self._trim(now)
        if not self._samples:
            return 0.0
        elapsed = max(now - self._samples[0][0], 1.0)
        rate = self._total / elapsed
        if rate <= self.limit:
            return 0.0
        return min(self._total / self.limit - elapsed, self.window_s)

    async def wait(self) -> float:
        """Sleep while over quota (this is the throttle itself, not synchronisation); returns ms waited."""
        delay = self.throttle_delay_s()
        if delay > 0:
            await asyncio.sleep(delay)
            ms = delay * 1000
            self.throttle_time_ms_total += ms
            self.throttle_count += 1
            self.throttle_time_ms_max = max(self.throttle_time_ms_max, ms)
            return ms
        return 0.0

    async def acquire(self, nbytes: int) -> float:
        """Wait until within quota, then record `nbytes` before the work starts (Kafka's copy quota does so under a
        lock): concurrent users cannot all pass one check and overshoot together. Returns ms waited."""
        waited = 0.0
        while (ms := await self.wait()) > 0:
            waited += ms
        self.record(nbytes)  # no await since the last check: atomic on the event loop
        return waited
