"""A fault-injecting S3 proxy with standing modes, for the end-to-end tiered tests (tests/tiered_s3).

`ModalFaultProxy` extends the RSM-level proxy of tests/support/s3_servers.py (`FaultProxy`: queued one-shot faults)
with a standing *mode*:

* ``pass``: traffic goes through (queued faults still apply);
* ``blackhole``: connections are accepted and requests read, but never answered (S3 "unreachable" as a client sees
  a silent network path: every attempt ends in its timeout);
* ``refuse``: the listening socket is closed, so connections are refused at once (S3 "down");
* ``flaky``: each request independently gets a random 500/503, a dropped connection (before or in the middle of
  the response) or added latency, with the probabilities of `FlakyProfile`; the rest goes through.

`ProxyThread` runs one on an event loop in a daemon thread, since the broker is a separate process and the test
bodies are synchronous.
"""

from __future__ import annotations

import asyncio
import random
import re
import threading
import uuid
from collections import Counter
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, Self, TypeVar

from tests.support.s3_servers import Fault, FaultProxy

T = TypeVar("T")


@dataclass
class FlakyProfile:
    error_p: float = 0.12  # answer 500 or 503 without forwarding
    drop_p: float = 0.08  # drop the connection before answering, or half-way through the response
    delay_p: float = 0.25  # forward after a random delay in [delay_min_s, delay_max_s]
    delay_min_s: float = 0.02
    delay_max_s: float = 0.4


class ModalFaultProxy(FaultProxy):
    MODES = ("pass", "blackhole", "refuse", "flaky")

    def __init__(
        self, upstream_host: str, upstream_port: int, seed: int = 405, flaky: FlakyProfile | None = None
    ) -> None:
        super().__init__(upstream_host, upstream_port)
        self.mode = "pass"
        self.rng = random.Random(seed)
        self.flaky = flaky or FlakyProfile()
        self.faults_by_mode: Counter[tuple[str, str]] = Counter()  # (mode, fault kind) -> count

    def _next_fault(self, method: str, path: str) -> Fault | None:
        queued = super()._next_fault(method, path)
        if queued is not None:
            return queued
        if self.mode == "blackhole":
            self._count("hang")
            return Fault("hang")
        if self.mode == "refuse":
            # accepted just before the listener closed: S3 is down, so nothing may reach it
            self._count("drop_request")
            return Fault("drop_request")
        if self.mode == "flaky":
            f = self.flaky
            x = self.rng.random()
            if x < f.error_p:
                fault = Fault("status", self.rng.choice((500, 503)))
            elif x < f.error_p + f.drop_p:
                fault = Fault(self.rng.choice(("drop_request", "drop_response")))
            elif x < f.error_p + f.drop_p + f.delay_p:
                fault = Fault("delay", delay=self.rng.uniform(f.delay_min_s, f.delay_max_s))
            else:
                return None
            self._count(fault.kind if fault.kind != "status" else f"status {fault.status}")
            return fault
        return None

    def _count(self, kind: str) -> None:
        self.faults_by_mode[(self.mode, kind)] += 1

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await super()._handle(reader, writer)
        except asyncio.CancelledError:
            pass  # a held ("hang") request cancelled by stop(): end quietly (asyncio logs cancelled handlers)

    async def set_mode(self, mode: str) -> None:
        if mode not in self.MODES:
            raise ValueError(f"unknown proxy mode {mode!r}")
        old = self.mode
        if mode == "refuse" and self._server is not None:
            self._server.close()  # first: from here on connections are refused
        self.mode = mode
        if old == "blackhole" and mode != "blackhole":
            # release the requests held open: their clients gave up on them already (attempt timeouts)
            for w in list(self._conns):
                w.close()
        if mode == "refuse" and self._server is not None:
            await self._server.wait_closed()
            self._server = None
        elif mode != "refuse" and self._server is None:
            # the same port again (SO_REUSEADDR is set by asyncio on POSIX)
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    async def stop(self) -> None:
        if self.mode == "refuse":
            await self.set_mode("pass")
        await super().stop()


class ProxyThread:
    """A `ModalFaultProxy` on an event loop in a daemon thread; `set_mode` / `add` are called from the test."""

    def __init__(self, upstream_port: int, **kw: object) -> None:
        self.loop = asyncio.new_event_loop()
        self.proxy = ModalFaultProxy("127.0.0.1", upstream_port, **kw)  # type: ignore[arg-type]
        self._thread = threading.Thread(target=self.loop.run_forever, name="s3-fault-proxy", daemon=True)

    @property
    def endpoint(self) -> str:
        return self.proxy.endpoint

    @property
    def mode(self) -> str:
        return self.proxy.mode

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> Self:
        self._thread.start()
        self._call(self.proxy.start())
        return self

    def set_mode(self, mode: str) -> None:
        self._call(self.proxy.set_mode(mode))

    def add(self, *faults: Fault) -> None:
        self.loop.call_soon_threadsafe(self.proxy.add, *faults)

    def requests(self) -> int:
        return len(self.proxy.log.requests)

    def stop(self) -> None:
        try:
            self._call(self.proxy.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def key_prefix(request: object) -> str:
    """A key prefix of the test's own in the shared bucket."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name)[:60]  # type: ignore[attr-defined]
    return f"{name}-{uuid.uuid4().hex[:8]}/"
