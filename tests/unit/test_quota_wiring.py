"""The wiring of client quotas around requests: the loop time a request quota measures (a handler's own steps, not
its waits), and which response versions throttle on the client side (KIP-219)."""

from __future__ import annotations

import asyncio
import time

import pytest

from strata.broker.quotas import LoopTimed, client_throttles
from strata.protocol.registry import ApiKey


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def _handler() -> str:
    _busy(0.02)
    await asyncio.sleep(0.3)  # a long poll: waiting is not request time
    _busy(0.02)
    await asyncio.to_thread(time.sleep, 0.1)  # work in a worker thread is not the loop's either
    return "answer"


def test_loop_time_counts_the_handlers_steps_not_its_waits() -> None:
    async def main() -> tuple[str, int]:
        timed = LoopTimed(_handler())
        return await timed, timed.ns

    answer, ns = asyncio.run(main())
    assert answer == "answer"
    assert 0.04 <= ns / 1e9 < 0.3  # both busy parts, none of the 0.4 s of waiting


def test_errors_and_cancellation_reach_the_handler() -> None:
    seen: list[str] = []

    async def failing() -> None:
        await asyncio.sleep(0)
        raise ValueError("bad request")

    async def parked() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async def main() -> None:
        with pytest.raises(ValueError, match="bad request"):
            await LoopTimed(failing())
        task = asyncio.ensure_future(LoopTimed(parked()))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert seen == ["cancelled"]


def test_kip_219_versions() -> None:
    assert client_throttles(ApiKey.PRODUCE, 6) and not client_throttles(ApiKey.PRODUCE, 5)
    assert client_throttles(ApiKey.FETCH, 8) and not client_throttles(ApiKey.FETCH, 7)
    assert not client_throttles(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1)  # Kafka's default: the broker holds it back
    assert client_throttles(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0)
