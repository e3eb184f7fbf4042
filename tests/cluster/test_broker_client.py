"""The inter-broker client (broker/cluster/broker_client.py) against a real broker, through a proxy that delays,
splits and cuts its responses (issue 21: a close from another task between a response's size and its body raised
AttributeError; a request that gave up left its response to be read by the next one, "correlation id 4 != 5")."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from strata.broker.cluster.broker_client import BrokerConnection, BrokerConnectionError
from strata.protocol.errors import ErrorCode
from strata.protocol.registry import REQUEST_CLASSES
from tests.support.broker_proc import StrataBroker
from tests.support.fault_proxy import FaultProxy

METADATA = 3
MD_VERSION = 9
TIMEOUT_S = 30.0  # the connection's default bound; each test's own faults are far shorter


def _run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 120))


async def _metadata(conn: BrokerConnection, name: str, timeout_s: float | None = None) -> str:
    """Metadata for one (absent) topic: the response names the topic asked for, so a response matched to the
    wrong request shows."""
    cls = REQUEST_CLASSES[METADATA][MD_VERSION]
    resp = await conn.request(
        METADATA,
        MD_VERSION,
        timeout_s,
        topics=[cls.MetadataRequestTopic(name=name)],
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    [topic] = resp.topics
    assert topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return str(topic.name)


def _connection(proxy: FaultProxy) -> BrokerConnection:
    return BrokerConnection("127.0.0.1", proxy.port, "test-broker-client", TIMEOUT_S)


def test_concurrent_requests_on_one_connection_each_get_their_own_response(module_broker: StrataBroker) -> None:
    async def scenario() -> None:
        async with FaultProxy(module_broker.host, module_broker.port) as proxy:
            proxy.delay_s = 0.01
            conn = _connection(proxy)
            try:
                names = [f"absent-{i}" for i in range(20)]
                got = await asyncio.gather(*(_metadata(conn, n) for n in names))
                assert got == names
                assert proxy.connections == 1  # one socket, shared
            finally:
                await conn.close()

    _run(scenario())


def test_a_caller_that_gives_up_leaves_no_stale_response_for_the_next_request(module_broker: StrataBroker) -> None:
    async def scenario() -> None:
        async with FaultProxy(module_broker.host, module_broker.port) as proxy:
            conn = _connection(proxy)
            try:
                proxy.delay_s = 1.0
                with pytest.raises(TimeoutError):  # the caller's own deadline, not the connection's
                    await asyncio.wait_for(_metadata(conn, "given-up"), 0.2)
                proxy.delay_s = 0.0
                assert await _metadata(conn, "next") == "next"  # not the late answer to "given-up"
                assert await _metadata(conn, "after") == "after"
            finally:
                await conn.close()

    _run(scenario())


def test_a_timed_out_request_poisons_its_socket_and_the_next_request_reconnects(module_broker: StrataBroker) -> None:
    async def scenario() -> None:
        async with FaultProxy(module_broker.host, module_broker.port) as proxy:
            conn = _connection(proxy)
            try:
                assert await _metadata(conn, "warm") == "warm"
                proxy.delay_s = 2.0
                patient = asyncio.ensure_future(_metadata(conn, "patient"))  # the default 30 s bound
                await asyncio.sleep(0)  # queued on the socket first
                with pytest.raises(BrokerConnectionError, match="timed out"):
                    await _metadata(conn, "hasty", timeout_s=0.3)
                # every request pending on the poisoned socket fails at once, with the retriable error
                with pytest.raises(BrokerConnectionError):
                    await asyncio.wait_for(patient, 1.0)
                assert not conn.connected
                proxy.delay_s = 0.0
                assert await _metadata(conn, "fresh") == "fresh"
                assert proxy.connections == 2
            finally:
                await conn.close()

    _run(scenario())


def test_close_from_another_task_between_a_responses_size_and_body(module_broker: StrataBroker) -> None:
    async def scenario() -> None:
        async with FaultProxy(module_broker.host, module_broker.port) as proxy:
            conn = _connection(proxy)
            try:
                assert await _metadata(conn, "warm") == "warm"
                proxy.split()
                waiting = asyncio.ensure_future(_metadata(conn, "split"))
                await asyncio.wait_for(proxy.split_sent.wait(), 10)
                await conn.close()  # e.g. a fetcher interrupted because a partition joined
                with pytest.raises(BrokerConnectionError):
                    await asyncio.wait_for(waiting, 1.0)  # at once: not after the body, not an AttributeError
                proxy.release()
                assert await _metadata(conn, "again") == "again"  # reconnects on next use
            finally:
                await conn.close()

    _run(scenario())


@pytest.mark.parametrize("after_bytes", [2, 4, 9])
def test_a_response_cut_midway_fails_the_request_and_the_next_one_reconnects(
    module_broker: StrataBroker, after_bytes: int
) -> None:
    async def scenario() -> None:
        async with FaultProxy(module_broker.host, module_broker.port) as proxy:
            conn = _connection(proxy)
            try:
                proxy.cut(after_bytes)
                with pytest.raises(BrokerConnectionError):
                    await _metadata(conn, "cut")
                assert await _metadata(conn, "whole") == "whole"
                assert proxy.connections == 2
            finally:
                await conn.close()

    _run(scenario())
