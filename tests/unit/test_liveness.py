"""broker/cluster/liveness.py against real sockets: which evidence revokes a peer's lease and which does not.

The metadata store is a small in-memory stand-in (the etcd path is covered end to end in
tests/cluster/test_cluster_basics.py); the peer is a real asyncio listener on loopback.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass, field

import pytest

from strata.broker.cluster.liveness import PeerWatch
from strata.broker.cluster.model import BrokerInfo
from tests.support.waiting import WaitTimeout
from tests.support.waiting import wait_until_async as async_wait_until


@dataclass
class _Controller:
    broker_id: int
    epoch: int = 1


@dataclass
class _Image:
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    controller: _Controller | None = None


class _Store:
    def __init__(self) -> None:
        self.image = _Image()
        self.listeners: list = []
        self.revoked: list[tuple[int, str]] = []

    def add_listener(self, fn) -> None:
        self.listeners.append(fn)

    def changed(self) -> None:
        for fn in self.listeners:
            fn("broker", 0)

    async def revoke_broker_lease(self, broker_id: int, incarnation: str) -> bool:
        self.revoked.append((broker_id, incarnation))
        return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _peer(port: int) -> tuple[asyncio.AbstractServer, list[asyncio.StreamWriter]]:
    conns: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns.append(writer)

    return await asyncio.start_server(accept, "127.0.0.1", port), conns


async def _watching(store: _Store, port: int, me: int = 1, peer: int = 2) -> PeerWatch:
    store.image.brokers = {
        me: BrokerInfo(me, {"PLAINTEXT": ("127.0.0.1", 1)}, incarnation="me"),
        peer: BrokerInfo(peer, {"PLAINTEXT": ("127.0.0.1", port)}, incarnation="inc-a"),
    }
    store.image.controller = _Controller(me)
    watch = PeerWatch(store, me, "PLAINTEXT", lambda: True)  # type: ignore[arg-type]
    watch.start()
    return watch


async def _case_a_closed_connection_and_a_refusing_listener_revoke_the_watched_incarnation() -> None:
    store, port = _Store(), _free_port()
    server, conns = await _peer(port)
    watch = await _watching(store, port)
    try:
        await async_wait_until(lambda: len(watch.connected) == 1, timeout=5)
        server.close()  # the process dies: listener gone, then its connections close
        await server.wait_closed()
        for w in conns:
            w.transport.abort()
        await async_wait_until(lambda: store.revoked, timeout=5)
        assert store.revoked == [(2, "inc-a")]
    finally:
        await watch.stop()


async def _case_a_peer_that_was_never_reached_is_not_declared_dead() -> None:
    """A broker registers before its listener opens: refusals before a first connection prove nothing."""
    store, port = _Store(), _free_port()  # nothing listens
    watch = await _watching(store, port)
    try:
        await asyncio.sleep(0)
        with pytest.raises(WaitTimeout):
            await async_wait_until(lambda: store.revoked, timeout=1.5)
        server, _ = await _peer(port)  # the listener opens late: watched from then on
        await async_wait_until(lambda: len(watch.connected) == 1, timeout=5)
        server.close()
        await server.wait_closed()
    finally:
        await watch.stop()
    assert store.revoked == []


async def _case_a_closed_connection_to_a_listening_peer_is_reopened_not_revoked() -> None:
    """The peer closing an idle connection (connections.max.idle.ms) is not death: the listener still accepts."""
    store, port = _Store(), _free_port()
    server, conns = await _peer(port)
    watch = await _watching(store, port)
    try:
        await async_wait_until(lambda: len(conns) == 1 and len(watch.connected) == 1, timeout=5)
        conns[0].close()
        await async_wait_until(lambda: len(conns) == 2 and len(watch.connected) == 1, timeout=5)
        assert store.revoked == []
    finally:
        await watch.stop()
        server.close()
        await server.wait_closed()


def test_the_controller_watches_every_broker_and_the_others_watch_the_controller() -> None:
    store = _Store()
    store.image.brokers = {
        i: BrokerInfo(i, {"PLAINTEXT": ("127.0.0.1", 9000 + i)}, incarnation=f"i{i}") for i in (1, 2, 3)
    }
    store.image.controller = _Controller(1)
    as_controller = PeerWatch(store, 1, "PLAINTEXT", lambda: True)  # type: ignore[arg-type]
    assert {p[0] for p in as_controller.wanted()} == {2, 3}
    as_follower = PeerWatch(store, 2, "PLAINTEXT", lambda: False)  # type: ignore[arg-type]
    assert {p[0] for p in as_follower.wanted()} == {1}
    store.image.controller = None
    assert as_follower.wanted() == set()


def test_a_closed_connection_and_a_refusing_listener_revoke_the_watched_incarnation() -> None:
    asyncio.run(_case_a_closed_connection_and_a_refusing_listener_revoke_the_watched_incarnation())


def test_a_peer_that_was_never_reached_is_not_declared_dead() -> None:
    asyncio.run(_case_a_peer_that_was_never_reached_is_not_declared_dead())


def test_a_closed_connection_to_a_listening_peer_is_reopened_not_revoked() -> None:
    asyncio.run(_case_a_closed_connection_to_a_listening_peer_is_reopened_not_revoked())
