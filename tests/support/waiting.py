"""Bounded waiting on a condition: the only synchronisation primitive the integration tests use."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """The condition did not hold within the timeout (an AssertionError so pytest reports it as a failure)."""


def wait_until(
    cond: Callable[[], T], timeout: float = 10.0, interval: float = 0.05, message: str | Callable[[], str] = ""
) -> T:
    """Poll ``cond()`` until it returns a truthy value and return that value.

    Exceptions raised by ``cond`` count as "not yet"; the last one is chained to the timeout error so a failing
    probe is visible. Raises :class:`WaitTimeout` after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    last_value: object = None
    while True:
        try:
            last_value = cond()
            if last_value:
                return last_value
            last_exc = None
        except Exception as exc:  # noqa: BLE001 - any probe failure means "not ready yet"
            last_exc = exc
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            detail = f"last value {last_value!r}" if last_exc is None else f"last error {last_exc!r}"
            raise WaitTimeout(f"condition not met within {timeout:.1f}s: {text} ({detail})") from last_exc
        time.sleep(interval)


async def wait_until_async(cond: Callable[[], T], timeout: float = 10.0, interval: float = 0.01) -> T:
    """`wait_until` inside an event loop: polls without blocking the loop the awaited work runs on."""
    import asyncio

    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"condition not met within {timeout:.1f}s (last value {value!r})")
        await asyncio.sleep(interval)
