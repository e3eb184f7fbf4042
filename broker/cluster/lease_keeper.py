"""The broker's etcd lease kept alive from a thread of its own.

A broker's registration lives on a lease of `broker.session.timeout.ms`; if a keep-alive waits behind a busy event
loop (thousands of partitions created or moved at once) for longer than that, the broker is deregistered although
it is up, its leaderships move, and it registers again a moment later: churn that feeds itself. Kafka's brokers send
their heartbeats from a thread of their own (BrokerLifecycleManager's event queue) for the same reason. Here a
daemon thread sends LeaseKeepAlive every `broker.heartbeat.interval.ms` on its own blocking gRPC channel; the event
loop only learns (by polling `lost`) that the lease ended -- revoked by a peer that saw our listener close, expired
after etcd was unreachable for the session timeout -- and registers again.

A loop stalled for good is not a live broker: the thread stops renewing once the loop has not stamped `loop_alive`
for LOOP_STALL_LIMIT_S (far beyond any bulk operation's pause), and the lease then runs out as before.
"""

from __future__ import annotations

import threading
import time

import grpc  # type: ignore[import-untyped]  # no stubs in the venv; used for one call
import structlog
from aetcd import rpc

log = structlog.get_logger("strata.etcd")

LOOP_STALL_LIMIT_S = 60.0


class LeaseKeeper:
    def __init__(
        self, endpoints: list[tuple[str, int]], interval_s: float, session_timeout_s: float, request_timeout_s: float
    ) -> None:
        self.endpoints = endpoints
        self.interval_s = interval_s
        self.session_timeout_s = session_timeout_s
        self.request_timeout_s = request_timeout_s
        self.lease_id = 0
        self.lost = 0  # the lease id found ended (0: none); read and cleared by the event loop
        self._last_ok = time.monotonic()
        self._loop_alive = time.monotonic()
        self._endpoint = 0
        self._channel: grpc.Channel | None = None
        self._call: grpc.Call | None = None  # the keep-alive in flight (stop cancels it)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.refreshes = 0

    def keep(self, lease_id: int) -> None:
        """Renew `lease_id` from now on (a new lease after re-registration)."""
        self._last_ok = time.monotonic()
        self.lost = 0
        self.lease_id = lease_id
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="etcd-lease-keeper", daemon=True)
            self._thread.start()

    def loop_alive(self) -> None:
        """Called from the event loop: it still runs."""
        self._loop_alive = time.monotonic()

    def stop(self) -> None:
        """Without waiting: a keep-alive in flight is cancelled, the thread closes its channel and ends."""
        self._stop.set()
        self._thread = None
        call = self._call
        if call is not None:
            call.cancel()

    # ---- the thread ---------------------------------------------------------------------------------------------
    def _stub(self) -> rpc.LeaseStub:
        if self._channel is None:
            host, port = self.endpoints[self._endpoint % len(self.endpoints)]
            self._channel = grpc.insecure_channel(f"{host}:{port}")
        return rpc.LeaseStub(self._channel)

    def _rotate(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        self._endpoint += 1

    def _run(self) -> None:
        try:
            self._renew_until_stopped()
        finally:
            if self._channel is not None:
                self._channel.close()
                self._channel = None

    def _renew_until_stopped(self) -> None:
        while not self._stop.wait(self.interval_s):
            lease = self.lease_id
            if not lease or self.lost == lease:
                continue
            if time.monotonic() - self._loop_alive > LOOP_STALL_LIMIT_S:
                continue  # a wedged broker: let the lease run out
            try:
                ttl = self._refresh(lease)
            except grpc.RpcError as e:
                if self._stop.is_set():
                    return
                log.warning("lease keep-alive failed", error=_code(e), lease=hex(lease))
                self._rotate()
                if time.monotonic() - self._last_ok > self.session_timeout_s:
                    self.lost = lease
                continue
            if ttl <= 0:
                self.lost = lease  # revoked or expired: the event loop registers again
            else:
                self._last_ok = time.monotonic()
                self.refreshes += 1

    def _refresh(self, lease: int) -> int:
        call = self._call = self._stub().LeaseKeepAlive(
            iter([rpc.LeaseKeepAliveRequest(ID=lease)]), timeout=self.request_timeout_s
        )
        try:
            for reply in call:
                return int(reply.TTL)
            return 0
        finally:
            self._call = None
            call.cancel()


def _code(e: grpc.RpcError) -> str:
    """The status code of a failed call (an RpcError from a call carries one; the base class need not)."""
    code = getattr(e, "code", None)
    return str(code()) if callable(code) else repr(e)
