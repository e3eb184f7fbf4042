"""Noticing a killed broker before its lease runs out.

A lease expires `broker.session.timeout.ms` after the broker's last keep-alive, so a `kill -9`ed leader's partitions
would wait up to that long for a new leader. But a killed process leaves evidence at once: the kernel closes its
sockets, and its listener port refuses connections. The controller holds an idle connection to every other broker's
inter-broker listener, and every other broker holds one to the controller; when such a connection ends and fresh
connections to the same advertised endpoint are refused, the watcher revokes the peer's lease. Etcd then drops the
peer's registration (and the controller key, if it held it) exactly as at lease expiry, and the controller elects.

Only a refusal counts. A peer that is slow, partitioned or behind a blackhole route times out instead, and stays
registered until its lease expires: connection evidence only shortens the wait when the process is certainly gone.
A peer is suspected only after one of our connections to it was established, so a broker that registers before its
listener opens is not mistaken for a dead one; a broker that restarted registers a new incarnation, and the
revocation names the incarnation it watched.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from .etcd_store import EtcdMetadataStore

log = structlog.get_logger("strata.liveness")

CONNECT_TIMEOUT_S = 2.0
RETRY_S = 0.5  # between connection attempts to a peer not yet reached, or unreachable without refusal
REFUSALS = 3  # consecutive refused connections that prove the listener gone
REFUSAL_GAP_S = 0.05

Peer = tuple[int, str, str, int]  # broker id, incarnation, host, port


class PeerWatch:
    def __init__(
        self,
        store: EtcdMetadataStore,
        broker_id: int,
        listener: str,
        is_controller: Callable[[], bool],
        on_detected: Callable[[int], None] | None = None,
    ) -> None:
        self.store = store
        self.broker_id = broker_id
        self.listener = listener
        self.is_controller = is_controller
        self.on_detected = on_detected
        self._watchers: dict[Peer, asyncio.Task] = {}
        self.connected: set[Peer] = set()  # peers we hold an open connection to now
        self._declarations: set[asyncio.Task] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        store.add_listener(lambda kind, key: self._wake.set())

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="peer-watch")

    def wake(self) -> None:
        self._wake.set()

    def wanted(self) -> set[Peer]:
        """The controller watches every broker; the others watch the controller."""
        img = self.store.image
        if self.is_controller():
            ids = set(img.brokers) - {self.broker_id}
        else:
            c = img.controller
            ids = {c.broker_id} if c is not None and c.broker_id != self.broker_id else set()
        out = set()
        for b in ids:
            info = img.brokers.get(b)
            ep = info.endpoint(self.listener) if info is not None else None
            if info is not None and ep is not None:
                out.add((b, info.incarnation, ep[0], ep[1]))
        return out

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            want = self.wanted()
            for peer in [p for p in self._watchers if p not in want]:
                self._watchers.pop(peer).cancel()
            for peer in want:
                t = self._watchers.get(peer)
                if t is None or t.done():
                    self._watchers[peer] = asyncio.create_task(self._watch(peer), name=f"peer-watch-{peer[0]}")
            try:
                await asyncio.wait_for(self._wake.wait(), 1.0)  # a fallback: role changes wake us (server.py)
            except TimeoutError:
                pass

    async def _watch(self, peer: Peer) -> None:
        broker_id, incarnation, host, port = peer
        established = False
        while True:
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), CONNECT_TIMEOUT_S)
            except ConnectionRefusedError:
                if established and await _listener_gone(host, port):
                    # its own task: the registration's removal cancels this watcher, not the revocation
                    t = asyncio.create_task(self._declare_dead(broker_id, incarnation, host, port))
                    self._declarations.add(t)
                    t.add_done_callback(self._declarations.discard)
                    return
                await asyncio.sleep(RETRY_S)
                continue
            except (TimeoutError, OSError):
                await asyncio.sleep(RETRY_S)
                continue
            if not established:
                log.info("watching peer broker", broker_id=broker_id, endpoint=f"{host}:{port}")
            established = True
            self.connected.add(peer)
            try:
                while await reader.read(65536):  # the peer sends nothing unasked: this returns at EOF or reset
                    pass
            except OSError:
                pass
            finally:
                self.connected.discard(peer)
                writer.close()

    async def _declare_dead(self, broker_id: int, incarnation: str, host: str, port: int) -> None:
        try:
            revoked = await self.store.revoke_broker_lease(broker_id, incarnation)
        except Exception as e:  # noqa: BLE001 - the lease runs out on its own
            log.warning("could not revoke a gone broker's lease", broker_id=broker_id, error=repr(e))
            return
        if revoked:
            log.warning(
                "broker is gone (connection closed, listener refuses); revoked its lease",
                broker_id=broker_id,
                endpoint=f"{host}:{port}",
            )
            if self.on_detected is not None:
                self.on_detected(broker_id)

    async def stop(self) -> None:
        tasks = [t for t in [self._task, *self._watchers.values(), *self._declarations] if t is not None]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2.0)
        self._watchers.clear()
        self.connected.clear()
        self._task = None


async def _listener_gone(host: str, port: int) -> bool:
    """True if `REFUSALS` connections in a row are refused (one refusal may be a listener being re-bound)."""
    for i in range(REFUSALS):
        if i:
            await asyncio.sleep(REFUSAL_GAP_S)
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), CONNECT_TIMEOUT_S)
        except ConnectionRefusedError:
            continue
        except (TimeoutError, OSError):
            return False
        writer.close()
        return False
    return True
