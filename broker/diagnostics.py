"""`kill -USR1 <pid>` prints every asyncio task's await chain to stderr: the broker's answer to Java's `kill -3`
thread dump, for finding which await a stuck request is parked on (py-spy sees only an idle event loop)."""

from __future__ import annotations

import asyncio
import io
import signal
import sys
from types import FrameType
from typing import Any, TextIO

MAX_DEPTH = 50


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


def install(loop: asyncio.AbstractEventLoop) -> None:
    if hasattr(signal, "SIGUSR1"):
        loop.add_signal_handler(signal.SIGUSR1, dump_tasks, loop)  # a loop callback: no task is mid-step
