"""Finding what holds the event loop up.

`kill -USR1 <pid>` prints every asyncio task's await chain to stderr: the broker's answer to Java's `kill -3`
thread dump, for finding which await a stuck request is parked on (py-spy sees only an idle event loop).

The `LoopWatchdog` catches the other kind of hang, where no await is reached at all: one callback or task step that
runs for seconds stops every connection. A thread watches a heartbeat the loop sets every `TICK_S`; when it is older
than `STALL_WARN_S` the thread logs a warning with the task and the stack running on the loop thread at that moment
(and again, at doubling intervals, while the stall lasts), and the loop logs the stall's length once it runs again.
`strata_event_loop_lag_seconds` histograms how late the heartbeat ran, so a silent multi-minute stall cannot happen.
"""

from __future__ import annotations

import asyncio
import io
import signal
import sys
import threading
import time
import traceback
from types import FrameType
from typing import Any, TextIO

import structlog
from prometheus_client import CollectorRegistry, Histogram

log = structlog.get_logger("strata.diagnostics")

MAX_DEPTH = 50
TICK_S = 0.1  # heartbeat period of the loop
STALL_WARN_S = 2.0  # a loop that has not run its heartbeat for this long is reported
STACK_FRAMES = 12  # innermost frames of the loop thread shown in a stall warning
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def await_chain(coro: Any) -> list[FrameType]:
    """The frames of a suspended coroutine and of everything it awaits, outermost first (Task.get_stack gives only
    the outermost one)."""
    frames: list[FrameType] = []
    while coro is not None and len(frames) < MAX_DEPTH:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None) or getattr(coro, "ag_frame", None)
        if frame is not None:
            frames.append(frame)
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None) or getattr(coro, "ag_await", None)
    return frames


def dump_tasks(loop: asyncio.AbstractEventLoop, out: TextIO | None = None) -> int:
    """Write each pending task's await chain; returns how many tasks there were."""
    tasks = sorted(asyncio.all_tasks(loop), key=lambda t: t.get_name())
    buf = io.StringIO()
    buf.write(f"===== asyncio task dump: {len(tasks)} tasks =====\n")
    for t in tasks:
        coro = t.get_coro()
        buf.write(f"--- {t.get_name()}: {getattr(coro, '__qualname__', coro)!s}\n")
        for frame in await_chain(coro):
            code = frame.f_code
            buf.write(f"  {code.co_filename}:{frame.f_lineno} in {code.co_name}\n")
    buf.write("===== end of task dump =====\n")
    out = out or sys.stderr
    out.write(buf.getvalue())
    out.flush()
    return len(tasks)


def loop_thread_stack(thread_id: int, limit: int = STACK_FRAMES) -> list[str]:
    """The innermost `limit` frames a thread is running now, outermost first, as "file:line in function"."""
    frame = sys._current_frames().get(thread_id)
    if frame is None:
        return []
    return [f"{fs.filename}:{fs.lineno} in {fs.name}" for fs in traceback.extract_stack(frame)[-limit:]]


class LoopWatchdog:
    """Reports event-loop stalls from a daemon thread (see the module docstring). Start it from the loop thread."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        warn_after_s: float = STALL_WARN_S,
        tick_s: float = TICK_S,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.loop = loop
        self.warn_after_s = warn_after_s
        self.tick_s = tick_s
        self.stalls = 0  # stalls reported so far
        self._beat = time.monotonic()
        self._loop_thread = threading.get_ident()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._lag = Histogram(
            "strata_event_loop_lag_seconds",
            "How late the event loop ran a timer (a request or task blocked it that long)",
            buckets=LAG_BUCKETS,
            registry=registry,
        )

    def start(self) -> None:
        self._loop_thread = threading.get_ident()
        self._beat = time.monotonic()
        self._handle = self.loop.call_later(self.tick_s, self._heartbeat, self._beat + self.tick_s)
        self._thread = threading.Thread(target=self._watch, name="strata-loop-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._handle is not None:
            self._handle.cancel()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _heartbeat(self, due: float) -> None:
        now = time.monotonic()
        self._lag.observe(max(0.0, now - due))
        gap = now - self._beat
        if gap >= self.warn_after_s:
            log.warning("event loop stall ended", stalled_s=round(gap, 3))
        self._beat = now
        if not self._stop.is_set() and not self.loop.is_closed():
            self._handle = self.loop.call_later(self.tick_s, self._heartbeat, now + self.tick_s)

    def _watch(self) -> None:
        reported_beat = -1.0
        next_report = self.warn_after_s
        while not self._stop.wait(self.tick_s):
            if self.loop.is_closed():
                return
            beat = self._beat
            stalled = time.monotonic() - beat
            if beat != reported_beat:
                next_report = self.warn_after_s  # a new stall (or none)
            if stalled < next_report:
                continue
            reported_beat = beat
            next_report = stalled * 2
            self.stalls += 1
            try:
                self._report(stalled)
            except Exception:  # noqa: BLE001, S110 - the watchdog must outlive a failing log line
                pass

    def _report(self, stalled: float) -> None:
        task = asyncio.current_task(self.loop) if not self.loop.is_closed() else None
        coro = task.get_coro() if task is not None else None
        log.warning(
            "event loop stalled",
            stalled_s=round(stalled, 3),
            task=task.get_name() if task is not None else None,
            coroutine=getattr(coro, "__qualname__", None),
            # not `stack=`: structlog's console renderer takes that key for a formatted traceback
            running=" > ".join(loop_thread_stack(self._loop_thread)),
        )


def install(loop: asyncio.AbstractEventLoop, registry: CollectorRegistry | None = None) -> LoopWatchdog:
    """SIGUSR1 task dumps and the stall watchdog (its lag histogram exported through `registry` if given)."""
    if hasattr(signal, "SIGUSR1"):
        loop.add_signal_handler(signal.SIGUSR1, dump_tasks, loop)  # a loop callback: no task is mid-step
    watchdog = LoopWatchdog(loop, registry=registry)
    watchdog.start()
    return watchdog
