"""KIP-956 byte-rate quota (remote/quota.py), on a fake clock: the copier records a copy's bytes before it starts,
so copiers running at once cannot all pass one check and overshoot together."""

from __future__ import annotations

import asyncio

import pytest

from strata.remote import quota
from strata.remote.quota import RateQuota


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    real_sleep = asyncio.sleep

    async def sleep(delay: float) -> None:
        now[0] += delay
        await real_sleep(0)  # let the other copiers run, as a real sleep would

    monkeypatch.setattr(quota.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(quota.asyncio, "sleep", sleep)
    return now


def test_concurrent_acquires_are_paid_for_one_after_the_other(clock: list[float]) -> None:
    q = RateQuota(1000, window_num=11, window_size_s=1)
    starts: list[float] = []

    async def copier() -> None:
        await q.acquire(1000)
        starts.append(clock[0])
        await asyncio.sleep(0.001)  # the copy itself: other copiers get the loop meanwhile

    async def body() -> None:
        await asyncio.gather(*(copier() for _ in range(5)))

    asyncio.run(body())
    # 5000 bytes at 1000 B/s: the last copy may start only once about 4000 bytes are paid for
    assert starts[-1] - starts[0] >= 3.0, starts
    assert q.throttle_count >= 3


def test_within_quota_acquire_does_not_wait(clock: list[float]) -> None:
    q = RateQuota(10_000, window_num=11, window_size_s=1)
    assert asyncio.run(q.acquire(1000)) == 0.0
    assert q.throttle_count == 0
