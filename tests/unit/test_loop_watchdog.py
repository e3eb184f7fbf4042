"""LoopWatchdog: a callback that holds the event loop is reported while it runs, naming its function, and the
stall's length is logged once the loop runs again."""

from __future__ import annotations

import asyncio
import time

from structlog.dev import ConsoleRenderer
from structlog.processors import JSONRenderer
from structlog.testing import capture_logs

from strata.broker.diagnostics import LoopWatchdog


def _hold_the_loop(wd: LoopWatchdog, limit_s: float) -> None:
    """Blocks the loop until the watchdog has reported it (bounded): the stall under test, not a wait."""
    deadline = time.monotonic() + limit_s
    while wd.stalls == 0 and time.monotonic() < deadline:
        pass


def test_a_blocked_loop_is_reported_with_what_blocks_it() -> None:
    async def main() -> LoopWatchdog:
        loop = asyncio.get_running_loop()
        wd = LoopWatchdog(loop, warn_after_s=0.2, tick_s=0.02)
        wd.start()
        try:
            await asyncio.sleep(0.05)  # a few heartbeats first
            _hold_the_loop(wd, 30.0)
            await asyncio.sleep(0.1)  # the heartbeat runs again and logs the end of the stall
        finally:
            wd.stop()
        return wd

    with capture_logs() as logs:
        wd = asyncio.run(main())
    assert wd.stalls >= 1
    stalled = [e for e in logs if e["event"] == "event loop stalled"]
    assert stalled, logs
    assert "in _hold_the_loop" in stalled[0]["running"].split(" > ")[-1], stalled[0]
    for render in (ConsoleRenderer(colors=False), JSONRenderer()):  # the broker's two log formats
        assert "_hold_the_loop" in render(None, "warning", dict(stalled[0]))
    assert stalled[0]["coroutine"] is not None and "main" in stalled[0]["coroutine"]
    ended = [e for e in logs if e["event"] == "event loop stall ended"]
    assert ended and ended[0]["stalled_s"] >= 0.2, logs


def test_a_responsive_loop_is_not_reported() -> None:
    async def main() -> LoopWatchdog:
        wd = LoopWatchdog(asyncio.get_running_loop(), warn_after_s=5.0, tick_s=0.02)
        wd.start()
        try:
            for _ in range(20):
                await asyncio.sleep(0.01)
        finally:
            wd.stop()
        return wd

    with capture_logs() as logs:
        wd = asyncio.run(main())
    assert wd.stalls == 0
    assert not [e for e in logs if e["event"].startswith("event loop stall")]
